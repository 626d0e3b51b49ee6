#!/usr/bin/env bash
# scripts/maintainers/lab_bench.sh - what the lab that stays up saves, measured in one run.
#
#   scripts/maintainers/lab_bench.sh [-n RUNS]     (default 20)
#
# Prints, in one run on this machine:
#   1. scripts/lab.sh exec -- true with the lab up: median and spread of RUNS
#   2. scripts/lab.sh run -- true (a cold boot each time): median of 3
#   3. make grade EX=4.1 SOLUTIONS=1 (the solution, which passes) with the lab up, against the same with no lab up
#      (it boots one for itself: exec --up), interleaved, 3 rounds each;
#      the ratio of the medians
# It brings up a lab of its own (LAB_UP_DIR in a temporary folder), so a lab
# you have up is neither used nor stopped. The goals (issue: the fast lab):
# exec median <= 0.4 s; grade with the lab up <= 0.4 x without.
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 2

runs=20
while (($#)); do
  case $1 in
    -n)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || {
        echo "lab_bench.sh: -n needs a number of runs, not '${2:-}'" >&2
        exit 2
      }
      runs=$2
      shift 2
      ;;
    -h | --help)
      sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *)
      echo "lab_bench.sh: unknown argument '$1' (see scripts/maintainers/lab_bench.sh -h)" >&2
      exit 2
      ;;
  esac
done

tmp=$(mktemp -d)
export LAB_UP_DIR="$tmp/up"
trap 'scripts/lab.sh down >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

# seconds CMD...: the wall time of CMD, in seconds, on stdout; its output discarded.
seconds() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || {
    echo "lab_bench.sh: '$*' failed" >&2
    return 1
  }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }'
}

# stats: "median M (min A, max B, n N)" of the numbers on stdin.
stats() {
  sort -n | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "median %.3f s (min %.3f, max %.3f, n %d)\n", m, v[1], v[NR], NR }'
}
median() { stats | awk '{ print $2 }'; }

echo "bench: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
make -s all
make -s build/exercises/solution/ex4_1 2>/dev/null || true

scripts/lab.sh up 2>/dev/null
echo -n "1. lab.sh exec -- true, lab up:    "
for ((i = 0; i < runs; i++)); do seconds scripts/lab.sh exec -- true; done | stats

echo -n "2. lab.sh run -- true, cold boot:  "
for i in 1 2 3; do seconds scripts/lab.sh run -- true; done | stats

up=() cold=()
for i in 1 2 3; do
  up+=("$(seconds make -s grade EX=4.1 SOLUTIONS=1)")
  scripts/lab.sh down >/dev/null 2>&1
  cold+=("$(seconds make -s grade EX=4.1 SOLUTIONS=1)")
  scripts/lab.sh up 2>/dev/null
done
up_m=$(printf '%s\n' "${up[@]}" | median)
cold_m=$(printf '%s\n' "${cold[@]}" | median)
echo "3. make grade EX=4.1, lab up:      $(printf '%s\n' "${up[@]}" | stats)"
echo "   make grade EX=4.1, no lab up:   $(printf '%s\n' "${cold[@]}" | stats)"
awk -v u="$up_m" -v c="$cold_m" 'BEGIN { printf "   ratio up / no lab: %.2f (goal <= 0.40)\n", u / c }'
