#!/usr/bin/env bats
# bats file_tags=rxe
#
# Lesson 13: one shared receive queue (SRQ) serves several RC clients; the
# server refills it when the SRQ limit event arrives. Server and clients run
# for real on the RDMA device (Soft-RoCE in the lab).

bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  load helpers/fake_peer
  lesson_setup
}
teardown() { lesson_teardown; }

# The IPv4 address in the server's GID (its "gid: index N ::ffff:A.B.C.D" line).
server_ipv4() {
  sed -n 's/^gid: index [0-9]* ::ffff:\([0-9.]*\) .*/\1/p' "$SERVER_OUT"
}

# The number K in the server's result line ("limit reached K times").
limit_count() {
  sed -n 's/^result: served .* limit reached \([0-9]*\) times\{0,1\}$/\1/p' "$SERVER_OUT"
}

@test "two clients at once share one SRQ: every request is answered on its own QP, and the limit event is raised" {
  start_server ./lesson13 -p "$PORT" --timeout 20 -c 2 -r 8 --limit 2
  wait_for_server_line "waiting for client 1 of 2" 10
  start_helper c1 ./lesson13 -p "$PORT" --timeout 20 127.0.0.1 -n 10
  start_helper c2 ./lesson13 -p "$PORT" --timeout 20 127.0.0.1 -n 10
  wait_helper c1 30
  assert_equal "$HELPER_STATUS" 0
  wait_helper c2 30
  assert_equal "$HELPER_STATUS" 0
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  # The server's last line, and the limit event at least once (20 requests, 8 receives).
  run tail -n 1 "$SERVER_OUT"
  assert_output --regexp '^result: served 20 requests from 2 clients with one SRQ of 8 receives; limit reached [0-9]+ times?$'
  (($(limit_count) >= 1)) || fail "limit reached $(limit_count) times"
  run grep -c '^server: async event "SRQ limit reached" #' "$SERVER_OUT"
  assert_output "$(limit_count)"
  # Each client: ten right sums, in order, on its own QP.
  local c qpn
  for c in c1 c2; do
    run cat "$BATS_TEST_TMPDIR/$c.out"
    assert_line "client: answer 1: 1 + 100 = 101"
    assert_line "client: answer 10: 10 + 1000 = 1010"
    assert_equal "$(grep -c '^client: answer ' <<<"$output")" 10
    assert_line --regexp '^result: 10 requests answered on QP 0x[0-9a-f]+, every sum right$'
  done
  # The server told the requests apart by wc.qp_num: ten from each of two QPs.
  run cat "$SERVER_OUT"
  for c in 1 2; do
    qpn=$(sed -n "s/^server: client $c .* QP \(0x[0-9a-f]*\) <-> .*/\1/p" "$SERVER_OUT")
    [[ -n $qpn ]] || fail "no QP for client $c"
    assert_equal "$(grep -c "^server: QP $qpn (client $c) request [0-9]*: " "$SERVER_OUT")" 10
  done
  assert_line "server: client 1 is done after 10 requests"
  assert_line "server: client 2 is done after 10 requests"
}

@test "the server prints the receive-memory arithmetic and the device's SRQ limits" {
  start_server ./lesson13 -p "$PORT" --timeout 10 -c 3 -r 6 --limit 2
  wait_for_server_line "waiting for client 1 of 3" 10
  run cat "$SERVER_OUT"
  assert_line "server: receive memory: a receive queue per QP needs 3 clients x 6 receives x 64 B = 1152 B; one SRQ needs 6 x 64 B = 384 B, however many clients"
  assert_line "server: SRQ of 6 receives posted; limit armed at 2"
  assert_line --regexp '^device: max_srq [1-9][0-9]*, max_srq_wr [1-9][0-9]*, max_srq_sge [1-9][0-9]*$'
}

