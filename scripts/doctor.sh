#!/usr/bin/env bash
# doctor.sh: `make doctor`, the workbook diagnoses this machine.
#
# Checks what the lessons need, one line per check:
#   STATUS  CHECK     what it looked at: what it found[; cause: ...; fix: COMMAND]
# STATUS is OK, WARN, FAIL or SKIP (the check had nothing to look at). Each
# WARN and FAIL says the cause in plain words and the command that fixes it
# ("needs root" where it does). The last line is the summary.
#
# Usage:
#   scripts/doctor.sh [--device DEV] [--peer HOST]
#   scripts/doctor.sh -h
#
#   --device DEV  look only at RDMA device DEV (default: every device)
#   --peer HOST   also check the way to HOST, an IP address of a second host
#                 (or this one): the route to it leaves through an RDMA
#                 netdev (not loopback), a real rdma_cm connect to
#                 ./lesson9's server there, and a real 8 KiB transfer to
#                 rping's (start `./lesson9` and `rping -s -S 8192 -C 1`
#                 on HOST first)
#
# Checks, in the order they run:
#   packages  dpkg: the Debian packages the lessons need (scripts/install_deps.sh)
#   memlock   /proc/self/limits and CAP_IPC_LOCK: room for ibv_reg_mr
#   lab       qemu-system-x86_64, static busybox, cpio: what scripts/lab.sh needs
#   accel     /dev/kvm and the lab's cached verdict: KVM or TCG
#   kernel    /sys/class/infiniband, /sys/module, modinfo rdma_rxe: RDMA in this kernel
#   devices   rdma link show: the RDMA devices, their ports and netdevs
#   uverbs    /dev/infiniband/uverbs*: the device files libibverbs opens
#   rdma_cm   /dev/infiniband/rdma_cm: what librdmacm opens (module rdma_ucm)
#   netns     rdma system show, /proc/self/ns/net: the network namespace
#   fork      rdma system show: does the kernel copy registered pages on fork()
#   firewall  nft list ruleset or iptables-save: UDP 4791 (RoCE v2), TCP 18515
#   and for each device and port:
#   verbs     ibv_devinfo -l: libibverbs itself sees the device (its provider)
#   port      rdma link show: the port is ACTIVE
#   netdev    /sys/class/net, ip addr: the netdev under the port is up, has an IP
#   gid       ibv_devinfo -v: the GID table has the IPv4-mapped RoCE v2 entry
#   mtu       /sys/class/net/NETDEV/mtu against ibv_devinfo's active_mtu
#   caps      ibv_devinfo -v: max_qp_wr, max_sge, max_cqe against the lessons' needs
#   and with --peer HOST:
#   route     ip route get HOST: HOST is reached through an RDMA netdev
#   connect   ./lesson9 HOST 1 2: a real rdma_cm connection to lesson 9's server
#   transfer  rping -c -a HOST -S 8192: a real 8 KiB RDMA transfer to rping's
#             server there (rping -s -S 8192 -C 1): the two hosts' MTUs agree
#
# It only reads: sysfs, /proc, /dev, `rdma` (iproute2), libibverbs (through
# ibv_devinfo), dpkg-query, modinfo, nft/iptables listings. It changes nothing.
# Without RDMA in this kernel it says so, points to the lab (make tour,
# scripts/lab.sh shell), and still checks packages, memlock and the lab.
#
# Environment (tests point these at fakes): SYSFS_ROOT=/sys PROC_ROOT=/proc
# DEV_ROOT=/dev IBV_CONFIG_DIR=/etc/libibverbs.d IBV_PROVIDER_DIR (where the
# provider libraries are) LAB_CACHE (the lab's cache).
#
# Exit status: 0 nothing failed (WARN is not a failure), 1 a check failed,
# 2 misuse.

