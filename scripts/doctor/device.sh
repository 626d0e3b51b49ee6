# shellcheck shell=bash
# device.sh: the checks of the RDMA devices: devices, uverbs, rdma_cm, and
# for each port verbs, port, netdev, gid, mtu, caps.

readonly ROCE_HEADERS=80 # bytes a RoCE v2 packet adds to its payload, at most (as rxe counts)
readonly NEED_QP_WR=128  # lesson 11's default --depth: WRs in flight
readonly NEED_CQE=256    # lesson 11's CQ: its send and receive queues
readonly IFF_UP=1        # bit 0 of /sys/class/net/NETDEV/flags

# rdma_links DEVICE: "DEV/PORT NETDEV STATE PHYS" for each port `rdma link
# show` lists (NETDEV "-" when it names none), only DEVICE's if given.
rdma_links() {
  local words w i nd state phys
  while read -r -a words; do
    [[ ${words[0]:-} == link ]] || continue
    [[ -z $1 || ${words[1]%/*} == "$1" ]] || continue
    nd=- state='?' phys='?'
    for ((i = 2; i < ${#words[@]} - 1; i++)); do
      w=${words[i + 1]}
      case ${words[i]} in
        netdev) nd=$w ;;
        state) state=$w ;;
        physical_state) phys=$w ;;
      esac
    done
    echo "${words[1]} $nd $state $phys"
  done < <(rdma link show 2>/dev/null)
}

# ib_names: the devices sysfs has, space-separated.
ib_names() {
  local d names=()
  for d in "$SYSFS_ROOT"/class/infiniband/*; do
    [[ -e $d ]] && names+=("${d##*/}")
  done
  echo "${names[*]}"
}

# check_devices DEVICE LINKS
check_devices() {
  local names
  names=$(ib_names)
  if ! command -v rdma >/dev/null; then
    report FAIL devices "rdma: not found (sysfs has: ${names:-nothing})" "the rdma tool comes with iproute2; the workbook's scripts use it" "sudo apt install iproute2"
  elif [[ -n $2 ]]; then
    local summary
    summary=$(while read -r l n s _; do printf '%s on %s (%s), ' "$l" "$n" "$s"; done <<<"$2")
    report OK devices "rdma link show: ${summary%, }"
  elif [[ -n $1 && -n $names ]]; then
    report FAIL devices "rdma link show: no device named $1; the devices here: $names" "--device names a device this host does not have" "scripts/doctor.sh --device ${names%% *}"
  elif [[ -d $SYSFS_ROOT/module/rdma_rxe ]]; then
    report FAIL devices "rdma link show: no RDMA device, although rdma_rxe is loaded" \
      "no rxe device was added, or it was deleted (rdma link delete); every lesson fails with 'no RDMA devices found'" \
      "sudo scripts/setup_rxe.sh up (adds rxe0 on the first Ethernet netdev with an IPv4 address; needs root)"
  elif ! modinfo -F filename rdma_rxe >/dev/null 2>&1; then
    report FAIL devices "rdma link show: no RDMA device; modinfo rdma_rxe: not found" \
      "no RDMA NIC's driver has a device here, and this kernel ($(uname -r)) has no Soft-RoCE module" \
      "make tour (the lessons in the lab: scripts/lab.sh shell), or a kernel with rdma_rxe (docs/soft-roce.md)"
  else
    report FAIL devices "rdma link show: no RDMA device; $SYSFS_ROOT/module/rdma_rxe absent" \
      "no RDMA NIC's driver has a device here, and Soft-RoCE is not set up" \
      "sudo scripts/setup_rxe.sh up (loads rdma_rxe and adds rxe0; needs root)"
  fi
}

# check_uverbs LINKS
check_uverbs() {
  local f files=() bad=()
  if [[ -z $1 ]]; then
    report SKIP uverbs "no RDMA device, so no $DEV_ROOT/infiniband/uverbs* to look at"
    return
  fi
  for f in "$DEV_ROOT"/infiniband/uverbs*; do
    [[ -e $f ]] || continue
    files+=("${f##*/}")
    [[ -r $f && -w $f ]] || bad+=("${f##*/}")
  done
  if ((${#files[@]} == 0)); then
    report FAIL uverbs "$DEV_ROOT/infiniband/uverbs*: none" \
      "ibv_open_device needs them: ib_uverbs is not loaded, or this container was started without the devices" \
      "sudo modprobe ib_uverbs; in a container: docker run --device /dev/infiniband ..."
  elif ((${#bad[@]})); then
    report FAIL uverbs "$DEV_ROOT/infiniband/${bad[*]}: not readable and writable by $(id -un 2>/dev/null || echo you)" \
      "ibv_open_device fails with EACCES" \
      "sudo chmod 666 $DEV_ROOT/infiniband/uverbs* (or a udev rule: rdma-core's 90-rdma-umad.rules, group rdma)"
  else
    report OK uverbs "$DEV_ROOT/infiniband: ${files[*]}, readable and writable"
  fi
}

# rdma_addresses LINKS: the IPv4 addresses on the RDMA netdevs, "ADDR on NETDEV, ...".
rdma_addresses() {
  local _l nd _s _p out=''
  while read -r _l nd _s _p; do
    [[ -n $nd && $nd != - ]] || continue
    local a
    for a in $(ipv4_of "$nd"); do out+="$a on $nd, "; done
  done <<<"$1"
  echo "${out%, }"
}

# ipv4_of NETDEV: its IPv4 addresses, one a line (from ip -o -4 addr).
ipv4_of() {
  local line
  while read -r line; do
    [[ $line =~ inet\ ([0-9.]+)/ ]] && echo "${BASH_REMATCH[1]}"
  done < <(ip -o -4 addr show dev "$1" 2>/dev/null)
}

# check_rdma_cm LINKS
check_rdma_cm() {
  local f=$DEV_ROOT/infiniband/rdma_cm addrs
  if [[ ! -e $f ]]; then
    report FAIL rdma_cm "$f: absent" "librdmacm (lesson 9 on) opens it: rdma_ucm is not loaded, or the container lacks it" "sudo modprobe rdma_ucm; in a container: docker run --device /dev/infiniband ..."
  elif [[ ! -r $f || ! -w $f ]]; then
    report FAIL rdma_cm "$f: not readable and writable by you" "rdma_create_event_channel fails with EACCES" "sudo chmod 666 $f"
  else
    addrs=$(rdma_addresses "$1")
    report OK rdma_cm "$f: present; rdma_cm's addresses here: ${addrs:-none} (never 127.0.0.1: loopback is no RDMA netdev)"
  fi
}

# provider_dir: where libibverbs loads its providers (lib<name>-rdmav<ABI>.so).
provider_dir() {
  local d
  if [[ -n ${IBV_PROVIDER_DIR:-} ]]; then
    echo "$IBV_PROVIDER_DIR"
    return
  fi
  for d in /usr/lib/*-linux-gnu/libibverbs /usr/lib64/libibverbs /usr/lib/libibverbs; do
    [[ -d $d ]] && echo "$d" && return
  done
  echo /usr/lib/libibverbs
}

# check_verbs DEV: libibverbs lists DEV. True if it does.
check_verbs() {
  local out cfg=${IBV_CONFIG_DIR:-/etc/libibverbs.d} pdir drivers libs
  if ! command -v ibv_devinfo >/dev/null; then
    report FAIL verbs "ibv_devinfo: not found" "ibverbs-utils is not installed; the doctor asks libibverbs through it" "sudo apt install ibverbs-utils"
    return 1
  fi
  out=$(ibv_devinfo -l 2>&1)
  if [[ $out =~ (^|$'\n')[[:space:]]+$1($'\n'|$) ]]; then
    report OK verbs "ibv_devinfo -l: libibverbs lists $1 (its user-space provider loads)"
    return 0
  fi
  pdir=$(provider_dir)
  drivers=$(compgen -G "$cfg/*.driver" | wc -l)
  libs=$(compgen -G "$pdir/lib*-rdmav*.so" | wc -l)
  report FAIL verbs "ibv_devinfo -l: libibverbs does not list $1, which the kernel has ($SYSFS_ROOT/class/infiniband/$1); $cfg has $drivers .driver files, $pdir $libs provider libraries" \
    "no user-space provider (librxe for rxe) loads for it: ibverbs-providers is missing or broken, its files are not where this libibverbs looks, or a container's rdma-core is older than the kernel's ABI; every lesson says 'no RDMA devices found'" \
    "sudo apt install --reinstall ibverbs-providers (needs root)"
  return 1
}

# netdev_up NETDEV: its IFF_UP flag is set in sysfs.
netdev_up() {
  local f
  f=$(rd "$SYSFS_ROOT/class/net/$1/flags") || return 1
  ((f & IFF_UP))
}

# check_port DEV PORT NETDEV STATE PHYS (STATE and PHYS from rdma link show)
check_port() {
  local what="rdma link show: $1/$2 state $4, physical_state $5${3:+ on $3}"
  if [[ $4 == ACTIVE ]]; then
    report OK port "$what"
  elif [[ $3 != - ]] && ! netdev_up "$3"; then
    report FAIL port "$what" "the netdev under it, $3, is down: the port is DOWN with it and every lesson fails with 'port 1 is down, not ACTIVE'" "sudo ip link set $3 up"
  elif [[ $4 == INIT ]]; then
    report FAIL port "$what" "an InfiniBand port stays INIT until a subnet manager configures it" "sudo systemctl start opensm (on one host of the fabric)"
  else
    report FAIL port "$what" "the link has no carrier (cable, switch port, or the peer's side is down)" "ip link show ${3/#-/DEV}; check the cable and the switch port"
  fi
}

# check_netdev NETDEV
check_netdev() {
  local nd=$1 mtu addrs=() line
  if [[ $nd == - ]]; then
    report SKIP netdev "the port names no netdev (InfiniBand)"
    return
  fi
  if [[ ! -e $SYSFS_ROOT/class/net/$nd ]]; then
    report FAIL netdev "$SYSFS_ROOT/class/net/$nd: absent" "the netdev under the RDMA device was removed" "sudo scripts/setup_rxe.sh down; sudo scripts/setup_rxe.sh up NETDEV"
    return
  fi
  if ! netdev_up "$nd"; then
    report FAIL netdev "$SYSFS_ROOT/class/net/$nd/flags: $nd is down" "the RDMA port above it is DOWN while it is" "sudo ip link set $nd up"
    return
  fi
  while read -r line; do
    [[ $line =~ inet6?\ ([0-9a-fA-F.:]+/[0-9]+)\ .*scope\ (global|site) ]] && addrs+=("${BASH_REMATCH[1]}")
  done < <(ip -o addr show dev "$nd" 2>/dev/null)
  mtu=$(rd "$SYSFS_ROOT/class/net/$nd/mtu") || mtu='?'
  if ((${#addrs[@]} == 0)); then
    report FAIL netdev "ip addr show dev $nd: up, MTU $mtu, but no IP address" \
      "RoCE GIDs are made from the netdev's addresses: without one there is no IPv4-mapped GID, and rdma_cm (lesson 9 on) has no address to resolve" \
      "sudo ip addr add 192.0.2.1/24 dev $nd (or an address of your network)"
    return
  fi
  report OK netdev "ip addr show dev $nd: up, MTU $mtu, ${addrs[*]}"
}

# devinfo_field INFO NAME: the value after "NAME:" in ibv_devinfo's output.
devinfo_field() {
  local line
  while IFS= read -r line; do
    line=${line#"${line%%[![:space:]]*}"}
    [[ $line == "$2:"* ]] || continue
    line=${line#"$2:"}
    echo "${line#"${line%%[![:space:]]*}"}"
    return 0
  done <<<"$1"
  return 1
}

# check_gid DEV PORT NETDEV INFO (INFO: ibv_devinfo -v of that port)
check_gid() {
  local line idx val type v2map='' v2='' v1='' n=0
  if [[ $(devinfo_field "$4" link_layer) == InfiniBand ]]; then
    report OK gid "ibv_devinfo -v: $1/$2 is InfiniBand: LID addressing, no GRH needed inside the subnet"
    return
  fi
  while IFS= read -r line; do
    [[ $line =~ GID\[\ *([0-9]+)\]:[[:space:]]*([^,]+),\ (.+)$ ]] || continue
    idx=${BASH_REMATCH[1]} val=${BASH_REMATCH[2]} type=${BASH_REMATCH[3]}
    n=$((n + 1))
    if [[ $type == "RoCE v2" ]]; then
      [[ -z $v2map && $val == ::ffff:*.* ]] && v2map="$idx $val"
      [[ -z $v2 ]] && v2="$idx $val"
    else
      [[ -z $v1 ]] && v1="$idx $val"
    fi
  done <<<"$4"
  if [[ -n $v2map ]]; then
    report OK gid "ibv_devinfo -v: $1/$2 GID index ${v2map%% *} = ${v2map#* } (RoCE v2, IPv4-mapped): the one the lessons pick (-g ${v2map%% *})"
  elif [[ -n $v2 ]]; then
    report WARN gid "ibv_devinfo -v: $1/$2 has no IPv4-mapped RoCE v2 GID ($n in the table); index ${v2%% *} = ${v2#* } (RoCE v2)" \
      "$3 has no IPv4 address; the link-local GID reaches only this link and can vanish, and rdma_cm to an IPv4 address fails" \
      "sudo ip addr add 192.0.2.1/24 dev $3 (or an address of your network)"
  elif [[ -n $v1 ]]; then
    report WARN gid "ibv_devinfo -v: $1/$2 has only RoCE v1 GIDs (index ${v1%% *} = ${v1#* })" \
      "RoCE v1 is not routable: it works only inside one Ethernet segment, and a peer using v2 never answers" \
      "use RoCE v2: on mlx5, sudo cma_roce_mode -d $1 -p $2 -m 2; give the lessons -g of a RoCE v2 entry"
  else
    report FAIL gid "ibv_devinfo -v: $1/$2 has an empty GID table" \
      "RoCE GIDs come from $3's addresses: it has none, or it is down; every RoCE QP needs a GID (GRH)" \
      "sudo ip link set $3 up; sudo ip addr add 192.0.2.1/24 dev $3"
  fi
}

# ib_mtu_fitting BYTES: the largest IB MTU (256..4096) whose packets fit a
# netdev MTU of BYTES.
ib_mtu_fitting() {
  local s
  for s in 4096 2048 1024 512 256; do ((${1} - ROCE_HEADERS >= s)) && break; done
  echo "$s"
}

# check_mtu DEV PORT NETDEV INFO
check_mtu() {
  local nd_mtu active fit
  active=$(devinfo_field "$4" active_mtu) || active='?'
  active=${active%% *}
  if [[ $3 == - ]]; then
    report OK mtu "ibv_devinfo: $1/$2 active_mtu $active (InfiniBand: no netdev under it)"
    return
  fi
  nd_mtu=$(rd "$SYSFS_ROOT/class/net/$3/mtu") || {
    report SKIP mtu "$SYSFS_ROOT/class/net/$3/mtu: unreadable"
    return
  }
  [[ $active =~ ^[0-9]+$ ]] || {
    report WARN mtu "ibv_devinfo: no active_mtu for $1/$2" "libibverbs did not report it" "ibv_devinfo -d $1"
    return
  }
  fit=$(ib_mtu_fitting "$nd_mtu")
  if ((active > fit)); then
    report FAIL mtu "$3 MTU $nd_mtu, but ibv_devinfo: $1/$2 active_mtu $active; packets of $active bytes need a netdev MTU of $((active + ROCE_HEADERS))" \
      "RoCE packets are sent with don't-fragment: the big ones are dropped, and large transfers end in IBV_WC_RETRY_EXC_ERR" \
      "sudo ip link set $3 mtu $((active + ROCE_HEADERS))"
  elif ((active < 1024)); then
    report WARN mtu "$3 MTU $nd_mtu: ibv_devinfo: $1/$2 active_mtu $active" "a netdev MTU under $((1024 + ROCE_HEADERS)) gives packets of $active bytes: slow, and a peer with 1024 disagrees" "sudo ip link set $3 mtu 1500"
  else
    report OK mtu "$3 MTU $nd_mtu, ibv_devinfo: $1/$2 active_mtu $active, the largest IB MTU that fits ($nd_mtu - $ROCE_HEADERS bytes of headers)"
  fi
}

# check_caps DEV INFO
check_caps() {
  local qp_wr sge cqe srq_wr
  qp_wr=$(devinfo_field "$2" max_qp_wr) || qp_wr=0
  sge=$(devinfo_field "$2" max_sge) || sge=0
  cqe=$(devinfo_field "$2" max_cqe) || cqe=0
  srq_wr=$(devinfo_field "$2" max_srq_wr) || srq_wr=0
  local what="ibv_devinfo -v: $1 max_qp_wr $qp_wr, max_sge $sge, max_cqe $cqe, max_srq_wr $srq_wr"
  if ((qp_wr < NEED_QP_WR || cqe < NEED_CQE || sge < 1)); then
    report WARN caps "$what; lesson 11 asks for $NEED_QP_WR WRs and a CQ of $NEED_CQE" \
      "ibv_create_qp and ibv_create_cq fail with EINVAL when asked for more than the device allows" \
      "./lesson11 --depth $((qp_wr < NEED_QP_WR ? qp_wr : NEED_QP_WR)) (a smaller depth)"
  else
    report OK caps "$what: above what the lessons ask (lesson 11: $NEED_QP_WR WRs, a CQ of $NEED_CQE; ./lesson15_probe shows max_inline_data)"
  fi
}
