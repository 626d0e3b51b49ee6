# Grader of exercise 18.1: a server whose buffers need more than its soft
# memlock limit raises the soft limit to the hard one before it listens,
# and serves the sum; one whose hard limit is too low says so at once.
# Both runs drop CAP_IPC_LOCK, as a container without --cap-add=IPC_LOCK.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="server, before it listens: getrlimit(RLIMIT_MEMLOCK); need = both buffers rounded up to pages; soft < need: hard < need -> wb::fail, else setrlimit with rlim_cur = rlim_max, and the line"

# An IPv4 address of the RDMA netdev under EX_DEV (the lab: 192.0.2.1 on dummy0).
rdma_ip() {
  # shellcheck disable=SC2016 # $1 is the inner bash's argument
  ex_sh 'netdev=$(rdma link show "$1/1" | sed -n "s/.* netdev \([^ ]*\).*/\1/p")
    ip -4 -o addr show dev "$netdev"' _ "$EX_DEV" | awk '{ sub(/\/.*/, "", $4); print $4; exit }'
}

grade() {
  # util-linux's setpriv and prlimit by path (busybox's setpriv has no --bounding-set).
  local drop=(/usr/bin/setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock /usr/bin/prlimit)
  local host a=$((RANDOM % 2000 - 1000)) b=$((RANDOM % 2000 - 1000)) got
  host=$(rdma_ip)
  [[ -n $host ]] || {
    ex_fail "an IPv4 address on $EX_DEV's netdev (rdma link show)" "none"
    return
  }
  # 1 MiB and a page to pin, soft limit 64 KiB, hard limit 4 MiB: raise it.
  ex_server "${drop[@]}" --memlock=65536:4194304 "$1" -s 1048576 -p "$EX_PORT" --timeout 15
  if ! ex_wait_line "$EX_SERVER_OUT" "listening on"; then
    ex_fail "the server (soft limit 64 KiB, hard 4096 KiB) to listen" "$(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  ex_run "$1" -p "$EX_PORT" --timeout 15 "$host" -- "$a" "$b"
  ex_wait_server
  got=$(ex_line "$EX_SERVER_OUT" '^memlock: raised' || echo "no 'memlock: raised' line")
  if [[ $got != "memlock: raised the RLIMIT_MEMLOCK soft limit from 64 KiB to 4096 KiB, the hard limit" ]]; then
    ex_fail "the server: 'memlock: raised the RLIMIT_MEMLOCK soft limit from 64 KiB to 4096 KiB, the hard limit'" "$got"
    return
  fi
  if ((EX_SERVER_STATUS != 0 || EX_STATUS != 0)) || [[ $(ex_line "$EX_OUT" '^result: ') != "result: $a + $b = $((a + b))" ]]; then
    ex_fail "the sum, 'result: $a + $b = $((a + b))', and both sides exit 0" \
      "client $EX_STATUS: $(ex_tail "$EX_OUT"); server $EX_SERVER_STATUS"
    return
  fi
  # Hard limit 64 KiB: nothing can help; say so before listening, exit 1.
  ex_run "${drop[@]}" --memlock=65536:65536 "$1" -s 1048576 -p "$((EX_PORT + 1))" --timeout 3
  got=$(ex_line "$EX_OUT" 'memlock: the server' || echo "no 'memlock: the server ...' line")
  if ((EX_STATUS != 1)) || grep -q "listening on" "$EX_OUT" ||
    [[ $got != "ex18_1: memlock: the server's buffers pin 1028 KiB, above the hard RLIMIT_MEMLOCK of 64 KiB" ]]; then
    ex_fail "with a 64 KiB hard limit: exit 1 before listening, 'ex18_1: memlock: the server's buffers pin 1028 KiB, above the hard RLIMIT_MEMLOCK of 64 KiB'" \
      "exit status $EX_STATUS: $got"
  fi
}
