# shellcheck shell=bash
# lab/cmd_shell.sh: `lab.sh shell` (part of scripts/lab.sh; sourced, never
# run).

# The run guest with an interactive bash on this terminal; exits with
# qemu's status.
cmd_shell() {
  [[ $# -eq 0 ]] || misuse "shell takes no arguments"
  check_host
  local lab rundir args qemu_status=0
  lab=$(prepare_lab)
  rundir=$(new_rundir)
  clean_up_on_exit "$rundir"
  write_guest_files "$rundir/share" a shell dummy0 192.0.2.1/24 ""
  mapfile -d '' -t args < <(qemu_base_args "$lab" a "$rundir")
  # The console on this terminal; Ctrl-C goes to the guest, Ctrl-A X quits.
  # shellcheck disable=SC2054 # qemu's options are comma-separated lists
  args+=(
    -nic none
    -chardev stdio,id=con,mux=on,signal=off
    -serial chardev:con -mon chardev=con
  )
  echo "lab.sh: booting the lab guest; 'exit' powers it off (Ctrl-A X kills it)" >&2
  qemu-system-x86_64 "${args[@]}" || qemu_status=$?
  exit "$qemu_status"
}
