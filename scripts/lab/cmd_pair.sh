# shellcheck shell=bash
# lab/cmd_pair.sh: `lab.sh pair [--pcap FILE] [--timeout SECS] [--ready TEXT]
# [--netem-a SPEC] [--netem-b SPEC] --a 'CMD' --b 'CMD'` (part of
# scripts/lab.sh; sourced, never run).

# Two guests, a (192.0.2.1) and b (192.0.2.2), joined by a virtual cable
# (the pair that stays up in LAB_PAIR_DIR, or two of their own for this
# run); each runs its bash command string; b's starts right after a's, or
# with --ready once a's command has printed a line containing TEXT.
# --netem-a/--netem-b (or LAB_NETEM_A/LAB_NETEM_B) impair that guest's
# egress on the cable for the run (netem_command). Exit status: a's if
# non-zero, else b's.
cmd_pair() {
  local timeout=600 pcap="" cmd_a="" cmd_b="" ready=""
  local netem_a=${LAB_NETEM_A:-} netem_b=${LAB_NETEM_B:-}
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --netem-a | --netem-b)
        [[ -n ${2:-} ]] || misuse "$1 needs a netem spec, e.g. $1 'loss 1%'"
        if [[ $1 == --netem-a ]]; then netem_a=$2; else netem_b=$2; fi
        ;;
      --timeout) timeout=$(parse_timeout "${2:-}") ;;
      --pcap)
        [[ -n ${2:-} ]] || misuse "--pcap needs a file name"
        pcap=$2
        ;;
      --ready)
        [[ -n ${2:-} ]] || misuse "--ready needs a text (a line of a's output that says b may start)"
        ready=$2
        ;;
      --a)
        [[ -n ${2:-} ]] || misuse "--a needs a command"
        cmd_a=$2
        ;;
      --b)
        [[ -n ${2:-} ]] || misuse "--b needs a command"
        cmd_b=$2
        ;;
      *) misuse "pair: unknown argument '$1'" ;;
    esac
    shift 2
  done
  if [[ -z $cmd_a || -z $cmd_b ]]; then
    misuse "pair needs --a 'CMD' and --b 'CMD'"
  fi
  [[ -z $netem_a ]] || cmd_a=$(netem_command a "$netem_a" "$cmd_a") || exit 2
  [[ -z $netem_b ]] || cmd_b=$(netem_command b "$netem_b" "$cmd_b") || exit 2
  if [[ -n $pcap ]]; then
    # qemu writes the pcap; give it an absolute path.
    [[ $pcap == /* ]] || pcap="$PWD/$pcap"
    : >"$pcap" || misuse "cannot write --pcap $pcap"
  fi

  # A pair that is up: in LAB_PAIR_DIR, whose folders pass private_dir.
  local dir=""
  [[ -z ${LAB_PAIR_DIR:-} ]] || dir=$(pair_dir)
  if [[ -n $dir ]] && private_dir "$dir/a" && private_dir "$dir/b" &&
    agent status "$dir/a" >/dev/null 2>&1 && agent status "$dir/b" >/dev/null 2>&1; then
    # Only a pair of the kernel and vCPUs asked for (LAB_KERNEL, LAB_CPUS)
    # may stand in for two fresh guests; otherwise two of their own boot.
    if up_kernel_matches "$dir/a" && up_cpus_match "$dir/a"; then
      pair_through_up "$dir" "$timeout" "$pcap" "$ready" "$cmd_a" "$cmd_b"
      exit $?
    fi
    echo "lab.sh: the pair that is up runs $(cat "$dir/a/kernel") with $(cat "$dir/a/cpus" 2>/dev/null || echo 1) vCPU(s), not what LAB_KERNEL/LAB_CPUS ask for: booting two guests of their own" >&2
  fi
  # A cold pair: two guests that stay up as long as this lab.sh, in a
  # folder of its own.
  check_host
  dir=$(new_rundir)
  clean_up_on_exit "$dir"
  up_pair run "$dir"
  pair_through_up "$dir" "$timeout" "$pcap" "$ready" "$cmd_a" "$cmd_b"
}

# pair_through_up DIR SECS PCAP READY CMD_A CMD_B: run the two commands
# in the pair up in DIR (up --pair's, or a cold pair's): a's first, b's
# once a's has printed READY (or at once); their lines prefixed; a's
# status if non-zero, else b's. The capture of the cable is started and
# stopped through qemu's monitor (a filter-dump object added to a's NIC,
# then deleted, which closes the file).
pair_through_up() {
  local dir=$1 secs=$2 pcap=$3 ready=$4 cmd_a=$5 cmd_b=$6 out pid_a
  local status_a=0 status_b=0 i=0
  out=$(mktemp -d)
  if [[ -n $pcap ]]; then
    [[ $pcap != *[\"\\]* ]] || misuse "--pcap: a file name without quotes or backslashes, please"
    rm -f "$pcap"
    # A capture killed mid-run left its filter behind: delete it first (qemu
    # refuses a second object of one id), which also closes its file.
    agent qmp "$dir/a/qmp.sock" '{"execute": "object-del", "arguments": {"id": "cap"}}' >/dev/null 2>&1 || true
    agent qmp "$dir/a/qmp.sock" \
      "{\"execute\": \"object-add\", \"arguments\": {\"qom-type\": \"filter-dump\", \"id\": \"cap\", \"netdev\": \"n0\", \"file\": \"$pcap\"}}" ||
      fail "could not start the capture on the pair's cable (see above)"
  fi
  pair_exec "$dir" a 192.0.2.1 192.0.2.2 "$secs" "$cmd_a" "$out" &
  pid_a=$!
  # b starts once a has printed READY (its server listens), or at once.
  while [[ -n $ready ]] && ! grep -qF -- "$ready" "$out/a.out" 2>/dev/null; do
    if ! kill -0 "$pid_a" 2>/dev/null; then
      echo "lab.sh: guest b: a's command ended without printing a line with '$ready'" >&2
      status_b=$STATUS_LAB_FAILED
      break
    fi
    ((i++ < secs * 10)) || {
      echo "lab.sh: guest b: a did not print '$ready' in $secs s" >&2
      status_b=$STATUS_TIMEOUT
      break
    }
    sleep 0.1
  done
  if [[ $status_b == 0 ]]; then
    pair_exec "$dir" b 192.0.2.2 192.0.2.1 "$secs" "$cmd_b" "$out" || status_b=$?
  fi
  wait "$pid_a" || status_a=$?
  if [[ -n $pcap ]]; then
    agent qmp "$dir/a/qmp.sock" '{"execute": "object-del", "arguments": {"id": "cap"}}' ||
      echo "lab.sh: could not stop the capture cleanly; $pcap may lack its last frames" >&2
  fi
  wait # the prefixers
  rm -rf "$out"
  echo "lab.sh: a exited $status_a, b exited $status_b" >&2
  if [[ $status_a != 0 ]]; then return "$status_a"; fi
  return "$status_b"
}

# pair_exec DIR ROLE ADDR PEER SECS CMD OUT: CMD (a bash command string)
# in guest ROLE of the pair up in DIR, with LAB_ROLE, LAB_ADDR and
# LAB_PEER_ADDR; its stdout and stderr lines prefixed "[ROLE] ", stdout
# also kept in OUT/ROLE.out (for --ready).
pair_exec() {
  local dir=$1 role=$2 addr=$3 peer=$4 secs=$5 cmd=$6 out=$7
  agent exec "$dir/$role" "$secs" "$(guest_workdir "$dir/$role/xfer")" -- \
    env LAB_ROLE="$role" LAB_ADDR="$addr" LAB_PEER_ADDR="$peer" bash -c "$cmd" \
    > >(tee "$out/$role.out" | sed -u "s/^/[$role] /") 2> >(sed -u "s/^/[$role] /" >&2) 3>&-
}

# netem_command ROLE SPEC CMD: a bash command string that puts a netem
# qdisc with SPEC (tc-netem(8): "loss 1%", "delay 10ms reorder 25%", ...) on
# the root of the guest's eth0, so that every frame the guest sends on the
# cable meets it, runs CMD, and takes the qdisc away again when CMD ends
# (or is killed), so that a pair that stays up is left with a clean cable.
# It runs in the guest as root, with the host's tc (iproute2) and the
# sch_netem module from the guest's initramfs. tc refusing SPEC ends the
# command with 125, saying so. SPEC is split into words; each must be
# letters, digits and . % _ - (a misuse otherwise).
netem_command() {
  local role=$1 spec=$2 cmd=$3 word words=()
  read -ra words <<<"$spec"
  [[ ${#words[@]} -gt 0 ]] || misuse "--netem-$role needs a netem spec, e.g. 'loss 1%'"
  for word in "${words[@]}"; do
    [[ $word =~ ^[A-Za-z0-9.%_-]+$ ]] ||
      misuse "--netem-$role: '$word' is not a netem word (tc-netem(8): e.g. 'loss 1%', 'delay 10ms reorder 25%')"
  done
  printf 'modprobe -q sch_netem 2>/dev/null\n'
  printf 'tc qdisc replace dev eth0 root netem%s || {\n' "$(printf ' %q' "${words[@]}")"
  printf '  echo %q >&2\n' "lab.sh: tc refused the netem spec '${words[*]}' on $role's eth0 (tc-netem(8))"
  printf '  exit 125\n}\n'
  printf 'echo %q >&2\n' "lab.sh: $role's egress on the cable: netem ${words[*]}"
  printf "trap 'tc qdisc del dev eth0 root 2>/dev/null' EXIT\n"
  printf "trap 'exit 143' TERM\ntrap 'exit 130' INT\n"
  printf 'bash -c %q\nexit $?\n' "$cmd"
}
