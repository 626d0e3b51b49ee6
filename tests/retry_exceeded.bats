#!/usr/bin/env bats
# bats file_tags=rxe
#
# retry_cnt, and a peer that dies after RTS. Lessons 4-8's clients send to a QP that no
# longer exists and must say so with IBV_WC_RETRY_EXC_ERR (12) once its tries
# run out: retry_cnt 6 gives 7 tries of 67 ms (common/qp.cpp), where 7
# would retry for ever on rxe. tests/helpers/kill_relay.py sits on the TCP
# exchange, kills the server the moment it says "go" (RTR! or GO!!), and only
# then passes the word on, so the client's first RDMA request always meets a
# dead QP. Runs for real on rxe (in the lab when the host has no RDMA).

bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  lesson_setup
}
teardown() { lesson_teardown; }

# die_after_go LESSON TOKEN SERVER_LINE CLIENT_ARGS...: start LESSON's server,
# put the relay in front of it, run the client through the relay, and check
# what load cannot move: the client's status 12 (its tries ran out: with
# retry_cnt 7 they never would, and the client would say "closed" or time
# out instead), its message, the port's retry_exceeded_err counter up by
# exactly one, and the order, the client's end after the server's death by
# at least 0.3 s (7 tries x 67 ms is 0.47 s; a guest whose timer was
# calibrated under load runs up to 6% fast, and load only adds time). How
# much later is the host's load, not the lesson: 0.47 s idle, 1.48 s and
# 4.2 s on loaded 2-core hosts; the one upper bound is the client's own
# --timeout 20, which a status 12 must beat.
die_after_go() {
  local lesson=$1 token=$2 line=$3
  shift 3
  local relay=$((PORT + 1)) stamp="$BATS_TEST_TMPDIR/token.at" before after took
  start_server "./$lesson" -p "$PORT" --timeout 20
  wait_for_server_line "$line" 10
  # The relay runs where the server runs, and finds it by its port.
  start_helper relay /usr/bin/python3 -I -S "$REPO_ROOT/tests/helpers/kill_relay.py" "$relay" "$PORT" - "$token" "$stamp"
  for _ in {1..100}; do
    grep -q "relay listening" "$BATS_TEST_TMPDIR/relay.out" && break
    sleep 0.1
  done
  before=$(counter retry_exceeded_err)
  # The client's end is stamped by the same clock as the relay's token.
  # shellcheck disable=SC2016 # expanded where the lessons run
  run --separate-stderr rx bash -c '"${@:2}"; s=$?; date +%s.%N >"$1"; exit $s' client "$BATS_TEST_TMPDIR/ended" "./$lesson" -p "$relay" --timeout 20 "$@"
  local ended
  ended=$(cat "$BATS_TEST_TMPDIR/ended")
  after=$(counter retry_exceeded_err)
  wait_helper relay 10
  # shellcheck disable=SC2154 # stderr: set by Bats' run --separate-stderr
  [[ -e $stamp ]] || fail "the relay wrote no stamp: $(cat "$BATS_TEST_TMPDIR/relay.out" "$BATS_TEST_TMPDIR/relay.err" 2>&1); the client said: $output $stderr"
  took=$(awk -v a="$(cat "$stamp")" -v b="$ended" 'BEGIN { printf "%.3f", b - a }')
  echo "client exited $took s after the server's $token" >&3
  assert_failure 1
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  [[ "$stderr" == *"completed with status transport retry counter exceeded (12, IBV_WC_RETRY_EXC_ERR, vendor_err "* ]] ||
    fail "no IBV_WC_RETRY_EXC_ERR (12) in the client's stderr:"$'\n'"$stderr"
  [[ "$stderr" == *exited* ]] || fail "the client's message does not name the likely cause (the peer exited): $stderr"
  refute_output --partial "result: "
  awk -v t="$took" 'BEGIN { exit !(t > 0.3 && t < 20) }' ||
    fail "status 12 came $took s after the server died; 7 tries x 67 ms is 0.47 s, the client's --timeout 20 s"
  assert_equal "$((after - before))" 1
  wait_server 5
  assert_equal "$SERVER_STATUS" 137 # SIGKILL, from the relay
}

@test "lesson 4: a client whose server dies after RTR! gets IBV_WC_RETRY_EXC_ERR once its 7 tries run out" {
  die_after_go lesson4 'RTR!' "waiting for a client" 127.0.0.1 2 3
}

@test "lesson 5: a WRITE with immediate to a server that died after RTR! ends in IBV_WC_RETRY_EXC_ERR once its 7 tries run out" {
  die_after_go lesson5 'RTR!' "waiting for a client" 127.0.0.1
}

@test "lesson 6: a READ from a server that died after RTR! ends in IBV_WC_RETRY_EXC_ERR once its 7 tries run out" {
  die_after_go lesson6 'RTR!' "waiting for a client" 127.0.0.1
}

@test "lesson 7: an atomic on a server that died after GO!! ends in IBV_WC_RETRY_EXC_ERR once its 7 tries run out" {
  die_after_go lesson7 'GO!!' "waiting for client 1 of 1" 127.0.0.1
}

@test "lesson 8: an event-driven client whose server died after RTR! gets IBV_WC_RETRY_EXC_ERR once its 7 tries run out" {
  die_after_go lesson8 'RTR!' "waiting for a client" 127.0.0.1 2 3
}

@test "lesson 3 shows that rxe accepts a retry_cnt of 8, past the spec's 3 bits, and reads it back" {
  run --separate-stderr rx ./lesson3
  assert_success
  assert_line "  retry_cnt 8 on a spare QP C, one past the spec's 3 bits (0..7)"
  assert_line "    -> accepted, and ibv_query_qp reads back retry_cnt 8: this device does not check the range"
  # The QPs that carry the SEND use 6: 7 tries, then IBV_WC_RETRY_EXC_ERR.
  assert_line --regexp "^    sq_psn 0x[0-9a-f]{6}, timeout 14, retry_cnt 6, rnr_retry 7, max_rd_atomic 1$"
}
