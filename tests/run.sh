#!/usr/bin/env bash
# tests/run.sh - build, run every Bats suite, and end with one line
# "N passed, N failed, N skipped".
#
#   tests/run.sh                  every suite
#   tests/run.sh tests/x.bats ... only these
#   tests/run.sh --lanes [FILE...]  where each would run: "LANE STEP FILE"
#
# Where a suite runs is said by its Bats file tags, one line at its top
# (`# bats file_tags=rxe,vcpus:2`). Bats itself runs on this host (but for
# the tag guest); a suite with no tags runs there and needs nothing else.
#   rxe        its tests run the programs through rx (tests/helpers/lesson.bash):
#              on this host's RDMA device, else in the Soft-RoCE lab that
#              stays up (brought up here if none is, down again at the end),
#              with Bats' TMPDIR in the lab's xfer folder, which both sides see.
#   lab        its scripts use a lab (make grade, make tour): it gets a second
#              lab of its own (LAB_UP_DIR), so that it runs beside the rxe
#              suites without sharing a device with them.
#   vcpus:2    the lab it runs in has two vCPUs (lesson 11: busy polling needs
#              a CPU of its own); the others get one, measured faster for the
#              suites on 2 host cores, and a second opens races between a
#              completion and the QP state it reports (exercise 5.2, rxe 6.1).
#   kernel:K   the lab it runs in boots LAB_KERNEL=K (lesson 16: trixie-backports,
#              for ODP). A suite tagged vcpus: or kernel: runs in a second
#              lab, one boot per kind, as a lab suite does.
#   pair       its `lab.sh pair` runs go through a pair of guests that stays
#              up for all such suites (LAB_PAIR_DIR): two boots for all.
#   guest      it changes the device itself (setup_rxe.sh up and down): Bats
#              runs in a throw-away guest of its own (scripts/lab.sh run), so
#              that the shared lab's rxe0 is never touched.
#   lane:device, lane:lab  a host suite that boots its own guests or needs
#              none, run at the end of that lane instead, to even the lanes.
#
# Three lanes run at the same time:
#   device  the rxe suites, one after another on one device: several read
#           device-wide counters (lessons 4, 10, 12, 13, retry_exceeded) that
#           another suite's traffic would move; then lane:device.
#   lab     the second lab's boots (vcpus:2, then one vCPU, then each
#           kernel:K), their suites one after another (the graders read
#           counters too); then guest, then lane:lab.
#   host    the pair suites in their pair, then the suites with no tags.
# On a host with an RDMA device the rxe and lab suites share it: all are in
# the device lane, one after another.
#
# What it guarantees:
# - The lessons and unit programs are rebuilt first (make all units), so a
#   stale ./lessonN is never tested; a failed build stops the run (exit 2).
# - Nothing hangs: every test is bounded by BATS_TEST_TIMEOUT (default 120 s
#   for rxe and guest suites, whose lessons wait at most 30 s; 600 s in the
#   second lab, where one test grades every exercise, over 360 s on a loaded
#   two-core host; 360 s for the others, whose tests boot whole lab guests),
#   every file by the sum of its tests' bounds plus 120 s, and each step by
#   the sum of its files' bounds. Set BATS_TEST_TIMEOUT to override them all.
#   A test that times out is a failure; a file cut short counts its missing
#   tests as failed.
# - Each file runs as its own Bats run and is checked against the number of
#   @test lines it declares, so a failing setup_file or teardown_file cannot
#   hide tests that never ran.
# - "ok N ... # skip" is counted as skipped, not passed.
#
# Internal: tests/run.sh --each FILE... runs each file under its bound and
# frames its TAP output with "#@ begin FILE" and "#@ end FILE STATUS" lines.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# BATS_TEST_TIMEOUT is used in arithmetic below, where bash would run a
# command substitution hidden in it ('x[$(cmd)]'): a number, or exit 2.
if [[ -n ${BATS_TEST_TIMEOUT:-} && ! $BATS_TEST_TIMEOUT =~ ^[1-9][0-9]{0,5}$ ]]; then
  echo "tests/run.sh: BATS_TEST_TIMEOUT must be a whole number of seconds, 1 to 999999, not '$BATS_TEST_TIMEOUT'" >&2
  exit 2
fi
given_timeout=${BATS_TEST_TIMEOUT:-}

# The number of tests a file declares.
declared_tests() { grep -cE '^@test ' "$1"; }

# The most seconds a file may take: each test's bound, plus 120 s for its
# setup_file, teardown_file and Bats itself.
file_limit() { echo $((120 + $(declared_tests "$1") * BATS_TEST_TIMEOUT)); }

