#!/usr/bin/env bash
# rxe_facts.sh - measure, on each kernel the lab boots, the rxe behaviours
# the lessons show or depend on, and write docs/rxe.md from what was seen.
#
#   scripts/maintainers/rxe_facts.sh [KERNEL...]     default: bookworm trixie trixie-backports
#
# For each kernel it brings up a lab of its own (LAB_KERNEL=KERNEL, a
# private LAB_UP_DIR: a lab you have up is not touched), runs there
#   ./lesson15_probe                           the capability matrix
#   build/maintainers/rxe_facts retry7               a SEND with retry_cnt 7 to nobody
#   build/maintainers/rxe_facts rnr --retry-cnt 6    an RNR wait (rnr_retry 7, retry_cnt 6)
#   build/maintainers/rxe_facts window               READ and WRITE across a window's end; SEND_WITH_INV's flags
#   build/maintainers/rxe_facts srq-limit            the SRQ limit event against its completion
#   build/maintainers/rxe_facts mcast-attach         a group joined with ibv_attach_mcast alone
#   ./lesson10, ./lesson10_nak (both sides)    each scenario's async events, both sides
#   ./lesson11 (server and client, taskset)    send latency, busy polling and --events
#   scripts/maintainers/netns_facts.sh                     lesson 18 across two network namespaces
# keeps each kernel's raw output in build/rxe-facts/KERNEL.txt and writes
# docs/rxe.md from all of them (a kernel not measured this time keeps the
# raw output it had). The lab has two vCPUs (lesson 11's numbers need
# them). Takes about 4 minutes per kernel under TCG.
set -euo pipefail
cd "$(dirname "$0")/../.."

kernels=("$@")
[[ ${#kernels[@]} -gt 0 ]] || kernels=(bookworm trixie trixie-backports)
out=build/rxe-facts
mkdir -p "$out"
make -s lesson10 lesson10_nak lesson11 lesson15_probe lesson18 build/maintainers/rxe_facts

# In the guest: every scenario of lesson 10's two programs (./lesson10 for
# the QP settings, ./lesson10_nak for the responder's NAKs), server and
# client on one host, the lines where each side reports its async events
# (or none), and the client's result line.
# shellcheck disable=SC2016 # expanded by the guest's bash
lesson10_events='port=18600 d=$(mktemp -d)
for p in lesson10 lesson10_nak; do
  for s in $(./$p --list | cut -d" " -f1); do
    port=$((port + 1))
    ./$p -p $port --timeout 20 >"$d/server.out" 2>&1 &
    for i in $(seq 50); do grep -q "waiting for a client" "$d/server.out" && break; sleep 0.1; done
    ./$p -p $port --timeout 20 127.0.0.1 "$s" >"$d/client.out" 2>&1
    wait
    echo "$s: $(grep -hE "^(client|server): (no )?async event" "$d/client.out" "$d/server.out" | paste -sd";" | sed "s/;/; /g")"
    echo "$s: $(grep "^result:" "$d/client.out" | tail -n 1)"
  done
done'
# Lesson 11's send latency, 1000 round trips: busy polling with a vCPU per
# side, then on completion events with both sides on vCPU 0 (as make bench).
# shellcheck disable=SC2016 # expanded by the guest's bash
lesson11_numbers='port=18620 d=$(mktemp -d)
for mode in busy events; do
  port=$((port + 1)); opts=(-n 1000 -p $port --timeout 30); cpus=(0 1)
  [[ $mode == events ]] && opts+=(--events) && cpus=(0 0)
  taskset -c ${cpus[0]} ./lesson11 "${opts[@]}" >"$d/server.out" 2>&1 &
  for i in $(seq 50); do grep -q "waiting for a client" "$d/server.out" && break; sleep 0.1; done
  echo "$mode: $(taskset -c ${cpus[1]} ./lesson11 "${opts[@]}" 127.0.0.1 2>&1 | grep -E "^(result|lesson11):" | paste -sd" ")"
  wait
done'

lab_dir=$(mktemp -d /tmp/rxe-facts.XXXXXX)
trap 'LAB_UP_DIR=$lab_dir/lab scripts/lab.sh down >/dev/null 2>&1 || true; rm -rf "$lab_dir"' EXIT
for kernel in "${kernels[@]}"; do
  echo "rxe_facts: $kernel" >&2
  export LAB_KERNEL=$kernel LAB_UP_DIR=$lab_dir/lab
  scripts/lab.sh up
  {
    echo "== kernel"
    scripts/lab.sh exec -- uname -r
    echo "== probe"
    scripts/lab.sh exec -- ./lesson15_probe || true
    echo "== retry7"
    scripts/lab.sh exec -- build/maintainers/rxe_facts retry7 --wait 15 || true
    echo "== rnr"
    scripts/lab.sh exec -- build/maintainers/rxe_facts rnr --retry-cnt 6 --rnr-retry 7 --wait 8 || true
    echo "== window"
    scripts/lab.sh exec -- build/maintainers/rxe_facts window || true
    echo "== srq-limit"
    scripts/lab.sh exec -- build/maintainers/rxe_facts srq-limit || true
    echo "== mcast-attach"
    scripts/lab.sh exec -- build/maintainers/rxe_facts mcast-attach || true
    echo "== lesson10"
    scripts/lab.sh exec --timeout 300 -- bash -c "$lesson10_events" || true
    echo "== lesson11"
    echo "host load (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
    scripts/lab.sh exec --timeout 300 -- bash -c "$lesson11_numbers" || true
    echo "== netns"
    scripts/lab.sh exec --timeout 300 -- scripts/maintainers/netns_facts.sh || true
  } >"$out/$kernel.txt.tmp" 2>&1
  mv "$out/$kernel.txt.tmp" "$out/$kernel.txt"
  scripts/lab.sh down
done
unset LAB_KERNEL LAB_UP_DIR
/usr/bin/python3 -I scripts/maintainers/rxe_facts_doc.py "$out" >docs/rxe.md
echo "rxe_facts: wrote docs/rxe.md" >&2
