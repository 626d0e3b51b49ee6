#!/usr/bin/env bash
# capture/netns.sh - run a lesson's server and client in two network
# namespaces of one lab guest and record the veth between them (the guest
# side of `make capture LESSON=18`: scripts/capture/lesson.sh runs it with
# lab.sh exec).
#
#   scripts/capture/netns.sh PCAP READY 'SERVER CMD' 'CLIENT CMD'
#
# lessons/18_netns/netns_pair.sh makes ns_a (198.51.100.1) and ns_b (198.51.100.2);
# dumpcap records veth_a, in ns_a, into PCAP (pcap format); the server
# command runs (as bash words, in the initial namespace: the lesson enters
# its own with --netns), and once it has printed a line containing READY,
# the client. Their lines are prefixed "[a] " and "[b] ", as lab.sh pair
# prefixes its two guests'. Then the capture stops and the namespaces are
# removed, whatever happened.
#
# Runs only where LAB=1 (in the lab guest). Exit status: the server's if
# non-zero, else the client's; 1 when the capture did not start; 2 misuse.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/capture/settle.sh
source scripts/capture/settle.sh

misuse() {
  echo "capture/netns.sh: $*" >&2
  exit 2
}
[[ ${1:-} == -h || ${1:-} == --help ]] && {
  sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
  exit 0
}
(($# == 4)) || misuse "PCAP READY 'SERVER CMD' 'CLIENT CMD' (see capture/netns.sh -h)"
[[ ${LAB:-} == 1 ]] || misuse "runs only in the lab guest (scripts/capture/lesson.sh runs it there)"
pcap=$1 ready=$2 server_cmd=$3 client_cmd=$4
work=$(mktemp -d)
dumpcap_pid="" server_pid=""

# shellcheck disable=SC2317 # run by the EXIT trap
finish() {
  [[ -z $server_pid ]] || kill "$server_pid" 2>/dev/null || true
  if [[ -n $dumpcap_pid ]]; then
    kill "$dumpcap_pid" 2>/dev/null || true
    wait "$dumpcap_pid" 2>/dev/null || true
  fi
  lessons/18_netns/netns_pair.sh down
  rm -rf "$work"
}
trap finish EXIT

lessons/18_netns/netns_pair.sh up >/dev/null
# dumpcap writes the file's header when it starts capturing: wait (10 s at
# most) for it, so that the first CM packet is not missed.
ip netns exec ns_a dumpcap -q -P -i veth_a -w "$work/wire.pcap" 2>"$work/dumpcap.err" &
dumpcap_pid=$!
for ((i = 0; i < 100; i++)); do
  [[ -s $work/wire.pcap ]] && break
  sleep 0.1
done
[[ -s $work/wire.pcap ]] || {
  cat "$work/dumpcap.err" >&2
  echo "capture/netns.sh: dumpcap did not start on veth_a" >&2
  exit 1
}

bash -c "$server_cmd" >"$work/a.out" 2>&1 &
server_pid=$!
for ((i = 0; i < 300; i++)); do
  grep -qF -- "$ready" "$work/a.out" && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
client_status=0
bash -c "$client_cmd" 2>&1 | sed 's/^/[b] /' || client_status=$?
server_status=0
wait "$server_pid" || server_status=$?
server_pid=""
sed 's/^/[a] /' "$work/a.out"
# The last ACKs and the disconnect are on the wire by now; let dumpcap write
# them (settle.sh).
capture_settle "$work/wire.pcap" "$dumpcap_pid"
kill "$dumpcap_pid"
wait "$dumpcap_pid" || true
dumpcap_pid=""
cp "$work/wire.pcap" "$pcap"
((server_status != 0)) && exit "$server_status"
exit "$client_status"
