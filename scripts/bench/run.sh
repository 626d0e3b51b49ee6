#!/usr/bin/env bash
# bench/run.sh - lesson 11 beside perftest, then the levers one at a time, plotted.
#
# Usage: scripts/bench/run.sh [-o DIR]      (also: make bench)
#   -o DIR   where the CSVs and the plots go (default: bench/)
#   -h       this help
#
# On a host with an RDMA device, it measures there. Without one, it boots
# one lab guest (scripts/lab.sh) and measures there, both sides on rxe0,
# with two vCPUs when this host has two cores or more (LAB_CPUS=2): with
# one, a busy-polling side holds the only CPU that its peer and rxe's kernel
# work need, and every round trip waits for the scheduler's tick
# (docs/lesson11-performance.md). LAB_CPUS, if set, decides instead.
# The parts, one job each:
#   bench/measure.sh   the runs, the side-by-side table, the goals (on the device)
#   bench/plot.sh      gnuplot: the CSVs into PNG plots (here)
# BENCH_SCALE=N multiplies every iteration count (default 1: a few minutes).
# BENCH_ROUNDS=N: rounds of lesson 11 against perftest (default 5), each
# tool's runs interleaved with the other's; the ratio is their median.
#
# Exit status: 0 when everything was measured and plotted (a goal not met
# is a finding, printed, not a failure); 1 when a run failed; 2 misuse.
set -euo pipefail

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; }
misuse() {
  echo "bench/run.sh: $1 (see scripts/bench/run.sh -h)" >&2
  exit 2
}

out=bench
while (($#)); do
  case $1 in
    -h | --help)
      usage
      exit 0
      ;;
    -o)
      (($# >= 2)) || misuse "-o needs a folder"
      out=$2
      shift 2
      ;;
    *) misuse "unknown argument '$1'" ;;
  esac
done
[[ ${BENCH_SCALE:-1} =~ ^[1-9][0-9]?$ ]] || misuse "BENCH_SCALE must be 1 to 99, not '${BENCH_SCALE}'"
[[ ${BENCH_ROUNDS:-5} =~ ^[1-9][0-9]?$ ]] || misuse "BENCH_ROUNDS must be 1 to 99, not '${BENCH_ROUNDS}'"
export BENCH_SCALE=${BENCH_SCALE:-1} BENCH_ROUNDS=${BENCH_ROUNDS:-5}

# split_guest_output OUT: the guest's output from stdin; after a line
# "==> NAME <==", lines go to OUT/NAME, before any, to stdout as they come
# (bash's read, not awk or tr, which would hold them back in a pipe).
split_guest_output() {
  local file="" line
  while IFS= read -r line; do
    line=${line%$'\r'} # the serial console ends lines with CR LF
    if [[ $line =~ ^==\>\ ([A-Za-z0-9_.-]+)\ \<==$ ]]; then
      file=$1/${BASH_REMATCH[1]}
    elif [[ -n $file ]]; then
      printf '%s\n' "$line" >>"$file"
    else
      printf '%s\n' "$line"
    fi
  done
}

cd "$(dirname "$0")/../.."
[[ -x ./lesson11 ]] || misuse "./lesson11 is not built: run make bench, or make first"
command -v gnuplot >/dev/null || misuse "gnuplot is missing: run scripts/install_deps.sh (gnuplot-nox)"
mkdir -p "$out"
rm -f "$out"/*.csv "$out"/*.png

if compgen -G '/sys/class/infiniband/*' >/dev/null; then
  echo "bench: measuring on this host's RDMA device"
  scripts/bench/measure.sh "$out"
else
  # The guest sees our files read-only: it writes to its own /tmp and prints
  # each file after a "==> NAME <==" line, which we split back into $out.
  # Its clock: scripts/lab.sh gives the guest the host's TSC rate, so that
  # it has nanoseconds rather than 4 ms jiffies (lab/qemu.sh, guest_clock_args).
  cpus=${LAB_CPUS:-1}
  if [[ -z ${LAB_CPUS:-} ]] && (($(nproc) >= 2)); then cpus=2; fi
  echo "bench: no RDMA device here; measuring in a lab guest with $cpus vCPU(s); this host: $(nproc) cores, load average $(cut -d ' ' -f 1-3 /proc/loadavg)"
  # The guest's environment starts empty: BENCH_SCALE and BENCH_ROUNDS go
  # through LAB_ENV. Its /tmp shows the host's shared /tmp: the guest
  # measures into a folder of its own (mktemp), never a fixed name there.
  export BENCH_SCALE=${BENCH_SCALE:-1}
  # shellcheck disable=SC2016 # the guest's command, expanded there
  if ! LAB_CPUS=$cpus LAB_ENV="${LAB_ENV:+$LAB_ENV }BENCH_SCALE BENCH_ROUNDS" \
    scripts/lab.sh run --timeout 1800 -- bash -c \
    'd=$(mktemp -d) && scripts/bench/measure.sh "$d" && for f in "$d"/*.csv; do echo "==> ${f##*/} <=="; cat "$f"; done' |
    split_guest_output "$out"; then
    echo "bench: the measurements failed (above)" >&2
    exit 1
  fi
fi

echo "bench: done; this host's load average $(cut -d ' ' -f 1-3 /proc/loadavg)"
scripts/bench/plot.sh "$out"
echo "bench: CSVs and plots in $out/: $(cd "$out" && echo *.csv *.png)"
