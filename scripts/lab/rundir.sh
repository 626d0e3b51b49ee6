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

# private_dir PATH [--create]: make sure PATH is a folder no other user can
# have made, planted or can change, or exit 125 saying why, before anything
# is opened in it: every folder above it belongs to root or to us and no one
# else may write it (unless it is sticky, as /tmp is, where no one may
# rename what is ours); PATH itself, if there, is a real folder (not a
# symlink) of ours that no one else may write. A folder our own private
# group (named as we are) may write counts as ours. Not there: with
# --create, each missing folder is made by one mkdir, mode 700 (never
# mkdir -p, which would go on through whatever it finds); without, returns
# 1.
private_dir() {
  local path=$1 create=${2:-} prefix="" part have=() missing=()
  local type uid mode group i last why
  [[ $path == /* ]] || fail "the lab's folder must be an absolute path, not '$path'"
  IFS=/ read -ra parts <<<"${path#/}"
  for part in "${parts[@]}"; do
    [[ -n $part ]] || continue
    [[ $part != . && $part != .. ]] || fail "the lab's folder must be a path without . or .., not '$path'"
    prefix+="/$part"
    if [[ ${#missing[@]} -eq 0 && (-e $prefix || -L $prefix) ]]; then
      have+=("$prefix")
    else
      missing+=("$prefix")
    fi
  done
  ((${#have[@]} + ${#missing[@]})) || fail "the lab's folder cannot be /"
  # One stat for every folder there (exec runs this each time).
  i=0
  while IFS='|' read -r type uid mode group; do
    prefix=${have[i++]}
    last=""
    [[ $prefix != "${have[-1]}" || ${#missing[@]} -gt 0 ]] || last=1
    if [[ $type == "symbolic link" ]]; then
      [[ -z $last ]] || fail "$prefix is a symlink: the lab's folder must be a real folder of yours"
      [[ $uid == 0 || $uid == "$EUID" ]] ||
        fail "$prefix is a symlink of uid $uid's: the lab's folder must be under folders of yours or root's"
      continue
    fi
    [[ $type == directory ]] || fail "$prefix is not a folder"
    if [[ -n $last ]]; then
      [[ $uid == "$EUID" ]] ||
        fail "$prefix belongs to uid $uid, not to you: the lab's folder must be yours alone"
      why=$(others_may_write "$mode" "$group") || true
      [[ -z $why ]] || fail "$prefix may be written by $why: the lab's folder must be yours alone"
    else
      [[ $uid == 0 || $uid == "$EUID" ]] ||
        fail "$prefix belongs to uid $uid: the lab's folder must be under folders of yours or root's"
      # Sticky (/tmp): others may write it, but not rename what is ours.
      why=""
      ((8#$mode & 8#1000)) || why=$(others_may_write "$mode" "$group") || true
      [[ -z $why ]] || fail "$prefix may be written by $why: the lab's folder must not be under it"
    fi
  done < <(stat -c '%F|%u|%a|%G' -- "${have[@]}")
  ((${#missing[@]})) || return 0
  [[ -n $create ]] || return 1
  for prefix in "${missing[@]}"; do
    mkdir -m 700 -- "$prefix" || fail "could not make the lab's folder $prefix"
  done
}

# others_may_write MODE GROUP: who else may write a folder of octal MODE
# and group GROUP ("others (mode 777)", "group g (mode 775)"), or nothing
# (a group named as we are is our own private group).
others_may_write() {
  if ((8#$1 & 8#002)); then
    echo "others (mode $1)"
  elif ((8#$1 & 8#020)) && [[ $2 != "$(id -un)" ]]; then
    echo "group $2 (mode $1)"
  fi
}