@test "an SRQ that runs dry makes clients wait (RNR NAKs counted), not fail" {
  # Limit 1: the event comes only when the last receive is taken, so the
  # SRQ is empty until the refill, and the clients' bursts find it so.
  local rnr_sent rnr_rcvd
  rnr_sent=$(counter send_rnr_err) rnr_rcvd=$(counter rcvd_rnr_err)
  start_server ./lesson13 -p "$PORT" --timeout 20 -c 3 --srq-size 3 --limit 1
  wait_for_server_line "waiting for client 1 of 3" 10
  start_helper c1 ./lesson13 -p "$PORT" --timeout 20 127.0.0.1 -n 30
  start_helper c2 ./lesson13 -p "$PORT" --timeout 20 127.0.0.1 -n 30
  start_helper c3 ./lesson13 -p "$PORT" --timeout 20 127.0.0.1 -n 30
  local c
  for c in c1 c2 c3; do
    wait_helper "$c" 30
    assert_equal "$HELPER_STATUS" 0
    run tail -n 1 "$BATS_TEST_TMPDIR/$c.out"
    assert_output --regexp '^result: 30 requests answered on QP 0x[0-9a-f]+, every sum right$'
  done
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run tail -n 1 "$SERVER_OUT"
  assert_output --regexp '^result: served 90 requests from 3 clients with one SRQ of 3 receives; limit reached [0-9]+ times?$'
  (($(limit_count) >= 1)) || fail "limit reached $(limit_count) times"
  # Server and clients share rxe0: the server's RNR NAKs and the clients' receipt of them.
  local sent=$(($(counter send_rnr_err) - rnr_sent)) rcvd=$(($(counter rcvd_rnr_err) - rnr_rcvd))
  ((sent >= 1 && rcvd >= 1)) || fail "no RNR NAK: send_rnr_err +$sent, rcvd_rnr_err +$rcvd"
  # No error anywhere: no failed completion on either side.
  run cat "$SERVER_ERR" "$BATS_TEST_TMPDIR"/c?.err
  assert_output ""
}

@test "one client on the tour's settings: the limit fires and the SRQ is refilled and re-armed" {
  start_server ./lesson13 -p "$PORT" --timeout 10 -c 1 --srq-size 4 --limit 1
  wait_for_server_line "waiting for client 1 of 1" 10
  run --separate-stderr rx ./lesson13 -p "$PORT" --timeout 10 127.0.0.1 -n 6
  assert_success
  assert_line --regexp '^result: 6 requests answered on QP 0x[0-9a-f]+, every sum right$'
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run tail -n 1 "$SERVER_OUT"
  assert_output --regexp '^result: served 6 requests from 1 client with one SRQ of 4 receives; limit reached [0-9]+ times?$'
  (($(limit_count) >= 1)) || fail "limit reached $(limit_count) times"
  run cat "$SERVER_OUT"
  assert_line --regexp '^server: refilled [0-9]+ receives; limit re-armed at 1$'
}

@test "more clients than receives is refused before anything is opened" {
  run --separate-stderr rx ./lesson13 -c 9 --srq-size 8
  assert_failure 2
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" "lesson13: an SRQ of 8 receives is too small for 9 clients: give it at least one receive per client (--srq-size 9 or more) (see lesson13 -h)"
  assert_output ""
}

@test "a limit that is not below the SRQ's size, or is zero, is a usage error" {
  run --separate-stderr rx ./lesson13 --srq-size 4 --limit 4
  assert_failure 2
  assert_equal "$stderr" "lesson13: --limit: '4' is out of range 1..3 (see lesson13 -h)"
  run --separate-stderr rx ./lesson13 --limit 0
  assert_failure 2
  assert_equal "$stderr" "lesson13: --limit: '0' is out of range 1..7 (see lesson13 -h)"
}

@test "non-numbers are usage errors naming the value" {
  run --separate-stderr rx ./lesson13 -c two
  assert_failure 2
  assert_equal "$stderr" "lesson13: -c: 'two' is not a whole number (see lesson13 -h)"
  run --separate-stderr rx ./lesson13 --srq-size 8x
  assert_failure 2
  assert_equal "$stderr" "lesson13: --srq-size: '8x' is not a whole number (see lesson13 -h)"
  run --separate-stderr rx ./lesson13 127.0.0.1 -n ten
  assert_failure 2
  assert_equal "$stderr" "lesson13: -n: 'ten' is not a whole number (see lesson13 -h)"
}

@test "server options on a client and -n on a server are usage errors" {
  run --separate-stderr rx ./lesson13 127.0.0.1 --limit 2
  assert_failure 2
  assert_equal "$stderr" "lesson13: -c, -r and --limit are server options (./lesson13 -c CLIENTS) (see lesson13 -h)"
  run --separate-stderr rx ./lesson13 127.0.0.1 -r 8
  assert_failure 2
  assert_equal "$stderr" "lesson13: -c, -r and --limit are server options (./lesson13 -c CLIENTS) (see lesson13 -h)"
  run --separate-stderr rx ./lesson13 -n 3
  assert_failure 2
  assert_equal "$stderr" "lesson13: -n is a client option (./lesson13 HOST -n N) (see lesson13 -h)"
}