if [[ ${1:-} == --each ]]; then
  shift
  : "${BATS_TEST_TIMEOUT:?tests/run.sh --each needs BATS_TEST_TIMEOUT}"
  export BATS_TEST_TIMEOUT
  for f in "$@"; do
    echo "#@ begin $f"
    started=$SECONDS
    # timeout signals its whole process group: Bats, the test and what it started.
    timeout -k 10 "$(file_limit "$f")" bats --formatter tap "$f" </dev/null 2>&1
    status=$?
    echo "# $f took $((SECONDS - started)) s"
    echo "#@ end $f $status"
  done
  exit 0
fi

lanes_only=""
[[ ${1:-} == --lanes ]] && lanes_only=1 && shift
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  # This file's header: the usage, the tags and the lanes.
  sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
suites=("$@")
[[ ${#suites[@]} -gt 0 ]] || suites=(tests/*.bats)
native=""
compgen -G '/sys/class/infiniband/*' >/dev/null && native=1

# step FILE: where FILE runs, from its file tags: rxe, lab:CPUS[:KERNEL],
# pair, guest, host, lane:device or lane:lab.
step() {
  local kind=host cpus=1 kernel="" tag
  [[ -f $1 ]] || {
    echo "tests/run.sh: no such suite: $1" >&2
    return 2
  }
  for tag in $(sed -n 's/^# bats file_tags=//p' "$1" | tr ',' ' '); do
    case $tag in
      rxe | lab | pair | guest | lane:device | lane:lab) kind=$tag ;;
      vcpus:[1-9]) cpus=${tag#vcpus:} ;;
      kernel:?*) kernel=:${tag#kernel:} ;;
      *)
        echo "tests/run.sh: $1: unknown file tag '$tag' (the tags are listed at the top of tests/run.sh)" >&2
        return 2
        ;;
    esac
  done
  [[ $kind == lab || $cpus != 1 || -n $kernel ]] && kind=lab:$cpus$kernel
  echo "$kind"
}
declare -A step_of
for s in "${suites[@]}"; do step_of[$s]=$(step "$s") || exit 2; done

# The steps of each lane, in the order they run.
mapfile -t lab_steps < <(printf '%s\n' "${step_of[@]}" | grep '^lab:' | sort -u -t: -k2,2r -k3)
device_lane=(rxe) lab_lane=("${lab_steps[@]}")
[[ -z $native ]] || device_lane+=("${lab_steps[@]}") lab_lane=()
device_lane+=(lane:device) lab_lane+=(guest lane:lab) host_lane=(pair host)

# files STEP...: the suites of those steps, in the steps' order.
files() {
  local step s
  for step; do
    for s in "${suites[@]}"; do
      [[ ${step_of[$s]} != "$step" ]] || echo "$s"
    done
  done
}

# lanes LANE STEP...: one line "LANE STEP FILE" for each suite of the steps.
lanes() {
  local lane=$1 step
  shift
  for step; do
    files "$step" | sed "s|^|$lane $step |"
  done
}
if [[ -n $lanes_only ]]; then
  lanes device "${device_lane[@]}"
  lanes lab "${lab_lane[@]}"
  lanes host "${host_lane[@]}"
  exit 0
fi

# Never test a stale binary: make rebuilds what is older than its sources.
if ! make -q all units 2>/dev/null; then
  echo "== building (make all units): a lesson or unit program is older than its sources"
  if ! make --no-print-directory -j2 all units; then
    echo "tests/run.sh: the build failed; not testing the old binaries (fix the build, or run make)" >&2
    exit 2
  fi
fi

passed=0 failed=0 skipped=0
log=$(mktemp)
# What failed, said again just before the summary line, so that the end of
# a long run (all that CI shows) names each failed test and its first lines.
failures=$(mktemp)

# Add one file's results (its section of $log) to the totals. Results that
# are missing count as failed: tests the file declares but never reported
# (a setup_file failure, a timeout, a crash), or a whole file that never
# began. A failed setup_file or teardown_file counts once, unless it already
# shows as missing tests.
count_file() {
  local f=$1 declared ok skip notok fixture ran status
  declared=$(declared_tests "$f")
  read -r ok skip notok fixture ran status < <(
    tr -d '\r' <"$log" | awk -v f="$f" '
      $0 == "#@ begin " f { on = 1; seen = 1; next }
      on && index($0, "#@ end " f " ") == 1 { status = $NF; on = 0; next }
      !on { next }
      /^ok [0-9]+ .* # skip( |$)/ { skip++; ran++; next }
      /^ok [0-9]+ / { ok++; ran++; next }
      /^not ok [0-9]+ (setup_file|teardown_file) failed/ { fixture++; next }
      /^not ok [0-9]+ / { notok++; ran++ }
      END {
        if (!seen) status = "never"; else if (status == "") status = "cut"
        print ok + 0, skip + 0, notok + 0, fixture + 0, ran + 0, status
      }'
  )
  if [[ $status == never ]]; then
    echo "tests/run.sh: $f never ran: its $declared tests count as failed" >&2
    notok=$declared
  elif ((ran < declared)); then
    echo "tests/run.sh: $f reported $ran of its $declared tests: the other $((declared - ran)) count as failed" >&2
    notok=$((notok + declared - ran))
  elif ((fixture > 0)); then
    notok=$((notok + fixture))
  elif [[ $status != 0 ]] && ((notok == 0)); then
    echo "tests/run.sh: $f: bats exited with status $status although every test passed: counted as 1 failed" >&2
    notok=1
  fi
  if [[ $status == 124 || $status == 137 ]]; then
    echo "tests/run.sh: $f was stopped after $(file_limit "$f") s" >&2
  fi
  if ((notok > 0)); then
    # Each "not ok" line of the file and up to 8 of its "#" lines, then what
    # run.sh itself said of it.
    tr -d '\r' <"$log" | awk -v f="$f" '
      $0 == "#@ begin " f { on = 1; next }
      on && index($0, "#@ end " f " ") == 1 { exit }
      !on { next }
      /^not ok / { print f ": " $0; n = 0; keep = 1; next }
      /^(ok|not ok) / { keep = 0 }
      keep && /^#/ && !/^# [^ ]+\.bats took / && n++ < 8 { print "  " $0 }' >>"$failures"
    [[ $status != never ]] || echo "$f: never ran" >>"$failures"
    ((ran >= declared)) || echo "$f: reported $ran of its $declared tests" >>"$failures"
  fi
  passed=$((passed + ok))
  skipped=$((skipped + skip))
  failed=$((failed + notok))
}

# run_group LABEL FILES CMD...: show LABEL, run CMD (the lane) showing its
# output, and count each of the files named by the array FILES.
run_group() {
  local label=$1 f
  declare -n group=$2
  shift 2
  echo "== $label: ${group[*]}"
  "$@" 2>&1 | tee "$log"
  for f in "${group[@]}"; do count_file "$f"; done
  # What tests/run.sh said in the lane (a lab that did not come up, ...).
  grep -E '^tests/run\.sh: |^lab\.sh: .*(did not|cannot|refus|error|fail)' "$log" >>"$failures" || true
}

# group_limit FILE...: the bound of a group of files, the sum of their
# bounds plus 60 s, so that each file's own timeout fires first (it lives in
# a process group of its own, which the group's timeout would not reach).
group_limit() {
  local total=60 f
  for f; do total=$((total + $(file_limit "$f"))); done
  echo "$total"
}

# each SECONDS FILE...: tests/run.sh --each FILE..., each test bounded by
# SECONDS (unless BATS_TEST_TIMEOUT was given), the whole by group_limit.
each() {
  local BATS_TEST_TIMEOUT=${given_timeout:-$1}
  export BATS_TEST_TIMEOUT
  shift
  timeout -k 10 "$(group_limit "$@")" tests/run.sh --each "$@"
}

# in_lab SECONDS FILE...: each, with the programs in the lab that is up
# (LAB_UP_DIR's, if set): Bats' TMPDIR in its xfer folder, which the guest
# sees too, and the device found once, here, not once per test.
in_lab() {
  local xfer dev
  xfer=$(scripts/lab.sh xfer)
  dev=$(scripts/lab.sh exec -- ibv_devices | awk 'NR > 2 { print $1; exit }')
  TMPDIR=$xfer LAB_XFER=$xfer RDMA_DEV=$dev each "$@"
}

# run_step STEP FILE...: the files of one step (see step), as the top of
# this file says; on a host with an RDMA device, rxe, lab and guest on it.
run_step() {
  local step=$1 cpus kernel
  shift
  case $native:$step in
    1:rxe | 1:guest) each 120 "$@" ;;
    1:lab:*) each 600 "$@" ;;
    :rxe) in_lab 120 "$@" ;;
    :lab:*)
      IFS=: read -r _ cpus kernel <<<"$step"
      # The step's kernel for the boot and for every exec into it (lab.sh
      # refuses an exec whose LAB_KERNEL names another kernel than the
      # lab's: under make check-kernels, LAB_KERNEL names the run's).
      local LAB_UP_DIR=$second_lab LAB_KERNEL=${kernel:-${LAB_KERNEL:-}}
      export LAB_UP_DIR LAB_KERNEL
      echo "== the second lab, $cpus vCPU(s)${kernel:+, kernel $kernel}, for $*"
      LAB_CPUS=$cpus scripts/lab.sh up ||
        echo "tests/run.sh: the second lab ($cpus vCPU(s)${kernel:+, kernel $kernel}) did not come up: $* cannot run" >&2
      in_lab 600 "$@"
      scripts/lab.sh down
      ;;
    :guest)
      local BATS_TEST_TIMEOUT=${given_timeout:-120}
      export BATS_TEST_TIMEOUT
      # The guest sees only the variables LAB_ENV names; 120 s more for the boot.
      LAB_ENV="${LAB_ENV:+$LAB_ENV }BATS_TEST_TIMEOUT" \
        scripts/lab.sh run --timeout $((120 + $(group_limit "$@"))) -- tests/run.sh --each "$@"
      ;;
    *:pair)
      echo "== a pair of guests that stays up for $*"
      local LAB_PAIR_DIR=$pair_lab
      export LAB_PAIR_DIR
      scripts/lab.sh up --pair || echo "tests/run.sh: the pair did not come up: $* cannot use it" >&2
      each 360 "$@"
      scripts/lab.sh down --pair
      ;;
    *) each 360 "$@" ;;
  esac
}

