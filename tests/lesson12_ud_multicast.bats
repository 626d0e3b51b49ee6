#!/usr/bin/env bats
# bats file_tags=rxe
# Lesson 12: unreliable datagrams. The sum over UD QPs (./lesson12),
# datagrams lost without a word (no receive posted, a wrong Q_Key), and
# multicast fan-out (./lesson12_mcast), all run for real on an RDMA device
# (Soft-RoCE in the lab). Server, client, sender and receivers share one rxe
# port here, so its counters count both ends.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  load helpers/fake_peer
  lesson_setup
}
teardown() { lesson_teardown; }

@test "the client prints the sum the server sent back over UD, each datagram behind a 40-byte GRH" {
  start_server ./lesson12 -p "$PORT" --timeout 20
  wait_for_server_line "waiting for a client"
  run rx ./lesson12 -p "$PORT" --timeout 20 127.0.0.1 2 3
  assert_success
  assert_line "result: 2 + 3 = 5"
  assert_line --regexp '^client: UD QP 0x[0-9a-f]+ is RTS with Q_Key 0x01234567, before knowing any peer$'
  assert_line "client: posted a 1064-byte receive (40 GRH + 1024) before the exchange"
  assert_line "client: send completion IBV_WC_SUCCESS: the datagram left; nobody tells us whether it arrived"
  assert_line "client: completion IBV_WC_RECV, 56 bytes = 40 GRH + 16 message"
  refute_line --partial "no answer"
  local client_qp
  client_qp=$(sed -n 's/^client: UD QP \(0x[0-9a-f]*\) is RTS.*/\1/p' <<<"$output")
  wait_server 20
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "server: posted a 1064-byte receive (40 GRH + 1024) before the exchange"
  # The server answers the QP that the GRH and wc.src_qp name: the client's.
  assert_line --regexp "^server: completion IBV_WC_RECV, 56 bytes = 40 GRH \\+ 16 message, from QP $client_qp at 192\\.0\\.2\\.1\$"
  assert_line "result: 2 + 3 = 5"
}

# A third UD QP (tests/helpers/ud_stray.cpp) that sends the QP named in
# FILE PAYLOAD (bytes or text); it is ready to send before this returns, and
# sends the moment FILE names the QP: a lesson-12 client's four tries of 1 s
# each are all the time there is.
start_stray() {
  local file=$1 payload=$2 count=${3:-1} i
  start_helper stray build/tests/helpers/ud_stray "@$file" 192.0.2.1 "$payload" "$count"
  for ((i = 0; i < 300; i++)); do
    grep -q "ready" "$BATS_TEST_TMPDIR/stray.out" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "ud_stray never said it was ready: $(cat "$BATS_TEST_TMPDIR/stray.err")"
}

# The fake server's exchange names QP 0x123, which does not exist, so no
# answer ever comes; the stray's datagram is the only one the client gets.
# All three share this host's GID, so wc.src_qp is what tells them apart.
client_meets_a_stray() {
  start_fake_server rtr 12 192.0.2.1
  start_stray "$BATS_TEST_TMPDIR/client.out" "$1"
  start_helper client ./lesson12 -p "$PORT" --timeout 10 127.0.0.1 2 3
  wait_helper stray 30
  assert_equal "$HELPER_STATUS" 0
  run cat "$BATS_TEST_TMPDIR/stray.out"
  assert_line --regexp "^ud_stray: datagram 1 of 1, $1 bytes, to QP 0x[0-9a-f]+ at ::ffff:192\.0\.2\.1: completion IBV_WC_SUCCESS\$"
  wait_helper client 20
  assert_equal "$HELPER_STATUS" 1
  run cat "$BATS_TEST_TMPDIR/client.out"
  assert_line --regexp '^client: ignored a datagram from QP 0x[0-9a-f]+ at ::ffff:192\.0\.2\.1: not the peer of the exchange \(QP 0x123 at ::ffff:192\.0\.2\.1\); 1 so far$'
  refute_output --partial "1337"
  assert_line "client: sending 2 and 3 (16 bytes), try 4 of 4"
  assert_equal "$(tail -n 1 "$BATS_TEST_TMPDIR/client.out")" "result: error: no answer after 4 tries: every datagram was dropped (is the server running? is the Q_Key right?)"
  run cat "$BATS_TEST_TMPDIR/client.err"
  refute_output --partial "status"
}