@test "a client gives up within its timeout on a server that says nothing" {
  start_fake silent
  SECONDS=0
  run --separate-stderr rx ./lesson13 -p "$PORT" --timeout 2 127.0.0.1
  assert_failure 1
  [ "$SECONDS" -lt 10 ]
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "${stderr_lines[0]}" "lesson13: the peer 127.0.0.1:$PORT sent nothing for 2 s"
  refute_output --partial "result:"
}

@test "a server gives up within its timeout on a client that connects and then sends no request" {
  # The fake client exchanges QP information like a real one, then is silent:
  # no SEND ever arrives at the SRQ and no DONE on TCP.
  start_server ./lesson13 -p "$PORT" --timeout 8 -c 1
  wait_for_server_line "waiting for client 1 of 1" 10
  start_fake client 13 "$(server_ipv4)"
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --index 0 --regexp '^lesson13: client 1 \(127\.0\.0\.1:[0-9]+\) sent nothing for 8 s \(0 served\); dropped it: QP 0x[0-9a-f]+ to IBV_QPS_ERR, connection closed$'
  run cat "$SERVER_OUT"
  assert_line "server: 1 of 1 clients connected; sending GO"
  assert_equal "${lines[-1]}" "result: error: served 0 requests; dropped 1 of 1 client that broke the protocol (stderr says why)"
}

@test "a client that sends half a DONE and stops is dropped on its own clock; the other client is served to the end" {
  # Client 1 (a fake, tests/helpers/fake_peer.py) sends "DO" after GO and
  # nothing more; client 2 sends its 50 requests meanwhile.
  # The fake first (it retries its connect): --timeout bounds the server's accept too.
  start_fake client 13 192.0.2.1 DO
  start_server ./lesson13 -p "$PORT" --timeout 6 -c 2
  wait_for_server_line "waiting for client 2 of 2" 10
  start_helper c2 ./lesson13 -p "$PORT" --timeout 6 127.0.0.1 -n 50
  wait_helper c2 30
  assert_equal "$HELPER_STATUS" 0
  run tail -n 1 "$BATS_TEST_TMPDIR/c2.out"
  assert_output --regexp '^result: 50 requests answered on QP 0x[0-9a-f]+, every sum right$'
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --index 0 --regexp '^lesson13: client 1 \(127\.0\.0\.1:[0-9]+\) sent nothing for 6 s \(0 served\); dropped it: QP 0x[0-9a-f]+ to IBV_QPS_ERR, connection closed$'
  run cat "$SERVER_OUT"
  assert_line "server: client 2 is done after 50 requests"
  assert_equal "${lines[-1]}" "result: error: served 50 requests; dropped 1 of 2 clients that broke the protocol (stderr says why)"
}

@test "a client whose SEND is longer than the server's receives is dropped; the other client is served to the end" {
  # Client 1 (tests/helpers/hostile_peer.cpp) sends one SEND of 128 bytes
  # into the SRQ's 64-byte receives; client 2 sends its 50 requests.
  # The hostile client first (it retries its connect): --timeout bounds the server's accept too.
  start_helper hostile build/tests/helpers/hostile_peer lesson13-oversized 127.0.0.1 "$PORT"
  start_server ./lesson13 -p "$PORT" --timeout 10 -c 2
  wait_for_server_line "waiting for client 2 of 2" 20
  start_helper c2 ./lesson13 -p "$PORT" --timeout 10 127.0.0.1 -n 50
  wait_helper c2 30
  assert_equal "$HELPER_STATUS" 0
  run tail -n 1 "$BATS_TEST_TMPDIR/c2.out"
  assert_output --regexp '^result: 50 requests answered on QP 0x[0-9a-f]+, every sum right$'
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --index 0 --regexp '^lesson13: client 1 \(127\.0\.0\.1:[0-9]+\) sent a request its receive could not take \(IBV_WC_LOC_QP_OP_ERR\); dropped it: QP 0x[0-9a-f]+ to IBV_QPS_ERR, connection closed$'
  run cat "$SERVER_OUT"
  assert_line "server: client 2 is done after 50 requests"
  assert_equal "${lines[-1]}" "result: error: served 50 requests; dropped 1 of 2 clients that broke the protocol (stderr says why)"
  # The hostile client saw its connection closed by the server.
  wait_helper hostile 10
  run cat "$BATS_TEST_TMPDIR/hostile.out"
  assert_line "hostile_peer: SEND of 128 bytes"
  assert_line "hostile_peer: the server closed the connection"
}

