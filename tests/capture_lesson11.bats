#!/usr/bin/env bats
# bats file_tags=pair
# Runs on the host; its pairs are the pair of guests tests/run.sh keeps up
# for the suites tagged pair (LAB_PAIR_DIR), or two fresh guests per
# capture when none is up (bats tests/FILE.bats alone).
# make capture LESSON=11: lesson 11's short run (run.conf: 100 round trips of
# a 2-byte SEND) across two lab guests joined by a virtual cable. This is
# where lesson 11 is shown to work across two hosts, and the wire shows the
# ping-pong: as many SENDs from each side as round trips.

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

# tshark on the capture, one field a line, without its "running as root" warning.
fields() {
  tshark -r captures/lesson11.pcap -Y "$1" -T fields -e "$2" 2>/dev/null
}

@test "lesson 11 across two guests: 100 round trips, 100 two-byte SENDs each way on the wire" {
  capture 11
  assert_output --regexp '\[b\] result: send lat 2 B: typical [0-9.]+ us, p99 [0-9.]+ us, p99\.9 [0-9.]+ us \(n=100\)'
  assert_output --partial "[a] result: served send lat, 1 size(s), n=100"
  # RC SEND Only (opcode 4), each way: 192.0.2.2 is the client (b), 192.0.2.1
  # the server (a). Counted by PSN: a SEND whose ACK came late is resent
  # with the same PSN (a one-CPU guest that spins can be late).
  run fields 'infiniband.bth.opcode == 4 && ip.src == 192.0.2.2' infiniband.bth.psn
  assert_equal "$(sort -u <<<"$output" | wc -l)" 100
  run fields 'infiniband.bth.opcode == 4 && ip.src == 192.0.2.1' infiniband.bth.psn
  assert_equal "$(sort -u <<<"$output" | wc -l)" 100
  # Each carries the 2 bytes and nothing else: UDP length = 8 UDP + 12 BTH + 2 data, padded to 4, + 4 ICRC.
  run fields 'infiniband.bth.opcode == 4' udp.length
  [[ $(sort -u <<<"$output") == 28 ]]
}
