#!/usr/bin/env bats
# bats file_tags=rxe
#
# Lesson 20: a key-value service over RC for many clients: requests by SEND
# into one SRQ, responses by RDMA WRITE with immediate into each client's
# ring, credits, a goodbye; a client that dies or stops taking responses is
# dropped alone. Server and clients run for real on the RDMA device
# (Soft-RoCE in the lab); --tcp runs the same service over TCP.

bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  lesson_setup
}
teardown() { lesson_teardown; }

# The count in a client's result line ("result: N requests answered ...").
client_count() {
  sed -n 's/^result: \([0-9]*\) requests answered .*/\1/p' "$BATS_TEST_TMPDIR/$1.out"
}

# The count in the server's result line, also when it ends in an error.
server_count() {
  sed -n 's/^result: \(error: \)\{0,1\}served \([0-9]*\) requests.*/\2/p' "$SERVER_OUT"
}

# Kill helper $1 (as a crash would: no goodbye) and reap it.
kill_helper() {
  local entry
  for entry in "${HELPER_PIDS[@]}"; do
    if [[ ${entry%%=*} == "$1" ]]; then
      kill "${entry#*=}" 2>/dev/null
      wait "${entry#*=}" 2>/dev/null || true
    fi
  done
}

# Wait (bounded, $3 seconds) until helper $1's stdout has a line starting with $2.
wait_for_helper_line() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -q "^$2" "$BATS_TEST_TMPDIR/$1.out" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "$1 never printed '$2': $(cat "$BATS_TEST_TMPDIR/$1.out" "$BATS_TEST_TMPDIR/$1.err")"
}

# A client's result line with N requests, every response checked.
assert_client_result() {
  run tail -n 1 "$BATS_TEST_TMPDIR/$1.out"
  assert_output --regexp "^result: $2 requests answered \([0-9]+ PUTs, [0-9]+ GETs\), every response checked; [0-9]+ requests/s, p50 [0-9]+ us, p99 [0-9]+ us, over $3\$"
}

# A hostile lesson-20 client (tests/helpers/hostile_peer.cpp MODE) connects
# first, as client 1; a real client of 1000 requests is client 2 and must be
# served to the end; the server, having dropped one, exits 1.
hostile_beside_a_client() {
  start_helper hostile build/tests/helpers/hostile_peer "$1" 127.0.0.1 "$PORT"
  start_server ./lesson20 -p "$PORT" --timeout 20 -c 2 -e
  wait_for_server_line "waiting for 2 clients" 10
  wait_for_server_line "server: client 1 (" 30
  start_helper c2 ./lesson20 -p "$PORT" --timeout 20 127.0.0.1 -n 1000 -e
  wait_helper c2 60
  assert_equal "$HELPER_STATUS" 0
  assert_client_result c2 1000 RDMA
  wait_server 30
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line "server: client 2 said DONE after 1000 requests; its last WRITE is acknowledged; BYE! sent"
}

@test "four clients of 10,000 GETs and PUTs each are all answered and checked, and the server's count is the clients' sum" {
  # Events (-e) on every side: in the lab's 2-vCPU guest five busy pollers
  # leave rxe's own work little CPU (4 x 10,000 took 27 s busy, 16 s with
  # events, 2026-12-04); the next test runs the busy-polling path.
  start_server ./lesson20 -p "$PORT" --timeout 30 -c 4 -e
  wait_for_server_line "waiting for 4 clients" 10
  local c
  for c in c1 c2 c3 c4; do
    start_helper "$c" ./lesson20 -p "$PORT" --timeout 30 127.0.0.1 -n 10000 -e
  done
  for c in c1 c2 c3 c4; do
    wait_helper "$c" 150
    assert_equal "$HELPER_STATUS" 0
    assert_client_result "$c" 10000 RDMA
    run cat "$BATS_TEST_TMPDIR/$c.out"
    assert_line "client: DONE sent, BYE! received: nothing left in flight either way"
    # The first response came with 1 credit in hand; it brought the grant.
    assert_line --regexp '^client: response 1 in slot 0: GET not found, credits 16$'
  done
  wait_server 30
  assert_equal "$SERVER_STATUS" 0
  run tail -n 1 "$SERVER_OUT"
  assert_output "result: served 40000 requests from 4 clients, each said goodbye"
  assert_equal "$(server_count)" $(($(client_count c1) + $(client_count c2) + $(client_count c3) + $(client_count c4)))
  run cat "$SERVER_OUT"
  for c in 1 2 3 4; do
    assert_line "server: client $c said DONE after 10000 requests; its last WRITE is acknowledged; BYE! sent"
  done
  # Every third request a PUT: 4 x 3333 PUTs, the rest GETs; each receive re-posted.
  assert_line "server: 26668 GETs, 13332 PUTs; 400 keys stored; 40000 receives re-posted"
  run cat "$SERVER_ERR" "$BATS_TEST_TMPDIR"/c?.err
  assert_output ""
}

