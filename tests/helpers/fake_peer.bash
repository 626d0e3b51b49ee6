# tests/helpers/fake_peer.bash - tests/helpers/fake_peer.py, a peer that
# speaks a lesson's TCP exchange and nothing else (silent, garbage, an offer
# of the test's choosing, a client of a QP that does not exist), started
# where the lessons run. After helpers/lesson:
#   setup() { load helpers/lesson; load helpers/fake_peer; lesson_setup; }
#   start_fake_server MODE ARGS...   the fake as the server on $PORT
#   start_fake MODE ARGS...          the fake as helper "fake" (fake.out)
#   start_helper NAME "${FAKE_PEER[@]}" "$PORT" MODE ARGS...   by hand

# The distribution's python3 with -I -S: a version-manager shim costs
# seconds per start in the lab. Run directly, not in a function's subshell,
# so that the PID teardown kills is python's own.
FAKE_PEER=(/usr/bin/python3 -I -S "$BATS_TEST_DIRNAME/helpers/fake_peer.py")
[[ -x /usr/bin/python3 ]] || FAKE_PEER[0]=python3

# start_fake_server MODE ARGS...: fake_peer.py as the server on $PORT
# ($SERVER_PID, $SERVER_OUT), once it listens (20 s at most).
start_fake_server() {
  start_server "${FAKE_PEER[@]}" "$PORT" "$@"
  wait_for_server_line "fake peer listening" 20
}

# start_fake MODE ARGS...: fake_peer.py as the helper named fake, once it
# has started (10 s at most); its output in $BATS_TEST_TMPDIR/fake.out.
start_fake() {
  start_helper fake "${FAKE_PEER[@]}" "$PORT" "$@"
  local i
  for ((i = 0; i < 100; i++)); do
    grep -q "fake peer" "$BATS_TEST_TMPDIR/fake.out" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "the fake peer never started: $(cat "$BATS_TEST_TMPDIR/fake.out" "$BATS_TEST_TMPDIR/fake.err")"
}
