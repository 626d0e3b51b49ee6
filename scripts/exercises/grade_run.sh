#!/usr/bin/env bash
# grade_run.sh - run the graders of built exercises (scripts/exercises/grade.sh's second half).
#
#   scripts/exercises/grade_run.sh LIST
#
# LIST has one line per exercise: "N.M<TAB>folder<TAB>program"; grade.sh
# builds the programs, then calls this. The graders run on this host; their
# programs run on its RDMA device, or in the lab with GRADE_LAB=1
# (grade_lib.bash). Each folder's grade.bash defines grade PROGRAM, which
# runs the program for real and returns 0 or says what was expected and what
# happened. Prints "PASS N.M TITLE" or "FAIL N.M TITLE" with those lines and
# the hint, or "SKIP N.M TITLE: why" for an exercise whose lesson needs what
# this device lacks (its run.conf's needs=, scripts/lessons/run_conf.sh).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

readonly kGraderSeconds=90 # one exercise, all its runs; the graders bound each run far below this

list=${1:?usage: scripts/exercises/grade_run.sh LIST}
# shellcheck disable=SC1091 # scripts/lessons/run_conf.sh, checked on its own
source scripts/lessons/run_conf.sh
# Where the programs run (scripts/exercises/grade_lib.bash): the lab with GRADE_LAB set.
LESSON_RX=()
[[ -z ${GRADE_LAB:-} ]] || LESSON_RX=(scripts/lab.sh exec --timeout 60 --)
dev=${GRADE_DEV:-$("${LESSON_RX[@]}" ibv_devices | awk 'NR > 2 { print $1; exit }')}
index=0
while IFS=$'\t' read -r id dir bin; do
  index=$((index + 1))
  title=$(sed -n '1s/^# *//p' "$dir/README.md")
  title=${title#"$id "}
  # An exercise whose lesson needs what this device lacks (run.conf's
  # needs=, lesson 16's ODP): one line, why, and the kernel it needs.
  unmet=$(lesson_unmet "${dir%/exercises/*}" "$dev")
  if [[ -n $unmet ]]; then
    echo "SKIP $id $title: lesson ${id%%.*} $unmet"
    continue
  fi
  report=$(mktemp) || exit 1
  # A fresh bash per exercise: graders cannot see each other's variables or processes.
  # shellcheck disable=SC2016 # $1 and $2 are the inner bash's arguments
  EX_INDEX=$index timeout --kill-after=5 "$kGraderSeconds" \
    bash -c 'source scripts/exercises/grade_lib.bash && source "$1/grade.bash" && ex_grade "$2"' _ "$dir" "$bin" \
    >"$report" 2>&1
  status=$?
  if ((status == 0)); then
    echo "PASS $id $title"
  else
    echo "FAIL $id $title"
    ((status == 124)) && echo "  what happened: the grader was stopped after $kGraderSeconds s"
    # What the learner's program printed is in there: cat -v shows its
    # control bytes as ^X and M-X, so that none of them reaches the terminal.
    sed 's/^/  /' "$report" | cat -v
  fi
  rm -f "$report"
done <"$list"
