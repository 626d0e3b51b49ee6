# tests/helpers/lesson.bash - shared setup for the suites that run lessons on a
# real RDMA device (Soft-RoCE in the lab, or this host's own device).
#
# In a suite:
#   # bats file_tags=rxe      (its top: tests/run.sh runs the file in the lab
#                              when this host has no RDMA device)
#   setup() { load helpers/lesson; lesson_setup; }
#   teardown() { lesson_teardown; }
#
# Then:
#   start_server ./lesson4 -p "$PORT"     background server, output in $SERVER_OUT / $SERVER_ERR
#   run ./lesson4 -p "$PORT" 127.0.0.1 2 3
#   wait_server                            waits (bounded) and sets $SERVER_STATUS
#   wait_for_server_line "waiting for"     waits (bounded) for a line of the server's
#   start_helper NAME CMD...               another background process (a fake peer,
#                                          a second client): output in
#                                          $BATS_TEST_TMPDIR/NAME.out, killed in teardown
#   wait_helper NAME [SECS]                waits (bounded); sets HELPER_STATUS
#   tcp_client NAME 'SCRIPT'               a raw client of $PORT (SCRIPT writes to fd 5)
#   run rx CMD...                          runs CMD where the RDMA device is (see rx)
#   rx_sh 'SCRIPT' [ARGS...]               a bash script there: rx bash -c SCRIPT
#   counter NAME                           the port's counter NAME (hw_counters), e.g. rcvd_pkts
#
# Ports: each test gets its own TCP port $PORT, and may also use $PORT + 1;
# nothing else in the suites uses these. The port is 20000 + 128 x (the
# file's place among tests/*.bats) + 2 x (the test's number in its file):
# distinct for every test of every file, without RANDOM, and below 32768,
# where Linux's ephemeral ports begin (so no client's source port takes it):
# room for 99 files of up to 63 tests.
# The variables this file sets (PORT, RDMA_DEV, SERVER_STATUS ...) are read by the suites.
# shellcheck disable=SC2034
bats_load_library bats-support
bats_load_library bats-assert
bats_load_library bats-file

REPO_ROOT="$(cd "$BATS_TEST_DIRNAME/.." && pwd)"

# rx CMD [ARGS...]: run CMD on the machine that has the RDMA device, with
# its stdout, stderr and exit status passed through. Every command a test
# runs against the device or the lessons' network (a lesson, a fake peer,
# ibv_devinfo, rdma, a read of /sys/class/infiniband, a /dev/tcp client)
# goes through rx, start_server or start_helper; the assertions stay here.
# RX is the prefix that gets it there: nothing on a host whose kernel has an
# RDMA device; `scripts/lab.sh exec` into the lab that stays up otherwise
# (tests/run.sh brings one up). There, files under $BATS_TEST_TMPDIR are
# seen at the same path on both sides (tests/run.sh puts TMPDIR in the
# lab's xfer folder), and killing the PID that start_server recorded kills
# the server in the guest. No test may depend on which of the two it got.
RX=()
rx() { "${RX[@]}" "$@"; }
rx_sh() { rx bash -c "$@"; }

# counter NAME: port 1's counter NAME (rxe's hw_counters), e.g. rcvd_pkts.
counter() {
  local file="/sys/class/infiniband/$RDMA_DEV/ports/1/hw_counters/$1" value
  value=$(rx cat "$file") || fail "$RDMA_DEV has no counter $1 in ${file%/*} (rxe has it)"
  echo "$value"
}

