#!/usr/bin/env bash
# tests/run.sh - build, run every Bats suite, and end with one line
# "N passed, N failed, N skipped".
#
# Suites whose header says "# runs-on: rxe" need an RDMA device: they run on
# this host when it has one, and inside the Soft-RoCE lab (scripts/lab.sh)
# when it has none. Every other suite runs on the host (the stubbed
# setup_rxe.sh tests, the unit tests, and the lab's own tests, which boot
# guests themselves).
#
#   tests/run.sh                  every suite
#   tests/run.sh tests/x.bats ... only these
#
# What it guarantees:
# - The lessons and unit programs are rebuilt first (make all units), so a
#   stale ./lessonN is never tested; a failed build stops the run (exit 2).
# - Nothing hangs: every test is bounded by BATS_TEST_TIMEOUT (default 120 s
#   for the rxe suites, whose lessons wait at most 30 s; 360 s for the host
#   suites, whose tests boot whole lab guests), every file by the sum of its
#   tests' bounds plus 120 s, and the lab by the sum of its files' bounds.
#   Set BATS_TEST_TIMEOUT to override both defaults. A test that times out
#   is a failure; a file cut short counts its missing tests as failed.
# - Each file runs as its own Bats run and is checked against the number of
#   @test lines it declares, so a failing setup_file or teardown_file cannot
#   hide tests that never ran.
# - "ok N ... # skip" is counted as skipped, not passed.
#
# Internal: tests/run.sh --each FILE... runs each file under its bound and
# frames its TAP output with "#@ begin FILE" and "#@ end FILE STATUS" lines
# (the lab runs this, so that one guest boot serves every rxe suite).
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

host_suites=() rxe_suites=()
for s in "${suites[@]}"; do
  if grep -q '^# runs-on: rxe' "$s"; then rxe_suites+=("$s"); else host_suites+=("$s"); fi
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

# The rxe suites: on this host's device, or in one lab guest. Prints TAP.
run_rxe() {
  export BATS_TEST_TIMEOUT=${given_timeout:-120}
  if compgen -G '/sys/class/infiniband/*' >/dev/null; then
    timeout -k 10 "$(group_limit "$@")" tests/run.sh --each "$@"
  else
    # No RDMA in this kernel: one lab guest runs all of them on real rdma_rxe.
    # The guest sees only the variables LAB_ENV names; 120 s more for the boot.
    # lab.sh's timeout stops the whole guest.
    LAB_ENV="${LAB_ENV:+$LAB_ENV }BATS_TEST_TIMEOUT" \
      scripts/lab.sh run --timeout $((120 + $(group_limit "$@"))) -- tests/run.sh --each "$@"
  fi
}

# The lab guest has one virtual CPU and this machine (CI's too) has two, so
# the rxe suites run beside the host suites, not after them, split over two
# guests (alternate files, so that each half gets long and short ones): the
# whole run takes about as long as the longest of the three. Their output is
# shown when they are done, so that nothing interleaves.
rxe_halves=("" "")
for i in "${!rxe_suites[@]}"; do rxe_halves[i % 2]+="${rxe_suites[i]} "; done
rxe_logs=() rxe_pids=()
trap 'rm -f "$log" "${rxe_logs[@]}"' EXIT
where="in the Soft-RoCE lab"
compgen -G '/sys/class/infiniband/*' >/dev/null && where="on this host's RDMA devices"
for half in "${rxe_halves[@]}"; do
  [[ -n $half ]] || continue
  read -r -a files <<<"$half"
  rxe_logs+=("$(mktemp)")
  run_rxe "${files[@]}" >"${rxe_logs[-1]}" 2>&1 &
  rxe_pids+=($!)
  echo "== $where, alongside the host suites (shown when done): ${files[*]}"
done

if [[ ${#host_suites[@]} -gt 0 ]]; then
  export BATS_TEST_TIMEOUT=${given_timeout:-360}
  group_files=("${host_suites[@]}")
  run_group "on this host: ${host_suites[*]}" \
    timeout -k 10 "$(group_limit "${host_suites[@]}")" tests/run.sh --each "${host_suites[@]}"
fi

for i in "${!rxe_pids[@]}"; do
  wait "${rxe_pids[i]}"
  read -r -a group_files <<<"${rxe_halves[i]}"
  run_group "$where: ${group_files[*]}" cat "${rxe_logs[i]}"
done

echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
