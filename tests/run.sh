#!/usr/bin/env bash
# tests/run.sh - build, run every Bats suite, and end with one line
# "N passed, N failed, N skipped".
#
# Bats always runs on this host. Three kinds of suite, by a header line:
# - "# runs-on: rxe": the lessons' suites. Their tests run the programs under
#   test through one helper (rx, tests/helpers/lesson.bash): on this host's
#   RDMA device when it has one, else in the Soft-RoCE lab that stays up
#   (scripts/lab.sh up: brought up here if none is, and down again at the
#   end). Bats' TMPDIR is then the lab's xfer folder, which both sides see.
# - "# uses: lab": suites whose scripts bring up a lab themselves, or use
#   the one that is up (make grade, make tour). Without a device here they
#   get a second lab of their own (LAB_UP_DIR), so that they run beside the
#   rxe suites without sharing a device with them. An rxe suite whose
#   header also says "# needs: two vCPUs" (lesson 11: busy polling needs a
#   CPU of its own) runs there too, first, in a boot with two vCPUs; the
#   rest with one, as the first lab has (measured faster for the suites on
#   2 host cores). An rxe suite whose header says "# kernel: K" (lesson 16:
#   trixie-backports, for ODP) runs there too, in a boot of its own with
#   LAB_KERNEL=K.
# - "# uses: pair": suites whose `lab.sh pair` runs may go through a pair of
#   guests that stays up for them (scripts/lab.sh up --pair, LAB_PAIR_DIR):
#   two boots for all of them. The capture suites say it (lesson 16's, whose
#   backports kernel the pair does not run, boots its own pair per capture).
# - "# runs-on: lab-guest": suites that change the device itself (setup_rxe.sh
#   up and down): Bats runs inside a throw-away guest of their own
#   (scripts/lab.sh run), so that the shared lab's rxe0 is never touched.
# Everything else runs on this host (the stubbed setup_rxe.sh tests, the
# unit tests, the lab's own tests and the captures, which boot guests).
#
# What may run at the same time, in three lanes (a host suite may say
# "# lane: device" or "# lane: lab" to run at the end of the first or
# second lane instead of in the third, to even the lanes out: doctor_lab
# and site, lab_netem and capture_lesson16, which boot guests of their own
# or need none): the rxe suites one after another on one device, because several of them read device-wide counters
# (lessons 4, 10, 12 and 13, retry_exceeded) that another suite's traffic
# would move; the lab suites one after another on a second device (their
# graders read counters too); and the host suites, then the lab-guest ones,
# which boot guests of their own. On a host with an RDMA device, the rxe
# and lab suites share it, so they run in one lane, one after another.
#
#   tests/run.sh                  every suite
#   tests/run.sh tests/x.bats ... only these
#
# What it guarantees:
# - The lessons and unit programs are rebuilt first (make all units), so a
#   stale ./lessonN is never tested; a failed build stops the run (exit 2).
# - Nothing hangs: every test is bounded by BATS_TEST_TIMEOUT (default 120 s
#   for the device suites, whose lessons wait at most 30 s; 360 s for the
#   host suites, whose tests boot whole lab guests), every file by the sum
#   of its tests' bounds plus 120 s, and each lane by the sum of its files'
#   bounds. Set BATS_TEST_TIMEOUT to override both defaults. A test that
#   times out is a failure; a file cut short counts its missing tests as
#   failed.
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
check_test_timeout() {
  [[ -z ${BATS_TEST_TIMEOUT:-} || $BATS_TEST_TIMEOUT =~ ^[1-9][0-9]{0,5}$ ]] && return 0
  echo "tests/run.sh: BATS_TEST_TIMEOUT must be a whole number of seconds, 1 to 999999, not '$BATS_TEST_TIMEOUT'" >&2
  exit 2
}
check_test_timeout

# The number of tests a file declares.
declared_tests() { grep -cE '^@test ' "$1"; }

# The most seconds a file may take: each test's bound, plus 120 s for its
# setup_file, teardown_file and Bats itself.
file_limit() { echo $((120 + $(declared_tests "$1") * BATS_TEST_TIMEOUT)); }

