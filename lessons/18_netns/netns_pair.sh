#!/usr/bin/env bash
# netns_pair.sh - lesson 18's two "hosts" inside one lab guest: two network
# namespaces joined by a veth pair, an rxe device on each end.
#
#   lessons/18_netns/netns_pair.sh up      make them (in the lab guest only)
#   lessons/18_netns/netns_pair.sh down    remove them again
#   lessons/18_netns/netns_pair.sh show    what there is: namespaces, links, rxe, UDP 4791
#
#   ns_a: veth_a 198.51.100.1/24, rxe_a on it
#   ns_b: veth_b 198.51.100.2/24, rxe_b on it
# (198.51.100.0/24 is TEST-NET-2, RFC 5737: never routed anywhere.)
#
# Each `rdma link add` runs inside its namespace (ip netns exec), as a
# container's would. It runs only where LAB=1 (scripts/lab.sh exec and run
# set it): namespaces, links and devices are made in the throw-away guest,
# never on the host. `up` twice fails (the namespaces exist); `down` removes
# what exists and succeeds. Exit status: 0, 1 a step failed, 2 misuse.
set -euo pipefail

readonly NAMESPACES=(ns_a ns_b)
readonly VETHS=(veth_a veth_b)
readonly RXES=(rxe_a rxe_b)
readonly ADDRS=(198.51.100.1/24 198.51.100.2/24)

misuse() {
  echo "netns_pair.sh: $*" >&2
  exit 2
}

up() {
  local i
  ip link add "${VETHS[0]}" type veth peer name "${VETHS[1]}"
  for i in 0 1; do
    ip netns add "${NAMESPACES[$i]}"
    ip link set "${VETHS[$i]}" netns "${NAMESPACES[$i]}"
    ip -n "${NAMESPACES[$i]}" addr add "${ADDRS[$i]}" dev "${VETHS[$i]}"
    ip -n "${NAMESPACES[$i]}" link set lo up
    ip -n "${NAMESPACES[$i]}" link set "${VETHS[$i]}" up
    ip netns exec "${NAMESPACES[$i]}" rdma link add "${RXES[$i]}" type rxe netdev "${VETHS[$i]}"
  done
  show
}

# Deleting a namespace deletes its veth end, and the veth pair with it;
# an rxe device goes with its netdev.
down() {
  local i
  for i in 0 1; do
    rdma link delete "${RXES[$i]}" 2>/dev/null || true
    ip netns delete "${NAMESPACES[$i]}" 2>/dev/null || true
  done
  ip link delete "${VETHS[0]}" 2>/dev/null || true
}

show() {
  local ns
  echo "rdma system: $(rdma system show)"
  for ns in "${NAMESPACES[@]}"; do
    [[ -e /run/netns/$ns ]] || continue
    echo "== $ns"
    ip -n "$ns" -br addr show
    ip netns exec "$ns" rdma link show
    ip netns exec "$ns" ss -Huln sport = :4791
  done
  echo "== the initial namespace"
  rdma link show
  ss -Huln sport = :4791
}

[[ ${1:-} == -h || ${1:-} == --help ]] && {
  sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
  exit 0
}
(($# == 1)) || misuse "one command: up, down or show (see netns_pair.sh -h)"
[[ ${LAB:-} == 1 ]] ||
  misuse "runs only in the lab guest (scripts/lab.sh exec -- lessons/18_netns/netns_pair.sh $1): it makes namespaces, links and rxe devices"
case $1 in
  up | down | show) "$1" ;;
  *) misuse "no command '$1': up, down or show (see netns_pair.sh -h)" ;;
esac
