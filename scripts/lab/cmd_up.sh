# shellcheck shell=bash
# lab/cmd_up.sh: `lab.sh up`, `exec`, `status`, `down`, `xfer`: a lab guest
# that stays up (part of scripts/lab.sh; sourced, never run).
#
# The channel is OpenSSH's: `up` starts an ssh master (ControlMaster) whose
# ProxyCommand is qemu itself, the guest's virtio-serial port lab.ssh on
# qemu's stdin and stdout, and dropbear in the guest at its other end
# (guest.sh). No network and no listening socket: the connection is a pipe
# between two processes of ours. Each `exec` is one session of that master
# (ssh -S), running guest_exec.sh; `down` is `ssh -O exit`, which ends
# qemu with the master. Nothing here signals a process by its PID.
#
# One lab per checkout: its folder, STATE = the cache's up/<hash of the
# checkout's path>, holds the keys, ssh's config and socket, the console log
# and xfer/, the one host folder the guest may write (tests keep their
# temporary files there, so both sides see them at the same path), and
# holders/, who uses the lab (up registers its caller; down stops the lab
# when the last one leaves).

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

# pair_dir: the folder of the pair that stays up (LAB_PAIR_DIR), refused
# as up_state_dir's is.
pair_dir() {
  [[ -n ${LAB_PAIR_DIR:-} ]] || misuse "--pair needs LAB_PAIR_DIR, a folder of yours for the pair (e.g. LAB_PAIR_DIR=\$(mktemp -d))"
  [[ $LAB_PAIR_DIR == /* ]] || misuse "LAB_PAIR_DIR must be an absolute path, not '$LAB_PAIR_DIR'"
  private_dir "$LAB_PAIR_DIR" || true
  echo "$LAB_PAIR_DIR"
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

# lab_ssh STATE ARGS...: ssh through the master of the lab in STATE.
lab_ssh() {
  ssh -F "$1/ssh_config" "${@:2}"
}

# is_up STATE: true if the lab in STATE is up (its ssh master answers).
is_up() {
  [[ -e $1/ssh_config ]] && lab_ssh "$1" -O check lab 2>/dev/null
}

# shellcheck disable=SC2120 # exec --up calls it with none
# cmd_up [--pair]: one lab for this checkout, or with --pair two guests
# joined by a cable (LAB_PAIR_DIR names their folder) for `lab.sh pair`.
cmd_up() {
  [[ $# -eq 0 || ($# -eq 1 && $1 == --pair) ]] || misuse "up takes no arguments but --pair"
  if [[ -z ${1:-} ]]; then
    LAB_DEFAULT_CPUS=${LAB_DEFAULT_CPUS:-2} up_guest "$(up_state_dir)" a dummy0 192.0.2.1/24 "" -nic none
    return
  fi
  local dir
  dir=$(pair_dir)
  private_dir "$dir" --create
  # One vCPU each, as a cold pair's: two guests already take both cores.
  # Each guest: its end of the cable (Unix datagram sockets, nothing outside
  # this host), as in a cold `lab.sh pair`; a's monitor (QMP, on two fifos)
  # starts and stops a capture of the cable (qmp).
  # shellcheck disable=SC2054 # qemu's options are comma-separated lists
  LAB_DEFAULT_CPUS=1 up_guest "$dir/a" a eth0 192.0.2.1/24 192.0.2.2 \
    -netdev "dgram,id=n0,local.type=unix,local.path=$dir/a.sock,remote.type=unix,remote.path=$dir/b.sock" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:00:02:01 \
    -chardev "pipe,id=qmp,path=$dir/a/qmp" -mon chardev=qmp,mode=control &
  local a=$!
  # shellcheck disable=SC2054
  LAB_DEFAULT_CPUS=1 up_guest "$dir/b" b eth0 192.0.2.2/24 192.0.2.1 \
    -netdev "dgram,id=n0,local.type=unix,local.path=$dir/b.sock,remote.type=unix,remote.path=$dir/a.sock" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:00:02:02 || exit $?
  wait "$a" || exit $?
}

# up_guest STATE ROLE NETDEV ADDR PEER_ADDR QEMU_ARGS...: boot the guest
# whose folder is STATE and return once ssh reaches it; if it is up
# already, say so. Either way, this lab.sh's caller holds it (hold).
up_guest() {
  local state=$1 role=$2 netdev=$3 addr=$4 peer=$5 idle lab kernel args tool
  shift 5
  idle=${LAB_IDLE:-1800}
  [[ $idle =~ ^[1-9][0-9]*$ ]] || misuse "LAB_IDLE needs a number of seconds, not '$idle'"
  private_dir "$state" --create
  # One `up` or `down` at a time per lab.
  exec 8>"$state/lock"
  flock 8
  if is_up "$state"; then
    # LAB_KERNEL: the lab that is up must be the kernel asked for.
    up_kernel_matches "$state" ||
      misuse "the lab that is up runs $(cat "$state/kernel"), not LAB_KERNEL=$(lab_suite): scripts/lab.sh down first"
    hold "$state" "${LAB_HOLDER:-$PPID}"
    echo "lab.sh: a lab is already up for $CHECKOUT: $(lab_status "$state")" >&2
    return 0
  fi
  check_host
  for tool in ssh ssh-keygen dropbear dropbearkey; do
    command -v "$tool" >/dev/null || fail "$tool not found: run scripts/install_deps.sh (packages openssh-client, dropbear-bin)"
  done
  [[ ${#state} -lt 90 ]] || fail "lab folder path too long for a socket ($state): set XDG_CACHE_HOME to a shorter folder of yours"
  lab=$(prepare_lab)
  kernel=$(head -n 1 <<<"$lab")
  # Which kernel this lab boots, "SUITE VERSION", for status and up.
  echo "$(lab_suite) $(kernel_version "$kernel")" >"$state/kernel"
  guest_cpus >"$state/cpus" # for pair, which runs in a pair that is up only when they match
  rm -rf "$state"/{share,xfer,holders,ssh_config,ssh.sock,known_hosts,id,id.pub,console.log,qemu.log,ssh.log,stopped,qemu.pid}
  mkdir -p "$state/share" "$state/xfer" "$state/holders"
  # qemu's monitor, if asked for (up --pair's guest a), speaks on these.
  rm -f "$state"/qmp.{in,out}
  mkfifo "$state"/qmp.{in,out}
  chmod 1777 "$state/xfer"
  write_guest_files "$state/share" "$role" up "$netdev" "$addr" "$peer"
  printf 'XFER=%q\nIDLE=%q\nBUSYBOX=%q\n' "$state/xfer" "$idle" "$(command -v busybox)" >>"$state/share/$role.conf"
  cp "$SELF_DIR/lab/guest_exec.sh" "$state/share/exec.sh"
  # The keys, made for this boot: the guest's host key and the master's.
  dropbearkey -t ed25519 -f "$state/share/host_key" >/dev/null 2>&1 || fail "dropbearkey failed"
  echo "lab $(dropbearkey -y -f "$state/share/host_key" | grep '^ssh-ed25519')" >"$state/known_hosts"
  ssh-keygen -q -t ed25519 -N '' -C lab -f "$state/id" || fail "ssh-keygen failed"
  cp "$state/id.pub" "$state/share/authorized_keys"
  mapfile -d '' -t args < <(qemu_base_args "$lab" "$role" "$state")
  # shellcheck disable=SC2054 # qemu's options are comma-separated lists
  args=(qemu-system-x86_64 "${args[@]}" "$@" -pidfile "$state/qemu.pid"
    -serial "file:$state/console.log"
    # The guest's writable share: xfer/, seen at the same path. mapped-file:
    # what the guest makes there (a symlink, a device) is a plain file on
    # the host, so that no host writer follows a symlink the guest planted.
    -virtfs "local,path=$state/xfer,mount_tag=labxfer,security_model=mapped-file"
    # ssh's channel: dropbear's port, on qemu's stdin and stdout.
    -device virtio-serial-pci -chardev stdio,id=ssh -device virtserialport,chardev=ssh,name=lab.ssh
  )
  write_ssh_config "$state" "${args[@]}"
  : >"$state/console.log"
  echo "lab.sh: booting a lab that stays up ($(cat "$state/kernel"), $(guest_cpus) vCPU${peer:+, guest $role of a pair}); it stops after $idle s unused, or with scripts/lab.sh down" >&2
  # The master: in a session of its own (Ctrl-C in this terminal does not
  # reach it); up returns once it has logged in.
  setsid ssh -F "$state/ssh_config" -N -o ControlMaster=yes -o ProxyCommand="sh ${state//%/%%}/qemu.sh" lab \
    </dev/null >>"$state/ssh.log" 2>&1 8>&- &
  local master=$! i
  for ((i = 0; i < 1800; i++)); do
    is_up "$state" && break
    if ! kill -0 "$master" 2>/dev/null; then
      echo "lab.sh: the lab guest did not come up: $(why_down "$state")" >&2
      sed 's/^/ssh: /' "$state/ssh.log" >&2
      exit "$STATUS_LAB_FAILED"
    fi
    sleep 0.1
  done
  is_up "$state" || fail "the lab guest did not answer ssh within 180 s; see $state/console.log"
  hold "$state" "${LAB_HOLDER:-$PPID}"
  echo "lab.sh: up; run commands in it with scripts/lab.sh exec -- CMD" >&2
}

# write_ssh_config STATE QEMU_ARGS...: STATE/ssh_config, everything ssh
# needs to reach this lab as `lab` (and nothing of ~/.ssh), and
# STATE/qemu.sh, the master's ProxyCommand: qemu, which dies with it.
write_ssh_config() {
  local state=$1 s=${1//%/%%}
  shift
  {
    printf 'exec 2>>%q\n' "$state/qemu.log"
    # shellcheck disable=SC2016 # $PPID is qemu.sh's: the master
    printf 'exec setpriv --pdeathsig KILL sh -c %q "$PPID"' "$NO_ORPHAN"
    printf ' %q' "$@"
    echo
  } >"$state/qemu.sh"
  cat >"$state/ssh_config" <<EOF
Host lab
  User root
  HostKeyAlias lab
  IdentityFile "$s/id"
  IdentitiesOnly yes
  UserKnownHostsFile "$s/known_hosts"
  StrictHostKeyChecking yes
  ControlPath "$s/ssh.sock"
  ControlMaster no
  BatchMode yes
  LogLevel ERROR
  # Only the master reaches the guest (its own ProxyCommand): never the network.
  ProxyCommand false
EOF
}

# hold STATE PID: PID (with its start time, so that a reused PID is not
# taken for it) uses the lab in STATE.
hold() {
  local start
  start=$(start_time "$2") && echo "$start" >"$1/holders/$2"
}

# start_time PID: the start time of process PID (field 22 of its stat), or
# false if there is none.
start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  read -ra stat <<<"$stat"
  echo "${stat[19]}"
}

# live_holders STATE: the PIDs that still hold the lab in STATE, one a line;
# a holder that has ended (or whose PID another process now has) is dropped.
live_holders() {
  local file
  for file in "$1"/holders/*; do
    [[ -e $file ]] || continue
    if [[ $(start_time "${file##*/}") == "$(<"$file")" ]]; then
      echo "${file##*/}"
    else
      rm -f "$file"
    fi
  done
}

# release STATE: drop the hold of the nearest of this lab.sh and its
# ancestors that holds the lab (the script or shell that ran up).
release() {
  local pid=$$ stat
  while ((pid > 1)); do
    if [[ -e $1/holders/$pid ]]; then
      rm -f "$1/holders/$pid"
      return
    fi
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    read -ra stat <<<"$stat"
    pid=${stat[1]}
  done
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
  [[ -z ${LAB_KERNEL:-} || ! -e $state/kernel ]] || up_kernel_matches "$state" || ! is_up "$state" ||
    misuse "the lab that is up runs $(cat "$state/kernel"), not LAB_KERNEL=$LAB_KERNEL: scripts/lab.sh down first"
  if [[ -n $up && -z $guest ]] && ! is_up "$state"; then
    # --up: no lab is up, so this command brings one up for CMD alone.
    # shellcheck disable=SC2119 # up takes no arguments
    (LAB_HOLDER=$$ cmd_up) || exit $?
    exec_in "$state" "$timeout" "$@" 8>&- 9>&- || status=$?
    (down_one "$state")
    exit "$status"
  fi
  exec 8>&- 9>&-
  exec_in "$state" "$timeout" "$@"
}

# exec_in STATE SECS CMD [ARGS...]: CMD in the lab in STATE (guest_exec.sh),
# with the guest's environment (LAB, HOME, PATH, TERM and LAB_ENV's names);
# its status is ours. A signal to us goes to CMD; if we are killed, the
# session's input ends and guest_exec.sh kills CMD.
exec_in() {
  local state=$1 secs=$2 name busybox status pid sig words
  busybox=$(command -v busybox)
  words=("$busybox" env -i LAB=1 HOME=/tmp/home "PATH=$PATH" "TERM=${TERM:-dumb}")
  shift 2
  # No master's socket: no lab (a test, not a process: exec is the hot path).
  if [[ ! -S $state/ssh.sock ]]; then
    echo "lab.sh: exec: $(why_down "$state")" >&2
    return "$STATUS_LAB_FAILED"
  fi
  for name in ${LAB_ENV:-}; do
    [[ ! $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ || -z ${!name+set} ]] || words+=("$name=${!name}")
  done
  words+=("$busybox" sh /run/lab/exec.sh "$busybox" "$secs" "$(guest_workdir "$state/xfer")" "$@")
  # The command line the guest's sh reads: each word in single quotes.
  local line=exec word
  for word in "${words[@]}"; do line+=" '${word//\'/\'\\\'\'}'"; done
  # ssh's stdin is a pipe from us (a coprocess's), its output our own.
  exec 3>&1
  coproc LAB_SSH { lab_ssh "$state" lab "$line" >&3 3>&-; }
  pid=$LAB_SSH_PID
  for sig in TERM INT HUP QUIT USR1 USR2; do
    # shellcheck disable=SC2064 # the signal's name is known now
    trap "echo $sig >&${LAB_SSH[1]}" "$sig"
  done
  # wait returns early (above 128) when a signal is trapped: wait again
  # while ssh runs.
  while :; do
    status=0
    wait "$pid" || status=$?
    if ((status <= 128)) || ! kill -0 "$pid" 2>/dev/null; then break; fi
  done
  if ((status == STATUS_TIMEOUT)); then
    echo "lab.sh: exec: $1 was still running after --timeout $secs s; killed in the guest" >&2
  elif ((status == 255)) && ! is_up "$state"; then
    # ssh's own 255: the lab was not up, or went away.
    echo "lab.sh: exec: $(why_down "$state")" >&2
    status=$STATUS_LAB_FAILED
  fi
  return "$status"
}

# why_down STATE: why the lab in STATE is not up: never started, stopped
# (and why), or its guest died (with the last lines of its console).
why_down() {
  local state=$1 why
  if [[ ! -e $state/console.log ]]; then
    echo "no lab is up (start one: scripts/lab.sh up)"
  elif why=$(cat "$state/stopped" 2>/dev/null) ||
    why=$(tr -d '\r' <"$state/console.log" | sed -n 's/^LAB_STOPPED: //p' | grep .); then
    echo "no lab is up (the last one stopped: $why); start one: scripts/lab.sh up"
  else
    echo "the lab guest died (qemu ended without down or an idle stop); scripts/lab.sh up starts a new one"
    echo "---- last lines of its console ($state/console.log) ----"
    tail -n 15 "$state/console.log" | tr -d '\r'
    echo "----"
  fi
}

# lab_status STATE: one line on the lab that is up in STATE.
lab_status() {
  local running idle
  # shellcheck disable=SC2016 # expanded by the guest's sh
  read -r running idle < <(lab_ssh "$1" lab 'set -- /run/lab-exec/*; [ -e "$1" ] || set --; echo $# $(($(date +%s) - $(stat -c %Y /run/lab-exec)))')
  echo "up since $(date -r "$1/qemu.pid" +%T) (qemu pid $(<"$1/qemu.pid")), ${running:-?} command(s) running, idle ${idle:-?} s of $(sed -n 's/^IDLE=//p' "$1"/share/?.conf) s before it stops by itself"
}

cmd_status() {
  [[ $# -le 1 ]] || misuse "status takes no arguments but --pair"
  local state states status=0
  states=$(up_states "$@")
  while read -r state; do
    if is_up "$state"; then
      echo "lab.sh: $(lab_status "$state")"
      echo "lab.sh: kernel $(cat "$state/kernel")"
    else
      echo "lab.sh: $(why_down "$state" | head -n 1)"
      status=3
    fi
  done <<<"$states"
  return "$status"
}

# up_kernel_matches STATE: true if the lab up in STATE booted the kernel
# LAB_KERNEL asks for.
up_kernel_matches() {
  local running=bookworm
  [[ ! -s $1/kernel ]] || read -r running _ <"$1/kernel"
  [[ $running == "$(lab_suite)" ]]
}

# up_cpus_match STATE: true unless LAB_CPUS is set and the lab up in STATE
# has another number of vCPUs.
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

# down_one STATE: release our hold on the lab in STATE; stop it if no one
# else holds it.
down_one() {
  local state=$1 others
  if ! private_dir "$state" || ! is_up "$state"; then
    echo "lab.sh: no lab was up" >&2
    return 0
  fi
  exec 8>"$state/lock"
  flock 8
  release "$state"
  others=$(live_holders "$state" | paste -sd' ')
  if [[ -n $others ]]; then
    echo "lab.sh: left up: still held by PID $others (each ran scripts/lab.sh up); it stops when the last one runs down, or after LAB_IDLE s unused" >&2
    return 0
  fi
  echo "lab.sh down" >"$state/stopped"
  lab_ssh "$state" -O exit lab 2>/dev/null || true
  # The master has ended qemu, its ProxyCommand: wait (up to 10 s) until
  # the process qemu.pid names is gone or is no longer this lab's qemu.
  local pid i
  pid=$(cat "$state/qemu.pid" 2>/dev/null) || pid=""
  for ((i = 0; i < 100; i++)); do
    if [[ -z $pid ]] || ! grep -qF -- "$state/" "/proc/$pid/cmdline" 2>/dev/null; then break; fi
    sleep 0.1
  done
  rm -f "$state/qemu.pid"
  echo "lab.sh: down" >&2
}

# qmp STATE JSON...: each JSON command to the monitor of the guest in
# STATE (QMP, on the fifos STATE/qmp.in and qmp.out), in order; false,
# saying so, at the first one qemu refuses.
qmp() {
  local state=$1 json id reply in out
  exec {in}>"$state/qmp.in" {out}<"$state/qmp.out"
  # Capabilities first (only the first client's counts; later ones are
  # refused, harmlessly).
  for json in '{"execute": "qmp_capabilities"}' "${@:2}"; do
    id="lab-$$-$RANDOM"
    echo "{\"id\": \"$id\", ${json#\{}" >&"$in"
    reply=""
    while [[ $reply != *"\"$id\""* ]]; do
      read -r -t 10 -u "$out" reply || {
        echo "lab.sh: qemu's monitor did not answer $json" >&2
        return 1
      }
    done
    if [[ $reply == *'"error"'* && $json != *qmp_capabilities* ]]; then
      echo "lab.sh: qemu refused $json: $reply" >&2
      return 1
    fi
  done
  exec {in}>&- {out}<&-
}

# cmd_xfer: the path of the folder the lab guest and the host both see (and
# the guest may write), for TMPDIR.
cmd_xfer() {
  [[ $# -eq 0 ]] || misuse "xfer takes no arguments"
  echo "$(up_state_dir)/xfer"
}