@test "a datagram from a third QP is ignored, counted and reported, and the client keeps waiting for its server" {
  client_meets_a_stray 16
}

@test "a stray as long as the MTU, far longer than the answer, is ignored too: every receive has room for any datagram" {
  # Before: a 56-byte receive, which a longer datagram failed
  # (IBV_WC_LOC_QP_OP_ERR on rxe) and put the QP in ERR.
  client_meets_a_stray 1024
}

@test "datagrams from others cannot keep the server waiting past --timeout" {
  # A fake client (tests/helpers/fake_peer.py) exchanges, as QP 0x123, and
  # then says nothing; a third QP sends the server a datagram every 0.25 s
  # for 30 s. The server must give up at its --timeout of 5 s, long before
  # the strays stop (even with the fake client's start, a few seconds under
  # the lab's emulation): the order is asserted, not a time.
  # The stray and the fake client (which retries its connect) are started
  # first, so that the server meets its client at once.
  start_stray "$SERVER_OUT" 16 120
  start_helper fake "${FAKE_PEER[@]}" "$PORT" client 12 192.0.2.1
  start_server ./lesson12 -p "$PORT" --timeout 5
  wait_server 30
  assert_equal "$SERVER_STATUS" 1
  run cat "$BATS_TEST_TMPDIR/stray.out"
  assert_line --partial "datagram 1 of 120"
  refute_line --partial "datagram 120 of 120" # still sending when the server gave up
  run cat "$SERVER_OUT"
  assert_line --regexp '^server: ignored a datagram from QP 0x[0-9a-f]+ at ::ffff:192\.0\.2\.1: not the peer of the exchange \(QP 0x123 at ::ffff:192\.0\.2\.1\); 1 so far$'
  refute_line --partial "server: completion"
  run cat "$SERVER_ERR"
  assert_output --regexp "no request from the client 127\.0\.0\.1:[0-9]+ within 5 s \([1-9][0-9]* datagrams from others ignored\)"
}

@test "a datagram that finds no receive is dropped: the sender's completion says success, and a retry gets the sum" {
  local pkts recvs
  pkts=$(counter rcvd_pkts) recvs=$(counter rdma_recvs)
  start_server ./lesson12 -p "$PORT" --timeout 20 --no-recv
  wait_for_server_line "waiting for a client"
  run rx ./lesson12 -p "$PORT" --timeout 20 127.0.0.1 40 2
  assert_success
  assert_line "result: 40 + 2 = 42"
  # Try 1 left with IBV_WC_SUCCESS and was never answered; a later try was.
  [[ "$output" == *"try 1 of 4"*"send completion IBV_WC_SUCCESS"*"no answer within 1000 ms"*"try 2 of 4"* ]]
  wait_server 20
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "server: --no-recv: no receive posted; one follows 1500 ms after the exchange"
  assert_line --regexp '^server: in those 1500 ms the port received [1-9][0-9]* packets \(rcvd_pkts\) and our CQ got nothing: dropped$'
  assert_line "result: 40 + 2 = 42"
  # The port took in more datagrams than it completed receives for: the difference was dropped.
  local dpkts=$(($(counter rcvd_pkts) - pkts)) drecvs=$(($(counter rdma_recvs) - recvs))
  ((drecvs == 2)) || fail "rdma_recvs +$drecvs, expected +2 (one request, one answer)"
  ((dpkts > drecvs)) || fail "rcvd_pkts +$dpkts, rdma_recvs +$drecvs: no datagram was dropped"
}