# The parts, sourced below from scripts/doctor/:
#   report.sh  the report line and the summary
#   host.sh    packages, memlock, lab, accel, kernel
#   device.sh  devices, uverbs, rdma_cm, verbs, port, netdev, gid, mtu, caps
#   net.sh     netns, fork, firewall, route, connect
# Each check is one function, check_NAME, that takes what it looks at as
# arguments and prints its report line; nothing is passed in globals.

set -uo pipefail

SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SELF_DIR
CHECKOUT=$(cd "$SELF_DIR/.." && pwd)
# shellcheck disable=SC2034 # used by the parts
readonly CHECKOUT
SYSFS_ROOT=${SYSFS_ROOT:-/sys}
PROC_ROOT=${PROC_ROOT:-/proc}
DEV_ROOT=${DEV_ROOT:-/dev}
LAB_CACHE=${LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/lab}
readonly SYSFS_ROOT PROC_ROOT DEV_ROOT LAB_CACHE

usage() {
  sed -n '2,/^$/s/^# \{0,1\}//p' "$SELF_DIR/doctor.sh"
}

misuse() {
  echo "doctor.sh: $*; see scripts/doctor.sh -h" >&2
  exit 2
}

for part in report host device net; do
  # shellcheck source=/dev/null
  source "$SELF_DIR/doctor/$part.sh"
done

# The checks that look at a device, skipped when there is none.
readonly DEVICE_CHECKS="verbs port netdev gid mtu caps"

# run_checks DEVICE PEER: every check, one report line each.
run_checks() {
  local device=$1 peer=$2 links link dev port netdev state phys
  check_packages
  check_memlock "$PROC_ROOT/self/limits" "$PROC_ROOT/self/status"
  check_lab
  check_accel
  if ! check_kernel; then
    skip_checks "devices uverbs rdma_cm netns fork firewall $DEVICE_CHECKS" "this kernel has no RDMA"
    [[ -z $peer ]] || skip_checks "route connect" "this kernel has no RDMA"
    return 0
  fi
  links=$(rdma_links "$device")
  check_devices "$device" "$links"
  check_uverbs "$links"
  check_rdma_cm "$links"
  check_netns
  check_fork
  check_firewall
  if [[ -z $links ]]; then
    skip_checks "$DEVICE_CHECKS" "no RDMA device to look at"
  fi
  while read -r link netdev state phys; do
    [[ -n $link ]] || continue
    dev=${link%/*} port=${link#*/}
    local info
    if check_verbs "$dev"; then
      info=$(ibv_devinfo -v -d "$dev" -i "$port" 2>&1)
    else
      info=
    fi
    check_port "$dev" "$port" "$netdev" "$state" "$phys"
    check_netdev "$netdev"
    if [[ -n $info ]]; then
      check_gid "$dev" "$port" "$netdev" "$info"
      check_mtu "$dev" "$port" "$netdev" "$info"
      check_caps "$dev" "$info"
    else
      skip_checks "gid mtu caps" "libibverbs cannot open $dev (see verbs)"
    fi
  done <<<"$links"
  if [[ -n $peer ]]; then
    if check_route "$peer" "$links"; then
      check_connect "$peer"
      check_transfer "$peer" "$links"
    else
      skip_checks "connect transfer" "the route to $peer failed (see route), so nothing was sent"
    fi
  fi
}

main() {
  local device='' peer=''
  while (($#)); do
    case $1 in
      -h | --help)
        usage
        return 0
        ;;
      --device)
        (($# >= 2)) || misuse "--device needs a device name"
        [[ $2 =~ ^[A-Za-z0-9_.-]+$ ]] || misuse "'$2' is not a device name"
        device=$2
        shift 2
        ;;
      --peer)
        (($# >= 2)) || misuse "--peer needs an IP address"
        is_ip_address "$2" || misuse "--peer needs an IP address (rdma_cm takes no names), not '$2'"
        peer=$2
        shift 2
        ;;
      *) misuse "unknown argument '$1'" ;;
    esac
  done
  echo "doctor: checking $(uname -n) (Linux $(uname -r), $(uname -m))${LAB:+, a lab guest}"
  run_checks "$device" "$peer" | tally
}

main "$@"
