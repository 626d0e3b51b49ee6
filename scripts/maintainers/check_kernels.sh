#!/usr/bin/env bash
# check_kernels.sh - the lesson suites and the tour on other kernels than
# make check's: one tests/run.sh per kernel, each in labs of its own.
#
#   scripts/maintainers/check_kernels.sh [KERNEL...]   default: trixie trixie-backports
#   make check-kernels                     the same; KERNELS=trixie for one
#
# For each KERNEL: LAB_KERNEL=KERNEL tests/run.sh on the lessons' suites
# (those tagged rxe: `# bats file_tags=rxe`) and tests/tour.bats
# (CHECK_KERNELS_SUITES names others), in labs of their own: the first
# brought up here in a temporary LAB_UP_DIR (a lab you have up is not
# touched), the second by tests/run.sh for lesson 11 and the tour, as in
# make check; a suite tagged kernel:K keeps its kernel. Each run's output is shown
# as it comes; at the end one line per kernel with its counts and time, then
#   check-kernels: N passed, N failed, N skipped
# Exit status 0 when nothing failed on any kernel, 1 otherwise, 2 misuse.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
kernels=("$@")
[[ ${#kernels[@]} -gt 0 ]] || read -r -a kernels <<<"${KERNELS:-trixie trixie-backports}"
for k in "${kernels[@]}"; do
  case $k in
    bookworm | trixie | trixie-backports) ;;
    *)
      echo "check_kernels.sh: unknown kernel '$k' (bookworm, trixie or trixie-backports) (see check_kernels.sh -h)" >&2
      exit 2
      ;;
  esac
done
if [[ -n ${CHECK_KERNELS_SUITES:-} ]]; then
  read -r -a suites <<<"$CHECK_KERNELS_SUITES"
else
  mapfile -t suites < <(grep -lE '^# bats file_tags=(.*,)? *rxe *(,.*)?$' tests/*.bats)
  suites+=(tests/tour.bats)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/check-kernels.XXXXXX")
trap 'LAB_UP_DIR=$work/lab scripts/lab.sh down >/dev/null 2>&1; rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

passed=0 failed=0 skipped=0 summary=()
for k in "${kernels[@]}"; do
  echo "== check-kernels: LAB_KERNEL=$k: ${suites[*]}"
  started=$SECONDS
  # The first lab up here (one vCPU, as tests/run.sh would), so that its
  # kernel's version is known; tests/run.sh finds it up and uses it.
  version=""
  if LAB_KERNEL=$k LAB_UP_DIR=$work/lab LAB_CPUS=1 scripts/lab.sh up; then
    version=$(LAB_UP_DIR=$work/lab scripts/lab.sh exec -- uname -r)
  fi
  LAB_KERNEL=$k LAB_UP_DIR=$work/lab tests/run.sh "${suites[@]}" 2>&1 | tee "$work/$k.log"
  LAB_UP_DIR=$work/lab scripts/lab.sh down
  took=$((SECONDS - started))
  # tests/run.sh's last line: "N passed, N failed, N skipped".
  line=$(tail -n 1 "$work/$k.log")
  if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed,\ ([0-9]+)\ skipped$ ]]; then
    passed=$((passed + BASH_REMATCH[1]))
    failed=$((failed + BASH_REMATCH[2]))
    skipped=$((skipped + BASH_REMATCH[3]))
  else
    line="tests/run.sh did not finish (its last line: '$line'): counted as 1 failed"
    failed=$((failed + 1))
  fi
  summary+=("check-kernels: $k${version:+ ($version)}: $line in $((took / 60)) min $((took % 60)) s")
done
# Each kernel's "what failed" block again, next to the summary.
for k in "${kernels[@]}"; do
  if grep -q '^== what failed' "$work/$k.log"; then
    echo "== check-kernels: what failed on $k:"
    sed -n '/^== what failed/,$p' "$work/$k.log" | sed '1d;$d'
  fi
done
printf '%s\n' "${summary[@]}"
echo "check-kernels: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
