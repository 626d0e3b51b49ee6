#!/usr/bin/env bash
# grade.sh - build and grade the exercises beside each lesson (`make grade`).
#
#   scripts/exercises/grade.sh            every exercise, from your starter files
#   scripts/exercises/grade.sh 4.2        one exercise (make grade EX=4.2)
#   scripts/exercises/grade.sh -s [EX]    the reference solutions instead (make grade SOLUTIONS=1)
#   scripts/exercises/grade.sh -h
#
# An exercise is a folder lessons/NN_topic/exercises/N.M/ holding README.md
# (the task), exN_M.cpp (your file, made from its starter the first time:
# scripts/exercises/exercise.sh) and grade.bash (its grader); the reference solution
# is made from lessons/NN_topic/exercises/solutions/exN_M.patch into
# build/exercises/src/solution/exN_M.cpp.
# Each program is built on this host (build/exercises/), then every grader
# runs it for real on RDMA: on this host's device when it has one, else in
# one Soft-RoCE lab guest (scripts/lab.sh). One line per exercise, PASS or
# FAIL with what was expected, what happened and a hint (or SKIP, with why,
# for an exercise whose lesson needs what the device lacks: lesson 16's ODP),
# then "grade: N of M exercises pass" (", K skipped (...)" after it).
#
# Environment: EX and SOLUTIONS=1 do what the arguments do (make passes them).
# Exit status: 0 when every graded exercise passes, 1 when one fails, 2 misuse.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; }
misuse() {
  echo "grade: $*" >&2
  exit 2
}

solutions=${SOLUTIONS:-}
ex=${EX:-}
while (($#)); do
  case $1 in
    -h | --help)
      usage
      exit 0
      ;;
    -s | --solutions) solutions=1 ;;
    -*) misuse "unknown option '$1' (see scripts/exercises/grade.sh -h)" ;;
    *)
      [[ -z $ex || $ex == "$1" ]] || misuse "one exercise at a time: '$ex' and '$1'"
      ex=$1
      ;;
  esac
  shift
done
[[ -z $solutions || $solutions == 1 ]] || misuse "SOLUTIONS takes 1 (or nothing), not '$solutions'"

# Every exercise folder, in lesson order: "N.M<TAB>folder".
mapfile -t all < <(scripts/exercises/exercise.sh list)
((${#all[@]})) || misuse "no exercises found under lessons/*/exercises/"

selected=()
if [[ -n $ex ]]; then
  [[ $ex =~ ^[0-9]+\.[0-9]+$ ]] || misuse "EX must look like 4.2, not '$ex'"
  for row in "${all[@]}"; do [[ ${row%%$'\t'*} == "$ex" ]] && selected+=("$row"); done
  ((${#selected[@]})) || misuse "there is no exercise $ex; there are: $(printf '%s\n' "${all[@]}" | cut -f1 | tr '\n' ' ')"
else
  selected=("${all[@]}")
fi

# Build each program; one that does not compile fails with the compiler's first error.
kind=starter
[[ -n $solutions ]] && kind=solution
# A make of our own, not a sub-make of `make grade`: its jobserver is not ours
# to share (MAKEFLAGS= keeps make from warning that it is unavailable).
export MAKEFLAGS=
make --no-print-directory -s build/libworkbook.a || exit 1
# Your files, made from the starters where they are missing (never overwritten).
ids=()
for row in "${selected[@]}"; do ids+=("${row%%$'\t'*}"); done
[[ $kind == solution ]] || scripts/exercises/exercise.sh files "${ids[@]}" || exit 1
# Every program at once, one job per core; -k goes on past a starter that
# does not compile. The loop below then makes each one alone, which is
# instant for those already built and shows a failure's own first error.
bins=()
for row in "${selected[@]}"; do
  id=${row%%$'\t'*}
  bins+=("build/exercises/$kind/ex${id/./_}")
done
make --no-print-directory -s -k -j"$(nproc)" "${bins[@]}" >/dev/null 2>&1
runnable=() failed=0
for row in "${selected[@]}"; do
  id=${row%%$'\t'*} dir=${row#*$'\t'}
  name=ex${id/./_}
  src=$dir/$name.cpp
  [[ $kind == solution ]] && src=build/exercises/src/solution/$name.cpp
  bin=build/exercises/$kind/$name
  log=$(mktemp) || exit 1
  if ! make --no-print-directory -s "$bin" >"$log" 2>&1; then
    # cat -v: the learner's source text can hold control bytes; show them as ^X.
    first=$({ grep -m1 -E 'error:|No rule to make target' "$log" || head -n1 "$log"; } | cat -v)
    title=$(sed -n '1s/^# *//p' "$dir/README.md")
    echo "FAIL $id ${title#"$id "}"
    echo "  expected: $src to compile"
    echo "  what happened: the compiler's first error: $first"
    failed=$((failed + 1))
  else
    runnable+=("$id"$'\t'"$dir"$'\t'"$bin")
  fi
  rm -f "$log"
done

# Run the graders that have a program, on RDMA.
passed=0 skipped=0
if ((${#runnable[@]})); then
  list=$(mktemp) || exit 1
  printf '%s\n' "${runnable[@]}" >"$list"
  out=$(mktemp) || exit 1
  if compgen -G '/sys/class/infiniband/*' >/dev/null; then
    scripts/exercises/grade_run.sh "$list" | tee "$out"
  else
    echo "grade: this host has no RDMA device; grading in the Soft-RoCE lab (scripts/lab.sh)"
    # The graders run here; each program they start runs in the lab that is
    # up (scripts/exercises/grade_lib.bash), or in one brought up for this grading
    # and stopped after it. That one has one vCPU: a second one opens a
    # race between a completion and the QP state it reports (exercise 5.2).
    brought=
    if ! scripts/lab.sh status >/dev/null 2>&1; then
      LAB_DEFAULT_CPUS=1 scripts/lab.sh up || exit 1
      brought=1
    fi
    # shellcheck disable=SC2317 # run by the trap
    lab_down() { [[ -z $brought ]] || scripts/lab.sh down; }
    trap lab_down EXIT
    xfer=$(scripts/lab.sh xfer) || exit 1
    dev=$(scripts/lab.sh exec -- ibv_devices | awk 'NR > 2 { print $1; exit }')
    GRADE_LAB=1 GRADE_TMP=$xfer GRADE_DEV=$dev scripts/exercises/grade_run.sh "$list" | tee "$out"
  fi
  passed=$(grep -c '^PASS ' "$out")
  skipped=$(grep -c '^SKIP ' "$out")
  failed=$((failed + ${#runnable[@]} - passed - skipped))
  rm -f "$list" "$out"
fi

summary="grade: $passed of $((passed + failed)) exercises pass"
((skipped == 0)) || summary+=", $skipped skipped (their lesson needs what this device lacks)"
echo "$summary"
((failed == 0))