# Wait (bounded, $2 seconds) until the server's stderr has a line matching the regexp $1.
wait_for_server_error() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    grep -qE -- "$1" "$SERVER_ERR" 2>/dev/null && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  fail "the server never printed /$1/ on stderr: $(cat "$SERVER_OUT" "$SERVER_ERR")"
}

@test "connections that say nothing, send garbage or close during the exchange are dropped alone; the clients after them are served" {
  # Before any real client: a connection that says nothing (a port scan, a
  # peer that hangs), one that sends 54 bytes that are not a PeerInfo, one
  # that closes at once. Each is dropped alone: the last two at once, while
  # the first is still waiting, and the first after --timeout (4 s). Then
  # the server still has room for its two clients, and serves them.
  start_server ./lesson13 -p "$PORT" --timeout 4 -c 2
  wait_for_server_line "waiting for client 1 of 2" 10
  tcp_client silent ':'
  tcp_client garbage 'printf "%054d" 0 >&5'
  tcp_client closer 'exec 5>&-'
  wait_for_server_error 'then nothing for 4 s; dropped it' 15
  start_helper c1 ./lesson13 -p "$PORT" --timeout 20 127.0.0.1 -n 10
  start_helper c2 ./lesson13 -p "$PORT" --timeout 20 127.0.0.1 -n 10
  local c
  for c in c1 c2; do
    wait_helper "$c" 30
    assert_equal "$HELPER_STATUS" 0
    run tail -n 1 "$BATS_TEST_TMPDIR/$c.out"
    assert_output --regexp '^result: 10 requests answered on QP 0x[0-9a-f]+, every sum right$'
  done
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run tail -n 1 "$SERVER_OUT"
  assert_output --regexp '^result: served 20 requests from 2 clients with one SRQ of 8 receives; limit reached [0-9]+ times?$'
  # One line each, in the order they were dropped: the silent one last.
  run cat "$SERVER_ERR"
  assert_equal "${#lines[@]}" 3
  local from='^lesson13: a connection from 127\.0\.0\.1:[0-9]+'
  assert_line --regexp "$from sent a malformed exchange message: not a workbook peer \(bad magic\); dropped it$"
  assert_line --regexp "$from closed after 0 of 54 bytes of its QP information; dropped it$"
  assert_line --index 2 --regexp "$from sent 0 of 54 bytes of its QP information and then nothing for 4 s; dropped it$"
}

@test "a server drops a client of another lesson, and gives up when no other comes within its timeout" {
  start_server ./lesson13 -p "$PORT" --timeout 5 -c 1
  wait_for_server_line "waiting for client 1 of 1" 10
  start_fake client 4 "$(server_ipv4)"
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --index 0 --regexp '^lesson13: a connection from 127\.0\.0\.1:[0-9]+ runs lesson 4, this is lesson 13; dropped it$'
  assert_line --index 1 "lesson13: no client connected to TCP port $PORT within 5 s (0 of 1 connected)"
}

@test "the SRQ's size is -r (ibv_srq_pingpong's letter) or --srq-size; the limit is --limit alone" {
  run --separate-stderr rx ./lesson13 -r 4 --limit 4
  assert_failure 2
  assert_equal "$stderr" "lesson13: --limit: '4' is out of range 1..3 (see lesson13 -h)"
  run --separate-stderr rx ./lesson13 -s 8
  assert_failure 2
  assert_equal "$stderr" "lesson13: unknown option '-s' (see lesson13 -h)"
  run --separate-stderr rx ./lesson13 -l 2
  assert_failure 2
  assert_equal "$stderr" "lesson13: unknown option '-l' (see lesson13 -h)"
  run -0 rx ./lesson13 -h
  assert_line --regexp '^  -r, --srq-size=N +server: receives in the shared receive queue \(default: 8\)$'
  assert_line --regexp '^      --limit=L +server: refill when fewer than L receives are left \(default: 2\)$'
}

@test "-h prints the usage with every default and exits 0" {
  run --separate-stderr rx ./lesson13 -h
  assert_success
  assert_line --partial "how many clients to serve at once (default: 2)"
  assert_line --partial "receives in the shared receive queue (default: 8)"
  assert_line --partial "refill when fewer than L receives are left (default: 2)"
  assert_line --partial "how many sum requests to send, in one burst (default: 10)"
  assert_line --partial "default: 18515"
  assert_equal "$stderr" ""
}
