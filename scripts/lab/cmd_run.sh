# shellcheck shell=bash
# lab/cmd_run.sh: `lab.sh run [--timeout SECS] -- CMD [ARGS...]` (part of
# scripts/lab.sh; sourced, never run).

# Boot one guest (no NIC; rxe0 on dummy0 = 192.0.2.1/24), run CMD there,
# stream its stdout and stderr to ours, exit with its status.
cmd_run() {
  local timeout=600
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --timeout)
        timeout=$(parse_timeout "${2:-}")
        shift 2
        ;;
      --)
        shift
        break
        ;;
      *) misuse "run: unknown option '$1' (the command goes after --)" ;;
    esac
  done
  [[ $# -gt 0 ]] || misuse "run: no command (scripts/lab.sh run -- CMD [ARGS...])"

  check_host
  local lab rundir args qemu_status=0
  lab=$(prepare_lab)
  rundir=$(new_rundir)
  clean_up_on_exit "$rundir"
  write_guest_files "$rundir/share" a run dummy0 192.0.2.1/24 "" "$@"
  mapfile -d '' -t args < <(qemu_base_args "$lab" a "$rundir")
  # shellcheck disable=SC2054 # qemu's options are comma-separated lists
  args+=(
    -nic none
    -serial "file:$rundir/console.log" # ttyS0: console
    # ttyS1 and ttyS2: CMD's stdout and stderr, written straight to our
    # own fds 1 and 2 (passed as 5 and 6: qemu's -add-fd refuses 0-2).
    # append=on: no truncation. Re-opening /dev/stdout instead would clobber
    # a log file we share with other writers.
    -add-fd fd=5,set=5 -chardev file,id=out,path=/dev/fdset/5,append=on -serial chardev:out
    -add-fd fd=6,set=6 -chardev file,id=err,path=/dev/fdset/6,append=on -serial chardev:err
  )
  : >"$rundir/console.log" # there even if qemu fails to start
  start_guest "$timeout" "${args[@]}" </dev/null 5>&1 6>&2 3>&-
  wait "$!" || qemu_status=$?
  exit "$(guest_result "$rundir/console.log" "$qemu_status" "$timeout")"
}
