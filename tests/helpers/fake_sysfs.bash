# fake_sysfs.bash - build a fake sysfs tree the way the kernel would show it.
#
# Sourced by tests/helpers/stubs.bash (to set the scene before a test) and by
# the stub commands in tests/helpers/stubs/ (so that the fake `rdma link add`
# makes an rxe device appear, as the real one does).
#
# Needs SYSFS_ROOT (the fake /sys) and FAKE_STATE (stub-only facts such as
# each netdev's IPv4 address, which sysfs does not hold).

# fake_netdev NAME [--ifindex N] [--type ARPHRD] [--down] [--mtu N] [--ipv4 A.B.C.D]
#   An interface in /sys/class/net. Defaults: next ifindex, type 1 (Ethernet),
#   up (flags 0x1003), MTU 1500, no IPv4 address.
fake_netdev() {
  local name=$1 ifindex='' type=1 flags=0x1003 mtu=1500 ipv4='' d
  shift
  while (($#)); do
    case $1 in
      --ifindex)
        ifindex=$2
        shift 2
        ;;
      --type)
        type=$2
        shift 2
        ;;
      --down)
        flags=0x1002
        shift
        ;;
      --mtu)
        mtu=$2
        shift 2
        ;;
      --ipv4)
        ipv4=$2
        shift 2
        ;;
      *)
        echo "fake_netdev: unknown option $1" >&2
        return 2
        ;;
    esac
  done
  d=$SYSFS_ROOT/class/net/$name
  mkdir -p "$d" "$FAKE_STATE/ipv4"
  if [[ -z $ifindex ]]; then
    ifindex=1
    while grep -qx "$ifindex" "$SYSFS_ROOT"/class/net/*/ifindex 2>/dev/null; do ifindex=$((ifindex + 1)); done
  fi
  echo "$ifindex" >"$d/ifindex"
  echo "$type" >"$d/type"
  echo "$flags" >"$d/flags"
  echo "$mtu" >"$d/mtu"
  if [[ -n $ipv4 ]]; then echo "$ipv4" >"$FAKE_STATE/ipv4/$name"; else rm -f "$FAKE_STATE/ipv4/$name"; fi
}

# ipv4 -> the IPv4-mapped GID as sysfs prints it (::ffff:a.b.c.d)
fake_mapped_gid() {
  local a b c d
  IFS=. read -r a b c d <<<"$1"
  printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$a" "$b" "$c" "$d"
}

# fake_gid PORTDIR INDEX VALUE TYPE
fake_gid() {
  echo "$3" >"$1/gids/$2"
  echo "$4" >"$1/gid_attrs/types/$2"
}

# fake_rxe DEV NETDEV: an rxe device on NETDEV, as rdma_rxe registers it.
#   FAKE_PORT_STATE   port state line (default "4: ACTIVE")
#   FAKE_GID_LAYOUT   rxe (default): 0 link-local RoCE v2, 1 IPv4-mapped RoCE v2
#                     v1v2: 0 link-local IB/RoCE v1, 1 link-local RoCE v2,
#                           2 IPv4-mapped IB/RoCE v1, 3 IPv4-mapped RoCE v2
#                     (the layout of a NIC with both RoCE versions)
#                     v1only: 0 link-local IB/RoCE v1, 1 IPv4-mapped IB/RoCE v1
#                     (no RoCE v2 GID at all)
fake_rxe() {
  local dev=$1 nd=$2 port ipv4='' i ll='fe80:0000:0000:0000:0200:5eff:fe00:0a01' mapped=''
  port=$SYSFS_ROOT/class/infiniband/$dev/ports/1
  mkdir -p "$port/gids" "$port/gid_attrs/types"
  echo "$nd" >"$SYSFS_ROOT/class/infiniband/$dev/parent"
  echo "1: CA" >"$SYSFS_ROOT/class/infiniband/$dev/node_type"
  echo "${FAKE_PORT_STATE:-4: ACTIVE}" >"$port/state"
  echo "Ethernet" >"$port/link_layer"
  [[ -e $FAKE_STATE/ipv4/$nd ]] && ipv4=$(<"$FAKE_STATE/ipv4/$nd") && mapped=$(fake_mapped_gid "$ipv4")
  # Unused entries read as zeros, and their type cannot be read at all
  # (EINVAL); a directory in place of the file fails the same way.
  for i in 0 1 2 3 4 5 6 7; do
    echo "0000:0000:0000:0000:0000:0000:0000:0000" >"$port/gids/$i"
    mkdir -p "$port/gid_attrs/types/$i"
  done
  rmdir "$port/gid_attrs/types/0" "$port/gid_attrs/types/1" "$port/gid_attrs/types/2" "$port/gid_attrs/types/3"
  case ${FAKE_GID_LAYOUT:-rxe} in
    rxe)
      fake_gid "$port" 0 "$ll" "RoCE v2"
      if [[ -n $mapped ]]; then fake_gid "$port" 1 "$mapped" "RoCE v2"; else mkdir "$port/gid_attrs/types/1"; fi
      mkdir "$port/gid_attrs/types/2" "$port/gid_attrs/types/3"
      ;;
    v1v2)
      fake_gid "$port" 0 "$ll" "IB/RoCE v1"
      fake_gid "$port" 1 "$ll" "RoCE v2"
      fake_gid "$port" 2 "$mapped" "IB/RoCE v1"
      fake_gid "$port" 3 "$mapped" "RoCE v2"
      ;;
    v1only)
      fake_gid "$port" 0 "$ll" "IB/RoCE v1"
      fake_gid "$port" 1 "$mapped" "IB/RoCE v1"
      mkdir "$port/gid_attrs/types/2" "$port/gid_attrs/types/3"
      ;;
  esac
}

# fake_ib_device DEV: a non-rxe RDMA device (a ConnectX, say): no "parent".
fake_ib_device() {
  mkdir -p "$SYSFS_ROOT/class/infiniband/$1/ports/1/gids"
  echo "1: CA" >"$SYSFS_ROOT/class/infiniband/$1/node_type"
  echo "4: ACTIVE" >"$SYSFS_ROOT/class/infiniband/$1/ports/1/state"
}

# fake_module_loaded [--old]: /sys/module/rdma_rxe exists (built in or loaded).
#   --old: a kernel before 5.17, with the parameters/add and /remove knobs.
fake_module_loaded() {
  mkdir -p "$SYSFS_ROOT/module/rdma_rxe/parameters"
  if [[ ${1:-} == --old ]]; then
    : >"$SYSFS_ROOT/module/rdma_rxe/parameters/add"
    : >"$SYSFS_ROOT/module/rdma_rxe/parameters/remove"
  fi
}
