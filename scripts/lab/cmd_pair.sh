# shellcheck shell=bash
# lab/cmd_pair.sh: `lab.sh pair [--pcap FILE] [--timeout SECS] [--ready TEXT]
# --a 'CMD' --b 'CMD'` (part of scripts/lab.sh; sourced, never run).

# Two guests, a (192.0.2.1) and b (192.0.2.2), joined by a virtual cable;
# each runs its bash command string; b starts once a has started its own,
# or with --ready once a's command has printed a line containing TEXT.
# Exit status: a's if non-zero, else b's.
cmd_pair() {
  local timeout=600 pcap="" cmd_a="" cmd_b="" ready=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
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
  if [[ -n $pcap ]]; then
    # qemu writes the pcap; give it an absolute path.
    [[ $pcap == /* ]] || pcap="$PWD/$pcap"
    : >"$pcap" || misuse "cannot write --pcap $pcap"
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