@test "busy polling serves two clients as events do, and a window of 1 still works" {
  start_server ./lesson20 -p "$PORT" --timeout 30 -c 2
  wait_for_server_line "waiting for 2 clients" 10
  start_helper c1 ./lesson20 -p "$PORT" --timeout 30 127.0.0.1 -n 500
  start_helper c2 ./lesson20 -p "$PORT" --timeout 30 127.0.0.1 -n 300 -t 1
  wait_helper c1 60
  assert_equal "$HELPER_STATUS" 0
  assert_client_result c1 500 RDMA
  wait_helper c2 60
  assert_equal "$HELPER_STATUS" 0
  assert_client_result c2 300 RDMA
  # A ring of 1 slot gets 1 credit, whatever the server's -t.
  run cat "$BATS_TEST_TMPDIR/c2.out"
  assert_line "client: response 1 in slot 0: GET not found, credits 1"
  wait_server 30
  assert_equal "$SERVER_STATUS" 0
  assert_equal "$(server_count)" 800
}

@test "both sides print the queue arithmetic: credits, SRQ, send and CQ depths, ring slots" {
  start_server ./lesson20 -p "$PORT" --timeout 20 -c 3 -t 8
  wait_for_server_line "waiting for 3 clients" 10
  run cat "$SERVER_OUT"
  assert_line "server: credits per client: 8 (-t); a client's ring may hold fewer, then it gets fewer"
  assert_line "server: SRQ depth: 3 clients x 8 credits = 24 receives of 64 B: every credit can be in flight at once"
  assert_line "server: send depth per client QP: 8 WRITEs with immediate (more responses wait in the program)"
  assert_line "server: CQ depth: 24 receives + 3 clients x 8 WRITEs = 48"
  assert_line "server: 24 receives posted to the SRQ; each is re-posted as soon as its request is read"
  run --separate-stderr rx ./lesson20 -p "$PORT" --timeout 20 127.0.0.1 -n 5 -t 4
  assert_success
  assert_line "client: ring: 4 slots of 64 B; window: 4 requests in flight at most (-t), 1 until the server grants more"
  assert_line "client: send depth 4, receive depth 4, CQ depth 8"
  assert_line --regexp '^client: requests go inline: (yes|no) \(max_inline_data [0-9]+, a request is 60 B\)$'
  # The server printed this line before the client ended, but in the lab its
  # stdout reaches $SERVER_OUT through exec's polling (every 10 to 300 ms),
  # later on a loaded host: wait for it rather than read at once.
  wait_for_server_line "server: client 1 (" 10
  run cat "$SERVER_OUT"
  assert_line --regexp '^server: client 1 \(127\.0\.0\.1:[0-9]+\) is connected: QP 0x[0-9a-f]+ <-> 0x[0-9a-f]+; its ring: 4 slots at 0x[0-9a-f]+, rkey 0x[0-9a-f]+; credits 4$'
}

