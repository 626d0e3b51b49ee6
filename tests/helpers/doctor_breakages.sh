#!/usr/bin/env bash
# doctor_breakages.sh: inside a lab guest of its own, run scripts/doctor.sh
# on the healthy guest, then break one thing at a time for real, run the
# doctor again, and put it back. tests/doctor_lab.bats boots the guest and
# asserts on the sections:
#   #@ begin NAME
#   ...the doctor's output...
#   #@ end NAME STATUS
#
# Usage (from the checkout's top, as root in a lab guest):
#   tests/helpers/doctor_breakages.sh [KERNEL_ROOT]
# KERNEL_ROOT: the lab's unpacked kernel package (its lib/modules has the
# netfilter modules the guest's initramfs lacks); without it, or without
# nft on PATH, the firewall section says why it was skipped.
set -uo pipefail

DOCTOR=scripts/doctor.sh
NETDEV=dummy0
ADDR=192.0.2.1/24
kroot=${1:-}

[[ ${LAB:-} == 1 ]] || {
  echo "doctor_breakages.sh: this breaks the machine's RDMA set-up on purpose: run it in a lab guest" >&2
  exit 2
}

# section NAME CMD...: CMD's output (stderr too), framed, with its status.
section() {
  local name=$1 status
  shift
  echo "#@ begin $name"
  "$@" 2>&1
  status=$?
  echo "#@ end $name $status"
}

# wait_active: up to 10 s for rxe0's port to be ACTIVE again.
wait_active() {
  local i s
  for ((i = 0; i < 50; i++)); do
    s=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)
    [[ $s == *ACTIVE ]] && return 0
    sleep 0.2
  done
  echo "doctor_breakages.sh: rxe0 is not ACTIVE again" >&2
  return 1
}

section healthy "$DOCTOR"

# A real rdma_cm connection to lesson 9's server, and a real transfer to
# rping's, on this guest's own address.
peer_ok() {
  ./lesson9 --timeout 60 >/dev/null 2>&1 &
  local server=$!
  timeout 60 rping -s -S 8192 -C 1 >/dev/null 2>&1 &
  local rping=$!
  sleep 1
  "$DOCTOR" --peer 192.0.2.1
  local status=$?
  kill "$server" "$rping" 2>/dev/null
  wait "$server" "$rping" 2>/dev/null
  return "$status"
}
section peer_ok peer_ok

# 1. The locked-memory limit of a container, for a user without CAP_IPC_LOCK
#    (root's CAP_IPC_LOCK bypasses it: setpriv drops it from the bounding set).
memlock() {
  ulimit -l 64 && setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock "$DOCTOR"
}
section memlock bash -c "$(declare -f memlock); DOCTOR=$DOCTOR memlock"

# 2. A netdev with no address.
ip addr flush dev "$NETDEV"
sleep 0.5
section no_address "$DOCTOR"
ip addr add "$ADDR" dev "$NETDEV"
sleep 0.5

# 3. The device deleted.
rdma link delete rxe0
section deleted "$DOCTOR"
scripts/setup_rxe.sh up "$NETDEV" >/dev/null 2>&1
wait_active

# 4. The provider hidden: an empty folder over libibverbs's provider
#    libraries, in a mount namespace of the doctor's own (the guest's other
#    processes keep them).
providers=$(compgen -G '/usr/lib/*-linux-gnu/libibverbs' | head -1)
section no_provider unshare -m bash -c "mount -t tmpfs none '$providers' && exec $DOCTOR"
# IBV_CONFIG_DIR pointing at an empty folder: rdma-core 44's libibverbs
# reads no such variable, so this hides nothing (the doctor stays OK).
mkdir -p /tmp/empty-ibv-config
section empty_config_dir env IBV_CONFIG_DIR=/tmp/empty-ibv-config "$DOCTOR"

# 5. The port down.
ip link set "$NETDEV" down
sleep 0.5
section port_down "$DOCTOR"
ip link set "$NETDEV" up
wait_active

# 6. A firewall rule dropping RoCE v2.
firewall() {
  command -v nft >/dev/null || {
    echo "skipped: no nft on PATH (apt install nftables)"
    return 0
  }
  [[ -n $kroot ]] && modprobe -d "$kroot" nf_tables 2>&1
  if ! {
    nft add table inet wb_doctor_test &&
      nft add chain inet wb_doctor_test input '{ type filter hook input priority 0; }' &&
      nft add rule inet wb_doctor_test input udp dport 4791 drop
  }; then
    echo "skipped: nft could not add a rule (this kernel's nf_tables?)"
    return 0
  fi
  "$DOCTOR"
  local status=$?
  nft delete table inet wb_doctor_test
  return "$status"
}
section firewall firewall

# 7. rdma_cm pointed at loopback.
section loopback "$DOCTOR" --peer 127.0.0.1

section restored "$DOCTOR"