@test "a wrong Q_Key drops every datagram: four successful sends, no answer, and nothing counted as received" {
  local sent pkts
  start_server ./lesson12 -p "$PORT" --timeout 20
  wait_for_server_line "waiting for a client"
  sent=$(counter sent_pkts) pkts=$(counter rcvd_pkts)
  run -1 rx ./lesson12 -p "$PORT" --timeout 20 -q 0x7 127.0.0.1 2 3
  assert_line "client: address handle for GID ::ffff:192.0.2.1, QP $(sed -n 's/^server: UD QP \(0x[0-9a-f]*\) is RTS.*/\1/p' "$SERVER_OUT"), Q_Key 0x00000007"
  [ "$(grep -c "^client: send completion IBV_WC_SUCCESS" <<<"$output")" -eq 4 ]
  [ "$(grep -c "^client: no answer within 1000 ms" <<<"$output")" -eq 4 ]
  assert_line "result: error: no answer after 4 tries: every datagram was dropped (is the server running? is the Q_Key right?)"
  # rxe drops a datagram with the wrong Q_Key while checking its headers,
  # before it counts it as received.
  assert_equal "$(($(counter sent_pkts) - sent))" 4
  assert_equal "$(($(counter rcvd_pkts) - pkts))" 0
  # The server saw nothing at all, and says so when the client leaves.
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_output --partial "closed the connection while we waited for the client's request (RECV)"
  run cat "$SERVER_OUT"
  refute_line --partial "server: completion"
}

@test "datagrams to a QP that does not exist vanish the same way" {
  start_fake_server rtr 12 192.0.2.1
  run -1 rx ./lesson12 -p "$PORT" --timeout 10 127.0.0.1 2 3
  assert_line "client: peer 127.0.0.1:$PORT is QP 0x123"
  [ "$(grep -c "^client: send completion IBV_WC_SUCCESS" <<<"$output")" -eq 4 ]
  assert_line --partial "result: error: no answer after 4 tries"
}

@test "a message longer than the path MTU does not fit in one datagram and is refused" {
  start_server ./lesson12 -p "$PORT" --timeout 20
  wait_for_server_line "waiting for a client"
  run -1 rx ./lesson12 -p "$PORT" --timeout 20 -B 2000 127.0.0.1 2 3
  assert_line "result: error: 2000 bytes do not fit in one datagram: the path MTU is 1024 bytes"
  refute_line --partial "sending"
}

@test "a request of the wrong length is answered with a refusal the client explains" {
  start_server ./lesson12 -p "$PORT" --timeout 20
  wait_for_server_line "waiting for a client"
  run -1 rx ./lesson12 -p "$PORT" --timeout 20 -B 1024 127.0.0.1 2 3
  assert_line "result: error: the server refused the request: it was 1024 bytes, not 16"
  wait_server 20
  run cat "$SERVER_OUT"
  assert_line --regexp '^server: completion IBV_WC_RECV, 1064 bytes = 40 GRH \+ 1024 message'
}

@test "multicast: three receivers each get every one of three datagrams the sender sent once" {
  local sent recvs
  sent=$(counter sent_pkts) recvs=$(counter rdma_recvs)
  start_server ./lesson12_mcast -p "$PORT" --timeout 20
  wait_for_server_line "waiting for a sender"
  run rx ./lesson12_mcast -p "$PORT" --timeout 20 127.0.0.1
  assert_success
  assert_line "sender: group GID ::ffff:239.1.2.3 = IPv4 239.1.2.3 = Ethernet 01:00:5e:01:02:03; QP 0xffffff, Q_Key 0x01234567"
  assert_line 'sender: "datagram 3 of 3" sent once, completion IBV_WC_SUCCESS'
  assert_line "result: sent 3 datagrams once to group 239.1.2.3"
  wait_server 20
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "cm event: RDMA_CM_EVENT_MULTICAST_JOIN"
  assert_line "receivers: joined group 239.1.2.3: GID ::ffff:239.1.2.3 (the IPv4 group as ::ffff:a.b.c.d), Ethernet 01:00:5e:01:02:03, Q_Key 0x01234567"
  local i
  for i in 1 2 3; do
    assert_line --regexp "^receiver $i \\(QP 0x[0-9a-f]+\\) got 3 of 3: \"datagram 1 of 3\", \"datagram 2 of 3\", \"datagram 3 of 3\"\$"
  done
  assert_line "result: each of 3 receivers got all 3 datagrams"
  # Sent once, received three times: the copies are made past the sender
  # (rxe here, the switch and each NIC on a real fabric).
  assert_equal "$(($(counter sent_pkts) - sent))" 3
  assert_equal "$(($(counter rdma_recvs) - recvs))" 9
  run cat "$SERVER_ERR"
  refute_output --partial "EBUSY" # every QP was detached before it was destroyed
}

