#!/bin/sh
# lab/guest_exec.sh BUSYBOX SECS CWD CMD [ARGS...]: one `lab.sh exec` in the guest
# of a lab that stays up (busybox sh, run by dropbear for an ssh session of
# scripts/lab/cmd_up.sh; lab.sh copies it to the guest's /run/lab).
#
# CMD runs in CWD, in a process group of its own, stdin /dev/null, stdout
# and stderr the session's. Its exit status is ours; 124 if it outlived SECS
# (then TERM to its group, KILL 3 s later). Our stdin is the host's word: a
# line with a signal name passes it on to the group; its end (the host's
# exec was killed) KILLs the group.

busybox=$1 secs=$2
cd "$3" || exit 125
shift 3
# While this file is there a command runs, and the lab is not idle
# (guest.sh's idle_stop); its content says whether it timed out.
mark=/run/lab-exec/$$
: >"$mark"
# Not a process group leader (an asynchronous list has none without job
# control): busybox setsid makes CMD lead a new session and group, same PID.
setsid "$@" </dev/null &
pid=$!
exec 3<&0 # an asynchronous list's stdin is /dev/null unless redirected
(
  while read -r sig; do kill -s "$sig" -- "-$pid"; done
  kill -s KILL -- "-$pid"
) <&3 2>/dev/null &
host=$!
(
  trap 'kill $sleeper; exit 0' TERM
  # By its path: a process named sleep would be CMD's to find (pgrep -x).
  "$busybox" sleep "$secs" &
  sleeper=$!
  wait $sleeper
  echo timeout >"$mark"
  kill -s TERM -- "-$pid"
  "$busybox" sleep 3
  kill -s KILL -- "-$pid"
) 2>/dev/null &
timer=$!
# 2>/dev/null: busybox sh would say "Terminated" when a signal ended CMD.
wait $pid 2>/dev/null
status=$?
kill $host $timer 2>/dev/null
[ ! -s "$mark" ] || status=124
rm -f "$mark"
exit $status
