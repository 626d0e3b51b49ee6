#!/usr/bin/env bash
# setup_rxe.sh - set up Soft-RoCE (the kernel's rdma_rxe driver) for the lessons.
#
# rxe runs RoCE v2 (InfiniBand transport over UDP port 4791) on top of any
# Ethernet-type network interface, entirely in the kernel. This script loads
# the module, attaches an rxe device to an interface, waits until its port is
# ACTIVE and prints what the lessons need: device name and RoCE v2 GID index.
#
# Usage: scripts/setup_rxe.sh up [NETDEV] | down [RXEDEV] | status | --help
# Read more: docs/soft-roce.md. Hosts without rdma_rxe: docs/lab.md.
#
# Tools are called by name (modprobe, rdma, ip, flock), never by path, so
# that tests/setup_rxe.bats can replace them with stubs. Each program started
# costs 0.1-0.25 s in the lab's emulated guest, on every boot, so whatever
# sysfs, /proc or bash itself can answer is read without one.
set -euo pipefail

PROG=setup_rxe
SYSFS_ROOT=${SYSFS_ROOT:-/sys} # tests point these two at fake trees
PROC_ROOT=${PROC_ROOT:-/proc}
SETUP_RXE_EUID=${SETUP_RXE_EUID:-$EUID}             # tests play root or a user with it
IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-/etc/libibverbs.d} # where ibverbs-providers puts rxe.driver
RXE_WAIT_SECS=${RXE_WAIT_SECS:-10}                  # how long `up` waits for PORT_ACTIVE
PORT=1                                              # an rxe device has exactly one port
MEMLOCK_MIN_KB=65536                                # 64 MiB: below this, ibv_reg_mr soon fails
ARPHRD_ETHER=1                                      # /sys/class/net/X/type of Ethernet-type netdevs
IFF_UP=1                                            # bit 0 of /sys/class/net/X/flags

