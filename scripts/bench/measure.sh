#!/usr/bin/env bash
# bench/measure.sh OUTDIR - the measurements of `make bench` (scripts/bench/run.sh),
# run where the RDMA device is: in a lab guest, or on this host.
#
# Runs lesson 11 and perftest's matching tools side by side in interleaved
# rounds (BENCH_ROUNDS, default 5), prints the table with the median ratio
# lesson11 / perftest, its spread and the goals, then the lever sweeps;
# every number goes to a CSV in OUTDIR. Both sides of every run are
# on this machine (127.0.0.1), on the first RDMA device.
#
# Iteration counts are small on purpose: an emulated NIC is slow, and the
# machine is shared. BENCH_SCALE=N multiplies them.
set -euo pipefail

out=${1:?usage: bench/measure.sh OUTDIR}
mkdir -p "$out"
scale=${BENCH_SCALE:-1}
n_lat=$((1000 * scale)) # latency round trips (perftest's default: 1000)
n_bw=$((500 * scale))   # bandwidth messages (perftest's default: 5000)
n_sweep=$((20 * scale))
n_lat_sweep=$((200 * scale))
rounds=${BENCH_ROUNDS:-5} # lesson 11 and perftest, interleaved
port=19400
dev=$(ibv_devices | awk 'NR > 2 { print $1; exit }')
[[ -n $dev ]] || {
  echo "bench: no RDMA device here" >&2
  exit 1
}

# roce_v2_ipv4_gid: the GID index lesson 11 picks by default (RoCE v2, an
# IPv4-mapped address), for perftest's -x.
roce_v2_ipv4_gid() {
  local f i
  for f in /sys/class/infiniband/"$dev"/ports/1/gid_attrs/types/*; do
    i=${f##*/}
    [[ $(<"$f") == "RoCE v2" ]] 2>/dev/null || continue
    [[ $(<"/sys/class/infiniband/$dev/ports/1/gids/$i") == 0000:0000:0000:0000:0000:ffff:* ]] || continue
    echo "$i"
    return
  done
  echo 0
}
gid=$(roce_v2_ipv4_gid)

# cpus_for ARGS... SIDE: the taskset words (one a line) for SIDE (server or
# client) of a run with ARGS, when there are two CPUs or more. Busy pollers
# each get a CPU of their own, the server 0 and the client 1: two spinners
# on one CPU wait for the scheduler's tick, and Linux may start both on the
# same CPU and move one only later. Runs on completion events (--events,
# perftest's -e) share CPU 0: a sleeper is woken by the other side, and in
# a qemu guest a wake-up that crosses vCPUs waits for the host to run the
# sleeping vCPU's thread, milliseconds on a busy host against 150 us within
# one vCPU (docs/lesson11-performance.md, the one-vCPU trap).
cpus_for() {
  local side=${*: -1} cpu=0
  (($(nproc) >= 2)) || return 0
  [[ " ${*:1:$#-1} " == *" --events "* || " ${*:1:$#-1} " == *" -e "* || $side == server ]] || cpu=1
  printf '%s\n' taskset -c "$cpu"
}

# pair CMD...: run CMD as a server, then CMD 127.0.0.1 as its client, each on a
# new TCP port; print the client's stdout. Bounded: 300 s each; each side on
# its CPU (cpus_for).
pair() {
  port=$((port + 1))
  local on_s on_c
  mapfile -t on_s < <(cpus_for "$@" server)
  mapfile -t on_c < <(cpus_for "$@" client)
  timeout 300 "${on_s[@]}" "$@" -p "$port" >/dev/null 2>"$out/server.err" &
  local server=$! status=0
  listening "$port" "$server"
  timeout 300 "${on_c[@]}" "$@" -p "$port" 127.0.0.1 2>"$out/client.err" || status=$?
  wait "$server" || status=$?
  if ((status != 0)); then
    echo "bench: '$* 127.0.0.1' failed ($status):" >&2
    cat "$out/client.err" "$out/server.err" >&2
    return 1
  fi
}

