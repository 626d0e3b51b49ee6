# shellcheck shell=bash
# lab/cmd_up.sh: `lab.sh up`, `exec`, `status`, `down`: a lab guest that
# stays up (part of scripts/lab.sh; sourced, never run).
#
# One lab per checkout: its folder, STATE = the cache's up/<hash of the
# checkout's path>, holds qemu's arguments, the console log, the guest
# agent's socket (qga.sock) and the supervisor's (exec.sock), and xfer/, the
# one host folder the guest may write (tests keep their temporary files
# there, so both sides see them at the same path). lab/agent.py is the
# supervisor and the client; see its header.

# up_state_dir: this checkout's lab folder (LAB_UP_DIR, if set, instead:
# the lab's own tests run a second lab beside the one the suites use).
# Refused (exit 125) if another user could have made or planted it
# (private_dir); it need not be there yet.
up_state_dir() {
  local dir
  if [[ -n ${LAB_UP_DIR:-} ]]; then
    [[ $LAB_UP_DIR == /* ]] || misuse "LAB_UP_DIR must be an absolute path, not '$LAB_UP_DIR'"
    dir=$LAB_UP_DIR
  else
    dir="$(cache_dir)/up/$(printf '%s' "$CHECKOUT" | sha256sum | cut -c1-12)"
  fi
  private_dir "$dir" || true
  echo "$dir"
}

# agent CMD ARGS...: lab/agent.py with Debian's own python3, isolated (a
# version manager's python3 first on PATH costs seconds and may lack asyncio).
agent() {
  "$(agent_python)" -I -S "$SELF_DIR/lab/agent.py" "$@"
}
agent_python() {
  if [[ -x /usr/bin/python3 ]]; then echo /usr/bin/python3; else echo python3; fi
}

# parse_idle: LAB_IDLE (seconds a lab nobody uses stays up), default 1800.
parse_idle() {
  local idle=${LAB_IDLE:-1800}
  [[ $idle =~ ^[1-9][0-9]*$ ]] || misuse "LAB_IDLE needs a number of seconds, not '$idle'"
  echo "$idle"
}

# shellcheck disable=SC2120 # exec --up calls it with none
# cmd_up [--pair]: one lab for this checkout, or with --pair two guests
# joined by a cable (LAB_PAIR_DIR names their folder) for `lab.sh pair`.
cmd_up() {
  local pair=""
  case "${1:-}" in
    --pair) pair=1 ;;
    "") ;;
    *) misuse "up takes no arguments but --pair" ;;
  esac
  [[ $# -le 1 ]] || misuse "up takes no arguments but --pair"
  if [[ -z $pair ]]; then
    export LAB_DEFAULT_CPUS=${LAB_DEFAULT_CPUS:-2}
    up_guest "$(up_state_dir)" a dummy0 192.0.2.1/24 "" -nic none
    return
  fi
  local dir
  dir=$(pair_dir)
  private_dir "$dir" --create
  # One vCPU each, as a cold pair's: two guests already take both cores.
  export LAB_DEFAULT_CPUS=1
  # Each guest: its end of the cable (Unix datagram sockets, nothing
  # outside this host), as in a cold `lab.sh pair`; a also answers qemu's
  # monitor protocol (QMP), which starts and stops a capture of the cable.
  # shellcheck disable=SC2054 # qemu's options are comma-separated lists
  up_guest "$dir/a" a eth0 192.0.2.1/24 192.0.2.2 \
    -netdev "dgram,id=n0,local.type=unix,local.path=$dir/a.sock,remote.type=unix,remote.path=$dir/b.sock" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:00:02:01 \
    -qmp "unix:$dir/a/qmp.sock,server=on,wait=off" &
  local a=$!
  # shellcheck disable=SC2054
  up_guest "$dir/b" b eth0 192.0.2.2/24 192.0.2.1 \
    -netdev "dgram,id=n0,local.type=unix,local.path=$dir/b.sock,remote.type=unix,remote.path=$dir/a.sock" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:00:02:02 || exit $?
  wait "$a" || exit $?
}

# pair_dir: the folder of the pair that stays up (LAB_PAIR_DIR), refused
# as up_state_dir's is.
pair_dir() {
  [[ -n ${LAB_PAIR_DIR:-} ]] || misuse "--pair needs LAB_PAIR_DIR, a folder of yours for the pair (e.g. LAB_PAIR_DIR=\$(mktemp -d))"
  [[ $LAB_PAIR_DIR == /* ]] || misuse "LAB_PAIR_DIR must be an absolute path, not '$LAB_PAIR_DIR'"
  private_dir "$LAB_PAIR_DIR" || true
  echo "$LAB_PAIR_DIR"
}

# up_guest STATE ROLE NETDEV ADDR PEER_ADDR QEMU_ARGS...: boot the guest
# whose folder is STATE and return once its guest agent answers; nothing
# to do if it is up already.
up_guest() {
  local state=$1 role=$2 netdev=$3 addr=$4 peer=$5 idle lab kernel args
  shift 5
  idle=$(parse_idle)
  private_dir "$state" --create
  # One `up` at a time per lab: a second one waits, then finds it up.
  exec 8>"$state/lock"
  flock 8
  if agent status "$state" >/dev/null; then
    # LAB_KERNEL: the lab that is up must be the kernel asked for.
    up_kernel_matches "$state" ||
      misuse "the lab that is up runs $(cat "$state/kernel"), not LAB_KERNEL=$(lab_suite): scripts/lab.sh down first"
    echo "lab.sh: a lab is already up for $CHECKOUT: $(agent status "$state")" >&2
    return 0
  fi
  check_host
  command -v qemu-ga >/dev/null ||
    fail "qemu-ga not found: run scripts/install_deps.sh (package qemu-guest-agent)"
  [[ ${#state} -lt 90 ]] || fail "lab folder path too long for a socket ($state): set XDG_CACHE_HOME to a shorter folder of yours"
  lab=$(prepare_lab)
  kernel=$(head -n 1 <<<"$lab")
  # Which kernel this lab boots, "SUITE VERSION", for status and up.
  echo "$(lab_suite) $(kernel_version "$kernel")" >"$state/kernel"
  guest_cpus >"$state/cpus" # for pair, which runs in a pair that is up only when they match
  rm -rf "$state/share" "$state/xfer" "$state"/{console.log,qemu.log,agent.log,stopped,qga.sock,exec.sock,qmp.sock}
  mkdir -p "$state/share" "$state/xfer"
  chmod 1777 "$state/xfer"
  write_guest_files "$state/share" "$role" up "$netdev" "$addr" "$peer"
  printf 'XFER=%q\n' "$state/xfer" >>"$state/share/$role.conf"
  mapfile -d '' -t args < <(qemu_base_args "$lab" "$role" "$state")
  # shellcheck disable=SC2054 # qemu's options are comma-separated lists
  args=(qemu-system-x86_64 "${args[@]}" "$@"
    -serial "file:$state/console.log"
    # The guest's writable share: xfer/, seen at the same path. mapped-file:
    # what the guest makes there is a plain file on the host, its mode,
    # owner and kind kept aside in .virtfs_metadata/, so that a symlink the
    # guest makes is no symlink for a host writer to follow.
    -virtfs "local,path=$state/xfer,mount_tag=labxfer,security_model=mapped-file"
    # qemu-ga's port: the guest agent's requests and answers.
    -device virtio-serial-pci
    -chardev "socket,id=qga,path=$state/qga.sock,server=on,wait=off"
    -device virtserialport,chardev=qga,name=org.qemu.guest_agent.0
  )
  printf '%s\0' "${args[@]}" >"$state/qemu.args"
  : >"$state/console.log"
  echo "lab.sh: booting a lab that stays up ($(cat "$state/kernel"), $(guest_cpus) vCPU${peer:+, guest $role of a pair}); it stops after $idle s unused, or with scripts/lab.sh down" >&2
  agent up "$state" "$idle" 8>&- || exit "$STATUS_LAB_FAILED"
  echo "lab.sh: up; run commands in it with scripts/lab.sh exec -- CMD" >&2
}

cmd_exec() {
  local timeout=600 up="" guest=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --timeout)
        timeout=$(parse_timeout "${2:-}")
        shift 2
        ;;
      --guest)
        [[ ${2:-} == a || ${2:-} == b ]] || misuse "exec: --guest takes a or b (a guest of the pair in LAB_PAIR_DIR), not '${2:-}'"
        guest=$2
        shift 2
        ;;
      --up)
        up=1
        shift
        ;;
      --)
        shift
        break
        ;;
      *) misuse "exec: unknown option '$1' (the command goes after --)" ;;
    esac
  done
  [[ $# -gt 0 ]] || misuse "exec: no command (scripts/lab.sh exec -- CMD [ARGS...])"
  local state status=0
  state=$(up_state_dir)
  if [[ -n $guest ]]; then
    state="$(pair_dir)/$guest"
    private_dir "$state" || true
  fi
  # LAB_KERNEL set: the lab that is up must run that kernel.
  [[ -z ${LAB_KERNEL:-} || ! -e $state/kernel ]] || up_kernel_matches "$state" ||
    ! agent status "$state" >/dev/null ||
    misuse "the lab that is up runs $(cat "$state/kernel"), not LAB_KERNEL=$LAB_KERNEL: scripts/lab.sh down first"
  if [[ -n $up && -z $guest ]] && ! agent status "$state" >/dev/null; then
    # --up: no lab is up, so this command brings one up for CMD alone.
    # shellcheck disable=SC2119 # up takes no arguments
    (cmd_up) || exit $?
    agent exec "$state" "$timeout" "$(guest_workdir "$state/xfer")" -- "$@" 8>&- 9>&- || status=$?
    agent down "$state"
    exit "$status"
  fi
  exec 8>&- 9>&-
  # exec: the PID of `lab.sh exec` is the client's own, so that a signal
  # sent to it reaches the command in the guest (the client passes it on).
  exec "$(agent_python)" -I -S "$SELF_DIR/lab/agent.py" exec "$state" "$timeout" "$(guest_workdir "$state/xfer")" -- "$@"
}

# up_states [--pair]: the folder of this checkout's lab, or of the pair's
# two guests, one a line.
up_states() {
  case "${1:-}" in
    --pair)
      local dir guest
      dir=$(pair_dir)
      for guest in a b; do
        private_dir "$dir/$guest" || true
        echo "$dir/$guest"
      done
      ;;
    "") up_state_dir ;;
    *) misuse "unknown argument '$1' (only --pair)" ;;
  esac
}

cmd_status() {
  [[ $# -le 1 ]] || misuse "status takes no arguments but --pair"
  local state states status=0
  states=$(up_states "$@")
  while read -r state; do
    agent status "$state" || status=$?
    [[ $status != 0 || ! -s $state/kernel ]] || echo "lab.sh: kernel $(cat "$state/kernel")"
  done <<<"$states"
  return "$status"
}

# up_kernel_matches STATE: true if the lab up in STATE booted the kernel
# LAB_KERNEL asks for (a lab with no record predates LAB_KERNEL: bookworm).
up_kernel_matches() {
  local running=bookworm
  [[ ! -s $1/kernel ]] || read -r running _ <"$1/kernel"
  [[ $running == "$(lab_suite)" ]]
}

# up_cpus_match STATE: true unless LAB_CPUS is set and the lab up in STATE
# has another number of vCPUs (a lab with no record counts as a match).
up_cpus_match() {
  [[ -z ${LAB_CPUS:-} || ! -s $1/cpus ]] || [[ $(<"$1/cpus") == "$LAB_CPUS" ]]
}

cmd_down() {
  [[ $# -le 1 ]] || misuse "down takes no arguments but --pair"
  local state states
  states=$(up_states "$@")
  while read -r state; do
    (down_one "$state")
  done <<<"$states"
}

down_one() {
  local state=$1
  if ! private_dir "$state"; then
    echo "lab.sh: no lab was up" >&2
    return 0
  fi
  exec 8>"$state/lock"
  flock 8
  if agent status "$state" >/dev/null; then
    agent down "$state"
    echo "lab.sh: down" >&2
  else
    agent down "$state"
    echo "lab.sh: no lab was up" >&2
  fi
}

# cmd_xfer: the path of the folder the lab guest and the host both see (and
# the guest may write), for TMPDIR.
cmd_xfer() {
  [[ $# -eq 0 ]] || misuse "xfer takes no arguments"
  echo "$(up_state_dir)/xfer"
}
