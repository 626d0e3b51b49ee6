#!/usr/bin/env bats
# Runs on the host; each capture boots a fresh pair of guests. Not a
# suite tagged pair: in a warm pair the SRQ ran dry less often than in the
# shipped capture (no RNR NAK), and the shipped-capture comparison failed.
# make capture LESSON=13, and lesson 13 with two clients across two lab
# guests: one SRQ at the server serves both clients' QPs, and the wire shows
# each client's SENDs going to its own server QP. Each
# test uses a pair of guests (the setup and helpers are
# tests/capture.bats's).

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

# "DESTQP COUNT" for the RC SEND Only packets (opcode 4) from $2 in capture $1,
# one line per destination QP, counting each PSN once (a SEND resent after an
# RNR NAK carries the same PSN).
sends_by_qp() {
  tshark_quiet -r "$1" -Y "infiniband.bth.opcode == 4 && ip.src == $2" -T fields \
    -e infiniband.bth.destqp -e infiniband.bth.psn | sort -u | awk '{ n[$1]++ } END { for (q in n) print q, n[q] }' | sort
}

@test "make capture LESSON=13: the SRQ's server answers every SEND, and the wire carries SENDs and ACKs" {
  capture 13
  assert_output --regexp '\[a\] result: served 6 requests from 1 client with one SRQ of 4 receives; limit reached [1-9][0-9]* times?'
  assert_output --regexp '\[b\] result: 6 requests answered on QP 0x[0-9a-f]+, every sum right'
  assert_output --partial "packet ladder of captures/lesson13.pcap"
  # Six requests to the server's one QP, six answers back, each a SEND Only.
  run sends_by_qp captures/lesson13.pcap 192.0.2.2
  assert_output --regexp '^0x[0-9a-f]+ 6$'
  run sends_by_qp captures/lesson13.pcap 192.0.2.1
  assert_output --regexp '^0x[0-9a-f]+ 6$'
  run tshark_quiet -r captures/lesson13.pcap -Y 'infiniband.bth.opcode == 17' -T fields -e infiniband.aeth.syndrome.opcode
  assert_line "0" # ACK (1 would be an RNR NAK: the SRQ ran dry, and the SEND was resent)
}

@test "two clients on one SRQ across two guests: their SENDs go to two server QPs, each acknowledged" {
  local pcap=$BATS_TEST_TMPDIR/l13.pcap
  run timeout 300 scripts/lab.sh pair --timeout 240 --pcap "$pcap" \
    --a "./lesson13 --timeout 60 -c 2 -r 4 --limit 1" \
    --b "./lesson13 --timeout 60 192.0.2.1 -n 8 & ./lesson13 --timeout 60 192.0.2.1 -n 8; wait \$!"
  assert_success
  assert_output --regexp '\[a\] result: served 16 requests from 2 clients with one SRQ of 4 receives; limit reached [1-9][0-9]* times?'
  assert_equal "$(grep -cE '^\[b\] result: 8 requests answered on QP 0x[0-9a-f]+, every sum right$' <<<"$output")" 2
  # The server's two QPs (one per client) as the server printed them, and on the wire.
  local qps want
  qps=$(sed -n 's/^\[a\] server: client [12] .* QP 0x\([0-9a-f]*\) <-> .*/\1/p' <<<"$output" | sort)
  assert_equal "$(wc -l <<<"$qps")" 2
  want=$(while read -r q; do printf '0x%06x 8\n' "0x$q"; done <<<"$qps")
  run sends_by_qp "$pcap" 192.0.2.2
  assert_output "$want"
  # Each client's QP gets eight answers and ACKs for its eight requests.
  run sends_by_qp "$pcap" 192.0.2.1
  assert_equal "${#lines[@]}" 2
  assert_line --regexp '^0x[0-9a-f]+ 8$'
  refute_line --regexp ' [0-79]$'
  run tshark_quiet -r "$pcap" -Y 'infiniband.bth.opcode == 17 && ip.src == 192.0.2.1' -T fields -e infiniband.bth.destqp
  assert_equal "$(sort -u <<<"$output" | wc -l)" 2
}
