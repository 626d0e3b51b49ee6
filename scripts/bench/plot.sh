#!/usr/bin/env bash
# bench/plot.sh DIR - the plots of `make bench` (scripts/bench/run.sh): DIR's
# CSVs (written by bench/measure.sh) into PNGs beside them, with gnuplot.
#   latency.png       typical latency against size: send, send --events,
#                     write, read, and send/write --inline
#   bandwidth.png     bandwidth against size: write and read at the path
#                     MTU, write at path MTU 1024 and 4096
#   depth-signal.png  bandwidth against depth, and against signaling
# The conditions below are awk's, in single quotes on purpose.
# shellcheck disable=SC2016
set -euo pipefail

dir=${1:?usage: bench/plot.sh DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# series NAME CSV AWK_CONDITION X Y: the rows of DIR/CSV (lesson 11's
# columns) that match the condition, as "X Y" lines in $tmp/NAME.
# Columns: 2 test, 3 op, 4 bytes, 6 inline, 7 signal, 8 batch, 9 depth,
# 10 events, 11 mtu, 13 typical_us, 17 mib_s.
series() {
  local f="$dir/$2"
  if [[ -f $f ]]; then
    awk -F, "NR > 1 && ($3) { print \$$4, \$$5 }" "$f" >"$tmp/$1"
  else
    : >"$tmp/$1"
  fi
}

series send lat_size.csv '$3 == "send" && $10 == 0' 4 13
series send_ev lat_size.csv '$3 == "send" && $10 == 1' 4 13
series write lat_size.csv '$3 == "write"' 4 13
series read lat_size.csv '$3 == "read" && $10 == 0' 4 13
series read_ev lat_size.csv '$3 == "read" && $10 == 1' 4 13
series send_inl inline.csv '$3 == "send"' 4 13
series write_inl inline.csv '$3 == "write"' 4 13
series bw_write bw_size.csv '$3 == "write" && $10 == 0' 4 17
series bw_write_ev bw_size.csv '$3 == "write" && $10 == 1' 4 17
series bw_read bw_size.csv '$3 == "read"' 4 17
series mtu_1024 mtu.csv '$11 == 1024' 4 17
series mtu_4096 mtu.csv '$11 == 4096' 4 17
series depth depth.csv '$10 == 0' 9 17
series depth_ev depth.csv '$10 == 1' 9 17
series signal signal.csv '$10 == 0' 7 17
series signal_ev signal.csv '$10 == 1' 7 17

# Only the series that have data: gnuplot stops at an empty file.
# plot_line NAME TITLE STYLE: one ", 'NAME' ... title" clause, or nothing.
# gnuplot runs in $tmp (draw, below), so its script names the series and
# the PNG by their fixed names alone: no path (DIR is the user's text, and
# a quote in it would end a gnuplot string) is ever pasted into it.
plot_line() {
  [[ -s $tmp/$1 ]] && printf "'%s' using 1:2 with linespoints %s title '%s', " "$1" "$3" "$2"
  return 0
}

# draw PNG: gnuplot reads its script on stdin, in $tmp, and writes PNG
# there; the PNG is then moved into DIR by the shell.
draw() {
  (cd "$tmp" && gnuplot) && mv -- "$tmp/$1" "$dir/$1"
}

# any_data NAME...: true when one of the series has a point; a plot with
# none is not drawn (gnuplot refuses an empty plot).
any_data() {
  local name
  for name in "$@"; do [[ -s $tmp/$name ]] && return 0; done
  echo "plot.sh: no data for $plot, not drawn" >&2
  return 1
}

common="set terminal pngcairo size 900,540 font 'sans,11' background rgb 'white'
set grid; set key outside right top; set logscale x 2
set xtics ('2' 2, '16' 16, '128' 128, '1K' 1024, '8K' 8192, '64K' 65536, '512K' 524288)"

plot=latency.png
any_data send send_ev write read read_ev send_inl write_inl && draw latency.png <<GP
$common
set output 'latency.png'
set title 'lesson 11: typical latency against message size'
set xlabel 'message size (bytes)'; set ylabel 'typical latency (us)'; set logscale y 10
plot $(plot_line send 'send (busy polling)' 'lw 2') $(plot_line send_ev 'send --events' 'lw 2') \
  $(plot_line write 'write (busy polling)' 'lw 2') $(plot_line read 'read (round trip)' 'lw 2') $(plot_line read_ev 'read --events' 'lw 2') \
  $(plot_line send_inl 'send --inline' 'dt 2') $(plot_line write_inl 'write --inline' 'dt 2') 1/0 notitle
GP

plot=bandwidth.png
any_data bw_write bw_write_ev bw_read mtu_1024 mtu_4096 && draw bandwidth.png <<GP
$common
set output 'bandwidth.png'
set title 'lesson 11: bandwidth against message size'
set xlabel 'message size (bytes)'; set ylabel 'MiB/s'
plot $(plot_line bw_write 'write' 'lw 2') $(plot_line bw_write_ev 'write --events' 'lw 2') $(plot_line bw_read 'read' 'lw 2') \
  $(plot_line mtu_1024 'write, path MTU 1024' 'dt 2') $(plot_line mtu_4096 'write, path MTU 4096' 'dt 2') 1/0 notitle
GP

plot=depth-signal.png
any_data depth depth_ev signal signal_ev && draw depth-signal.png <<GP
$common
set output 'depth-signal.png'
set multiplot layout 1,2 title 'lesson 11: WRITE bandwidth against the levers'
set ylabel 'MiB/s'; set yrange [0:*]; set xrange [0.8:180]; set key inside top left
set xtics (1, 2, 4, 8, 16, 32, 64, 128)
set title '4 KiB WRITEs, against --depth'; set xlabel 'WRs in flight (--depth)'
plot $(plot_line depth 'busy polling' 'lw 2') $(plot_line depth_ev '--events' 'lw 2') 1/0 notitle
set title '64 B WRITEs, against --signal'; set xlabel 'a completion every N WRs (--signal)'
plot $(plot_line signal 'busy polling' 'lw 2') $(plot_line signal_ev '--events' 'lw 2') 1/0 notitle
unset multiplot
GP
exit 0
