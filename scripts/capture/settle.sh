# shellcheck shell=bash
# capture/settle.sh: wait for a capture's last packets to reach its file
# (sourced by capture/command.sh and capture/netns.sh, never run).
#
# libpcap on Linux hands dumpcap a block of packets at a time, once the
# block is 250 ms old (dumpcap's read timeout), and a block still open when
# the capture stops is lost (libpcap pull request 1495). A fixed wait is a
# guess about the host's load: a half second once lost a lesson's last four
# packets in a loaded guest.

# capture_settle FILE PID: return once FILE has not grown for 1 s (four
# such blocks), after 10 s at most, or at once if process PID (the
# capturing tshark or dumpcap) has ended; the caller says why then.
capture_settle() {
  local file=$1 pid=$2 size=-1 still=0 now i
  for ((i = 0; i < 40 && still < 4; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.25
    now=$(stat -c %s "$file" 2>/dev/null) || now=0
    if [[ $now == "$size" ]]; then still=$((still + 1)); else still=0 size=$now; fi
  done
}