# Where the device is: on this host, or in the lab (then RX is set). On
# failure RX_WHY says why. tests/run.sh, which has brought the lab up,
# exports LAB_XFER; without it, ask the lab.
rx_where() {
  if compgen -G '/sys/class/infiniband/*' >/dev/null; then
    RX=()
    return 0
  fi
  local xfer=${LAB_XFER:-}
  if [[ -z $xfer ]]; then
    if ! "$REPO_ROOT/scripts/lab.sh" status >/dev/null 2>&1; then
      RX_WHY="no RDMA device here and no lab up: run this suite with 'make check', or 'scripts/lab.sh up' first"
      return 1
    fi
    xfer=$("$REPO_ROOT/scripts/lab.sh" xfer)
  fi
  if [[ $BATS_TEST_TMPDIR != "$xfer"/* ]]; then
    RX_WHY="the lab cannot see $BATS_TEST_TMPDIR: run Bats with TMPDIR=$xfer (tests/run.sh does)"
    return 1
  fi
  # Each command is bounded in the guest too; Bats' own timeout ends the
  # client, and with it the command.
  RX=("$REPO_ROOT/scripts/lab.sh" exec --timeout "${BATS_TEST_TIMEOUT:-120}" --)
}

# guest_kernel: the kernel release where the lessons run (`uname -r` there:
# the lab's guest, or this host), asked once per file and kept in
# $BATS_FILE_TMPDIR. Where rxe behaves differently by kernel (docs/rxe.md),
# a test names each kernel's answer: `if kernel_at_least 6.2; then ...`.
guest_kernel() {
  local cache=$BATS_FILE_TMPDIR/guest-kernel
  if [[ ! -s $cache ]]; then
    rx uname -r >"$cache.tmp" || fail "uname -r failed where the lessons run"
    mv "$cache.tmp" "$cache"
  fi
  cat "$cache"
}

# kernel_at_least MAJOR.MINOR: the kernel where the lessons run is that
# version or later (6.1.0-57-amd64 is 6.1; 6.12.118+deb13-amd64 is 6.12).
kernel_at_least() {
  local have
  have=$(guest_kernel | grep -oE '^[0-9]+\.[0-9]+') || fail "no version in '$(guest_kernel)'"
  [[ $(printf '%s\n' "$1" "$have" | sort -V | head -n 1) == "$1" ]]
}

lesson_setup() {
  cd "$REPO_ROOT" || return 1
  rx_where || fail "$RX_WHY"
  # The first device, as the lessons pick it when -d is not given
  # (tests/run.sh finds it once for every file).
  [[ -n ${RDMA_DEV:-} ]] || RDMA_DEV=$(rx ibv_devices | awk 'NR > 2 { print $1; exit }')
  [[ -n $RDMA_DEV ]] || fail "ibv_devices lists no RDMA device"
  PORT=$(test_port) || return 1
  SERVER_PID=
  HELPER_PIDS=()
  SERVER_OUT="$BATS_TEST_TMPDIR/server.out"
  SERVER_ERR="$BATS_TEST_TMPDIR/server.err"
}

# This test's TCP port (see the top of this file).
test_port() {
  local files file index=0 i port
  files=("$REPO_ROOT"/tests/*.bats)
  # ${x##*/}, not basename: this runs for every test, and 55 forks of
  # basename cost a loaded host about 0.1 s each time.
  file=${BATS_TEST_FILENAME##*/}
  for i in "${!files[@]}"; do
    if [[ ${files[$i]##*/} == "$file" ]]; then index=$i; fi
  done
  port=$((20000 + 128 * index + 2 * BATS_TEST_NUMBER))
  if ((BATS_TEST_NUMBER >= 64 || port + 1 >= 32768)); then
    echo "test_port: test $BATS_TEST_NUMBER of $file (file $index) has no port of its own below 32768" >&2
    return 1
  fi
  echo "$port"
}

# Start a server in the background. fd 3 is closed so Bats does not wait on it.
start_server() {
  # Emptied here, before the server starts: the redirection below happens in
  # the background job, and a wait_for_server_line that ran before it would
  # read a previous server's lines in the same test.
  : >"$SERVER_OUT"
  : >"$SERVER_ERR"
  "${RX[@]}" "$@" >"$SERVER_OUT" 2>"$SERVER_ERR" 3>&- &
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

# Start another background process, named NAME; "$@" is run directly (not in
# a subshell), so the PID recorded is the process's own and teardown can kill it.
start_helper() {
  local name=$1
  shift
  "${RX[@]}" "$@" >"$BATS_TEST_TMPDIR/$name.out" 2>"$BATS_TEST_TMPDIR/$name.err" 3>&- &
  HELPER_PIDS+=("$name=$!")
}

# tcp_client NAME 'SCRIPT': a client of the server's TCP port, run where the
# lessons run (start_helper): fd 5 connected to 127.0.0.1:$PORT, then the
# bash SCRIPT (which may write to fd 5), then the connection held open
# until the test ends (30 s at most), as a peer that stops talking.
tcp_client() {
  # shellcheck disable=SC2016 # expanded by the helper's bash
  start_helper "$1" bash -c 'exec 5<>"/dev/tcp/127.0.0.1/$1" || exit 1; echo connected; eval "$2"; sleep 30' tcp_client "$PORT" "$2"
  # Connected before the test goes on, as a client in the test's own shell would be.
  local i
  for ((i = 0; i < 200; i++)); do
    grep -q '^connected$' "$BATS_TEST_TMPDIR/$1.out" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "tcp_client $1: no connection to port $PORT within 10 s" >&2
  return 1
}

# Wait up to $2 seconds (default 30) for helper $1; sets HELPER_STATUS (124
# when it had to be killed).
wait_helper() {
  local name=$1 limit=${2:-30} entry pid='' i
  for entry in "${HELPER_PIDS[@]}"; do
    [[ ${entry%%=*} == "$name" ]] && pid=${entry#*=}
  done
  [[ -n $pid ]] || {
    echo "wait_helper: no helper named $name" >&2
    return 1
  }
  for ((i = 0; i < limit * 10; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      HELPER_STATUS=0
      wait "$pid" || HELPER_STATUS=$?
      return 0
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  HELPER_STATUS=124
}

lesson_teardown() {
  if [ -n "${SERVER_PID:-}" ]; then
    kill "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  local entry
  for entry in "${HELPER_PIDS[@]}"; do
    kill "${entry#*=}" 2>/dev/null
    wait "${entry#*=}" 2>/dev/null
  done
  # Shown by Bats only when a test fails: what the server said.
  if [ -s "${SERVER_OUT:-/nonexistent}" ] || [ -s "${SERVER_ERR:-/nonexistent}" ]; then
    echo "--- server stdout:"
    cat "$SERVER_OUT" 2>/dev/null
    echo "--- server stderr:"
    cat "$SERVER_ERR" 2>/dev/null
  fi
  return 0
}