# listening PORT PID: wait until something listens on TCP PORT (perftest's
# client gives up at once where nothing does; a loaded guest may take
# seconds to start the server), at most 30 s, or until PID has ended.
listening() {
  local i
  for ((i = 0; i < 300; i++)); do
    [[ -z $(ss -Hltn "sport = :$1" 2>/dev/null) ]] || return 0
    kill -0 "$2" 2>/dev/null || return 0
    sleep 0.1
  done
}

# l11 CSV ARGS...: lesson 11 with ARGS, rows appended to OUTDIR/CSV.csv; prints
# the client's output; each side on its CPU (cpus_for). sweep: the same, silent.
l11() {
  local csv=$1 on_s on_c
  shift
  port=$((port + 1))
  mapfile -t on_s < <(cpus_for "$@" server)
  mapfile -t on_c < <(cpus_for "$@" client)
  timeout 300 "${on_s[@]}" ./lesson11 -p "$port" --timeout 60 "$@" >/dev/null 2>"$out/server.err" &
  local server=$! status=0
  sleep 0.3
  timeout 300 "${on_c[@]}" ./lesson11 -p "$port" --timeout 60 "$@" -C "$out/$csv.csv" 127.0.0.1 2>"$out/client.err" || status=$?
  wait "$server" || status=$?
  if ((status != 0)); then
    echo "bench: lesson11 $* failed ($status):" >&2
    cat "$out/client.err" "$out/server.err" >&2
    return 1
  fi
}

sweep() { l11 "$@" >/dev/null; }

# The numbers from each tool's output: lesson 11's result line, perftest's row
# (lat: bytes iters t_min t_max t_typical ...; bw: bytes iters peak average ...).
l11_value() { sed -n 's/^result: .*: typical \([0-9.]*\) us.*/\1/p; s/^result: .* bw .*: \([0-9.]*\) MiB\/s.*/\1/p' | head -n 1; }
perftest_lat() { awk -v s="$1" '$1 == s && NF >= 9 { print $5; exit }'; }
perftest_bw() { awk -v s="$1" '$1 == s && NF >= 5 { print $4; exit }'; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# median: the median of the numbers on stdin (the mean of the two middle
# ones for an even count); min_max: "MIN-MAX". Both skip anything not a number.
median() { grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
min_max() { grep -E '^[0-9.]+$' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print (NR ? lo "-" hi : "n/a") }'; }

echo "bench: $dev, GID index $gid, $(nproc) CPU(s), clock $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo '?'), load average $(cut -d ' ' -f 1-3 /proc/loadavg)"
echo "bench: n=$n_lat round trips per latency, n=$n_bw messages per bandwidth (perftest takes the same -n and -s); $rounds interleaved rounds"
(($(nproc) < 2)) || echo "bench: busy polling: server on CPU 0, client on CPU 1; on completion events (--events, -e): both on CPU 0 (taskset)"

# What each round measures: NAME, then lesson11's options or perftest's
# command. perftest's bandwidth tools keep 128 WRs in flight, as lesson 11
# does, and signal every 100th WR, but not above 8 KiB unless told (-Q):
# at 64 KiB both sides signal every WR by default, and "--signal 100" puts
# both on perftest's small-message setting.
pt=(-d "$dev" -x "$gid" -F)
declare -A run_of
names=()
measure() {
  names+=("$1")
  run_of[$1]=${*:2}
}
measure l11.send.lat l11 --op send -n "$n_lat"
# The same run again, as if it were another tool: its ratio to the first is
# the noise of this machine, the smallest difference the rounds can resolve.
measure l11.send.lat.again l11 --op send -n "$n_lat"
measure pt.send.lat pt lat ib_send_lat -s 2 -n "$n_lat"
measure l11.send.inline l11 --op send --inline -n "$n_lat"
measure l11.send.ev l11 --op send --events -n "$n_lat"
measure pt.send.ev pt lat ib_send_lat -e -s 2 -n "$n_lat"
measure l11.send.ev.inline l11 --op send --events --inline -n "$n_lat"
measure l11.write.lat l11 --op write -n "$n_lat"
measure pt.write.lat pt lat ib_write_lat -s 2 -n "$n_lat"
measure l11.read.lat l11 --op read -n "$n_lat"
measure pt.read.lat pt lat ib_read_lat -s 2 -n "$n_lat"
measure l11.write.bw l11 --test bw --op write -s 65536 -n "$n_bw"
measure l11.write.bw.q100 l11 --test bw --op write -s 65536 -n "$n_bw" --depth 128 --signal 100
measure pt.write.bw pt bw ib_write_bw -s 65536 -n "$n_bw"
measure pt.write.bw.q100 pt bw ib_write_bw -s 65536 -n "$n_bw" -t 128 -Q 100
measure l11.read.bw l11 --test bw --op read -s 65536 -n "$n_bw"
measure pt.read.bw pt bw ib_read_bw -s 65536 -n "$n_bw"

# measure_once NAME: run it once, print its number (lesson 11's typical us
# or MiB/s; perftest's t_typical or BW average).
measure_once() {
  local words
  read -ra words <<<"${run_of[$1]}"
  case ${words[0]} in
    l11) l11 side_by_side "${words[@]:1}" | l11_value ;;
    pt)
      if [[ ${words[1]} == lat ]]; then
        pair "${words[2]}" "${pt[@]}" "${words[@]:3}" | perftest_lat "$(size_of "${words[@]}")"
      else
        pair "${words[2]}" "${pt[@]}" "${words[@]:3}" | perftest_bw "$(size_of "${words[@]}")"
      fi
      ;;
  esac
}
size_of() { sed -n 's/.* -s \([0-9]*\).*/\1/p' <<<"$*"; }

