#!/usr/bin/env bats
# bats file_tags=pair
# Runs on the host; its pairs are the pair of guests tests/run.sh keeps up
# for the suites tagged pair (LAB_PAIR_DIR), or two fresh guests per
# capture when none is up (bats tests/FILE.bats alone).
# make capture LESSON=10 SCENARIO=NAME: lesson 10's failures (./lesson10's
# scenarios and ./lesson10_nak's) across two lab guests joined by a virtual
# cable, and what the wire carries for each, read with Wireshark's own
# fields: the AETH syndrome of an RNR NAK and of a NAK, and the same PSN sent
# again and again when nothing answers. The refusals at the end boot nothing.

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

# The RoCE packets of scenario $1's capture, one per line, with the fields
# given after it, tab-separated; tshark's "running as root" warning dropped.
fields() {
  local pcap=captures/lesson10-$1.pcap args=() f
  shift
  for f in "$@"; do args+=(-e "$f"); done
  tshark -r "$pcap" -Y infiniband -T fields -E occurrence=f "${args[@]}" 2>/dev/null
}

# fields_once SCENARIO FIELD...: the same, each packet once. A loaded host
# has put one WRITE on the wire twice, 11 us apart with the same PSN, long
# before any ACK timeout (67 ms): the same packet, not a resend.
fields_once() { fields "$@" | awk '!seen[$0]++'; }

@test "rnr across two guests: the SEND is answered by an RNR NAK (AETH opcode 1, timer 12) for its PSN, and the client gets status 13" {
  capture 10 rnr
  assert_output --partial "capture: lesson 10 scenario rnr (./lesson10), server on guest a"
  assert_output --partial "[b] result: rnr: IBV_WC_RNR_RETRY_EXC_ERR (13), as expected"
  assert_output --partial "[a] result: server: rnr: no completion; our QP is IBV_QPS_RTS"
  run fields_once rnr infiniband.bth.opcode infiniband.bth.psn infiniband.aeth.syndrome \
    infiniband.aeth.syndrome.opcode infiniband.aeth.syndrome.timer
  assert_equal "${#lines[@]}" 2 # one SEND, one answer: rnr_retry 0 sends it once
  local send nak
  read -ra send <<<"${lines[0]}"
  read -ra nak <<<"${lines[1]}"
  assert_equal "${send[0]}" 4           # RC SEND Only
  assert_equal "${nak[0]}" 17           # RC Acknowledge
  assert_equal "${nak[1]}" "${send[1]}" # for the SEND's PSN
  assert_equal "${nak[2]}" 44           # syndrome 0x2c = 001 01100
  assert_equal "${nak[3]}" 1            # RNR NAK
  assert_equal "${nak[4]}" 12           # the server's min_rnr_timer: 0.64 ms
}

@test "rem-access across two guests, played by ./lesson10_nak: the WRITE is answered by a NAK remote access error (AETH opcode 3, code 2), status 10" {
  capture 10 rem-access
  assert_output --partial "capture: lesson 10 scenario rem-access (./lesson10_nak), server on guest a"
  assert_output --partial "[b] result: rem-access: IBV_WC_REM_ACCESS_ERR (10), as expected"
  assert_output --partial "[a] result: server: rem-access: no completion; our QP is IBV_QPS_ERR"
  run fields_once rem-access infiniband.bth.opcode infiniband.bth.psn infiniband.aeth.syndrome \
    infiniband.aeth.syndrome.opcode infiniband.aeth.syndrome.error_code
  assert_equal "${#lines[@]}" 2
  local write nak
  read -ra write <<<"${lines[0]}"
  read -ra nak <<<"${lines[1]}"
  assert_equal "${write[0]}" 10 # RC RDMA WRITE Only
  assert_equal "${nak[0]}" 17
  assert_equal "${nak[1]}" "${write[1]}"
  assert_equal "${nak[2]}" 98 # syndrome 0x62 = 011 00010
  assert_equal "${nak[3]}" 3  # NAK
  assert_equal "${nak[4]}" 2  # remote access error
}

@test "retry across two guests: the same PSN goes out retry_cnt + 1 = 7 times, nothing answers, status 12" {
  capture 10 retry
  assert_output --partial "[b] result: retry: IBV_WC_RETRY_EXC_ERR (12), as expected"
  assert_output --partial "[a] result: server: retry: no completion; our QP is IBV_QPS_INIT"
  run fields retry infiniband.bth.opcode infiniband.bth.psn
  assert_equal "${#lines[@]}" 7
  [[ $(sort -u <<<"$output" | wc -l) -eq 1 ]] || fail "not one packet sent 7 times: $output"
  assert_equal "${lines[0]%%[[:space:]]*}" 4 # RC SEND Only, each time
  run fields retry infiniband.aeth.syndrome
  refute_output --regexp '[0-9]' # no AETH at all: the server's QP in INIT answers nothing
}

# --- with nothing booted ------------------------------------------------------

# check_current SCENARIO: capture it again between two guests and compare
# with its shipped docs/captures/lesson10-SCENARIO.pcapng.
check_current() {
  run timeout 300 scripts/capture/shipped.sh --check "10:$1"
  assert_success
  assert_line --regexp "^10:$1: current \\([0-9]+ distinct RoCE packets as shipped in docs/captures/lesson10-$1\\.pcapng\\)$"
}

# rnr, rem-access and retry are compared by their own tests above.
@test "the shipped capture of lesson 10's rnr-wait is current" { check_current rnr-wait; }
@test "the shipped capture of lesson 10's qp-access is current" { check_current qp-access; }
@test "the shipped capture of lesson 10's len is current" { check_current len; }
@test "the shipped capture of lesson 10's flush is current, but for the SENDs that race the NAK" {
  # Whether the two SENDs leave before the WRITE's NAK comes back is a race
  # (docs/lesson10-failures.md, flush): compare everything else.
  run timeout 300 make -s capture LESSON=10 SCENARIO=flush
  assert_success
  assert_output --partial "[b] result: flush: IBV_WC_WR_FLUSH_ERR (5), as expected"
  run diff <(scripts/capture/shipped.sh --signature docs/captures/lesson10-flush.pcapng | grep -vx 'client -> server op 4') \
    <(scripts/capture/shipped.sh --signature captures/lesson10-flush.pcap | grep -vx 'client -> server op 4')
  assert_success
  run scripts/capture/shipped.sh --signature captures/lesson10-flush.pcap
  assert_line "client -> server op 10"
  assert_line "server -> client op 17 Nak,Remote Access Error"
}
@test "the shipped capture of lesson 10's recover is current" { check_current recover; }

@test "capture/lesson.sh refuses a SCENARIO that lesson 10 does not have, or a lesson without scenarios, exit 2" {
  run -2 scripts/capture/lesson.sh 10 nope
  assert_output "capture/lesson.sh: lesson 10 has no scenario 'nope'; its scenarios are rnr rnr-wait retry mtu gid recover rem-access qp-access len flush"
  run -2 scripts/capture/lesson.sh 4 rnr
  assert_output "capture/lesson.sh: lesson 4 has no scenarios; SCENARIO is for a lesson that lists them (lesson 10)"
  run -2 make -s capture LESSON=10 SCENARIO=nope
  assert_output --partial "capture/lesson.sh: lesson 10 has no scenario 'nope'"
  refute_output --partial "capture: lesson 10" # the line printed before the guests boot
}
