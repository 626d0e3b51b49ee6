# shellcheck shell=bash
# lab/cmd_pair.sh: `lab.sh pair [--pcap FILE] [--timeout SECS] [--ready TEXT]
# [--netem-a SPEC] [--netem-b SPEC] --a 'CMD' --b 'CMD'` (part of
# scripts/lab.sh; sourced, never run).

# Two guests, a (192.0.2.1) and b (192.0.2.2), joined by a virtual cable;
# each runs its bash command string; b starts once a has started its own,
# or with --ready once a's command has printed a line containing TEXT.
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
    if up_kernel_matches "$LAB_PAIR_DIR/a" && up_cpus_match "$LAB_PAIR_DIR/a"; then
      pair_through_up "$timeout" "$pcap" "$ready" "$cmd_a" "$cmd_b"
      exit $?
    fi
    echo "lab.sh: the pair that is up runs $(cat "$LAB_PAIR_DIR/a/kernel") with $(cat "$LAB_PAIR_DIR/a/cpus" 2>/dev/null || echo 1) vCPU(s), not what LAB_KERNEL/LAB_CPUS ask for: booting two guests of their own" >&2
  fi
  check_host
  local lab rundir role qemu_status fifo fd
  lab=$(prepare_lab)
  rundir=$(new_rundir)
  clean_up_on_exit "$rundir"
  # A Unix socket path must fit in 108 bytes.
  [[ ${#rundir} -lt 90 ]] || fail "run folder path too long for a socket: set TMPDIR=/tmp"
  # b's share is a's: every file in it is written before a boots.
  write_guest_files "$rundir/share" a pair eth0 192.0.2.1/24 192.0.2.2 bash -c "$cmd_a"
  write_guest_files "$rundir/share" b pair eth0 192.0.2.2/24 192.0.2.1 bash -c "$cmd_b"
  if [[ -n $ready ]]; then
    for role in a b; do printf 'READY=%q\n' "$ready" >>"$rundir/share/$role.conf"; done
  fi
  # The one folder the guests may write: a.started, which b waits for.
  # The host never opens anything in it.
  mkdir "$rundir/pair"

  local -A pid=() result=()
  for role in a b; do
    start_pair_guest "$lab" "$rundir" "$role" "$timeout" "$pcap"
    pid[$role]=$!
  done
  for role in a b; do
    qemu_status=0
    wait "${pid[$role]}" || qemu_status=$?
    # Guest b may still wait for a to start its command: tell it not to.
    touch "$rundir/share/$role.exited"
    result[$role]=$(guest_result "$rundir/console-$role.log" "$qemu_status" "$timeout" \
      "$role" "$rundir/qemu-$role.log")
  done
  # A sed still waiting to open its fifo (its qemu never started) would
  # wait forever: open each fifo once read-write (never blocks), close it.
  for fifo in "$rundir"/*.fifo; do
    exec {fd}<>"$fifo"
    exec {fd}>&-
  done
  wait # the sed prefixers
  echo "lab.sh: a exited ${result[a]}, b exited ${result[b]}" >&2
  if [[ ${result[a]} != 0 ]]; then exit "${result[a]}"; fi
  exit "${result[b]}"
}

# start_pair_guest LAB RUNDIR ROLE SECS PCAP: start guest ROLE (a or b) in
# the background, its PID then in $!, and the two seds that prefix its
# command's stdout and stderr lines with "[ROLE] " on ours. Guest a also
# writes every frame on the cable to PCAP, if not empty.
start_pair_guest() {
  local lab=$1 rundir=$2 role=$3 secs=$4 pcap=$5 peer=a n=2 args
  [[ $role == b ]] || peer=b n=1
  mapfile -d '' -t args < <(qemu_base_args "$lab" "$role" "$rundir")
  args+=(
    -virtfs "local,path=$rundir/pair,mount_tag=labpair,security_model=none"
    # The virtual cable: each guest sends datagrams to the other's socket.
    -netdev "dgram,id=n0,local.type=unix,local.path=$rundir/$role.sock,remote.type=unix,remote.path=$rundir/$peer.sock"
    -device "virtio-net-pci,netdev=n0,mac=52:54:00:00:02:0$n"
    -serial "file:$rundir/console-$role.log"
    -chardev "file,id=out,path=$rundir/stdout-$role.fifo" -serial chardev:out
    -chardev "file,id=err,path=$rundir/stderr-$role.fifo" -serial chardev:err
  )
  if [[ $role == a && -n $pcap ]]; then
    args+=(-object "filter-dump,id=f0,netdev=n0,file=$pcap")
  fi
  mkfifo "$rundir/stdout-$role.fifo" "$rundir/stderr-$role.fifo"
  sed -u "s/^/[$role] /" <"$rundir/stdout-$role.fifo" 3>&- &
  sed -u "s/^/[$role] /" <"$rundir/stderr-$role.fifo" >&2 3>&- &
  : >"$rundir/console-$role.log" # there even if qemu fails to start
  start_guest "$secs" "${args[@]}" </dev/null >"$rundir/qemu-$role.log" 2>&1 3>&-
}

# pair_through_up SECS PCAP READY CMD_A CMD_B: what cmd_pair does, in the
# pair that stays up in LAB_PAIR_DIR (scripts/lab.sh up --pair): the same
# commands, environment, order, prefixes and exit status, without the two
# boots. The capture of the cable is started and stopped through qemu's
# monitor (a filter-dump object added to a's NIC, then deleted, which
# closes the file).
pair_through_up() {
  local secs=$1 pcap=$2 ready=$3 cmd_a=$4 cmd_b=$5 dir=$LAB_PAIR_DIR out pid_a
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
  pair_exec a 192.0.2.1 192.0.2.2 "$secs" "$cmd_a" "$out" &
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
    pair_exec b 192.0.2.2 192.0.2.1 "$secs" "$cmd_b" "$out" || status_b=$?
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

# pair_exec ROLE ADDR PEER SECS CMD OUT: CMD (a bash command string) in
# guest ROLE of the pair that stays up, with pair mode's environment; its
# stdout and stderr lines prefixed "[ROLE] ", stdout also kept in
# OUT/ROLE.out (for --ready).
pair_exec() {
  local role=$1 addr=$2 peer=$3 secs=$4 cmd=$5 out=$6
  "$SELF_DIR/lab.sh" exec --guest "$role" --timeout "$secs" -- \
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