usage() {
  cat <<EOF
Usage: scripts/setup_rxe.sh COMMAND [ARG]

Set up Soft-RoCE (rdma_rxe): RoCE v2 over an Ethernet-type network interface.

Commands:
  up [NETDEV]     load rdma_rxe, add an rxe device on NETDEV (named rxe0, or the
                  next free rxeN), wait up to ${RXE_WAIT_SECS} s for the port to be ACTIVE,
                  and print device, netdev, ipv4, state, active_mtu, gid_index, gid.
                  Default NETDEV: the first interface (by ifindex) that is up,
                  Ethernet-type and has an IPv4 address. If NETDEV already has an
                  rxe device, that one is reported and nothing is added.
  down [RXEDEV]   delete RXEDEV (default: every rxe device). Nothing to delete is fine.
  status          list rxe devices: netdev, port state, active_mtu, GIDs and types.
  -h, --help      show this help and exit.

Environment (defaults):
  RXE_WAIT_SECS=${RXE_WAIT_SECS}   seconds \`up\` waits for PORT_ACTIVE
  SYSFS_ROOT=${SYSFS_ROOT}        where sysfs is mounted
  IBV_CONFIG_DIR=${IBV_CONFIG_DIR}  where rxe.driver (ibverbs-providers) lives

up and down need root. Exit status: 0 done, 1 error, 2 misuse.
EOF
}

say() { printf '%s\n' "$*"; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
note() { printf '%s: note: %s\n' "$PROG" "$*" >&2; }
die() {
  printf '%s: error: %s\n' "$PROG" "$1" >&2
  shift
  local l
  for l in "$@"; do printf '  %s\n' "$l" >&2; done
  exit 1
}
misuse() {
  printf '%s: %s (see --help)\n' "$PROG" "$*" >&2
  exit 2
}

# --- small sysfs readers (builtins only: no process per file) ---------------
# rd FILE VAR: FILE's first line into VAR; false if FILE cannot be read.
rd() {
  printf -v "$2" '%s' ''
  { read -r "$2" <"$1"; } 2>/dev/null || [[ -n ${!2} ]]
}
valid_name() { [[ $1 =~ ^[A-Za-z0-9_.:@-]+$ && $1 != . && $1 != .. ]]; }

# An rxe device has a sysfs attribute "parent" holding its netdev's name;
# other RDMA drivers (mlx5, siw, ...) have none. This works without the rdma
# tool and on old kernels alike. Prints "DEV NETDEV" lines.
rxe_devices() {
  local p nd
  for p in "$SYSFS_ROOT"/class/infiniband/*/parent; do
    rd "$p" nd || continue
    p=${p%/parent}
    printf '%s %s\n' "${p##*/}" "$nd"
  done
}
rxe_on() {
  local d n
  while read -r d n; do [[ $n == "$1" ]] && say "$d"; done < <(rxe_devices)
  return 0
}
port_state() {
  local s
  rd "$SYSFS_ROOT/class/infiniband/$1/ports/$PORT/state" s || s="?: UNKNOWN"
  say "${s#*: }"
}

ipv4_of() { # first IPv4 address of a netdev, empty if it has none
  local out
  out=$(ip -o -4 addr show dev "$1" 2>/dev/null) || true
  [[ $out =~ inet\ ([0-9.]+)/ ]] && say "${BASH_REMATCH[1]}"
  return 0
}

# The lessons need the GID index whose type is "RoCE v2" and whose value is
# the IPv4-mapped address ::ffff:a.b.c.d of the netdev. It is usually 1
# (0 is the IPv6 link-local one) but that is not guaranteed: search for it.
# Without IPv4, fall back to the first RoCE v2 GID. Prints "INDEX GID".
find_gid() {
  local port want='' a b c d i g t first=''
  port=$SYSFS_ROOT/class/infiniband/$1/ports/$PORT
  if [[ -n $2 ]]; then
    IFS=. read -r a b c d <<<"$2"
    printf -v want '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d"
  fi
  for ((i = 0; ; i++)); do
    [[ -e $port/gids/$i ]] || break
    rd "$port/gid_attrs/types/$i" t || continue # unused entries refuse reads
    [[ $t == "RoCE v2" ]] || continue
    rd "$port/gids/$i" g || continue
    [[ -n $want && $g == "$want" ]] && {
      say "$i $g"
      return 0
    }
    [[ -z $first ]] && first="$i $g"
  done
  [[ -z $want && -n $first ]] && say "$first"
  return 0
}

# active_mtu RXEDEV NETDEV: rxe's own rule, which ibv_devinfo would report
# (sysfs has no active_mtu): NETDEV's MTU minus the largest RoCE v2 header
# (80 bytes), rounded down to an IB MTU (256..4096). 1500 gives 1024;
# 1104 is the least that gives 1024 (tests/setup_rxe_lab.bats checks the
# rule against ibv_devinfo at several MTUs).
active_mtu() {
  local m s
  rd "$SYSFS_ROOT/class/net/$2/mtu" m || {
    say unknown
    return
  }
  for s in 4096 2048 1024 512 256; do ((m - 80 >= s)) && break; done
  say "$s"
}

# Can the installed rdma tool add links? iproute2 < 5.1 only knows "show".
rdma_has_link_add() {
  local help
  command -v rdma >/dev/null || return 1
  help=$(rdma link help 2>&1) || true
  [[ $help == *"link add"* ]]
}

need_root() { ((SETUP_RXE_EUID == 0)) || die "$1 needs root: run it with sudo." "sudo scripts/setup_rxe.sh $1"; }

warn_environment() { # non-fatal checks
  # The locked-memory limit `ulimit -l` shows, read from /proc (in bytes).
  local line lim=unlimited
  while read -r line; do
    [[ $line == "Max locked memory"* ]] && read -r _ _ _ lim _ <<<"$line"
  done 2>/dev/null <"$PROC_ROOT/self/limits"
  [[ $lim == unlimited ]] || lim=$((lim / 1024))
  if [[ $lim != unlimited ]] && ((lim < MEMLOCK_MIN_KB)); then
    warn "locked-memory limit is ${lim} KiB (ulimit -l); ibv_reg_mr fails with ENOMEM beyond it." \
      "Raise it (limits.conf, or docker run --ulimit memlock=-1) to at least $((MEMLOCK_MIN_KB / 1024)) MiB."
  fi
  [[ -e $IBV_CONFIG_DIR/rxe.driver ]] ||
    warn "no $IBV_CONFIG_DIR/rxe.driver: the rxe user-space provider (librxe) is missing, so ibv_devices will list nothing. Install it: apt install ibverbs-providers"
}

load_module() {
  if [[ -d $SYSFS_ROOT/module/rdma_rxe ]]; then
    say "rdma_rxe is already loaded."
    return
  fi
  local msg
  if msg=$(modprobe rdma_rxe 2>&1); then
    say "Loaded rdma_rxe."
    return
  fi
  if [[ $msg == *"not found"* ]]; then
    die "this kernel ($(uname -r)) has no rdma_rxe module." \
      "modprobe said: $msg" \
      "Debian: apt install linux-image-amd64 (the generic kernel; -cloud kernels lack rdma_rxe), reboot into it." \
      "Ubuntu: apt install linux-modules-extra-\$(uname -r)" \
      "WSL2 and containers usually cannot load kernel modules at all." \
      "No such kernel at hand? Use the lab: scripts/lab.sh shell, or scripts/lab.sh run -- CMD (docs/lab.md)."
  fi
  die "could not load rdma_rxe: $msg"
}

check_netdev() { # refuse anything rxe cannot use, before changing anything
  local nd=$1 t f
  if ! valid_name "$nd" || [[ ! -e $SYSFS_ROOT/class/net/$nd ]]; then die "no network interface named '$nd' (list them: ip -br link)."; fi
  rd "$SYSFS_ROOT/class/net/$nd/type" t || t=unknown
  if [[ $t != "$ARPHRD_ETHER" ]]; then
    [[ $t == 772 ]] && t="772, loopback" # ARPHRD_LOOPBACK
    die "$nd is not Ethernet-type (ARPHRD type $t); rxe needs an Ethernet-type netdev." \
      "For a local playground create a dummy one:" \
      "ip link add dummy0 type dummy && ip addr add 192.0.2.10/24 dev dummy0 && ip link set dummy0 up"
  fi
  rd "$SYSFS_ROOT/class/net/$nd/flags" f || f=0
  (((f & IFF_UP) != 0)) || die "$nd is down; rxe's port only becomes ACTIVE on an up interface." "ip link set $nd up"
}

pick_netdev() { # sets PICKED: first up, Ethernet-type interface with IPv4, by ifindex
  local p n i t f byidx=()
  for p in "$SYSFS_ROOT"/class/net/*; do
    rd "$p/ifindex" i && byidx[i]=${p##*/}
  done
  for n in "${byidx[@]}"; do
    rd "$SYSFS_ROOT/class/net/$n/type" t || continue
    [[ $t == "$ARPHRD_ETHER" ]] || continue
    rd "$SYSFS_ROOT/class/net/$n/flags" f || f=0
    ((f & IFF_UP)) || continue
    i=$(ipv4_of "$n")
    [[ -n $i ]] || continue
    say "No NETDEV given: picked $n, the first interface (by ifindex) that is up, Ethernet-type and has an IPv4 address ($i)."
    # A real NIC (sysfs links its device) is likely this host's uplink, or
    # its Wi-Fi: rxe on it puts RoCE frames on that network and answers
    # RoCE from it.
    if [[ -e $SYSFS_ROOT/class/net/$n/device ]]; then
      local what="a hardware NIC"
      [[ ! -e $SYSFS_ROOT/class/net/$n/wireless ]] || what="a Wi-Fi NIC"
      warn "$n is $what, likely this host's link to its network: RoCE v2 (UDP 4791) will run on that network." \
        "For a playground of your own, name a dummy netdev instead:" \
        "ip link add dummy0 type dummy && ip addr add 192.0.2.10/24 dev dummy0 && ip link set dummy0 up && $PROG up dummy0"
    fi
    PICKED=$n
    return
  done
  die "no NETDEV given and no interface is up, Ethernet-type and has an IPv4 address." \
    "Name one (scripts/setup_rxe.sh up eth0), or create a dummy one:" \
    "ip link add dummy0 type dummy && ip addr add 192.0.2.10/24 dev dummy0 && ip link set dummy0 up"
}

add_rxe() { # add an rxe device on $1, by rdma link add, else the old sysfs knob
  local nd=$1 n=0 out status=0
  while [[ -e $SYSFS_ROOT/class/infiniband/rxe$n ]]; do n=$((n + 1)); done
  # Tried first, without asking `rdma link help` (one program less): an
  # rdma too old for it (iproute2 < 5.1) says "Unknown link command".
  out=$(rdma link add "rxe$n" type rxe netdev "$nd" 2>&1) || status=$?
  if [[ $out != *"Unknown link command"* ]] && ((status != 127)); then
    ((status == 0)) || die "rdma link add rxe$n type rxe netdev $nd failed: $out"
    say "Added rxe$n on $nd (rdma link add rxe$n type rxe netdev $nd)."
  elif [[ -e $SYSFS_ROOT/module/rdma_rxe/parameters/add ]]; then
    printf '%s\n' "$nd" >"$SYSFS_ROOT/module/rdma_rxe/parameters/add" || die "writing $nd to /sys/module/rdma_rxe/parameters/add failed."
    say "Added an rxe device on $nd (old kernel: via /sys/module/rdma_rxe/parameters/add)."
  else
    die "the rdma tool is missing or too old to add links (no 'rdma link add')." "Install iproute2 >= 5.1 (Debian/Ubuntu: apt install iproute2)."
  fi
}

cmd_up() {
  local nd=${1:-} dev ip4 gid state i
  need_root up
  [[ -n $nd ]] || {
    pick_netdev
    nd=$PICKED
  }
  check_netdev "$nd"
  warn_environment
  load_module
  # Choosing the name and adding the device is one step: two `up`s at once
  # would both choose rxe0. Lock the infiniband class folder (ib_core, which
  # rdma_rxe needs, made it); flock lets go if we die.
  exec 9<"$SYSFS_ROOT/class/infiniband" || die "no $SYSFS_ROOT/class/infiniband although rdma_rxe is loaded."
  flock 9
  dev=$(rxe_on "$nd")
  if [[ -n $dev ]]; then
    say "$nd already has rxe device $dev; not adding another."
  else
    add_rxe "$nd"
  fi
  exec 9<&-
  ip4=$(ipv4_of "$nd")
  [[ -n $ip4 ]] || warn "$nd has no IPv4 address, so there is no IPv4-mapped GID; add one: ip addr add 192.0.2.10/24 dev $nd"
  # Wait (bounded) for the port to be ACTIVE and the RoCE v2 GID to appear.
  for ((i = 0; i <= RXE_WAIT_SECS * 5; i++)); do
    dev=$(rxe_on "$nd")
    state=
    gid=
    if [[ -n $dev ]]; then
      state=$(port_state "$dev")
      gid=$(find_gid "$dev" "$ip4")
    fi
    [[ $state == ACTIVE && -n $gid ]] && break
    sleep 0.2
  done
  [[ -n $dev ]] || die "no rxe device appeared on $nd within ${RXE_WAIT_SECS} s."
  [[ $state == ACTIVE ]] || die "$dev port $PORT is ${state:-?}, not ACTIVE, after ${RXE_WAIT_SECS} s; is $nd up with a carrier?" \
    "$dev was left in place; remove it with: scripts/setup_rxe.sh down $dev"
  [[ -n $gid ]] || die "$dev has no RoCE v2 GID for ${ip4:-$nd} after ${RXE_WAIT_SECS} s (see: scripts/setup_rxe.sh status)."
  say "device: $dev"
  say "netdev: $nd"
  say "ipv4: ${ip4:-none}"
  say "state: $state"
  say "active_mtu: $(active_mtu "$dev" "$nd")"
  say "gid_index: ${gid%% *}"
  say "gid: ${gid#* }"
  say "Use it as: -d $dev -g ${gid%% *}   (for example: ibv_rc_pingpong -d $dev -g ${gid%% *})"
  note "two processes on this host talk through rxe's internal loopback and never put packets on the wire; to capture RoCE traffic use two hosts or guests (docs/wireshark.md)."
}

cmd_down() {
  local want=${1:-} d n removed=0 out
  need_root down
  if [[ -n $want ]]; then
    valid_name "$want" || die "'$want' is not a valid device name."
    if [[ ! -e $SYSFS_ROOT/class/infiniband/$want ]]; then
      say "No RDMA device named $want; nothing to remove."
      return
    fi
    [[ -e $SYSFS_ROOT/class/infiniband/$want/parent ]] || die "$want is not an rxe device; not removing it."
  fi
  [[ -n $(rxe_devices) ]] || {
    say "No rxe devices; nothing to remove."
    return
  }
  while read -r d n; do
    [[ -z $want || $d == "$want" ]] || continue
    if rdma_has_link_add; then
      out=$(rdma link delete "$d" 2>&1) || die "rdma link delete $d failed: $out"
    elif [[ -e $SYSFS_ROOT/module/rdma_rxe/parameters/remove ]]; then
      printf '%s\n' "$d" >"$SYSFS_ROOT/module/rdma_rxe/parameters/remove"
    else
      die "the rdma tool is missing or too old to delete links (no 'rdma link delete')." "Install iproute2 >= 5.1 (Debian/Ubuntu: apt install iproute2)."
    fi
    say "Removed $d (was on $n)."
    removed=$((removed + 1))
  done < <(rxe_devices)
  ((removed > 0)) || say "Nothing removed."
}

cmd_status() {
  local d n port i g t ip4 found=0
  while read -r d n; do
    found=1
    port=$SYSFS_ROOT/class/infiniband/$d/ports/$PORT
    say "$d: netdev $n, port $PORT $(port_state "$d"), active_mtu $(active_mtu "$d" "$n")"
    ip4=$(ipv4_of "$n")
    for ((i = 0; ; i++)); do
      [[ -e $port/gids/$i ]] || break
      rd "$port/gid_attrs/types/$i" t || continue
      rd "$port/gids/$i" g || continue
      say "  gid $i: $g ($t)"
    done
    g=$(find_gid "$d" "$ip4")
    [[ -z $g ]] || say "  use: -d $d -g ${g%% *}"
  done < <(rxe_devices)
  ((found)) && return
  say "no rxe devices"
  [[ -d $SYSFS_ROOT/module/rdma_rxe ]] || say "rdma_rxe is not loaded; set it up with: sudo scripts/setup_rxe.sh up [NETDEV]"
}

# --- argument parsing ----------------------------------------------------------
case ${1:-} in
  -h | --help)
    usage
    exit 0
    ;;
  "") misuse "missing command: up, down or status" ;;
  -*) misuse "unknown option: $1" ;;
  up | down | status)
    cmd=$1
    shift
    ;;
  *) misuse "unknown command: $1" ;;
esac
for a in "$@"; do
  case $a in
    -h | --help)
      usage
      exit 0
      ;;
    -*) misuse "unknown option: $a" ;;
  esac
done
max=1
[[ $cmd == status ]] && max=0
(($# <= max)) || misuse "too many arguments for $cmd: $*"
"cmd_$cmd" "$@"
