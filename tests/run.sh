#!/usr/bin/env bash
# tests/run.sh - run every Bats suite and print one closing line "N passed, N failed".
#
# Suites whose header says "# runs-on: rxe" need an RDMA device: they run on
# this host when it has one, and inside the Soft-RoCE lab (scripts/lab.sh)
# when it has none. Every other suite runs on the host (the stubbed
# setup_rxe.sh tests, the unit tests, and the lab's own tests, which boot
# guests themselves).
#
#   tests/run.sh                  every suite
#   tests/run.sh tests/x.bats ... only these
set -uo pipefail
cd "$(dirname "$0")/.."

suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(tests/*.bats)

host_suites=() rxe_suites=()
for s in "${suites[@]}"; do
  if grep -q '^# runs-on: rxe' "$s"; then rxe_suites+=("$s"); else host_suites+=("$s"); fi
done

passed=0 failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Run a TAP-producing command, show its output, and add its results to the totals.
# Tests that were planned ("1..N") but never reported count as failed.
count() {
  local label=$1
  shift
  echo "== $label"
  "$@" 2>&1 | tee "$log"
  local ok notok plan
  ok=$(grep -cE '^ok [0-9]+' "$log")
  notok=$(grep -cE '^not ok [0-9]+' "$log")
  plan=$(grep -m1 -oE '^1\.\.[0-9]+' "$log" | cut -d. -f3)
  if [ -z "$plan" ]; then
    echo "tests/run.sh: $label printed no test plan: counted as 1 failed" >&2
    notok=$((notok + 1))
  elif [ $((ok + notok)) -lt "$plan" ]; then
    echo "tests/run.sh: $label reported $((ok + notok)) of $plan tests: the rest count as failed" >&2
    notok=$((plan - ok))
  fi
  passed=$((passed + ok))
  failed=$((failed + notok))
}

if [ ${#host_suites[@]} -gt 0 ]; then
  count "on this host: ${host_suites[*]}" bats --formatter tap "${host_suites[@]}"
fi

if [ ${#rxe_suites[@]} -gt 0 ]; then
  if compgen -G '/sys/class/infiniband/*' >/dev/null; then
    count "on this host's RDMA devices: ${rxe_suites[*]}" bats --formatter tap "${rxe_suites[@]}"
  else
    # No RDMA in this kernel: one lab guest runs all of them on real rdma_rxe.
    count "in the Soft-RoCE lab: ${rxe_suites[*]}" \
      scripts/lab.sh run -- bats --formatter tap "${rxe_suites[@]}"
  fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
