#!/usr/bin/env bash
# lossy_sweep.sh - lesson 17's measurement: throughput against loss, RDMA WRITE beside TCP.
#
#   scripts/maintainers/lossy_sweep.sh [OUT_DIR]     default OUT_DIR: docs/img/lesson17
#
# For each loss rate (LOSSES, default "0 0.01 0.1 1 5", in %) it runs, across
# two lab guests (scripts/lab.sh pair; the pair that stays up if
# LAB_PAIR_DIR names one), with netem dropping that share of the client's
# frames (guest b's egress: the data; the ACKs come back intact):
#   - ./lesson17 -n COUNT (default 64) WRITEs of 64 KiB at path MTU 1024,
#     once per ACK timeout exponent (-u) in ACKS (default "14 18": 67 ms, 1.07 s);
#   - iperf3 -n COUNT x 64 KiB over TCP, the same bytes over the same cable.
# It writes OUT_DIR/throughput.csv (loss_pct,proto,mib_s,seconds,extra) and
# OUT_DIR/throughput.png (gnuplot). RUNS (default 1) repeats each point; the
# CSV keeps every run, the plot shows their median. A lesson 17 run that
# fails (a completion error) is a row with 0 MiB/s and the status in extra.
# PLOT_ONLY=1 draws the plot from an OUT_DIR/throughput.csv already there.
#
# Exit status: 0 done; 1 a run failed (its output is shown); 2 misuse.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

out=${1:-docs/img/lesson17}
count=${COUNT:-64}
runs=${RUNS:-1}
losses=${LOSSES:-0 0.01 0.1 1 5}
acks=${ACKS:-14 18}
[[ $count =~ ^[1-9][0-9]*$ && $runs =~ ^[1-9][0-9]*$ ]] || {
  echo "lossy_sweep: COUNT and RUNS are whole numbers" >&2
  exit 2
}
command -v gnuplot >/dev/null || {
  echo "lossy_sweep: gnuplot not found: run scripts/install_deps.sh" >&2
  exit 2
}
mkdir -p "$out"
csv=$out/throughput.csv
log=$(mktemp)
trap 'rm -f "$log"' EXIT
[[ -n ${PLOT_ONLY:-} ]] || echo "loss_pct,proto,mib_s,seconds,extra" >"$csv"

# netem_for LOSS: the netem spec for LOSS % ("0" still puts a qdisc there,
# so that every point crosses the same path).
netem_for() { echo "loss $1%"; }

# client_counter NAME: how far the client's port counter NAME moved, from
# its line "[b] client: port counters that moved: rcvd_pkts +10 sent_pkts +594".
client_counter() {
  sed -n "s/^\[b\] client: port counters that moved: \(.* \)\{0,1\}$1 +\([0-9]*\).*/\2/p" "$log"
}

# rdma LOSS ACK: one lesson 17 run with ACK timeout exponent ACK (-u); its
# CSV row, with the client's counters of resends in extra.
rdma() {
  local line sent seq retry failed
  scripts/lab.sh pair --timeout 600 --netem-b "$(netem_for "$1")" --ready 'waiting for a client' \
    --a './lesson17 --timeout 300' --b "./lesson17 --timeout 300 -u $2 -n $count 192.0.2.1" >"$log" 2>&1
  sent=$(client_counter sent_pkts)
  seq=$(client_counter rcvd_seq_err)
  retry=$(client_counter completer_retry_err)
  line=$(grep '^\[b\] result: ' "$log")
  if [[ -z $line ]]; then
    failed=$(sed -n 's/^\[b\] client: WRITE .* failed after \([0-9.]*\) s: status \([0-9]*\).*/\2 after \1 s/p' "$log")
    [[ -n $failed ]] || {
      cat "$log" >&2
      return 1
    }
    echo "$1,rdma_write_u$2,0,,failed: status $failed sent_pkts=${sent:-0} naks=${seq:-0} retries=${retry:-0}"
    return
  fi
  # "result: 64 WRITEs of 65536 bytes in 1.234 s: 3.4 MiB/s (28.5 Mbit/s)"
  awk -v loss="$1" -v ack="$2" -v sent="${sent:-0}" -v seq="${seq:-0}" -v retry="${retry:-0}" \
    '{ print loss ",rdma_write_u" ack "," $(NF-3) "," $(NF-5) ",sent_pkts=" sent " naks=" seq " retries=" retry }' <<<"$line"
}