@test "a client killed mid-run is dropped alone; the other two finish, and the counts still add up" {
  start_server ./lesson20 -p "$PORT" --timeout 30 -c 3 -e
  wait_for_server_line "waiting for 3 clients" 10
  # The victim first, so that it is client 1; killed once it is streaming.
  start_helper victim ./lesson20 -p "$PORT" --timeout 30 127.0.0.1 -n 1000000 -e
  wait_for_helper_line victim "client: response 3 in slot" 30
  start_helper c2 ./lesson20 -p "$PORT" --timeout 30 127.0.0.1 -n 2000 -e
  start_helper c3 ./lesson20 -p "$PORT" --timeout 30 127.0.0.1 -n 2000 -e
  sleep 1
  kill_helper victim
  local c
  for c in c2 c3; do
    wait_helper "$c" 90
    assert_equal "$HELPER_STATUS" 0
    assert_client_result "$c" 2000 RDMA
  done
  wait_server 30
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_equal "${#lines[@]}" 1
  assert_line --index 0 --regexp '^lesson20: client 1 \(127\.0\.0\.1:[0-9]+\) closed its connection before DONE \(after [0-9]+ requests\); dropped it: QP 0x[0-9a-f]+ to IBV_QPS_ERR, connection closed$'
  local served_victim
  served_victim=$(sed -n 's/.* before DONE (after \([0-9]*\) requests).*/\1/p' "$SERVER_ERR")
  run cat "$SERVER_OUT"
  assert_line "server: client 2 said DONE after 2000 requests; its last WRITE is acknowledged; BYE! sent"
  assert_line "server: client 3 said DONE after 2000 requests; its last WRITE is acknowledged; BYE! sent"
  assert_equal "${lines[-1]}" "result: error: served $((4000 + served_victim)) requests; dropped 1 of 3 clients (stderr says why)"
}

@test "a client that stops taking responses (no receive posted: hostile peer) is dropped alone at the first RNR NAK" {
  # tests/helpers/hostile_peer.cpp: a real lesson-20 client's steps, minus
  # the receives its responses' immediates need; then one GET.
  hostile_beside_a_client lesson20-stall
  run cat "$SERVER_ERR"
  assert_line --index 0 --regexp '^lesson20: client 1 \(127\.0\.0\.1:[0-9]+\) stopped taking responses: our WRITE with immediate found no receive posted \(IBV_WC_RNR_RETRY_EXC_ERR\); dropped it: QP 0x[0-9a-f]+ to IBV_QPS_ERR, connection closed$'
  run cat "$SERVER_OUT"
  assert_equal "${lines[-1]}" "result: error: served 1001 requests; dropped 1 of 2 clients (stderr says why)"
  wait_helper hostile 30
  run cat "$BATS_TEST_TMPDIR/hostile.out"
  assert_line "hostile_peer: 1 GET in one post list, the first naming slot 0"
  assert_line "hostile_peer: the server closed the connection"
}

@test "a client that sends more requests than its credits is dropped alone, before it eats the others' receives" {
  # tests/helpers/hostile_peer.cpp: a ring of 4 slots (4 credits at most, 1
  # before the first response), and 16 GETs in one post list. The server
  # (-e) wakes to a CQ holding several of them: more outstanding than 1 or 4.
  hostile_beside_a_client lesson20-greedy
  run cat "$SERVER_ERR"
  assert_equal "${#lines[@]}" 1
  assert_line --index 0 --regexp '^lesson20: client 1 \(127\.0\.0\.1:[0-9]+\) had ([2-9]|1[0-6]) requests outstanding with (1 credit|4 credits); dropped it: QP 0x[0-9a-f]+ to IBV_QPS_ERR, connection closed$'
}

@test "a request naming a slot outside the client's ring is refused before anything is written; the client is dropped" {
  start_helper hostile build/tests/helpers/hostile_peer lesson20-bad-slot 127.0.0.1 "$PORT"
  start_server ./lesson20 -p "$PORT" --timeout 20 -c 1 -e
  wait_server 40
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --index 0 --regexp '^lesson20: client 1 \(127\.0\.0\.1:[0-9]+\) named ring slot 99 of its 4; dropped it: QP 0x[0-9a-f]+ to IBV_QPS_ERR, connection closed$'
  run tail -n 1 "$SERVER_OUT"
  assert_output "result: error: served 1 request; dropped 1 of 1 client (stderr says why)"
}

