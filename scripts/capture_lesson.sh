#!/usr/bin/env bash
# capture_lesson.sh - run lesson N across two lab guests and decode the wire.
#
#   scripts/capture_lesson.sh N          (what `make capture LESSON=N` runs)
#
# Guest a (192.0.2.1) runs the lesson's server, guest b (192.0.2.2) its
# client; a virtual cable joins them and every frame on it is written to
# captures/lessonN.pcap on this host. Then the packet ladder is printed
# (scripts/ladder.sh): open the pcap in Wireshark for the full decode
# (docs/wireshark.md).
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:-}
case $n in
  -h | --help)
    sed -n '2,11s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  "")
    echo "capture_lesson.sh: which lesson? make capture LESSON=N (4 to 9)" >&2
    exit 2
    ;;
  1 | 2 | 3)
    echo "capture_lesson.sh: lesson $n has no peer, so nothing crosses a wire; lessons 4 to 9 do" >&2
    exit 2
    ;;
  4 | 5 | 6 | 7 | 8 | 9) ;;
  *)
    echo "capture_lesson.sh: no lesson '$n'; lessons 4 to 9 have two sides to capture" >&2
    exit 2
    ;;
esac
[ -x "./lesson$n" ] || {
  echo "capture_lesson.sh: ./lesson$n is not built: run make" >&2
  exit 1
}

server_ip=192.0.2.1 client_ip=192.0.2.2 # documentation range: never leaves the guests
opts="--timeout 60"
case $n in
  4) server_args="" client_args="$server_ip 2 3" ;;
  5) server_args="" client_args="$server_ip 'hello over the wire'" ;;
  6) server_args="-m 'text in the server memory'" client_args="$server_ip" ;;
  7) server_args="" client_args="$server_ip -n 3" ;;
  8) server_args="" client_args="-n 2 $server_ip 2 3" ;;
  9) server_args="" client_args="$server_ip 2 3" ;;
esac

mkdir -p captures
pcap=captures/lesson$n.pcap
rm -f "$pcap"
echo "capture: lesson $n, server on guest a ($server_ip), client on guest b ($client_ip), wire -> $pcap"
status=0
scripts/lab.sh pair --pcap "$pcap" \
  --a "./lesson$n $opts $server_args" \
  --b "./lesson$n $opts $client_args" || status=$?
echo
if [ ! -s "$pcap" ]; then
  echo "capture_lesson.sh: no capture was written (lab exit status $status)" >&2
  exit 1
fi
echo "packet ladder of $pcap (server $server_ip, client $client_ip):"
scripts/ladder.sh "$pcap" "$server_ip" "$client_ip"
exit "$status"
