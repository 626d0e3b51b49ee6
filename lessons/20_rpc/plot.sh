#!/usr/bin/env bash
# plot.sh DIR - lesson 20 beside TCP: DIR/bench.csv (lessons/20_rpc/bench.sh)
# into DIR/bench.png, and the table docs/lesson20-rpc.md shows, on stdout.
#
# For each number of clients and each mode, every run is first summed up:
#   requests/s  the clients' own requests/s added (they ran at once)
#   p50         the median of the clients' p50s
#   p99         the largest of the clients' p99s (the worst client's tail)
# and the table and the plot show the median of those over the runs, with
# the smallest and largest run's requests/s beside it: on a shared machine
# one run says little.
# The conditions below are awk's, in single quotes on purpose.
# shellcheck disable=SC2016
set -euo pipefail

dir=${1:?usage: lessons/20_rpc/plot.sh DIR (with DIR/bench.csv)}
[[ -f $dir/bench.csv ]] || {
  echo "plot.sh: no $dir/bench.csv (lessons/20_rpc/bench.sh writes it)" >&2
  exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Columns: 1 clients, 2 mode, 3 run, 4 client, 5 requests, 6 rps, 7 p50_us, 8 p99_us.
# One line per run: clients mode rps p50 p99.
awk -F, 'NR > 1 {
  k = $1 " " $2 " " $3
  if (!(k in rps)) { keys[++n] = k; rps[k] = 0; p99[k] = 0; p50s[k] = "" }
  rps[k] += $6
  if ($8 > p99[k]) p99[k] = $8
  p50s[k] = p50s[k] " " $7
}
function median(list,   v, m, i, j, t) {
  m = split(list, v, " ")
  for (i = 2; i <= m; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
  return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
}
END { for (i = 1; i <= n; i++) { split(keys[i], f, " "); print f[1], f[2], rps[keys[i]], median(p50s[keys[i]]), p99[keys[i]] } }' \
  "$dir/bench.csv" >"$tmp/runs"

# One line per clients and mode, over its runs: clients mode rps p50 p99 min_rps max_rps runs.
awk '
function median(list,   v, m, i, j, t) {
  m = split(list, v, " ")
  for (i = 2; i <= m; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
  return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
}
{
  k = $1 " " $2
  if (!(k in runs)) { keys[++n] = k; lo[k] = $3; hi[k] = $3 }
  runs[k]++; r[k] = r[k] " " $3; a[k] = a[k] " " $4; b[k] = b[k] " " $5
  if ($3 < lo[k]) lo[k] = $3
  if ($3 > hi[k]) hi[k] = $3
}
END { for (i = 1; i <= n; i++) { k = keys[i]; printf "%s %d %d %d %d %d %d\n", k, median(r[k]), median(a[k]), median(b[k]), lo[k], hi[k], runs[k] } }' \
  "$tmp/runs" | sort -k1,1n -k2,2 >"$tmp/summary"

# The table, markdown: one row per number of clients, the three modes side by side.
name() { case $1 in busy) echo "RDMA, busy polling" ;; events) echo "RDMA, events (-e)" ;; tcp) echo "TCP (--tcp)" ;; esac }
echo "| clients | service | requests/s (median) | runs' range | p50 (us) | p99 (us) |"
echo "|---|---|---|---|---|---|"
while read -r clients mode rps p50 p99 lo hi runs; do
  echo "| $clients | $(name "$mode") | $rps | $lo-$hi ($runs runs) | $p50 | $p99 |"
done <"$tmp/summary"

for mode in busy events tcp; do
  awk -v m="$mode" '$2 == m { print $1, $3, $4, $5, $6, $7 }' "$tmp/summary" >"$tmp/$mode"
done

# The requests per client, for the axis: digits only, pasted into gnuplot's script.
per_client=$(awk -F, 'NR == 2 { print $5 }' "$dir/bench.csv")
[[ $per_client =~ ^[0-9]+$ ]] || per_client=N

# gnuplot runs in $tmp, so its script names its files by fixed names alone.
(cd "$tmp" && gnuplot) <<GP
set terminal pngcairo size 1100,520 font 'sans,11' background rgb 'white'
set output 'bench.png'
set multiplot layout 1,2 title "lesson 20: a key-value service over RDMA and over TCP, in the lab (2 vCPUs, TCG)"
set grid; set key below; set xrange [0.7:4.6]; set xtics (1, 2, 4); set xlabel 'clients ($per_client requests each, -t 16)'
set title 'requests per second (median of the runs; bars: slowest and fastest run)'
set ylabel 'requests/s, all clients'; set yrange [0:*]
# Each mode a little aside (x - 0.08, x, x + 0.08), so that its bar is seen.
plot 'busy' using (\$1 - 0.08):2:5:6 with yerrorlines lw 2 title 'RDMA, busy polling', \
     'events' using 1:2:5:6 with yerrorlines lw 2 title 'RDMA, events (-e)', \
     'tcp' using (\$1 + 0.08):2:5:6 with yerrorlines lw 2 title 'TCP (--tcp)'
set title 'latency per request: p50 (solid) and p99 (dashed)'
set ylabel 'microseconds'; set logscale y 10; set yrange [*:*]; set key below maxrows 3
plot 'busy' using 1:3 with linespoints lw 2 lc 1 title 'RDMA busy p50', 'busy' using 1:4 with linespoints lw 2 dt 2 lc 1 title 'RDMA busy p99', \
     'events' using 1:3 with linespoints lw 2 lc 2 title 'RDMA -e p50', 'events' using 1:4 with linespoints lw 2 dt 2 lc 2 title 'RDMA -e p99', \
     'tcp' using 1:3 with linespoints lw 2 lc 3 title 'TCP p50', 'tcp' using 1:4 with linespoints lw 2 dt 2 lc 3 title 'TCP p99'
unset multiplot
GP
mv -- "$tmp/bench.png" "$dir/bench.png"
