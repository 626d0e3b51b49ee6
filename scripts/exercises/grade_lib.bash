# grade_lib.bash - what a grader (lessons/*/exercises/N.M/grade.bash) may use.
# shellcheck disable=SC2034 # the variables are for the graders that source this file
#
# A grader sets HINT and defines grade PROGRAM: it runs PROGRAM (and, for a
# two-process exercise, PROGRAM as the server too) for real, then checks what
# happened: results, completion statuses, the device's counters. It returns 0
# when the exercise is solved; otherwise it calls ex_fail "what was expected"
# "what happened", which prints both with the hint and returns 1.
#
#   ex_server CMD...          start a server in the background; output in $EX_SERVER_OUT
#   ex_wait_line FILE TEXT    wait (at most 10 s) until FILE has a line containing TEXT
#   ex_run CMD...             run a client (at most 30 s); output in $EX_OUT, status in $EX_STATUS
#   ex_wait_server [SECONDS]  wait (at most SECONDS, 15) for the server; status in $EX_SERVER_STATUS (124: killed)
#   ex_counter NAME           a port counter of the device (hw_counters), e.g. rcvd_rnr_err
#   ex_rx CMD...              run CMD where the device is (anything that reads the
#                             device, its sysfs or its netdev: ibv_devinfo, rdma, ip)
#   ex_sh 'SCRIPT' ARGS...    the same for a bash script
#   ex_line FILE REGEX        the first line of FILE that matches REGEX (status 1: none)
#   ex_fail EXPECTED HAPPENED print them with $HINT; return 1
# $EX_PORT is a TCP port of this exercise's own; $EX_TMP a folder of its own,
# seen by the programs too; $EX_EUID the user id the programs run as.
#
# Where the programs run: the grader itself runs on this host. With
# GRADE_LAB=1 (scripts/exercises/grade.sh sets it when this host has no RDMA device)
# every program goes through `scripts/lab.sh exec` into the lab that is up,
# and GRADE_TMP (the lab's xfer folder) holds EX_TMP, so that both sides
# see its files. Without it, everything runs here.
EX_RX=()
EX_EUID=$EUID
if [[ -n ${GRADE_LAB:-} ]]; then
  EX_RX=(scripts/lab.sh exec --timeout 60 --)
  EX_EUID=0 # the lab's programs run as root
fi
ex_rx() { "${EX_RX[@]}" "$@"; }
ex_sh() { ex_rx bash -c "$@"; }

EX_TMP=$(mktemp -d -p "${GRADE_TMP:-${TMPDIR:-/tmp}}") || {
  echo "grade: mktemp -d failed: no folder for this exercise's files" >&2
  exit 1
}
EX_PORT=$((21000 + ${EX_INDEX:-0} * 4)) # below the ephemeral range; 4 ports per exercise
EX_DEV=${GRADE_DEV:-$(ex_rx ibv_devices | awk 'NR > 2 { print $1; exit }')}
EX_SERVER_PID=
# The programs' output, which this host writes (through `>`), lives outside
# the lab's xfer folder, where the guest could plant a symlink in its place
# and steer the write to any file of ours.
EX_LOGS=$(mktemp -d /tmp/grade-out.XXXXXX) || {
  echo "grade: mktemp -d failed: no folder for this exercise's output" >&2
  exit 1
}
EX_SERVER_OUT=$EX_LOGS/server.out
EX_OUT=$EX_LOGS/client.out
EX_STATUS=
EX_SERVER_STATUS=
HINT=

ex_cleanup() {
  [[ -n $EX_SERVER_PID ]] && kill "$EX_SERVER_PID" 2>/dev/null
  rm -rf "$EX_TMP" "$EX_LOGS"
}
trap ex_cleanup EXIT

ex_server() {
  # Emptied before the start, not by the background job's redirection: a
  # second server's ex_wait_line must not read the first one's lines.
  : >"$EX_SERVER_OUT"
  "${EX_RX[@]}" "$@" >"$EX_SERVER_OUT" 2>&1 &
  EX_SERVER_PID=$!
}

# ex_serve PROGRAM ARGS...: ex_server, then wait until it listens ("waiting
# for a client"); when it never does, ex_fail says so and the status is 1.
ex_serve() {
  ex_server "$@"
  ex_wait_line "$EX_SERVER_OUT" "waiting for a client" ||
    ex_fail "the server (${*:2}) to print 'waiting for a client'" "$(ex_tail "$EX_SERVER_OUT")"
}

ex_wait_line() {
  local file=$1 text=$2 i
  for ((i = 0; i < 100; i++)); do
    grep -qF -- "$text" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

ex_run() {
  EX_STATUS=0
  timeout 30 "${EX_RX[@]}" "$@" >"$EX_OUT" 2>&1 || EX_STATUS=$?
}

ex_wait_server() {
  local i
  EX_SERVER_STATUS=124
  for ((i = 0; i < ${1:-15} * 10; i++)); do
    if ! kill -0 "$EX_SERVER_PID" 2>/dev/null; then
      EX_SERVER_STATUS=0
      wait "$EX_SERVER_PID" || EX_SERVER_STATUS=$?
      EX_SERVER_PID=
      return 0
    fi
    sleep 0.1
  done
  kill "$EX_SERVER_PID" 2>/dev/null
  EX_SERVER_PID=
}

ex_counter() {
  ex_rx cat "/sys/class/infiniband/$EX_DEV/ports/1/hw_counters/$1"
}

ex_line() {
  grep -m1 -E -- "$2" "$1"
}

# The last lines a program printed, on one line, for "what happened".
ex_tail() {
  tail -n "${2:-2}" "$1" | tr '\n' ' ' | sed 's/ *$//'
}

ex_fail() {
  echo "expected: $1"
  echo "what happened: $2"
  # A two-process exercise: the server's side of the story, which the client's last line rarely tells.
  [[ ! -s $EX_SERVER_OUT ]] || echo "the server's last lines: $(ex_tail "$EX_SERVER_OUT" 3 | cut -c1-400)"
  [[ -z $HINT ]] || echo "hint: $HINT"
  return 1
}

# Run by grade_run.sh: the grader, then a verdict even if it forgot to return one.
ex_grade() {
  grade "$1"
}