@test "a connection that says nothing, and one of another lesson, are dropped alone; the client after them is served" {
  # The server's --timeout (6 s) bounds the silent connection, and then the
  # wait for the client after it: long enough for a loaded lab to start one.
  start_server ./lesson20 -p "$PORT" --timeout 6 -c 1 -e
  wait_for_server_line "waiting for 1 client on" 10
  tcp_client silent ':'
  start_helper other ./lesson13 -p "$PORT" --timeout 10 127.0.0.1 -n 1
  local i
  for ((i = 0; i < 200; i++)); do
    grep -q 'then nothing for 6 s; dropped it' "$SERVER_ERR" && break
    sleep 0.1
  done
  start_helper c1 ./lesson20 -p "$PORT" --timeout 20 127.0.0.1 -n 100 -e
  wait_helper c1 60
  assert_equal "$HELPER_STATUS" 0
  assert_client_result c1 100 RDMA
  wait_server 30
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_ERR"
  assert_equal "${#lines[@]}" 2
  assert_line --regexp '^lesson20: a connection from 127\.0\.0\.1:[0-9]+ runs lesson 13, this is lesson 20; dropped it$'
  assert_line --regexp '^lesson20: a connection from 127\.0\.0\.1:[0-9]+ sent 0 of 54 bytes of its QP information and then nothing for 6 s; dropped it$'
}

@test "--tcp runs the same service over TCP: every response checked, the counts agree" {
  start_server ./lesson20 -p "$PORT" --timeout 20 -c 2 --tcp
  wait_for_server_line "waiting for 2 clients" 10
  start_helper c1 ./lesson20 -p "$PORT" --timeout 20 127.0.0.1 -n 2000 --tcp
  start_helper c2 ./lesson20 -p "$PORT" --timeout 20 127.0.0.1 -n 3000 --tcp
  wait_helper c1 60
  assert_equal "$HELPER_STATUS" 0
  assert_client_result c1 2000 TCP
  wait_helper c2 60
  assert_equal "$HELPER_STATUS" 0
  assert_client_result c2 3000 TCP
  wait_server 20
  assert_equal "$SERVER_STATUS" 0
  run tail -n 1 "$SERVER_OUT"
  assert_output "result: served 5000 requests from 2 clients over TCP, each said goodbye"
  # Which of the two connected first is up to the scheduler.
  run cat "$SERVER_OUT"
  assert_line --regexp '^server: client [12] said goodbye after 2000 requests$'
  assert_line --regexp '^server: client [12] said goodbye after 3000 requests$'
}

@test "a client whose server is gone gives up within its timeout" {
  SECONDS=0
  run --separate-stderr rx ./lesson20 -p "$PORT" --timeout 2 127.0.0.1 -n 5
  assert_failure 1
  ((SECONDS < 15)) || fail "took $SECONDS s"
  refute_output --partial "result:"
}

@test "-h prints the usage with every default and exits 0" {
  run --separate-stderr rx ./lesson20 -h
  assert_success
  assert_line --regexp '^  -c, --clients=CLIENTS +server: how many clients to serve \(default: 2\)$'
  assert_line --regexp '^  -t, --depth=N +requests in flight, 1\.\.64: .*'
  assert_line --partial "slots and window (default: 16)"
  assert_line --regexp '^  -n, --requests=N +client: how many GETs and PUTs to send, 1\.\.1000000 \(default: 1000\)$'
  assert_line --regexp '^  -e, --events +sleep on a completion channel instead of busy polling \(lesson 8\)$'
  assert_line --regexp '^      --tcp +the same service over TCP instead of RDMA, for comparison \(both sides\)$'
  assert_line --partial "default: 18515"
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" ""
}

@test "misuse is one line on stderr and exit 2: options on the wrong side, depths out of range, -e with --tcp" {
  local -a cases=(
    "-n 5|lesson20: -n is a client option (./lesson20 HOST -n N) (see lesson20 -h)"
    "127.0.0.1 -c 2|lesson20: -c is a server option (./lesson20 -c CLIENTS) (see lesson20 -h)"
    "-t 0|lesson20: -t: '0' is out of range 1..64 (see lesson20 -h)"
    "-t 65|lesson20: -t: '65' is out of range 1..64 (see lesson20 -h)"
    "-c 0|lesson20: -c: '0' is out of range 1..64 (see lesson20 -h)"
    "127.0.0.1 -n zero|lesson20: -n: 'zero' is not a whole number (see lesson20 -h)"
    "--tcp -e|lesson20: -e is for RDMA completions; --tcp always sleeps in poll() (see lesson20 -h)"
    "a b|lesson20: expected at most one argument (HOST), got 2 (see lesson20 -h)"
  )
  local c args
  for c in "${cases[@]}"; do
    read -ra args <<<"${c%%|*}"
    run --separate-stderr rx ./lesson20 "${args[@]}"
    assert_failure 2
    assert_equal "$stderr" "${c#*|}"
    assert_output ""
  done
}
