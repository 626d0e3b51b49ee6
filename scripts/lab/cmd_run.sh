# shellcheck shell=bash
# lab/cmd_run.sh: `lab.sh run [--timeout SECS] -- CMD [ARGS...]` (part of
# scripts/lab.sh; sourced, never run).

# Boot one guest (no NIC; rxe0 on dummy0 = 192.0.2.1/24) as `up` does, in a
# folder of its own, run CMD there as `exec` does (its stdout and stderr
# apart, its status passed through, 124 after SECS), and take it down.
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
  local state status=0
  state=$(new_rundir)
  clean_up_on_exit "$state"
  up_guest run "$state" a dummy0 192.0.2.1/24 "" -nic none
  agent exec "$state" "$timeout" "$(guest_workdir "$state/xfer")" -- "$@" 8>&- 9>&- || status=$?
  exit "$status"
}
