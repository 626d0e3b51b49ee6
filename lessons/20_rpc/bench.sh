#!/usr/bin/env bash
# bench.sh - lesson 20 beside TCP: requests per second and latency for 1, 2
# and 4 clients, over RDMA with busy polling, over RDMA with events (-e), and
# over TCP (--tcp); what docs/lesson20-rpc.md's table and plot show.
#
#   lessons/20_rpc/bench.sh [-n REQUESTS] [-r RUNS] > bench.csv    (where the device is)
#   LAB_CPUS=2 scripts/lab.sh run -- lessons/20_rpc/bench.sh > docs/img/lesson20/bench.csv
#   lessons/20_rpc/plot.sh docs/img/lesson20       the table and the plot from it
#
# Each run: one server (-c CLIENTS) and CLIENTS clients of REQUESTS each
# (default 10000), started at once, every one with lesson 20's default
# window (-t 16), all on this host. It prints one CSV row per client, from
# the client's result: line (its own requests/s, p50 and p99 in us), and
# the run's wall time from starting the clients to the last one's exit
# (their connection setup included):
#   clients,mode,run,client,requests,rps,p50_us,p99_us,wall_s
# RUNS (default 5) repeats every configuration, the modes interleaved, so
# that a burst of load on a shared machine spreads over all of them.
# Exit status: 0, 1 a run failed (its output on stderr), 2 misuse.
set -uo pipefail
cd "$(dirname "$0")" || exit 1

requests=10000 runs=5
while getopts n:r:h opt; do
  case $opt in
    n) requests=$OPTARG ;;
    r) runs=$OPTARG ;;
    h)
      sed -n '2,/^set/{/^#/s/^# \{0,1\}//p}' "$0"
      exit 0
      ;;
    *) exit 2 ;;
  esac
done
[[ $requests =~ ^[1-9][0-9]*$ && $runs =~ ^[1-9][0-9]*$ ]] || {
  echo "bench.sh: -n and -r take a positive count" >&2
  exit 2
}
[[ -x ../../lesson20 ]] || {
  echo "bench.sh: no ./lesson20 at the checkout's top: make lesson20" >&2
  exit 1
}
out=$(mktemp -d) || exit 1
trap 'rm -rf "$out"' EXIT

# flags MODE: the options that select it, on every side.
flags() {
  case $1 in
    busy) ;;
    events) echo -e ;;
    tcp) echo --tcp ;;
  esac
}

# one CLIENTS MODE RUN PORT: a server and its clients; the clients' rows.
one() {
  local clients=$1 mode=$2 run=$3 port=$4 server i pids=() failed=0 line start wall
  # shellcheck disable=SC2046 # flags prints zero or one word
  ../../lesson20 $(flags "$mode") -c "$clients" -p "$port" --timeout 60 >"$out/server" 2>&1 &
  server=$!
  for ((i = 0; i < 100; i++)); do
    grep -q 'waiting for' "$out/server" && break
    sleep 0.1
  done
  start=$EPOCHREALTIME
  for ((i = 1; i <= clients; i++)); do
    # shellcheck disable=SC2046
    ../../lesson20 $(flags "$mode") 127.0.0.1 -p "$port" -n "$requests" --timeout 60 >"$out/client$i" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[i]}" || failed=1; done
  wall=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
  wait "$server" || failed=1
  if ((failed)); then
    echo "bench.sh: $clients clients, $mode, run $run failed:" >&2
    tail -n 3 "$out"/server "$out"/client* >&2
    return 1
  fi
  for ((i = 1; i <= clients; i++)); do
    # result: N requests answered (...), every response checked; R requests/s, p50 L us, p99 L us, over ...
    line=$(grep '^result: ' "$out/client$i")
    [[ $line =~ ^result:\ ([0-9]+)\ requests\ answered.*\;\ ([0-9]+)\ requests/s,\ p50\ ([0-9]+)\ us,\ p99\ ([0-9]+)\ us ]] || {
      echo "bench.sh: client $i printed no result line: $line" >&2
      return 1
    }
    echo "$clients,$mode,$run,$i,${BASH_REMATCH[1]},${BASH_REMATCH[2]},${BASH_REMATCH[3]},${BASH_REMATCH[4]},$wall"
  done
}

echo "clients,mode,run,client,requests,rps,p50_us,p99_us,wall_s"
port=19600 status=0
for ((run = 1; run <= runs; run++)); do
  for clients in 1 2 4; do
    for mode in busy events tcp; do
      one "$clients" "$mode" "$run" "$port" || status=1
      port=$((port + 1))
    done
  done
done
exit "$status"
