#!/usr/bin/env bats
# bats file_tags=pair
# Runs on the host; its pairs are the pair of guests tests/run.sh keeps up
# for the suites tagged pair (LAB_PAIR_DIR), or two fresh guests per
# capture when none is up (bats tests/FILE.bats alone).
# Lesson 17 across two lab guests joined by a virtual cable, first clean
# (make capture LESSON=17), then with netem dropping some of the client's
# frames (scripts/lab.sh pair --netem-b): the wire shows go-back-N, the
# counters agree with the wire, and retry_cnt 0 turns the first NAK into
# IBV_WC_RETRY_EXC_ERR. Each test uses a pair of guests.

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

# lossy SPEC CLIENT_OPTS...: lesson 17 across the pair, the client's egress
# through netem SPEC, the wire in $BATS_TEST_TMPDIR/wire.pcap; lab.sh's
# output in $output, its status in $status.
lossy() {
  local spec=$1
  shift
  run timeout 300 scripts/lab.sh pair --timeout 240 --pcap "$BATS_TEST_TMPDIR/wire.pcap" --netem-b "$spec" \
    --ready 'waiting for a client on TCP port' --a './lesson17 --timeout 120' \
    --b "./lesson17 --timeout 120 $* 192.0.2.1"
}

# packets: the capture's RoCE packets as "SOURCE OPCODE PSN SYNDROME", in order.
packets() {
  tshark_quiet -r "$BATS_TEST_TMPDIR/wire.pcap" -Y infiniband -T fields \
    -e ip.src -e infiniband.bth.opcode -e infiniband.bth.psn -e infiniband.aeth.syndrome
}

@test "make capture LESSON=17: a clean stream of 4 WRITEs, 64 packets each (First, 62 Middle, Last), one ACK per WRITE" {
  capture 17
  assert_output --partial "[b] result: 4 WRITEs of 65536 bytes in "
  assert_output --partial "[a] result: the buffer holds 65536 bytes of "
  # Each packet once (a PSN sent again under TCG's delays is the same packet).
  run bash -c "tshark -r captures/lesson17.pcap -Y infiniband -T fields -e infiniband.bth.opcode -e infiniband.bth.psn 2>/dev/null | sort -u | cut -f1"
  assert_equal "$(grep -cx 6 <<<"$output")" 4   # RC RDMA WRITE First
  assert_equal "$(grep -cx 8 <<<"$output")" 4   # RC RDMA WRITE Last
  assert_equal "$(grep -cx 7 <<<"$output")" 248 # RC RDMA WRITE Middle: 62 per WRITE
  assert_line 17                                # RC Acknowledge
}

@test "3% loss on the client's egress: NAKs with syndrome 0x60, the client resends from the PSN a NAK names, every WRITE lands" {
  # --retry 7 (for ever on rxe): rxe gives its retry_cnt back only when a WRITE
  # completes, and every NAK and every ACK timeout inside one 64-packet
  # WRITE spends one (seen once under load: 7 NAKs into WRITE 0, status 12).
  # Running out is the retry_cnt 0 test's subject; this one's is go-back-N.
  lossy 'loss 3%' -n 8 --retry 7
  assert_success
  assert_output --partial "[b] lab.sh: b's egress on the cable: netem loss 3%"
  assert_output --partial "[b] result: 8 WRITEs of 65536 bytes in "
  assert_output --partial "[a] result: the buffer holds 65536 bytes of "
  local naks
  # AETH syndrome 0x60 (96): NAK, PSN sequence error; the NAK's PSN is the one the responder expects.
  naks=$(packets | awk '$1 == "192.0.2.1" && $4 == 96 { print $3 }')
  [[ -n $naks ]] || fail "no NAK 'PSN sequence error' in 512 packets at 3% loss: $(packets | awk '$4 != "" && $4 != 31' | head -5)"
  # Go-back-N: after a NAK, the client sends the PSN it names again. Not
  # after every NAK: on a loaded host the server's rxe works through its
  # queue well behind its NIC, and a NAK can name a PSN that was already on
  # its way (seen once: NAK 2577897 sent 170 frames after that PSN arrived,
  # the client going on without a resend, every WRITE landing).
  local psn resent=0
  for psn in $naks; do
    packets | awk -v psn="$psn" '$1 == "192.0.2.1" && $3 == psn && $4 == 96 { nak = 1; next }
      nak && $1 == "192.0.2.2" && $3 == psn { found = 1; exit } END { exit !found }' && resent=$((resent + 1))
  done
  ((resent > 0)) || {
    cp "$BATS_TEST_TMPDIR/wire.pcap" captures/lesson17-loss-failed.pcap
    fail "no NAK's PSN was sent again after it (the capture: captures/lesson17-loss-failed.pcap)"
  }
  # The counters agree with the wire: one out_of_seq_request at the server
  # per NAK on the cable; the client counts the NAKs it received in
  # rcvd_seq_err, at least one, at most as many (measured: 9 of 12 in one
  # run, when NAKs came while it was already resending).
  local count seq
  count=$(wc -w <<<"$naks")
  assert_output --regexp "\[a\] server: port counters that moved: ([a-z_]+ \+[0-9]+ )*out_of_seq_request \+$count([^0-9]|\$)"
  seq=$(sed -n 's/^\[b\] client: port counters that moved: \(.* \)\{0,1\}rcvd_seq_err +\([0-9]*\).*/\2/p' <<<"$output")
  ((seq >= 1 && seq <= count)) || fail "client rcvd_seq_err +${seq:-0}, for $count NAKs on the wire"
}

@test "retry_cnt 0 at 5% loss: the first resend the stream needs fails it with status 12, counted as retry_exceeded_err" {
  lossy 'loss 5%' --retry 0 -n 8
  assert_failure 1
  assert_output --regexp '\[b\] client: WRITE [0-9]+ of 8 failed after [0-9.]+ s: status 12 \(IBV_WC_RETRY_EXC_ERR, transport retry counter exceeded\)'
  assert_output --regexp "\[b\] client: port counters that moved: ([a-z_]+ \+[0-9]+ )*retry_exceeded_err \+1([^0-9]|\$)"
  assert_output --partial "[b] lesson17: retry_cnt 0: 1 NAK or ACK timeout before the WRITE completed, one more than the resends allowed; the requester gave up"
  assert_output --regexp "\[a\] lesson17: the peer 192\.0\.2\.2:[0-9]+ closed the connection instead of sending DONE"
  refute_output --partial "[b] result: "
}