# The rounds: every measurement once per round, lesson 11 and perftest
# alternating; every other round in the reverse order, so that a drift of
# the machine's speed falls on both tools alike.
# A warm-up of each tool, not counted: the first runs after a guest's boot
# find it still settling (its timers switch to high resolution late).
measure_once l11.send.lat >/dev/null
measure_once pt.send.lat >/dev/null
declare -A val
rounds_csv="$out/rounds.csv"
echo "round,name,value" >"$rounds_csv"
for ((r = 1; r <= rounds; r++)); do
  order=("${names[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#names[@]} - 1; i >= 0; i--)); do order+=("${names[i]}"); done
  fi
  for name in "${order[@]}"; do
    port=$((port + 2)) # measure_once runs in a subshell: its ports are not counted here
    val[$name.$r]=$(measure_once "$name")
    echo "$r,$name,${val[$name.$r]}" >>"$rounds_csv"
  done
  echo "bench: round $r of $rounds done (load average $(cut -d ' ' -f 1-3 /proc/loadavg))"
done

echo
printf '%-34s %12s %12s %6s %11s  %s\n' "measurement (median of $rounds)" "lesson11" "perftest" "ratio" "spread" "goal"
compare="$out/compare.csv"
echo "measurement,unit,lesson11,perftest,ratio,ratio_min,ratio_max,goal,verdict" >"$compare"
# row LABEL UNIT L11 PT [OP LIMIT]: lesson 11's NAME L11 against perftest's
# PT, round by round; the median of the per-round ratios, their spread, and
# the goal (ratio OP LIMIT, OP one of <=, >=, <) met or not.
row() {
  local label=$1 unit=$2 a=$3 b=$4 op=${5:-} limit=${6:-} r ratios=() va vb med spread verdict=""
  for ((r = 1; r <= rounds; r++)); do ratios+=("$(ratio "${val[$a.$r]}" "${val[$b.$r]}")"); done
  med=$(printf '%s\n' "${ratios[@]}" | median)
  spread=$(printf '%s\n' "${ratios[@]}" | min_max)
  va=$(for ((r = 1; r <= rounds; r++)); do echo "${val[$a.$r]}"; done | median)
  vb=$(for ((r = 1; r <= rounds; r++)); do echo "${val[$b.$r]}"; done | median)
  if [[ -n $op ]]; then
    verdict=$(awk -v r="$med" -v op="$op" -v l="$limit" 'BEGIN {
      if (r == "n/a") { print "NOT MEASURED"; exit }
      ok = (op == "<=") ? r <= l : (op == ">=") ? r >= l : r < l
      print ok ? "met" : "MISSED" }')
  fi
  printf '%-34s %9s %-5s %9s %-5s %5s %11s  %s\n' "$label" "$va" "$unit" "$vb" "$unit" "$med" "$spread" \
    "${op:+$op $limit: $verdict}"
  echo "$label,$unit,$va,$vb,$med,${spread%-*},${spread#*-},${op:+$op $limit},$verdict" >>"$compare"
}
row "send lat 2 B" us l11.send.lat pt.send.lat "<=" 1.00
row "send lat 2 B, lesson 11 against itself" us l11.send.lat l11.send.lat.again
row "send lat 2 B --inline" us l11.send.inline pt.send.lat "<" 1.00
row "send lat 2 B --events" us l11.send.ev pt.send.ev "<=" 1.00
row "send lat 2 B --events --inline" us l11.send.ev.inline pt.send.ev "<" 1.00
row "write lat 2 B" us l11.write.lat pt.write.lat
row "read lat 2 B" us l11.read.lat pt.read.lat "<=" 1.00
row "write bw 64 KiB" MiB/s l11.write.bw pt.write.bw ">=" 1.00
row "write bw 64 KiB --signal 100 (-Q 100)" MiB/s l11.write.bw.q100 pt.write.bw.q100 ">=" 1.00
row "read bw 64 KiB" MiB/s l11.read.bw pt.read.bw ">=" 1.00
echo "(lat: typical, the median of half round trips, READ's whole; bw: MiB/s. ratio: lesson11 / perftest,"
echo " the median of the rounds' ratios; spread: their smallest and largest. perftest turns inline off"
echo " on rxe, so the --inline rows compare with its plain run; -e rows with ib_send_lat -e. \"against itself\":"
echo " the same run twice in every round, whose ratio is the machine's noise: a goal missed by less is no finding.)"
# Busy polling against sleeping on events, from the same rounds.
echo "polling against events (lesson 11, send lat 2 B): polling $(for ((r = 1; r <= rounds; r++)); do echo "${val[l11.send.lat.$r]}"; done | median) us, --events $(for ((r = 1; r <= rounds; r++)); do echo "${val[l11.send.ev.$r]}"; done | median) us"
echo
echo "levers (lesson 11 alone; CSVs in $out):"
# 1. Size: latency and bandwidth from 2 B to 1 MiB, at the current path MTU.
#    Latency with 10 times the iterations: at 20 round trips a size, a host
#    that stops a vCPU for a few ms now and then (a busy two-core host does)
#    makes the typical of a busy-polling size one scheduler tick.
sweep lat_size --op send -a -n "$n_lat_sweep"
sweep lat_size --op send -a -n "$n_lat_sweep" --events
sweep lat_size --op write -a -n "$n_lat_sweep"
sweep lat_size --op read -a -n "$n_lat_sweep"
sweep lat_size --op read -a -n "$n_lat_sweep" --events
echo "  latency against size: send, send --events, write, read, read --events (lat_size.csv)"
# 2. Inline: off and on, up to the QP's max_inline_data.
sweep inline --op send -a -n "$n_lat_sweep" --inline
sweep inline --op write -a -n "$n_lat_sweep" --inline
echo "  inline: send and write --inline up to max_inline_data (inline.csv; without: lat_size.csv)"
sweep bw_size --test bw --op write -a -n "$n_sweep"
sweep bw_size --test bw --op read -a -n "$n_sweep"
sweep bw_size --test bw --op write -a -n "$n_sweep" --events
echo "  bandwidth against size: write, read, write --events (bw_size.csv)"
# 3. Selective signaling, 64-byte WRITEs: a completion every 1, 16, 128 WRs,
#    polling and on events (each completion asked for may be a wake-up),
#    128 WRs in flight.
for s in 1 16 128; do
  sweep signal --test bw --op write -s 64 -n $((5000 * scale)) --signal "$s"
  sweep signal --test bw --op write -s 64 -n $((5000 * scale)) --signal "$s" --events
done
echo "  signaling every 1, 16, 128 WRs, polling and --events (signal.csv):"
awk -F, 'NR > 1 { printf "    --signal %-4s %-9s %s MiB/s\n", $7, ($10 ? "--events" : "polling"), $17 }' "$out/signal.csv"
# 4. Post lists: 1, 8, 32 WRs per ibv_post_send, and the write() syscalls
#    that carry them to the kernel (rxe's doorbell), counted by strace. The
#    bandwidth comes from a second run without strace: a traced system call
#    costs a stop of the whole process.
echo "  batches (64-byte WRITEs, n=$((2000 * scale)), --signal 32): ibv_post_send calls, write() syscalls (strace), bandwidth (no strace)"
echo "batch,post_calls,write_syscalls,mib_s" >"$out/doorbells.csv"
for b in 1 8 32; do
  port=$((port + 1))
  args=(--test bw --op write -s 64 -n $((2000 * scale)) --signal 32 --batch "$b" -p "$port" --timeout 60)
  timeout 300 ./lesson11 "${args[@]}" >/dev/null 2>&1 &
  server=$!
  sleep 0.3
  res=$(timeout 300 strace -f -c -e trace=write -o "$out/strace.txt" ./lesson11 "${args[@]}" 127.0.0.1)
  wait "$server"
  calls=$(sed -n 's/.*; \([0-9]*\) ibv_post_send calls.*/\1/p' <<<"$res")
  writes=$(awk '$NF == "write" { print $4 }' "$out/strace.txt")
  mib=$(l11 batch --test bw --op write -s 64 -n $((2000 * scale)) --signal 32 --batch "$b" | l11_value)
  printf '    --batch %-3s %6s ibv_post_send calls, %6s write() syscalls, %s MiB/s\n' "$b" "$calls" "$writes" "$mib"
  echo "$b,$calls,$writes,$mib" >>"$out/doorbells.csv"
done
# 5. Depth: WRs in flight, 4 KiB WRITEs.
for d in 1 2 4 8 16 32 64 128; do
  sweep depth --test bw --op write -s 4096 -n $((2000 * scale)) --depth "$d"
  sweep depth --test bw --op write -s 4096 -n $((2000 * scale)) --depth "$d" --events
done
echo "  depth 1 to 128, polling and --events (depth.csv):"
awk -F, 'NR > 1 { printf "    --depth %-4s %-9s %s MiB/s\n", $9, ($10 ? "--events" : "polling"), $17 }' "$out/depth.csv"
# 6. Polling against events (send latency: the table above).
echo "  polling against events (events.csv):"
printf '    write bw 64 KiB:       polling %s MiB/s, --events %s MiB/s\n' \
  "$(l11 events --test bw --op write -s 65536 -n "$n_bw" | l11_value)" \
  "$(l11 events --test bw --op write -s 65536 -n "$n_bw" --events | l11_value)"
# 7. Path MTU 1024 against 4096: jumbo frames on the lab's netdev (only in
#    the lab: on a real host, the MTU of your network is not ours to change).
netdev=$(rdma link show "$dev/1" 2>/dev/null | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
mtu_now=$(ibv_devinfo -d "$dev" | awk '$1 == "active_mtu:" { print $2; exit }')
sweep mtu --test bw --op write -a -n "$n_sweep"
if [[ ${LAB:-} == 1 && -n $netdev ]]; then
  ip link set "$netdev" mtu 9000 # rxe's active_mtu follows its netdev: 4096 fits in 9000
  sleep 1
  mtu_jumbo=$(ibv_devinfo -d "$dev" | awk '$1 == "active_mtu:" { print $2; exit }')
  sweep mtu --test bw --op write -a -n "$n_sweep"
  echo "  path MTU: $netdev at its MTU gives active_mtu $mtu_now; at 9000, $mtu_jumbo (mtu.csv)"
else
  echo "  path MTU: $mtu_now only (jumbo frames are changed only in the lab) (mtu.csv)"
fi
rm -f "$out/server.err" "$out/client.err" "$out/strace.txt"
