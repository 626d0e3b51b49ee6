#!/usr/bin/env bats
# make capture LESSON=N: each two-process lesson runs across two lab guests
# joined by a virtual cable, and the capture holds the operations the lesson
# is named for. Runs on the host: every test boots a pair of guests itself.
# This is also where the lessons are shown to work across two hosts.

setup_file() {
  cd "$BATS_TEST_DIRNAME/.." || return 1
  make -s all
}

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  bats_load_library bats-file
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

# The BTH opcodes in a capture, one per line, in order.
opcodes() {
  tshark -r "captures/lesson$1.pcap" -Y infiniband -T fields -e infiniband.bth.opcode 2>/dev/null
}

# tshark on a capture, without its "running as root" warning on stderr.
tshark_quiet() {
  tshark "$@" 2>/dev/null
}

# Run `make capture LESSON=$1` (bounded) and check that it succeeded on both guests.
capture() {
  run timeout 300 make -s capture LESSON="$1"
  assert_success
  assert_file_exists "captures/lesson$1.pcap"
  assert_output --partial "packet ladder of captures/lesson$1.pcap"
}

@test "lesson 4 across two guests: the sum is right on both, and the wire carries SENDs and ACKs" {
  capture 4
  assert_output --partial "[b] result: 2 + 3 = 5"
  assert_output --partial "[a] result: 2 + 3 = 5"
  run opcodes 4
  assert_line "4"    # RC SEND Only: the request and the response
  assert_line "17"   # RC Acknowledge
  [ "$(grep -cx 4 <<<"$output")" -ge 2 ]
}

@test "lesson 5 across two guests: one RDMA WRITE Only with Immediate carries RETH and ImmDt" {
  capture 5
  assert_output --partial '[a] result: received 19 bytes: "hello over the wire"'
  run opcodes 5
  assert_line "11"   # RDMA WRITE Only with Immediate
  assert_line "17"
  refute_line "4"    # no SEND: the data arrives by WRITE
  run tshark_quiet -r captures/lesson5.pcap -Y 'infiniband.bth.opcode == 11' -T fields -E occurrence=f \
    -e infiniband.reth.dmalen -e infiniband.immdt
  assert_output --regexp '^19[[:space:]]+0*13$'   # 19 bytes, immediate = 19 (0x13)
}

@test "lesson 6 across two guests: an RDMA READ Request answered by a READ Response" {
  capture 6
  assert_output --partial '[b] result: read 25 bytes: "text in the server memory"'
  # The ladder: the request carries the server's buffer, the client's DONE follows on TCP.
  assert_output --regexp 'client -> server +RC RDMA Read Request \(op 12\).*RETH va=0x[0-9a-f]+ rkey=0x[0-9a-f]+ len=25'
  assert_output --regexp 'server -> client +RC RDMA Read Response Only \(op 16\)'
  assert_output --partial '4 bytes (out-of-band exchange) "DONE"'
  run opcodes 6
  assert_line "12"   # RDMA READ Request
  assert_line "16"   # RDMA READ Response Only
}

@test "lesson 7 across two guests: FetchAdd and CmpSwap, each answered by an Atomic Acknowledge" {
  capture 7
  assert_output --partial "[a] result: counter = 3"
  # The ladder: each Atomic Acknowledge carries the value before the add: 0, 1, 2.
  assert_output --regexp 'RC Atomic Acknowledge \(op 18\).*AtomicAckETH orig=0 '
  assert_output --regexp 'RC Atomic Acknowledge \(op 18\).*AtomicAckETH orig=2 '
  run opcodes 7
  assert_line "20"   # FetchAdd
  assert_line "19"   # CmpSwap
  assert_line "18"   # ATOMIC Acknowledge
  [ "$(grep -cx 20 <<<"$output")" -eq 3 ]   # -n 3: three fetch-and-adds
}

@test "lesson 8 across two guests: two requests, two sums, all by SEND" {
  capture 8
  assert_output --partial "[b] result: 2 + 3 = 5"
  run opcodes 8
  assert_line "4"
  [ "$(grep -cx 4 <<<"$output")" -ge 4 ]   # -n 2: two requests and two responses
}

@test "lesson 9 across two guests: the CM's MADs on QP1 connect and disconnect, then SENDs carry the sum" {
  capture 9
  assert_output --partial "[b] result: 2 + 3 = 5"
  run opcodes 9
  assert_line "100"  # UD SEND Only: the CM's MADs
  assert_line "4"
  run tshark_quiet -r captures/lesson9.pcap -Y 'infiniband.bth.opcode == 100' -T fields -e infiniband.bth.destqp
  assert_line --regexp '^0x0+1$'   # addressed to QP1, the General Services QP
  run tshark_quiet -r captures/lesson9.pcap -Y infiniband
  assert_output --partial "ConnectRequest"
  assert_output --partial "ReadyToUse"
  assert_output --partial "DisconnectRequest"
}

@test "make capture refuses a lesson without a peer, with the reason, and changes nothing" {
  run make -s capture LESSON=2
  assert_failure
  assert_output --partial "lesson 2 has no peer"
  assert_file_not_exists captures/lesson2.pcap
}

@test "scripts/capture.sh on a host whose rxe sits on a real netdev captures the lesson and prints its ladder" {
  # Guest b plays a learner's real host: rxe0 on eth0, the server on another host (guest a).
  run timeout 300 scripts/lab.sh pair --timeout 240 \
    --a "./lesson4 --timeout 60" \
    --b "scripts/capture.sh -o /tmp/l4.pcap -- ./lesson4 --timeout 60 192.0.2.1 2 3"
  assert_success
  assert_output --partial "[b] capture.sh: capturing on eth0 (udp port 4791 or tcp port 18515) into /tmp/l4.pcap"
  assert_output --partial "[b] result: 2 + 3 = 5"
  assert_output --regexp '\[b\] +[0-9]+ +[0-9.]+ +192\.0\.2\.2 -> 192\.0\.2\.1 +RC Send Only \(op 4\)'
  assert_output --regexp '\[b\] +[0-9]+ +[0-9.]+ +192\.0\.2\.1 -> 192\.0\.2\.2 +RC Acknowledge \(op 17\).*AETH ACK'
  refute_output --partial "no RoCE packets captured"
}

@test "scripts/capture.sh warns that a peer on the same host puts nothing on the wire, and says so after" {
  run timeout 200 scripts/lab.sh run --timeout 150 -- bash -c \
    './lesson4 --timeout 30 >/dev/null & sleep 0.5; scripts/capture.sh -o /tmp/l4.pcap -- ./lesson4 --timeout 30 127.0.0.1 2 3'
  assert_success
  assert_output --partial "result: 2 + 3 = 5"
  assert_output --partial "warning: the peer is on this host; rxe loopback puts nothing on dummy0"
  assert_output --partial "no RoCE packets captured: was the peer on this host (rxe loopback)?"
}