# run_lane STEP...: each step's suites, one step after another.
run_lane() {
  local step f
  for step; do
    mapfile -t f < <(files "$step")
    ((${#f[@]} == 0)) || run_step "$step" "${f[@]}"
  done
  echo "# this lane took $SECONDS s from the start of tests/run.sh"
}

lab_started=""
device_log=$(mktemp)
lab_log=$(mktemp)
second_lab=$(mktemp -d "${TMPDIR:-/tmp}/lab2.XXXXXX")
pair_lab=$(mktemp -d "${TMPDIR:-/tmp}/pair.XXXXXX")
trap 'rm -f "$log" "$failures" "$device_log" "$lab_log"; [[ -z $lab_started ]] || scripts/lab.sh down; LAB_UP_DIR=$second_lab scripts/lab.sh down >/dev/null 2>&1; rm -rf "$second_lab"; LAB_PAIR_DIR=$pair_lab scripts/lab.sh down --pair >/dev/null 2>&1; rm -rf "$pair_lab"' EXIT
# A run stopped by Ctrl-C or kill still takes its labs down (the EXIT trap).
trap 'exit 130' INT
trap 'exit 143' TERM
if [[ -z $native && -n $(files rxe) ]]; then
  if scripts/lab.sh status >/dev/null 2>&1; then
    echo "== the lab is up: the rxe suites run in it"
  else
    echo "== no RDMA device here: bringing the Soft-RoCE lab up for the rxe suites (scripts/lab.sh up)"
    LAB_CPUS=1 scripts/lab.sh up || echo "tests/run.sh: the lab did not come up: the rxe suites cannot run" | tee -a "$failures" >&2
    lab_started=1
  fi
fi

# The three lanes at once; the device and lab lanes' output is shown when
# each is done, so that nothing interleaves.
mapfile -t device_files < <(files "${device_lane[@]}")
mapfile -t lab_files < <(files "${lab_lane[@]}")
mapfile -t host_files < <(files "${host_lane[@]}")
where="in the Soft-RoCE lab"
[[ -z $native ]] || where="on this host's RDMA devices"
if ((${#device_files[@]})); then
  run_lane "${device_lane[@]}" >"$device_log" 2>&1 &
  device_pid=$!
  echo "== $where, alongside the host suites (shown when done): ${device_files[*]}"
fi
if ((${#lab_files[@]})); then
  run_lane "${lab_lane[@]}" >"$lab_log" 2>&1 &
  lab_pid=$!
  echo "== in a second Soft-RoCE lab and a guest of their own, alongside (shown when done): ${lab_files[*]}"
fi
((${#host_files[@]} == 0)) || run_group "on this host" host_files run_lane "${host_lane[@]}"
if ((${#device_files[@]})); then
  wait "$device_pid"
  run_group "$where" device_files cat "$device_log"
fi
if ((${#lab_files[@]})); then
  wait "$lab_pid"
  run_group "in a second Soft-RoCE lab, and a guest of their own" lab_files cat "$lab_log"
fi

# The lab this run brought up goes down before the summary, so that the
# summary is the run's last line (the EXIT trap then has nothing to do).
if [[ -n $lab_started ]]; then
  scripts/lab.sh down 2>&1
  lab_started=""
fi
if [[ -s $failures ]]; then
  echo "== what failed (each test's output is above):"
  cat "$failures"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