@test "multicast to a group of our choosing, with R receivers and K datagrams" {
  start_server ./lesson12_mcast -p "$PORT" --timeout 20 --receivers 5 -n 2 239.9.8.7
  wait_for_server_line "waiting for a sender"
  run rx ./lesson12_mcast -p "$PORT" --timeout 20 -n 2 127.0.0.1
  assert_success
  assert_line "sender: group GID ::ffff:239.9.8.7 = IPv4 239.9.8.7 = Ethernet 01:00:5e:09:08:07; QP 0xffffff, Q_Key 0x01234567"
  wait_server 20
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line --regexp '^receiver 5 \(QP 0x[0-9a-f]+\) got 2 of 2: "datagram 1 of 2", "datagram 2 of 2"$'
  assert_line "result: each of 5 receivers got all 2 datagrams"
}

@test "receivers that expect more datagrams than the sender sends say the two sides' -n differ, not that datagrams were lost" {
  start_server ./lesson12_mcast -p "$PORT" --timeout 20 --receivers 2 -n 3
  wait_for_server_line "waiting for a sender"
  run rx ./lesson12_mcast -p "$PORT" --timeout 20 -n 2 127.0.0.1
  assert_success
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line 'receiver 1 (QP '"$(sed -n 's/^receiver 1: UD QP \(0x[0-9a-f]*\) .*/\1/p' "$SERVER_OUT")"') got 2 of 3: "datagram 1 of 2", "datagram 2 of 2"'
  assert_line "result: error: the sender sent 2 datagrams, the receivers expect 3: the two sides' -n differ; give both the same -n"
  refute_line --partial "not every receiver got every datagram"
}

@test "receivers that expect fewer datagrams than the sender sends say the counts differ too" {
  start_server ./lesson12_mcast -p "$PORT" --timeout 20 --receivers 1 -n 2
  wait_for_server_line "waiting for a sender"
  run rx ./lesson12_mcast -p "$PORT" --timeout 20 -n 3 127.0.0.1
  assert_success
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line --regexp '^receiver 1 \(QP 0x[0-9a-f]+\) got 2 of 2: "datagram 1 of 3", "datagram 2 of 3"$'
  assert_line "result: error: the sender sent 3 datagrams, the receivers expect 2: the two sides' -n differ; give both the same -n"
}

@test "multicast receivers count only the sender of the exchange: a forged datagram to the group is ignored" {
  # A third QP sends the group "datagram 3 of 3" before the sender starts.
  # Each receiver QP gets a copy, in one of the three receives it posted,
  # and ignores it; the sender's third datagram then finds no receive and
  # is lost, which the receivers report as a loss, not as the forgery.
  start_server ./lesson12_mcast -p "$PORT" --timeout 20
  wait_for_server_line "waiting for a sender"
  run rx build/tests/helpers/ud_stray 0xffffff 239.1.2.3 "datagram 3 of 3"
  assert_success
  local stray_qp
  stray_qp=$(sed -n 's/^ud_stray: UD QP \(0x[0-9a-f]*\) ready$/\1/p' <<<"$output")
  run rx ./lesson12_mcast -p "$PORT" --timeout 20 127.0.0.1
  assert_success
  local sender_qp
  sender_qp=$(sed -n 's/^sender: UD QP \(0x[0-9a-f]*\) is RTS.*/\1/p' <<<"$output")
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  local i
  for i in 1 2 3; do
    assert_line "receiver $i: ignored a datagram from QP $stray_qp at ::ffff:192.0.2.1: not the peer of the exchange (QP $sender_qp at ::ffff:192.0.2.1); 1 so far"
    assert_line --regexp "^receiver $i \\(QP 0x[0-9a-f]+\\) got 2 of 3: \"datagram 1 of 3\", \"datagram 2 of 3\"\$"
  done
  refute_line --partial "from QP $stray_qp at 192.0.2.1"
  assert_line "result: error: not every receiver got every datagram (lines above)"
}

@test "a multicast sender with no receivers yet says so as the sender, not as a client" {
  run -1 --separate-stderr rx ./lesson12_mcast -p "$PORT" --timeout 2 127.0.0.1
  assert_line --regexp "^sender: 127\.0\.0\.1:$PORT did not answer \(ECONNREFUSED \(Connection refused\)\); retrying for up to 2 s$"
  refute_line --partial "client:"
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  [[ "$stderr" == *"could not connect to 127.0.0.1:$PORT within 2 s"* ]]
}

