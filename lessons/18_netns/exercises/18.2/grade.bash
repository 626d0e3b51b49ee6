# Grader of exercise 18.2: in a network namespace where no GID of any
# device is on a netdev (unshare -n: a new namespace with only lo), server
# and client refuse at once, naming the namespace; in the initial one the
# sum still goes through.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="count the GIDs 'in this namespace' in report_where's loop; none: wb::fail(\"no RDMA device has a GID on a netdev of this namespace (\" + self + \")\", ...) before any rdma_cm call"

# An IPv4 address of the RDMA netdev under EX_DEV (the lab: 192.0.2.1 on dummy0).
rdma_ip() {
  # shellcheck disable=SC2016 # $1 is the inner bash's argument
  ex_sh 'netdev=$(rdma link show "$1/1" | sed -n "s/.* netdev \([^ ]*\).*/\1/p")
    ip -4 -o addr show dev "$netdev"' _ "$EX_DEV" | awk '{ sub(/\/.*/, "", $4); print $4; exit }'
}

grade() {
  local host a=$((RANDOM % 2000 - 1000)) b=$((RANDOM % 2000 - 1000)) got side
  host=$(rdma_ip)
  [[ -n $host ]] || {
    ex_fail "an IPv4 address on $EX_DEV's netdev (rdma link show)" "none"
    return
  }
  # A namespace of its own (util-linux's unshare by path: the lab's shell is
  # busybox), gone when the program ends. 10 s: the starter waits it out.
  for side in server client; do
    local args=(-p "$EX_PORT" --timeout 10)
    [[ $side == server ]] || args+=("$host" 2 3)
    SECONDS=0
    ex_run /usr/bin/unshare -n "$1" "${args[@]}"
    got=$(ex_line "$EX_OUT" '^ex18_2: ' || ex_tail "$EX_OUT")
    if ((EX_STATUS != 1 || SECONDS >= 10)) || grep -qE '^(server: listening|cm event:)' "$EX_OUT" ||
      [[ $got != "ex18_2: no RDMA device has a GID on a netdev of this namespace (net:["*"])" ]]; then
      ex_fail "the $side in a new namespace (unshare -n): exit 1 at once, before any rdma_cm step, 'ex18_2: no RDMA device has a GID on a netdev of this namespace (net:[...])'" \
        "exit status $EX_STATUS after ${SECONDS} s: $got"
      return
    fi
  done
  ex_server "$1" -p "$EX_PORT" --timeout 15
  if ! ex_wait_line "$EX_SERVER_OUT" "listening on"; then
    ex_fail "the server in the initial namespace to listen" "$(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  ex_run "$1" -p "$EX_PORT" --timeout 15 "$host" -- "$a" "$b"
  ex_wait_server
  if ((EX_SERVER_STATUS != 0 || EX_STATUS != 0)) || [[ $(ex_line "$EX_OUT" '^result: ') != "result: $a + $b = $((a + b))" ]]; then
    ex_fail "in the initial namespace the sum, 'result: $a + $b = $((a + b))', and both sides exit 0" \
      "client $EX_STATUS: $(ex_tail "$EX_OUT"); server $EX_SERVER_STATUS"
  fi
}
