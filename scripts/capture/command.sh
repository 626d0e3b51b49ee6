#!/usr/bin/env bash
# capture/command.sh - capture the RoCE traffic of a command on a real host, then
# print the packet ladder (scripts/capture/ladder.sh).
#
#   sudo scripts/capture/command.sh [-d RDMA_DEV] [-i NETDEV] [-o FILE] [-p TCP_PORT] -- CMD [ARGS...]
#
# tshark captures as root; CMD runs as the user who called sudo (SUDO_USER),
# or as root when there is none.
#
# It captures on the netdev behind the RDMA device (rxe or a RoCE NIC): RoCE
# v2 (UDP 4791) and the lessons' out-of-band TCP (port 18515 or -p). Run the
# lesson's client (or server) as CMD with its peer on ANOTHER host: two
# processes on one rxe host talk through rxe's internal loopback and put
# nothing on the wire. Without a second host, use `make capture LESSON=N`.
#
# Exit status: CMD's; 1 if the capture itself failed (tshark's message is
# shown); 2 misuse.
set -euo pipefail
# shellcheck source=scripts/capture/settle.sh
source "$(dirname "$0")/settle.sh"

usage() {
  cat <<'USAGE'
usage: scripts/capture/command.sh [-d RDMA_DEV] [-i NETDEV] [-o FILE] [-p TCP_PORT] -- CMD [ARGS...]
  -d RDMA_DEV  the RDMA device whose netdev to capture on (default: the first one)
  -i NETDEV    capture on this netdev instead (default: the one under RDMA_DEV)
  -o FILE      where the pcap goes (default: captures/capture.pcap)
  -p TCP_PORT  the lessons' out-of-band TCP port to include (default: 18515)
USAGE
}
die() {
  echo "capture/command.sh: $1" >&2
  exit "${2:-1}"
}
misuse() { die "$1 (see scripts/capture/command.sh -h)" 2; }
# need_value OPTION [VALUE...]: misuse if the option came last.
need_value() { [[ $# -ge 2 ]] || misuse "$1 needs a value"; }

dev="" netdev="" out="captures/capture.pcap" tcp_port=18515
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help)
      usage
      exit 0
      ;;
    -d)
      need_value "$@"
      dev=$2
      shift 2
      ;;
    -i)
      need_value "$@"
      netdev=$2
      shift 2
      ;;
    -o)
      need_value "$@"
      out=$2
      shift 2
      ;;
    -p)
      need_value "$@"
      tcp_port=$2
      shift 2
      ;;
    --)
      shift
      break
      ;;
    *) misuse "unknown argument '$1'" ;;
  esac
done
[[ $# -gt 0 ]] || misuse "no command to run after --"
# The port goes into tshark's capture filter: a number, or the filter would
# say something else ("1 or tcp" captures every TCP segment).
if ! [[ $tcp_port =~ ^[0-9]{1,5}$ ]] || ((10#$tcp_port < 1 || 10#$tcp_port > 65535)); then
  misuse "-p '$tcp_port' is not a TCP port (1-65535)"
fi
tcp_port=$((10#$tcp_port))
command -v tshark >/dev/null || die "tshark is missing: scripts/install_deps.sh installs it"

if [[ -z $netdev ]]; then
  [[ -n $dev ]] || dev=$(ibv_devices 2>/dev/null | awk 'NR > 2 { print $1; exit }')
  [[ -n $dev ]] || die "no RDMA device here: set up Soft-RoCE (scripts/setup_rxe.sh up) or use 'make capture LESSON=N'"
  netdev=$(rdma link show "$dev/1" 2>/dev/null | sed -n 's/.*netdev \([^ ]*\).*/\1/p')
  [[ -n $netdev ]] || die "no netdev under $dev (an InfiniBand port? capture IB with ibdump instead); give one with -i"
fi

case " $* " in
  *" 127.0.0.1 "* | *" localhost "* | *" ::1 "*)
    echo "capture/command.sh: warning: the peer is on this host; rxe loopback puts nothing on $netdev" >&2
    ;;
esac

# tshark needs root; nothing else here does. Under sudo, the command, the
# output folder and file and the dissection are the user's who called sudo
# (SUDO_USER), as they would be had they run them themselves: root only
# captures, into a file of its own, which the user then copies into place.
as_user=()
if [[ $(id -u) == 0 && -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
  as_user=(runuser -u "$SUDO_USER" --)
fi
"${as_user[@]}" mkdir -p "$(dirname "$out")"
echo "capture/command.sh: capturing on $netdev (udp port 4791 or tcp port $tcp_port) into $out"
log=$(mktemp)
cap=$(mktemp)
tshark -q -i "$netdev" -f "udp port 4791 or tcp port $tcp_port" -w "$cap" 2>"$log" 3>&- &
tpid=$!
trap 'kill "$tpid" 2>/dev/null || true; rm -f "$log" "$cap"' EXIT
# tshark_failed: say that tshark stopped, with its own message (a bad
# filter, no permission, no such interface), and exit 1.
tshark_failed() {
  echo "capture/command.sh: tshark stopped $1; it said:" >&2
  grep -v 'Running as user "root"' "$log" | sed 's/^/  /' >&2
  exit 1
}
# Wait (bounded: 60 s; tshark starts slowly in an emulated guest, and on a
# loaded host, where two test runs side by side once took over 20 s) until
# the capture is live: dumpcap writes the file's header once the netdev is
# open and filtered. (Not tshark's "Capturing on": it says that before its
# dumpcap has opened the netdev, 13 ms before on an idle host, in a loaded
# guest long enough to miss lesson 4's exchange and SEND.)
for _ in $(seq 600); do
  [[ -s $cap ]] && break
  kill -0 "$tpid" 2>/dev/null || tshark_failed "before it started"
  sleep 0.1
done
[[ -s $cap ]] || tshark_failed "short of capturing within 60 s"

[[ ${#as_user[@]} -eq 0 ]] ||
  echo "capture/command.sh: running $1 as $SUDO_USER (SUDO_USER); tshark captures as root"
set +e
"${as_user[@]}" "$@"
status=$?
set -e
# Let the last packets reach the file before tshark stops (settle.sh).
capture_settle "$cap" "$tpid"
kill -0 "$tpid" 2>/dev/null || tshark_failed "while $1 ran: the capture is incomplete"
kill "$tpid" 2>/dev/null || true
wait "$tpid" 2>/dev/null || true
# A tshark that failed slowly (a loaded host) was still alive above, but
# wrote no file.
[[ -s $cap ]] || tshark_failed "while $1 ran: the capture is incomplete"
# shellcheck disable=SC2016 # expanded by the inner sh
"${as_user[@]}" sh -c 'cat >"$1"' sh "$out" <"$cap"

"${as_user[@]}" "$(dirname "$0")/ladder.sh" "$out"
if ! "${as_user[@]}" tshark -r "$out" -Y infiniband 2>/dev/null | grep -q .; then
  echo "capture/command.sh: no RoCE packets captured: was the peer on this host (rxe loopback)?" >&2
fi
exit "$status"
