#!/usr/bin/env bash
# capture.sh - capture the RoCE traffic of a command on a real host, then
# print the packet ladder (scripts/ladder.sh).
#
#   sudo scripts/capture.sh [-d RDMA_DEV] [-i NETDEV] [-o FILE] [-p TCP_PORT] -- CMD [ARGS...]
#
# It captures on the netdev behind the RDMA device (rxe or a RoCE NIC): RoCE
# v2 (UDP 4791) and the lessons' out-of-band TCP (port 18515 or -p). Run the
# lesson's client (or server) as CMD with its peer on ANOTHER host: two
# processes on one rxe host talk through rxe's internal loopback and put
# nothing on the wire. Without a second host, use `make capture LESSON=N`.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/capture.sh [-d RDMA_DEV] [-i NETDEV] [-o FILE] [-p TCP_PORT] -- CMD [ARGS...]
  -d RDMA_DEV  the RDMA device whose netdev to capture on (default: the first one)
  -i NETDEV    capture on this netdev instead (default: the one under RDMA_DEV)
  -o FILE      where the pcap goes (default: captures/capture.pcap)
  -p TCP_PORT  the lessons' out-of-band TCP port to include (default: 18515)
USAGE
}
die() {
  echo "capture.sh: $1" >&2
  exit "${2:-1}"
}

dev="" netdev="" out="captures/capture.pcap" tcp_port=18515
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help)
      usage
      exit 0
      ;;
    -d)
      dev=${2:?}
      shift 2
      ;;
    -i)
      netdev=${2:?}
      shift 2
      ;;
    -o)
      out=${2:?}
      shift 2
      ;;
    -p)
      tcp_port=${2:?}
      shift 2
      ;;
    --)
      shift
      break
      ;;
    *) die "unknown argument '$1' (see scripts/capture.sh -h)" 2 ;;
  esac
done
[ $# -gt 0 ] || die "no command to run after -- (see scripts/capture.sh -h)" 2
command -v tshark >/dev/null || die "tshark is missing: scripts/install_deps.sh installs it"

if [ -z "$netdev" ]; then
  [ -n "$dev" ] || dev=$(ibv_devices 2>/dev/null | awk 'NR > 2 { print $1; exit }')
  [ -n "$dev" ] || die "no RDMA device here: set up Soft-RoCE (scripts/setup_rxe.sh up) or use 'make capture LESSON=N'"
  netdev=$(rdma link show "$dev/1" 2>/dev/null | sed -n 's/.*netdev \([^ ]*\).*/\1/p')
  [ -n "$netdev" ] || die "no netdev under $dev (an InfiniBand port? capture IB with ibdump instead); give one with -i"
fi

case " $* " in
  *" 127.0.0.1 "* | *" localhost "* | *" ::1 "*)
    echo "capture.sh: warning: the peer is on this host; rxe loopback puts nothing on $netdev" >&2
    ;;
esac

mkdir -p "$(dirname "$out")"
echo "capture.sh: capturing on $netdev (udp port 4791 or tcp port $tcp_port) into $out"
tshark -q -i "$netdev" -f "udp port 4791 or tcp port $tcp_port" -w "$out" 2>"$out.log" 3>&- &
tpid=$!
trap 'kill "$tpid" 2>/dev/null || true' EXIT
# Wait (bounded) until tshark reports that it is capturing.
for _ in $(seq 50); do
  grep -q "Capturing on" "$out.log" 2>/dev/null && break
  sleep 0.1
done
grep -q "Capturing on" "$out.log" || die "tshark did not start: $(tail -n 3 "$out.log")"

set +e
"$@"
status=$?
set -e
sleep 0.5 # let the last ACKs arrive
kill "$tpid" 2>/dev/null || true
wait "$tpid" 2>/dev/null || true
trap - EXIT
rm -f "$out.log"

"$(dirname "$0")/ladder.sh" "$out"
if ! tshark -r "$out" -Y infiniband 2>/dev/null | grep -q .; then
  echo "capture.sh: no RoCE packets captured: was the peer on this host (rxe loopback)?" >&2
fi
exit "$status"
