#!/usr/bin/env bats
# bats file_tags=pair
# Runs on the host; its pairs are the pair of guests tests/run.sh keeps up
# for the suites tagged pair (LAB_PAIR_DIR), or two fresh guests per
# capture when none is up (bats tests/FILE.bats alone).
# make capture LESSON=15: lesson 15 runs across two lab guests joined by a
# virtual cable. The extended verbs change the API, not the wire: the capture
# holds the same packets as lesson 4's, opcode for opcode and byte for byte
# in length.

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

# Each RoCE packet of a capture as "SOURCE OPCODE UDP_LENGTH", in order: who
# sent it, what it is and how big. A packet sent again with the same PSN is
# listed once: rxe on the busy lab host now and then resends a SEND or an ACK
# (seen in lesson 4's captures and in lesson 15's), and a resend is not a
# different packet.
packets() {
  tshark -r "captures/lesson$1.pcap" -Y infiniband -T fields \
    -e ip.src -e infiniband.bth.opcode -e infiniband.bth.psn -e udp.length 2>/dev/null |
    awk '!seen[$1 " " $2 " " $3]++ { print $1, $2, $4 }'
}

@test "lesson 15 across two guests: the sum is right on both, and the wire carries SENDs and ACKs" {
  capture 15
  assert_output --partial "[b] result: 2 + 3 = 5"
  assert_output --partial "[a] result: 2 + 3 = 5"
  run opcodes 15
  assert_line "4"  # RC SEND Only: the request and the response
  assert_line "17" # RC Acknowledge
  [ "$(grep -cx 4 <<<"$output")" -ge 2 ]
}

@test "lesson 15's packets are lesson 4's: the same opcodes and the same sizes, in the same order" {
  [[ -e captures/lesson15.pcap ]] || capture 15
  capture 4
  local four fifteen
  four=$(packets 4)
  fifteen=$(packets 15)
  [[ -n $four ]] || fail "no RoCE packets in captures/lesson4.pcap"
  # SEND Only of a 16-byte request: 8 (UDP) + 12 (BTH) + 16 + 4 (ICRC) = 40 bytes of UDP.
  # The client (192.0.2.2) SENDs the request, the server (192.0.2.1) ACKs it,
  # SENDs the response, and the client ACKs that.
  assert_equal "$fifteen" "192.0.2.2 4 40
192.0.2.1 17 28
192.0.2.1 4 40
192.0.2.2 17 28"
  assert_equal "$fifteen" "$four"
}
