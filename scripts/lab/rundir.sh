# shellcheck shell=bash
# lab/rundir.sh: the per-run folder, and the files the guest reads from it
# (part of scripts/lab.sh; sourced, never run).
#
# RUNDIR (mode 700, the host's own: console logs, fifos, sockets) is never
# shared. RUNDIR/share is, read-only, at the guest's /lab: guest.sh, and per
# role (a, or a and b in pair mode) ROLE.conf for lab_guest.sh and ROLE.cmd,
# the command.

# new_rundir: make a per-run folder and its share/; print its path.
new_rundir() {
  local rundir
  rundir=$(mktemp -d "${TMPDIR:-/tmp}/lab.XXXXXX")
  mkdir "$rundir/share"
  echo "$rundir"
}

# clean_up_on_exit RUNDIR: on exit, and on Ctrl-C or kill, stop this run's
# guests (each `timeout` passes the signal on to its qemu) and remove
# RUNDIR, unless LAB_KEEP is set.
clean_up_on_exit() {
  # shellcheck disable=SC2064 # RUNDIR is known now
  trap "stop_background_jobs; [[ -n \${LAB_KEEP:-} ]] || rm -rf $(printf %q "$1")" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

stop_background_jobs() {
  local pid
  for pid in $(jobs -p); do
    kill "$pid" 2>/dev/null || true
  done
}

# guest_workdir [ALSO]: the guest's working folder, the current one if inside the
# checkout (or in the folder ALSO, which the guest sees too: a lab's xfer/),
# else the checkout's top. Physical paths: git names the checkout by its
# real path, not a symlink's.
guest_workdir() {
  local here also=${1:-$CHECKOUT}
  here=$(pwd -P)
  case "$here/" in
    "$CHECKOUT"/* | "$also"/*) echo "$here" ;;
    *) echo "$CHECKOUT" ;;
  esac
}

# write_guest_files SHARE ROLE MODE NETDEV ADDR PEER_ADDR [CMD [ARGS...]]
#   Write lab_guest.sh, ROLE.conf and ROLE.cmd into SHARE. MODE is run,
#   shell or pair; ADDR is NETDEV's address/prefix; PEER_ADDR is the other
#   guest's address (pair mode only, else empty). No CMD: an interactive bash.
write_guest_files() {
  local share=$1 role=$2 mode=$3 netdev=$4 addr=$5 peer_addr=$6
  shift 6
  local name size
  cp "$SELF_DIR/lab_guest.sh" "$share/guest.sh"
  {
    printf 'MODE=%q\nCHECKOUT=%q\nNETDEV=%q\nADDR=%q\n' "$mode" "$CHECKOUT" "$netdev" "$addr"
    # The peer's MAC follows from its address: qemu gives 192.0.2.N the NIC
    # 52:54:00:00:02:0N (cmd_pair.sh, cmd_up.sh).
    [[ -z $peer_addr ]] || printf 'PEER=%q\nPEER_MAC=%q\n' "$peer_addr" "52:54:00:00:02:0${peer_addr##*.}"
    if [[ $mode == shell ]] && size=$(stty size 2>/dev/null); then
      printf 'ROWS=%q\nCOLS=%q\n' "${size% *}" "${size#* }"
    fi
  } >"$share/$role.conf"
  {
    echo "# The command lab.sh runs in the guest (bash, env reset)."
    printf 'export LAB=1 HOME=/tmp/home PATH=%q TERM=%q\n' "$PATH" "${TERM:-dumb}"
    for name in ${LAB_ENV:-}; do
      [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || misuse "LAB_ENV: '$name' is not a variable name"
      if [[ -n ${!name+set} ]]; then
        printf 'export %s=%q\n' "$name" "${!name}"
      fi
    done
    if [[ $mode == pair ]]; then
      printf 'export LAB_ROLE=%q LAB_ADDR=%q LAB_PEER_ADDR=%q\n' "$role" "${addr%/*}" "$peer_addr"
    fi
    printf 'cd %q || exit 125\n' "$(guest_workdir "$CHECKOUT")"
    if [[ $# -eq 0 ]]; then
      printf 'export PS1=%q\n' 'lab:\w\$ '
      echo "exec bash --norc -i"
    else
      printf 'exec'
      printf ' %q' "$@"
      printf '\n'
    fi
  } >"$share/$role.cmd"
}