# tcp LOSS: iperf3 sends the same bytes; its receiver's rate in MiB/s.
tcp() {
  local bytes=$((count * 65536))
  scripts/lab.sh pair --timeout 600 --netem-b "$(netem_for "$1")" \
    --a 'iperf3 -s -1 -p 5201 --forceflush' \
    --b "for try in 1 2 3 4 5 6 7 8 9 10; do iperf3 -c 192.0.2.1 -p 5201 -n $bytes -f m --connect-timeout 3000 && exit 0; sleep 1; done; exit 1" \
    >"$log" 2>&1 || {
    cat "$log" >&2
    return 1
  }
  # "[b] [  5]   0.00-1.52  sec  4.00 MBytes  22.1 Mbits/sec  12   sender"
  grep '^\[b\] .* sender$' "$log" | tail -n 1 |
    awk -v loss="$1" '{ for (i = 1; i < NF; i++) if ($(i+1) == "Mbits/sec") { rate = $i; retr = $(i+2) }
      split($4, t, "-"); print loss ",tcp_iperf3," rate * 1e6 / 8 / 1048576 "," t[2] ",retransmits=" retr }'
}

[[ -n ${PLOT_ONLY:-} ]] && losses=""
for loss in $losses; do
  for ((run = 1; run <= runs; run++)); do
    for ack in $acks; do
      rdma "$loss" "$ack" >>"$csv" || exit 1
      tail -n 1 "$csv"
    done
    tcp "$loss" >>"$csv" || exit 1
    tail -n 1 "$csv"
  done
done

# The median of each point, "LOSS MIB_S" per line, for gnuplot.
median() {
  awk -F, -v p="$1" 'NR > 1 && $2 == p { print $1, $3 }' "$csv" | sort -k1,1g -k2,2g |
    awk '{ v[$1] = v[$1] " " $2; n[$1]++ } END { for (k in v) { split(substr(v[k], 2), a, " "); print k, a[int((n[k] + 1) / 2)] } }' |
    sort -k1,1g
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$log"' EXIT
median rdma_write_u14 >"$tmp/rdma14"
median rdma_write_u18 >"$tmp/rdma18"
median tcp_iperf3 >"$tmp/tcp"
# Loss 0 cannot sit on a log axis: it is drawn at 0.001 %, labelled 0.
(cd "$tmp" && gnuplot) <<'GP' && mv "$tmp/throughput.png" "$out/throughput.png"
set terminal pngcairo size 900,540 font 'sans,11' background rgb 'white'
set output 'throughput.png'
set grid; set key below
set logscale x 10
set xtics ('0' 0.001, '0.01' 0.01, '0.1' 0.1, '1' 1, '5' 5)
set xrange [0.0007:7]
set yrange [0:*]
set xlabel 'packets lost on the client''s egress (%, tc netem loss)'
set ylabel 'MiB/s'
set title 'lesson 17: 64 KiB RDMA WRITEs at path MTU 1024 (rxe, go-back-N) beside TCP (iperf3), two lab guests under TCG'
zero(x) = x == 0 ? 0.001 : x
plot 'rdma14' using (zero($1)):2 with linespoints lw 2 pt 7 title 'RDMA WRITE, ACK timeout 67 ms (-u 14)', \
     'rdma18' using (zero($1)):2 with linespoints lw 2 pt 9 title 'RDMA WRITE, ACK timeout 1.07 s (-u 18)', \
     'tcp' using (zero($1)):2 with linespoints lw 2 pt 5 title 'TCP (iperf3)'
GP
echo "lossy_sweep: $csv and $out/throughput.png"
