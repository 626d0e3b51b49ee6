#!/usr/bin/env bash
# bench/measure.sh OUTDIR - the measurements of `make bench` (scripts/bench.sh),
# run where the RDMA device is: in a lab guest, or on this host.
#
# Runs lesson 11 and perftest's matching tools side by side, prints the
# table with the ratios lesson11 / perftest and the goals, then the lever
# sweeps; every number goes to a CSV in OUTDIR. Both sides of every run are
# on this machine (127.0.0.1), on the first RDMA device.
#
# Iteration counts are small on purpose: an emulated NIC is slow, and the
# machine is shared. BENCH_SCALE=N multiplies them.
set -euo pipefail

out=${1:?usage: bench/measure.sh OUTDIR}
mkdir -p "$out"
scale=${BENCH_SCALE:-1}
n_lat=$((200 * scale)) # latency round trips (perftest's default: 1000)
n_bw=$((300 * scale))  # bandwidth messages (perftest's default: 5000)
n_sweep=$((20 * scale))
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

# listening PORT: true once a socket listens on TCP PORT, IPv4 or IPv6
# (/proc/net/tcp: local address :PORT in hex, state 0A = LISTEN).
listening() {
  local hex
  hex=$(printf '%04X' "$1")
  grep -hqE "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:[0-9A-F]+ 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# pair CMD...: run CMD as a server, then CMD 127.0.0.1 as its client, each on a
# new TCP port; print the client's stdout. Bounded: 300 s each. perftest's
# client tries to connect once, and its server prints "Waiting for client to
# connect" before it listens (and buffered, into a file): so the client
# starts once the server's port is listening (at most 30 s).
pair() {
  port=$((port + 1))
  timeout 300 "$@" -p "$port" >/dev/null 2>"$out/server.err" &
  local server=$! status=0 i
  for ((i = 0; i < 300; i++)); do
    listening "$port" && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  timeout 300 "$@" -p "$port" 127.0.0.1 2>"$out/client.err" || status=$?
  wait "$server" || status=$?
  if ((status != 0)); then
    echo "bench: '$* 127.0.0.1' failed ($status):" >&2
    cat "$out/client.err" "$out/server.err" >&2
    return 1
  fi
}

# l11 CSV ARGS...: lesson 11 with ARGS, rows appended to OUTDIR/CSV.csv; prints
# the client's output. sweep: the same, silent.
l11() {
  local csv=$1
  shift
  port=$((port + 1))
  timeout 300 ./lesson11 -p "$port" --timeout 60 "$@" >/dev/null 2>"$out/server.err" &
  local server=$! status=0
  sleep 0.3
  timeout 300 ./lesson11 -p "$port" --timeout 60 "$@" -C "$out/$csv.csv" 127.0.0.1 2>"$out/client.err" || status=$?
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

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

echo "bench: $dev, GID index $gid, $(nproc) CPU(s), clock $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo '?')"
echo "bench: n=$n_lat round trips per latency, n=$n_bw messages per bandwidth (perftest takes the same -n and -s)"
echo
printf '%-30s %14s %14s %7s\n' "measurement" "lesson11" "perftest" "ratio"
compare="$out/compare.csv"
echo "measurement,unit,lesson11,perftest,ratio" >"$compare"
pt=(-d "$dev" -x "$gid" -F)
# row LABEL UNIT L11_VALUE PERFTEST_VALUE: one line of the table and of compare.csv.
row() {
  local r
  r=$(ratio "$3" "$4")
  printf '%-30s %11s %-2s %11s %-2s %7s\n' "$1" "$3" "$2" "$4" "$2" "$r"
  echo "$1,$2,$3,$4,$r" >>"$compare"
}
declare -A got
for op in send write read; do
  a=$(l11 side_by_side --op "$op" -n "$n_lat" | l11_value)
  b=$(pair "ib_${op}_lat" "${pt[@]}" -s 2 -n "$n_lat" | perftest_lat 2)
  row "$op lat 2 B (typical)" us "$a" "$b"
  got[$op.lat]=$a got[$op.lat.pt]=$b
done
a=$(l11 side_by_side --op send --inline -n "$n_lat" | l11_value)
row "send lat 2 B --inline" us "$a" "${got[send.lat.pt]}"
got[inline]=$a
# The same with both tools asleep on completion events (-e), where a CPU that
# one poller would hog is free for the other side and for rxe's kernel work.
a=$(l11 side_by_side --op send --events -n "$n_lat" | l11_value)
b=$(pair ib_send_lat "${pt[@]}" -e -s 2 -n "$n_lat" | perftest_lat 2)
row "send lat 2 B --events" us "$a" "$b"
got[ev]=$a got[ev.pt]=$b
a=$(l11 side_by_side --op send --events --inline -n "$n_lat" | l11_value)
row "send lat 2 B --events --inline" us "$a" "$b"
got[ev.inline]=$a
for op in write read; do
  a=$(l11 side_by_side --test bw --op "$op" -s 65536 -n "$n_bw" | l11_value)
  b=$(pair "ib_${op}_bw" "${pt[@]}" -s 65536 -n "$n_bw" | perftest_bw 65536)
  row "$op bw 64 KiB" MiB/s "$a" "$b"
  got[$op.bw]=$a got[$op.bw.pt]=$b
done

echo
echo "goals (lesson11 / perftest, measured above in this run):"
# goal TEXT RATIO OP LIMIT: met when RATIO OP LIMIT (OP is <= or >= or <).
goal() {
  local verdict
  verdict=$(awk -v r="$2" -v op="$3" -v l="$4" 'BEGIN {
    ok = (op == "<=") ? r <= l : (op == ">=") ? r >= l : r < l
    print (r == "n/a") ? "NOT MEASURED" : ok ? "met" : "NOT MET" }')
  printf '  %-52s ratio %5s (goal %s %s): %s\n' "$1" "$2" "$3" "$4" "$verdict"
}
goal "send lat 2 B typical vs ib_send_lat" "$(ratio "${got[send.lat]}" "${got[send.lat.pt]}")" "<=" 1.05
goal "write bw 64 KiB vs ib_write_bw" "$(ratio "${got[write.bw]}" "${got[write.bw.pt]}")" ">=" 1.00
goal "send lat 2 B --inline vs ib_send_lat (no inline on rxe)" "$(ratio "${got[inline]}" "${got[send.lat.pt]}")" "<" 1.00
echo "and with both tools on completion events (-e):"
goal "send lat 2 B --events vs ib_send_lat -e" "$(ratio "${got[ev]}" "${got[ev.pt]}")" "<=" 1.05
goal "send lat 2 B --events --inline vs ib_send_lat -e" "$(ratio "${got[ev.inline]}" "${got[ev.pt]}")" "<" 1.00

echo
echo "levers (lesson 11 alone; CSVs in $out):"
# 1. Size: latency and bandwidth from 2 B to 1 MiB, at the current path MTU.
sweep lat_size --op send -a -n "$n_sweep"
sweep lat_size --op send -a -n "$n_sweep" --events
sweep lat_size --op write -a -n "$n_sweep"
sweep lat_size --op read -a -n "$n_sweep"
sweep lat_size --op read -a -n "$n_sweep" --events
echo "  latency against size: send, send --events, write, read, read --events (lat_size.csv)"
# 2. Inline: off and on, up to the QP's max_inline_data.
sweep inline --op send -a -n "$n_sweep" --inline
sweep inline --op write -a -n "$n_sweep" --inline
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
# 6. Polling against events.
echo "  polling against events (events.csv):"
printf '    send lat 2 B typical:  polling %s us, --events %s us\n' \
  "$(l11 events --op send -n "$n_lat" | l11_value)" "$(l11 events --op send -n "$n_lat" --events | l11_value)"
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
