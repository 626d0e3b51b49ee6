# tests/helpers/lesson.bash - shared setup for the suites that run lessons on a
# real RDMA device (Soft-RoCE in the lab, or this host's own device).
#
# In a suite:
#   # runs-on: rxe            (first lines: tests/run.sh runs the file in the lab
#                              when this host has no RDMA device)
#   setup() { load helpers/lesson; lesson_setup; }
#   teardown() { lesson_teardown; }
#
# Then:
#   start_server ./lesson4 -p "$PORT"     background server, output in $SERVER_OUT / $SERVER_ERR
#   run ./lesson4 -p "$PORT" 127.0.0.1 2 3
#   wait_server                            waits (bounded) and sets $SERVER_STATUS
bats_load_library bats-support
bats_load_library bats-assert
bats_load_library bats-file

REPO_ROOT="$(cd "$BATS_TEST_DIRNAME/.." && pwd)"

lesson_setup() {
  cd "$REPO_ROOT" || return 1
  if ! compgen -G '/sys/class/infiniband/*' >/dev/null; then
    fail "no RDMA device here: run this suite with 'make check' or 'scripts/lab.sh run -- bats $BATS_TEST_FILENAME'"
  fi
  # The first device, as the lessons pick it when -d is not given.
  RDMA_DEV=$(ibv_devices | awk 'NR > 2 { print $1; exit }')
  # A TCP port of our own for each test, so tests never meet each other's servers.
  PORT=$((20000 + (BATS_SUITE_TEST_NUMBER * 37 + RANDOM) % 20000))
  SERVER_PID=
  SERVER_OUT="$BATS_TEST_TMPDIR/server.out"
  SERVER_ERR="$BATS_TEST_TMPDIR/server.err"
}

# Start a server in the background. fd 3 is closed so Bats does not wait on it.
start_server() {
  "$@" >"$SERVER_OUT" 2>"$SERVER_ERR" 3>&- &
  SERVER_PID=$!
}

# Wait up to $1 seconds (default 30) for the server; sets SERVER_STATUS
# (124 when it had to be killed).
wait_server() {
  local limit=${1:-30} i
  for ((i = 0; i < limit * 10; i++)); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      # "|| ..." so that a server that failed does not trip Bats' errexit here.
      SERVER_STATUS=0
      wait "$SERVER_PID" || SERVER_STATUS=$?
      SERVER_PID=
      return 0
    fi
    sleep 0.1
  done
  kill "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=
  SERVER_STATUS=124
}

# Wait (bounded) until the server's output contains $1, e.g. a "waiting" line.
wait_for_server_line() {
  local text=$1 limit=${2:-20} i
  for ((i = 0; i < limit * 10; i++)); do
    grep -qF -- "$text" "$SERVER_OUT" 2>/dev/null && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "server never printed '$text'; its output:" >&2
  cat "$SERVER_OUT" "$SERVER_ERR" >&2
  return 1
}

lesson_teardown() {
  if [ -n "${SERVER_PID:-}" ]; then
    kill "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  # Shown by Bats only when a test fails: what the server said.
  if [ -s "${SERVER_OUT:-/nonexistent}" ] || [ -s "${SERVER_ERR:-/nonexistent}" ]; then
    echo "--- server stdout:"
    cat "$SERVER_OUT" 2>/dev/null
    echo "--- server stderr:"
    cat "$SERVER_ERR" 2>/dev/null
  fi
  return 0
}
