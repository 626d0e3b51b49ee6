#!/usr/bin/env bash
# netns_facts.sh - what rxe does across network namespaces on the kernel
# the lab guest runs: the "== netns" section of scripts/maintainers/rxe_facts.sh, which
# runs it in each kernel's lab (scripts/lab.sh exec -- scripts/maintainers/netns_facts.sh).
#
# One line per fact, "NAME: VALUE":
#   link-add       rdma link add inside a namespace: ok, or the error
#   udp4791        rxe's UDP 4791 sockets in the initial namespace and in ns_a
#   sum-shared     ./lesson18 across ns_a and ns_b (shared mode): the client's
#                  result line, or its last cm event and error, and the seconds
#   exclusive-busy rdma system set netns exclusive while namespaces exist
#   dev-move       rdma dev set rxe_a netns ns_a (exclusive mode): ok, or the error
#   listed         the devices ./lesson18 --netns ns_a lists (exclusive mode)
#   sum-exclusive  ./lesson18 across the namespaces with both devices moved
# Runs only where LAB=1 (lessons/18_netns/netns_pair.sh makes the namespaces); leaves
# the guest as it found it: no namespaces, netns mode shared.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
[[ ${LAB:-} == 1 ]] || {
  echo "netns_facts.sh: runs only in the lab guest (scripts/maintainers/rxe_facts.sh runs it there)" >&2
  exit 2
}
trap 'lessons/18_netns/netns_pair.sh down; rdma system set netns shared' EXIT

# sum PORT: lesson 18's server in ns_a, its client in ns_b; one line.
sum() {
  local port=$1 start line ms
  ./lesson18 --netns ns_a -p "$port" --timeout 15 >/tmp/netns-server.out 2>&1 &
  for _ in $(seq 100); do
    grep -q "listening on" /tmp/netns-server.out && break
    sleep 0.1
  done
  start=${EPOCHREALTIME/./}
  ./lesson18 --netns ns_b -p "$port" --timeout 15 198.51.100.1 2 3 >/tmp/netns-client.out 2>&1
  line=$(grep -E '^(result: |lesson18: [^c])' /tmp/netns-client.out | head -n 1)
  ms=$(((${EPOCHREALTIME/./} - start) / 1000))
  echo "${line:-$(tail -n 1 /tmp/netns-client.out)} (after $((ms / 1000)).$((ms % 1000 / 100)) s)"
  kill %1 2>/dev/null
  wait
}

lessons/18_netns/netns_pair.sh down
lessons/18_netns/netns_pair.sh up >/dev/null 2>/tmp/netns-up.err &&
  echo "link-add: ok" || echo "link-add: $(tail -n 1 /tmp/netns-up.err)"
echo "udp4791: initial $(ss -Huln 'sport = :4791' | wc -l), ns_a $(ip netns exec ns_a ss -Huln 'sport = :4791' | wc -l)"
echo "sum-shared: $(sum 18700)"
echo "exclusive-busy: $(rdma system set netns exclusive 2>&1 || true)"
lessons/18_netns/netns_pair.sh down
rdma system set netns exclusive
lessons/18_netns/netns_pair.sh up >/dev/null 2>&1
echo "dev-move: $(rdma dev set rxe_a netns ns_a 2>&1 && rdma dev set rxe_b netns ns_b 2>&1 && echo ok)"
echo "listed: $(./lesson18 --netns ns_a --timeout 1 2>&1 | sed -n 's/^device \([^:]*\):.*/\1/p' | paste -sd' ')"
echo "sum-exclusive: $(sum 18702)"
