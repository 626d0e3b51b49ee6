# Helpers for the suites that capture lessons between two lab guests
# (tests/capture.bats, tests/capture_lessonN.bats). Load it at the top of
# the suite, and let its fixtures do the common part:
#   load helpers/capture
#   setup_file() { capture_setup_file; }
#   setup() { capture_setup; }
# shellcheck shell=bash
# shellcheck disable=SC2034 # output and lines are read by the suites (bats-assert)

# capture_setup_file: from the checkout's top, build every lesson (once per suite).
capture_setup_file() {
  cd "$BATS_TEST_DIRNAME/.." || return 1
  make -s all
}

# capture_setup: bats-support, -assert and -file, and the checkout's top as cwd.
capture_setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  bats_load_library bats-file
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

# capture N [SCENARIO]: run `make capture LESSON=N [SCENARIO=S]` (bounded),
# check that both guests succeeded and the ladder was printed, and that the
# wire is still the shipped docs/captures/ file (scripts/capture/shipped.sh
# --compare: the same packets, so the shipped capture is current). Leaves
# make capture's output in $output and $lines.
capture() {
  local n=$1 scenario=${2:-} pcap item made
  pcap=captures/lesson$n${scenario:+-$scenario}.pcap
  item=$n${scenario:+:$scenario}
  run timeout 300 make -s capture LESSON="$n" SCENARIO="$scenario"
  assert_success
  assert_file_exists "$pcap"
  assert_output --partial "packet ladder of $pcap"
  made=$output
  run scripts/capture/shipped.sh --compare "$pcap" "$item"
  assert_success
  assert_line --regexp "^$item: current \\([0-9]+ distinct RoCE packets as shipped in docs/captures/"
  output=$made
  mapfile -t lines <<<"$made"
}

# opcodes N: the BTH opcodes in captures/lessonN.pcap, one per line, in
# order, each packet once: a resend (the same source, opcode and PSN, sent
# again when its ACK came later than the 67 ms timeout on a loaded host) is
# left out, as the ladder marks it RETRANSMIT.
opcodes() {
  tshark -r "captures/lesson$1.pcap" -Y infiniband -T fields -e ip.src -e infiniband.bth.opcode \
    -e infiniband.bth.psn 2>/dev/null | awk '!seen[$0]++ { print $2 }'
}

# tshark on a capture, without its "running as root" warning on stderr.
tshark_quiet() {
  tshark "$@" 2>/dev/null
}