@test "the receivers leave their group: nothing librdmacm keeps for a join is left behind (LeakSanitizer)" {
  local lsan
  lsan=$(gcc -print-file-name=liblsan.so 2>/dev/null)
  [[ $lsan == /* && -f $lsan ]] || fail "no liblsan.so here (gcc's LeakSanitizer runtime: package liblsan0, which scripts/install_deps.sh installs)"
  # LD_PRELOAD: LeakSanitizer checks an uninstrumented program at its exit.
  start_server env LD_PRELOAD="$lsan" ./lesson12_mcast -p "$PORT" --timeout 20 --receivers 2 -n 1
  wait_for_server_line "waiting for a sender"
  run rx ./lesson12_mcast -p "$PORT" --timeout 20 -n 1 127.0.0.1
  assert_success
  wait_server 20
  run cat "$SERVER_ERR"
  refute_output --partial "LeakSanitizer"
  assert_equal "$SERVER_STATUS" 0
}

@test "a unicast client refuses multicast receivers, and a multicast sender a unicast server" {
  start_server ./lesson12_mcast -p "$PORT" --timeout 20
  wait_for_server_line "waiting for a sender"
  run -1 --separate-stderr rx ./lesson12 -p "$PORT" --timeout 10 127.0.0.1 2 3
  [[ "$stderr" == *"the peer 127.0.0.1:$PORT runs multicast receivers"* ]]
  wait_server 20
  start_server ./lesson12 -p "$PORT" --timeout 20
  wait_for_server_line "waiting for a client"
  run -1 --separate-stderr rx ./lesson12_mcast -p "$PORT" --timeout 10 127.0.0.1
  # The server's QP number in hex, as on every other line.
  [[ "$stderr" =~ "the peer 127.0.0.1:$PORT is not multicast receivers (it gave QP 0x"[0-9a-f]+", not 0xffffff)" ]]
}

@test "a client whose server accepts and then says nothing gives up after --timeout" {
  start_fake_server silent
  local start=$SECONDS
  run -1 --separate-stderr rx ./lesson12 -p "$PORT" --timeout 2 127.0.0.1 1 2
  [ $((SECONDS - start)) -le 8 ]
  [[ "$stderr" == *"127.0.0.1:$PORT sent nothing for 2 s"* ]]
}

@test "multicast receivers given --timeout and no sender give up" {
  local start=$SECONDS
  run -1 --separate-stderr rx ./lesson12_mcast -p "$PORT" --timeout 2
  [ $((SECONDS - start)) -le 8 ]
  assert_line --partial "receivers: waiting for a sender"
  [[ "$stderr" == *"2 s"* ]]
}

@test "bad numbers and misplaced options are one-line usage errors" {
  run -2 --separate-stderr rx ./lesson12 127.0.0.1 two 3
  assert_equal "$stderr" "lesson12: A: 'two' is not a whole number (see lesson12 -h)"
  run -2 --separate-stderr rx ./lesson12 -q 0x1ffffffff 127.0.0.1 2 3
  assert_equal "$stderr" "lesson12: -q: '0x1ffffffff' is not a 32-bit number (decimal or 0x hex) (see lesson12 -h)"
  run -2 --separate-stderr rx ./lesson12 -q key 127.0.0.1 2 3
  assert_equal "$stderr" "lesson12: -q: 'key' is not a 32-bit number (decimal or 0x hex) (see lesson12 -h)"
  run -2 --separate-stderr rx ./lesson12 --no-recv 127.0.0.1 2 3
  assert_equal "$stderr" "lesson12: --no-recv is a server option (see lesson12 -h)"
  # --no-recv has no short letter: -n is a count in every program that has it.
  run -2 --separate-stderr rx ./lesson12 -n
  assert_equal "$stderr" "lesson12: unknown option '-n' (see lesson12 -h)"
  run -2 --separate-stderr rx ./lesson12 -q 7
  assert_equal "$stderr" "lesson12: -B and -q are client options (see lesson12 -h)"
  # Multicast is the other program: lesson12 has no multicast options.
  run -2 --separate-stderr rx ./lesson12 --mcast
  assert_equal "$stderr" "lesson12: unknown option '--mcast' (see lesson12 -h)"
  run -2 --separate-stderr rx ./lesson12 -r 2
  assert_equal "$stderr" "lesson12: unknown option '-r' (see lesson12 -h)"
  assert_equal "$output" ""
}

@test "the multicast program's bad counts, misplaced options and extra arguments are one-line usage errors" {
  run -2 --separate-stderr rx ./lesson12_mcast --receivers 9
  assert_equal "$stderr" "lesson12_mcast: --receivers: '9' is out of range 1..8 (see lesson12_mcast -h)"
  run -2 --separate-stderr rx ./lesson12_mcast -n many 127.0.0.1
  assert_equal "$stderr" "lesson12_mcast: -n: 'many' is not a whole number (see lesson12_mcast -h)"
  run -2 --separate-stderr rx ./lesson12_mcast -n 17
  assert_equal "$stderr" "lesson12_mcast: -n: '17' is out of range 1..16 (see lesson12_mcast -h)"
  run -2 --separate-stderr rx ./lesson12_mcast --receivers 2 127.0.0.1
  assert_equal "$stderr" "lesson12_mcast: --receivers is a receivers' option (no HOST) (see lesson12_mcast -h)"
  # The old letters are gone: -r is an SRQ's receives and -k nothing, in every program.
  run -2 --separate-stderr rx ./lesson12_mcast -r 2
  assert_equal "$stderr" "lesson12_mcast: unknown option '-r' (see lesson12_mcast -h)"
  run -2 --separate-stderr rx ./lesson12_mcast -k 2
  assert_equal "$stderr" "lesson12_mcast: unknown option '-k' (see lesson12_mcast -h)"
  run -2 --separate-stderr rx ./lesson12_mcast 239.1.2.3 127.0.0.1
  assert_equal "$stderr" "lesson12_mcast: give one GROUP or one HOST, not 2 arguments (see lesson12_mcast -h)"
  run -2 --separate-stderr rx ./lesson12_mcast -q 7
  assert_equal "$stderr" "lesson12_mcast: unknown option '-q' (see lesson12_mcast -h)"
  assert_equal "$output" ""
}

@test "-h prints the usage with its defaults and exits 0, and names the other program" {
  run -0 rx ./lesson12 -h
  assert_line --partial "lesson12 [options] HOST A B"
  assert_line --partial "(default: 0x01234567, the server's; any other is dropped)"
  assert_line --partial "(default: 16, one request)"
  assert_line --regexp '^      --no-recv +server: post the receive 1\.5 s after the exchange \(default: before\)$'

  assert_line "Multicast is the lesson's second program: ./lesson12_mcast -h."
  refute_line --partial "receivers: R QPs"
}

@test "the multicast program's -h prints its usage with every default and exits 0" {
  run -0 rx ./lesson12_mcast -h
  assert_line --partial "lesson12_mcast [options] [--receivers R] [-n N] [GROUP]   receivers: R QPs join GROUP (default: 239.1.2.3)"
  assert_line --partial "lesson12_mcast [options] [-n N] HOST"
  assert_line --regexp '^      --receivers=R +receivers: R QPs join the group, 1\.\.8 \(default: 3\)$'
  assert_line --regexp '^  -n, --count=N +.*1\.\.16 \(default: 3\)$'
  assert_line --regexp '^  -p, --port=PORT +TCP port of the out-of-band exchange \(default: 18515\)$'
  assert_line --partial "The sum over UD is ./lesson12."
}

# ---- the parts of ud.hpp that need no device (tests/unit/ud_datagram.cpp)

@test "ud.hpp: a UD receive's message is what follows its 40-byte GRH, and the GRH area gives the IPv4 source" {
  run build/tests/ud_datagram
  assert_success
  assert_line "ok - a 56-byte receive with its GRH holds a 16-byte message"
  assert_line "ok - a receive of the GRH alone holds an empty message"
  assert_line "ok - grh_source_ipv4 reads the IPv4 header's source (got 192.0.2.7)"
  refute_line --partial "not ok"
  assert_line "ud_datagram: 3 checks, 0 failed"
}

@test "ud.hpp: a UD receive shorter than its GRH is refused, saying how long it was" {
  run -1 --separate-stderr build/tests/ud_datagram short
  assert_output ""
  assert_equal "$stderr" "ud_datagram: a UD receive without its 40-byte GRH (39 bytes)"
}