# --each: run each file on its own, bounded; frame its output for count_file.
run_each() {
  local f status
  for f in "$@"; do
    echo "#@ begin $f"
    local started=$SECONDS
    # timeout signals its whole process group: Bats, the test and what it started.
    timeout -k 10 "$(file_limit "$f")" bats --formatter tap "$f" </dev/null 2>&1
    status=$?
    echo "# $f took $((SECONDS - started)) s"
    echo "#@ end $f $status"
  done
}

if [[ ${1:-} == --each ]]; then
  shift
  : "${BATS_TEST_TIMEOUT:?tests/run.sh --each needs BATS_TEST_TIMEOUT}"
  [[ $BATS_TEST_TIMEOUT =~ ^[1-9][0-9]*$ ]] || {
    echo "tests/run.sh: BATS_TEST_TIMEOUT must be a whole number of seconds, not '$BATS_TEST_TIMEOUT'" >&2
    exit 2
  }
  export BATS_TEST_TIMEOUT
  run_each "$@"
  exit 0
fi

suites=("$@")
[[ ${#suites[@]} -gt 0 ]] || suites=(tests/*.bats)
for s in "${suites[@]}"; do
  [[ -f $s ]] || {
    echo "tests/run.sh: no such suite: $s" >&2
    exit 2
  }
done

# Never test a stale binary: make rebuilds what is older than its sources.
if ! make -q all units 2>/dev/null; then
  echo "== building (make all units): a lesson or unit program is older than its sources"
  if ! make --no-print-directory -j2 all units; then
    echo "tests/run.sh: the build failed; not testing the old binaries (fix the build, or run make)" >&2
    exit 2
  fi
fi

host_suites=() device_suites=() lab_suites=() guest_suites=() pair_suites=() late_suites=() lab_late_suites=()
for s in "${suites[@]}"; do
  if grep -q '^# runs-on: rxe$' "$s" && grep -qE '^# (needs: two vCPUs|kernel: .+)$' "$s"; then
    lab_suites+=("$s")
  elif grep -q '^# runs-on: rxe$' "$s"; then
    device_suites+=("$s")
  elif grep -q '^# uses: lab$' "$s"; then
    lab_suites+=("$s")
  elif grep -q '^# uses: pair$' "$s"; then
    pair_suites+=("$s")
  elif grep -q '^# runs-on: lab-guest$' "$s"; then
    guest_suites+=("$s")
  elif grep -q '^# lane: device$' "$s"; then
    late_suites+=("$s")
  elif grep -q '^# lane: lab$' "$s"; then
    lab_late_suites+=("$s")
  else
    host_suites+=("$s")
  fi
done

passed=0 failed=0 skipped=0
log=$(mktemp)

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
  passed=$((passed + ok))
  skipped=$((skipped + skip))
  failed=$((failed + notok))
}

# Run the files of group_files through CMD... (which runs
# "tests/run.sh --each FILES"), show the output, and count each file.
run_group() {
  local label=$1 f
  shift
  echo "== $label"
  "$@" 2>&1 | tee "$log"
  for f in "${group_files[@]}"; do count_file "$f"; done
}

# The bound of a whole group: the sum of its files' bounds, plus 60 s, so
# that each file's own timeout fires first (it lives in a process group of
# its own, which the group's timeout would not reach).
group_limit() {
  local total=60 f
  for f in "$@"; do total=$((total + $(file_limit "$f"))); done
  echo "$total"
}

given_timeout=${BATS_TEST_TIMEOUT:-}
if [[ -n $given_timeout && ! $given_timeout =~ ^[1-9][0-9]*$ ]]; then
  echo "tests/run.sh: BATS_TEST_TIMEOUT must be a whole number of seconds, not '$given_timeout'" >&2
  exit 2
fi
native=""
compgen -G '/sys/class/infiniband/*' >/dev/null && native=1
if [[ -n $native ]]; then
  device_suites+=("${lab_suites[@]}")
  lab_suites=()
fi

# The device lane: the rxe and lab suites, one file after another, Bats on
# this host. Without a device here, in the lab that stays up. Prints TAP.
run_device() {
  export BATS_TEST_TIMEOUT=${given_timeout:-120}
  if [[ -n $native ]]; then
    timeout -k 10 "$(group_limit "$@")" tests/run.sh --each "$@"
    return
  fi
  each_in_lab "$@"
}

# each_in_lab FILE...: the files, Bats here, their programs in the lab that
# is up (LAB_UP_DIR's, if set): Bats' TMPDIR in its xfer folder, which the
# guest sees too, and the device found once, here, not once per test.
each_in_lab() {
  local xfer dev
  xfer=$(scripts/lab.sh xfer)
  dev=$(scripts/lab.sh exec -- ibv_devices | awk 'NR > 2 { print $1; exit }')
  TMPDIR=$xfer LAB_XFER=$xfer RDMA_DEV=$dev \
    timeout -k 10 "$(group_limit "$@")" tests/run.sh --each "$@"
}

# The host suites marked "# lane: device", after the device lane's: the
# lanes end closer together.
run_late() { run_own_guests "${late_suites[@]}"; }

# run_own_guests FILE...: host suites, with the host suites' bound; never in
# a lab of this run (run_lab exports LAB_UP_DIR in the lab lane): the guests
# they need, they boot themselves.
run_own_guests() {
  (($#)) || return 0
  # The bound of the group is computed with the same per-test bound the
  # tests get (run alone, no earlier lane has set one).
  local BATS_TEST_TIMEOUT=${given_timeout:-360}
  export BATS_TEST_TIMEOUT
  env -u LAB_UP_DIR timeout -k 10 "$(group_limit "$@")" tests/run.sh --each "$@"
}

# The host lane: the pair suites in a pair that stays up, the host suites,
# then those that bring their own guest.
run_host() {
  export BATS_TEST_TIMEOUT=${given_timeout:-360}
  if ((${#pair_suites[@]})); then
    echo "== a pair of guests that stays up for ${pair_suites[*]}"
    LAB_PAIR_DIR=$pair_lab scripts/lab.sh up --pair
    LAB_PAIR_DIR=$pair_lab timeout -k 10 "$(group_limit "${pair_suites[@]}")" tests/run.sh --each "${pair_suites[@]}"
    LAB_PAIR_DIR=$pair_lab scripts/lab.sh down --pair
  fi
  if ((${#host_suites[@]})); then
    timeout -k 10 "$(group_limit "${host_suites[@]}")" tests/run.sh --each "${host_suites[@]}"
  fi
}

# The host suites marked "# lane: lab", at the end of the lab lane.
run_lab_late() { run_own_guests "${lab_late_suites[@]}"; }

# The suites that run Bats in a throw-away guest of their own.
run_guest() {
  ((${#guest_suites[@]})) || return 0
  BATS_TEST_TIMEOUT=${given_timeout:-120}
  if [[ -n $native ]]; then
    timeout -k 10 "$(group_limit "${guest_suites[@]}")" tests/run.sh --each "${guest_suites[@]}"
  else
    # The guest sees only the variables LAB_ENV names; 120 s more for the boot.
    LAB_ENV="${LAB_ENV:+$LAB_ENV }BATS_TEST_TIMEOUT" \
      scripts/lab.sh run --timeout $((120 + $(group_limit "${guest_suites[@]}"))) -- tests/run.sh --each "${guest_suites[@]}"
  fi
}

# The lab lane: the lab suites, in a second lab that this run owns.
run_lab() {
  # 600 s: one test grades every exercise (make grade SOLUTIONS=1), which
  # took over 360 s on a loaded two-core host.
  export BATS_TEST_TIMEOUT=${given_timeout:-600}
  export LAB_UP_DIR=$second_lab
  local f two=() one=() kernel=()
  for f in "$@"; do
    if grep -q '^# needs: two vCPUs$' "$f"; then
      two+=("$f")
    elif grep -qE '^# kernel: .+$' "$f"; then
      kernel+=("$f")
    else
      one+=("$f")
    fi
  done
  # First with two vCPUs, then with one: the graders' exercises are not
  # about speed, and a second vCPU opens races between a completion and
  # the QP state it reports (exercise 5.2's, on rxe 6.1).
  ((${#two[@]})) && run_in_lab 2 "${two[@]}"
  ((${#one[@]})) && run_in_lab 1 "${one[@]}"
  # The "# kernel: K" suites, in one boot per kernel K.
  local k files
  for k in $(for f in "${kernel[@]}"; do sed -n 's/^# kernel: //p' "$f"; done | sort -u); do
    files=()
    for f in "${kernel[@]}"; do grep -qx "# kernel: $k" "$f" && files+=("$f"); done
    LAB_KERNEL=$k run_in_lab 1 "${files[@]}"
  done
  return 0
}

# run_in_lab CPUS FILE...: the files in the second lab, booted with CPUS vCPUs.
run_in_lab() {
  local cpus=$1
  shift
  echo "== the second lab, $cpus vCPU(s)${LAB_KERNEL:+, kernel $LAB_KERNEL}, for $*"
  LAB_CPUS=$cpus scripts/lab.sh up
  each_in_lab "$@"
  scripts/lab.sh down
}

lab_started=""
device_log=$(mktemp)
lab_log=$(mktemp)
second_lab=$(mktemp -d "${TMPDIR:-/tmp}/lab2.XXXXXX")
pair_lab=$(mktemp -d "${TMPDIR:-/tmp}/pair.XXXXXX")
trap 'rm -f "$log" "$device_log" "$lab_log"; [[ -z $lab_started ]] || scripts/lab.sh down; LAB_UP_DIR=$second_lab scripts/lab.sh down >/dev/null 2>&1; rm -rf "$second_lab"; LAB_PAIR_DIR=$pair_lab scripts/lab.sh down --pair >/dev/null 2>&1; rm -rf "$pair_lab"' EXIT
# A run stopped by Ctrl-C or kill still takes its labs down (the EXIT trap).
trap 'exit 130' INT
trap 'exit 143' TERM
if ((${#device_suites[@]})) && [[ -z $native ]]; then
  # up holds the lab for this run, whoever brought it up; the down at the
  # end stops it only if no one else holds it by then.
  echo "== no RDMA device here: the device suites run in the Soft-RoCE lab (scripts/lab.sh up)"
  if ! LAB_CPUS=1 scripts/lab.sh up; then
    echo "tests/run.sh: the lab did not come up: the device suites cannot run" >&2
  fi
  lab_started=1
fi

# The three lanes at once; the device and lab lanes' output is shown when
# each is done, so that nothing interleaves.
device_pid=""
if ((${#device_suites[@]} + ${#late_suites[@]})); then
  where="in the Soft-RoCE lab"
  [[ -n $native ]] && where="on this host's RDMA devices"
  {
    ((${#device_suites[@]} == 0)) || run_device "${device_suites[@]}"
    run_late
    echo "# this lane took $SECONDS s from the start of tests/run.sh"
  } >"$device_log" 2>&1 &
  device_pid=$!
  echo "== $where, alongside the host suites (shown when done): ${device_suites[*]} ${late_suites[*]}"
fi

lab_pid=""
if ((${#lab_suites[@]} + ${#guest_suites[@]} + ${#lab_late_suites[@]})); then
  {
    ((${#lab_suites[@]} == 0)) || run_lab "${lab_suites[@]}"
    run_guest
    run_lab_late
    echo "# this lane took $SECONDS s from the start of tests/run.sh"
  } >"$lab_log" 2>&1 &
  lab_pid=$!
  echo "== in a second Soft-RoCE lab and a guest of their own, alongside (shown when done): ${lab_suites[*]} ${guest_suites[*]} ${lab_late_suites[*]}"
fi

if ((${#pair_suites[@]} + ${#host_suites[@]})); then
  group_files=("${pair_suites[@]}" "${host_suites[@]}")
  run_group "on this host: ${group_files[*]}" run_host
  echo "# this lane took $SECONDS s from the start of tests/run.sh"
fi

if [[ -n $device_pid ]]; then
  wait "$device_pid"
  group_files=("${device_suites[@]}" "${late_suites[@]}")
  run_group "$where: ${group_files[*]}" cat "$device_log"
fi

if [[ -n $lab_pid ]]; then
  wait "$lab_pid"
  group_files=("${lab_suites[@]}" "${guest_suites[@]}" "${lab_late_suites[@]}")
  run_group "in a second Soft-RoCE lab, and a guest of their own: ${group_files[*]}" cat "$lab_log"
fi

# This run's hold on the lab goes before the summary, so that the summary
# is the run's last line (the EXIT trap then has nothing to do).
if [[ -n $lab_started ]]; then
  scripts/lab.sh down 2>&1
  lab_started=""
fi
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
