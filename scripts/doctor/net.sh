# shellcheck shell=bash
# net.sh: the checks of the network around the devices: netns, fork,
# firewall, and with --peer HOST, route and connect.

readonly ROCE_PORT=4791      # UDP: RoCE v2 (IANA)
readonly EXCHANGE_PORT=18515 # TCP: the lessons' out-of-band exchange, as perftest's

# kernel_at_least MAJOR MINOR: uname -r is that version or later.
kernel_at_least() {
  local r major minor
  r=$(uname -r)
  IFS=. read -r major minor _ <<<"$r"
  minor=${minor%%[!0-9]*}
  ((major > $1 || (major == $1 && ${minor:-0} >= $2)))
}

# rdma_system: the words of `rdma system show` ("netns shared copy-on-fork on").
rdma_system() { rdma system show 2>/dev/null; }

check_netns() {
  local sys mode self init
  sys=$(rdma_system)
  mode=${sys#*netns }
  mode=${mode%% *}
  self=$(readlink "$PROC_ROOT/self/ns/net" 2>/dev/null)
  init=$(readlink "$PROC_ROOT/1/ns/net" 2>/dev/null)
  if [[ -z $self || -z $init ]]; then
    report OK netns "rdma system show: netns ${mode:-?}; $PROC_ROOT/1/ns/net is not readable here, so this process's namespace cannot be compared"
  elif [[ $self == "$init" ]]; then
    report OK netns "rdma system show: netns ${mode:-?}; $PROC_ROOT/self/ns/net is the initial network namespace"
  elif ! kernel_at_least 7 1; then
    report WARN netns "$PROC_ROOT/self/ns/net: $self, not the initial namespace ($init); rdma system show: netns ${mode:-?}; Linux $(uname -r)" \
      "before Linux 7.1 rxe's UDP $ROCE_PORT socket lives only in the initial namespace (and since 6.15 hw_counters are hidden outside it): RoCE packets never leave, a connect ends in RDMA_CM_EVENT_UNREACHABLE (6.1) or no event at all (6.12)" \
      "run the lessons in the initial namespace (docker run --network host ...), or boot Linux 7.1+ (docs/lesson18-netns.md)"
  else
    report OK netns "$PROC_ROOT/self/ns/net: $self, not the initial namespace; Linux $(uname -r) (7.1 or later) gives rxe a socket per namespace; rdma system show: netns ${mode:-?}"
  fi
}

check_fork() {
  local sys cof
  sys=$(rdma_system)
  if [[ $sys != *copy-on-fork* ]]; then
    report WARN fork "rdma system show: says nothing of copy-on-fork (${sys:-no output})" \
      "a kernel before 5.13 (or an old iproute2): a fork() after ibv_reg_mr can give the parent's pinned pages to the child" \
      "call ibv_fork_init() before registering (or RDMAV_FORK_SAFE=1), or do not fork"
    return
  fi
  cof=${sys#*copy-on-fork }
  cof=${cof%% *}
  if [[ $cof == on ]]; then
    report OK fork "rdma system show: copy-on-fork on: the kernel copies registered pages on fork() (ibv_is_fork_initialized: IBV_FORK_UNNEEDED)"
  else
    report WARN fork "rdma system show: copy-on-fork $cof" \
      "a fork() after ibv_reg_mr can give the parent's pinned pages to the child (copy-on-write)" \
      "call ibv_fork_init() before registering (or RDMAV_FORK_SAFE=1), or do not fork"
  fi
}

# nft_blocking RULESET: for each rule (nft -a list ruleset) that drops or
# rejects UDP 4791 or TCP 18515, "FAMILY TABLE CHAIN HANDLE RULE".
nft_blocking() {
  local line table='' chain='' rule
  while IFS= read -r line; do
    line=${line#"${line%%[![:space:]]*}"}
    if [[ $line =~ ^table\ ([a-z0-9]+)\ ([^ ]+)\ \{ ]]; then
      table="${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
    elif [[ $line =~ ^chain\ ([^ ]+)\ \{ ]]; then
      chain=${BASH_REMATCH[1]}
    elif [[ $line =~ (udp\ dport\ (\{[^}]*)?$ROCE_PORT|tcp\ dport\ (\{[^}]*)?$EXCHANGE_PORT)([^0-9]|$) && $line =~ (drop|reject) ]]; then
      rule=${line% \# handle *}
      echo "$table $chain ${line##*\# handle } $rule"
    fi
  done <<<"$1"
}

# iptables_blocking SAVED: for each rule (iptables-save) that drops or
# rejects UDP 4791 or TCP 18515, "TABLE RULE" (RULE without its -A).
iptables_blocking() {
  local line table=filter
  while IFS= read -r line; do
    [[ $line == \** ]] && table=${line#\*}
    [[ $line == "-A "* ]] || continue
    [[ $line =~ -p\ udp.*--dports?\ ([0-9:,]*[,:])?$ROCE_PORT([^0-9]|$) || $line =~ -p\ tcp.*--dports?\ ([0-9:,]*[,:])?$EXCHANGE_PORT([^0-9]|$) ]] || continue
    [[ $line =~ -j\ (DROP|REJECT) ]] || continue
    echo "$table ${line#-A }"
  done <<<"$1"
}

# firewall_loaded MODULE...: one of the kernel's MODULEs is there (loaded,
# or built in). The doctor asks nft or iptables-save only then: as root,
# their first request would make the kernel load nf_tables (or ip_tables),
# and the doctor changes nothing.
firewall_loaded() {
  local m
  for m in "$@"; do
    [[ -d $SYSFS_ROOT/module/$m ]] && return 0
    grep -qs "/$m\.ko" "/lib/modules/$(uname -r)/modules.builtin" && return 0
  done
  return 1
}

check_firewall() {
  local out found
  if ! firewall_loaded nf_tables ip_tables; then
    report OK firewall "$SYSFS_ROOT/module: neither nf_tables nor ip_tables is loaded, so no rule drops anything (not asked through nft, which would load it)"
    return
  fi
  if command -v nft >/dev/null; then
    if ! out=$(nft -a list ruleset 2>&1); then
      if [[ $out == *"Protocol not supported"* ]]; then
        report OK firewall "nft -a list ruleset: '${out##*: }': nf_tables is not loaded, so no nft rule drops anything"
      elif [[ $out == *"Operation not permitted"* ]]; then
        report SKIP firewall "nft -a list ruleset: '${out##*: }': reading the rules needs root (sudo scripts/doctor.sh)"
      else
        report SKIP firewall "nft -a list ruleset failed: ${out%%$'\n'*}"
      fi
      return
    fi
    found=$(nft_blocking "$out")
    if [[ -n $found ]]; then
      local fam tab chain handle rule
      read -r fam tab chain handle rule <<<"${found%%$'\n'*}"
      report FAIL firewall "nft -a list ruleset: table $fam $tab chain $chain: '$rule'" \
        "this rule drops RoCE v2 (UDP $ROCE_PORT) or the lessons' exchange (TCP $EXCHANGE_PORT): across hosts QPs end in IBV_WC_RETRY_EXC_ERR, rdma_cm in RDMA_CM_EVENT_UNREACHABLE" \
        "sudo nft delete rule $fam $tab $chain handle $handle"
      return
    fi
    report OK firewall "nft -a list ruleset: no rule drops UDP $ROCE_PORT or TCP $EXCHANGE_PORT"
    return
  fi
  if command -v iptables-save >/dev/null; then
    if ! out=$(iptables-save 2>&1) || [[ $out == *"ermission denied"* ]]; then
      report SKIP firewall "iptables-save: ${out%%$'\n'*} (reading the rules needs root: sudo scripts/doctor.sh)"
      return
    fi
    found=$(iptables_blocking "$out")
    if [[ -n $found ]]; then
      local tab rule
      read -r tab rule <<<"${found%%$'\n'*}"
      report FAIL firewall "iptables-save: table $tab: '-A $rule'" \
        "this rule drops RoCE v2 (UDP $ROCE_PORT) or the lessons' exchange (TCP $EXCHANGE_PORT): across hosts QPs end in IBV_WC_RETRY_EXC_ERR, rdma_cm in RDMA_CM_EVENT_UNREACHABLE" \
        "sudo iptables -t $tab -D $rule"
      return
    fi
    report OK firewall "iptables-save: no rule drops UDP $ROCE_PORT or TCP $EXCHANGE_PORT"
    return
  fi
  report SKIP firewall "neither nft nor iptables-save is installed, so no rules can be listed (sudo apt install nftables to check them)"
}

# netdev_of_address ADDR: the netdev that holds ADDR (ip -o addr show to ADDR).
netdev_of_address() {
  local _i nd _rest
  read -r _i nd _rest < <(ip -o addr show to "$1" 2>/dev/null)
  echo "${nd%:}"
}

# check_route PEER LINKS: the route to PEER leaves through an RDMA netdev.
check_route() {
  local peer=$1 out nd rdma_nds='' _l n _s _p addrs
  while read -r _l n _s _p; do [[ -n $n && $n != - ]] && rdma_nds+=" $n"; done <<<"$2"
  addrs=$(rdma_addresses "$2")
  if [[ $peer == 127.* || $peer == ::1 ]]; then
    report FAIL route "--peer $peer: a loopback address" \
      "rdma_cm maps an address to the RDMA device whose netdev holds it, and lo has none: rdma_resolve_route fails with ENODEV (lesson 9)" \
      "./lesson9 ${addrs%% *} 2 3 (an address on an RDMA netdev: ${addrs:-none here: sudo scripts/setup_rxe.sh up})"
    return 1
  fi
  if ! out=$(ip route get "$peer" 2>&1); then
    report FAIL route "ip route get $peer: ${out%%$'\n'*}" "no route to $peer from here" "ip route; ip addr (is $peer on one of this host's networks?)"
    return 1
  fi
  if [[ $out == local\ * ]]; then
    nd=$(netdev_of_address "$peer")
  else
    [[ $out =~ \ dev\ ([^ ]+) ]] && nd=${BASH_REMATCH[1]}
  fi
  if [[ " $rdma_nds " == *" ${nd:-?} "* ]]; then
    out=${out%%$'\n'*}
    report OK route "ip route get $peer: ${out% } (${nd} carries an RDMA device)"
    return 0
  fi
  report FAIL route "ip route get $peer: ${out%%$'\n'*}: through ${nd:-?}, which has no RDMA device (those with one:${rdma_nds:- none})" \
    "rdma_cm resolves $peer to ${nd:-?} and finds no device there: RDMA_CM_EVENT_ADDR_ERROR, or ENODEV at rdma_resolve_route" \
    "sudo scripts/setup_rxe.sh up ${nd:-NETDEV} (Soft-RoCE on it), or give an address of a netdev with RDMA"
  return 1
}

# check_connect PEER: a real rdma_cm connection to ./lesson9's server at PEER.
check_connect() {
  local peer=$1 out first
  if [[ ! -x $CHECKOUT/lesson9 ]]; then
    report SKIP connect "$CHECKOUT/lesson9: not built (make lesson9), so no rdma_cm connect was tried"
    return
  fi
  out=$(timeout 30 "$CHECKOUT/lesson9" --timeout 5 "$peer" 1 2 2>&1)
  if [[ $out == *"result: 1 + 2 = 3"* ]]; then
    report OK connect "./lesson9 $peer 1 2: connected through rdma_cm and got 'result: 1 + 2 = 3' (UDP $ROCE_PORT passes both ways)"
    return
  fi
  first=$(grep -m1 '^lesson9: ' <<<"$out")
  first=${first#lesson9: }
  if [[ $out == *"reject reason 8"* ]]; then
    report WARN connect "./lesson9 $peer 1 2: ${first:-no answer}" \
      "nothing listens there: the connect test needs lesson 9's server on $peer" \
      "on $peer: ./lesson9 --timeout 60, then scripts/doctor.sh --peer $peer again"
    return
  fi
  local hint
  hint=$(grep -m1 '^lesson9: check: ' <<<"$out")
  report FAIL connect "./lesson9 $peer 1 2: ${first:-${out%%$'\n'*}}" \
    "${hint#lesson9: check: }" \
    "run scripts/doctor.sh on $peer too (its firewall, port and netdev), and start ./lesson9 there"
}

readonly TRANSFER_BYTES=8192 # several packets at every IB MTU: 2 at 4096, 8 at 1024

# check_transfer PEER LINKS: a real RDMA transfer of TRANSFER_BYTES through
# rdma_cm to `rping -s` on PEER (rdmacm-utils). rdma_cm takes the path MTU
# from the connecting side's netdev: when the other host's MTU is smaller,
# the connection is made but the big packets are lost, and the transfer
# stalls (measured in the lab: 9000 against 1500, rping -S 8000 never ends).
check_transfer() {
  local peer=$1 out status=0 mtus='' _l nd _s _p m
  while read -r _l nd _s _p; do
    [[ -n $nd && $nd != - ]] || continue
    m=$(rd "$SYSFS_ROOT/class/net/$nd/mtu") && mtus+="$nd MTU $m, "
  done <<<"$2"
  mtus=${mtus%, }
  if ! command -v rping >/dev/null; then
    report SKIP transfer "rping: not found (sudo apt install rdmacm-utils), so no transfer was tried"
    return
  fi
  # Line-buffered, so that rping's debug lines (ESTABLISHED) survive timeout's kill.
  out=$(timeout 15 stdbuf -oL -eL rping -c -a "$peer" -S "$TRANSFER_BYTES" -C 1 -v -d 2>&1) || status=$?
  if ((status == 0)) && [[ $out == *"ping data"* ]]; then
    report OK transfer "rping -c -a $peer -S $TRANSFER_BYTES -C 1: the $TRANSFER_BYTES-byte RDMA transfer completed (here: ${mtus:-no netdev})"
  elif [[ $out == *REJECTED* ]]; then
    report WARN transfer "rping -c -a $peer -S $TRANSFER_BYTES -C 1: rejected: no rping server there" \
      "the transfer test needs rping's server on $peer" \
      "on $peer: rping -s -S $TRANSFER_BYTES -C 1, then scripts/doctor.sh --peer $peer again"
  elif ((status == 124)) && [[ $out == *ESTABLISHED* ]]; then
    report FAIL transfer "rping -c -a $peer -S $TRANSFER_BYTES -C 1: connected, but the $TRANSFER_BYTES-byte transfer did not complete in 15 s (here: $mtus)" \
      "the two hosts' MTUs differ: rdma_cm took the path MTU from this side's netdev, and packets that size are lost on the way to or on the smaller side; the lessons stall or end in IBV_WC_RETRY_EXC_ERR" \
      "the same MTU on both hosts: sudo ip link set ${mtus%% *} mtu M, with M the other host's MTU (its doctor's netdev line)"
  elif ((status == 124)); then
    report FAIL transfer "rping -c -a $peer -S $TRANSFER_BYTES -C 1: no connection and no answer within 15 s (here: $mtus)" \
      "rdma_cm's packets or the transfer's are lost on the way: a firewall on either host (UDP $ROCE_PORT), or the two hosts' MTUs apart" \
      "run scripts/doctor.sh on $peer too, and compare its netdev line's MTU with this one"
  else
    out=$(grep -m1 -iE 'error|fail|event' <<<"$out")
    report FAIL transfer "rping -c -a $peer -S $TRANSFER_BYTES -C 1: ${out:-exit $status}" \
      "the connection or the transfer failed" \
      "run scripts/doctor.sh on $peer too (its firewall, port and netdev)"
  fi
}
