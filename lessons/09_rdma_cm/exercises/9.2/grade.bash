# Grader of exercise 9.2: one server (-c 2) serves two clients one after the
# other; between them it holds nothing of the first connection (rdma
# resource show: only its listening id, no QP), and it ends "served 2 clients".
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="listen once; then a loop of -c rounds whose body declares the connection's id (from each CONNECT_REQUEST), PD, CQs, QP and MRs, so that each round destroys them in reverse before the next; print the per-client line, and 'result: served N clients' after the loop"

# An IPv4 address of the RDMA netdev under EX_DEV (the lab: 192.0.2.1 on dummy0).
rdma_ip() {
  # shellcheck disable=SC2016 # $1 is the inner bash's argument
  ex_sh 'netdev=$(rdma link show "$1/1" | sed -n "s/.* netdev \([^ ]*\).*/\1/p")
    ip -4 -o addr show dev "$netdev"' _ "$EX_DEV" | awk '{ sub(/\/.*/, "", $4); print $4; exit }'
}

# client_sums PROGRAM HOST K A B: client K adds A and B; status 1 (after ex_fail) unless it printed the sum and exited 0.
client_sums() {
  local program=$1 host=$2 k=$3 a=$4 b=$5 got
  ex_run "$program" -p "$EX_PORT" --timeout 5 "$host" -- "$a" "$b"
  got=$(ex_line "$EX_OUT" '^result: ' || ex_tail "$EX_OUT")
  if ((EX_STATUS != 0)) || [[ $got != "result: $a + $b = $((a + b))" ]]; then
    ex_fail "client $k ($host $a $b): 'result: $a + $b = $((a + b))' and exit status 0" "exit status $EX_STATUS: $got"
    return 1
  fi
}

grade() {
  local host a1=$((RANDOM % 100)) b1=$((RANDOM % 100)) a2=$((RANDOM % 1000 - 500)) b2=$((RANDOM % 1000 - 500)) got
  host=$(rdma_ip)
  [[ -n $host ]] || {
    ex_fail "an IPv4 address on $EX_DEV's netdev (rdma link show)" "none"
    return
  }
  ex_server "$1" -p "$EX_PORT" --timeout 10 -c 2
  if ! ex_wait_line "$EX_SERVER_OUT" "listening on"; then
    ex_fail "the server to print 'server: listening on ...'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  client_sums "$1" "$host" 1 "$a1" "$b1" || return
  # The server must now be waiting for its second client, holding nothing of the first.
  local i
  for ((i = 0; i < 50; i++)); do
    grep -qF "waiting for client 2 of 2" "$EX_SERVER_OUT" && break
    kill -0 "$EX_SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -qF "waiting for client 2 of 2" "$EX_SERVER_OUT"; then
    ex_wait_server
    ex_fail "the server (-c 2), after client 1, to print 'server: waiting for client 2 of 2'" \
      "$( ((EX_SERVER_STATUS == 124)) || echo "it exited with status $EX_SERVER_STATUS after its first client: ")$(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  local ids qps
  # The server by its name: in the lab its pid is the guest's, not $EX_SERVER_PID.
  local comm=${1##*/}
  ids=$(ex_rx rdma resource show cm_id | grep -w "comm ${comm:0:15}")
  qps=$(ex_rx rdma resource show qp | grep -w "comm ${comm:0:15}")
  if [[ $(grep -c . <<<"$ids") != 1 || $ids != *"state LISTEN"* || -n $qps ]]; then
    ex_fail "while it waits for client 2, the server (${comm:0:15}) holds one cm_id, its listener (state LISTEN), and no QP: client 1's id and QP destroyed" \
      "rdma resource show: $(echo "${ids:-no cm_id}" "${qps:-no QP}" | tr -s ' \n' ' ')"
    return
  fi
  client_sums "$1" "$host" 2 "$a2" "$b2" || return
  ex_wait_server

  got=$(ex_line "$EX_SERVER_OUT" '^result: ' || ex_tail "$EX_SERVER_OUT")
  if ((EX_SERVER_STATUS != 0)) || [[ $got != "result: served 2 clients" ]]; then
    ex_fail "the server: 'result: served 2 clients' and exit status 0" "exit status $EX_SERVER_STATUS: $got"
    return
  fi
  local want
  for want in "server: client 1: $a1 + $b1 = $((a1 + b1))" "server: client 2: $a2 + $b2 = $((a2 + b2))"; do
    grep -qxF "$want" "$EX_SERVER_OUT" || {
      ex_fail "the server's line '$want'" "$(grep -E '^server: client [0-9]' "$EX_SERVER_OUT" | tr '\n' ';' || echo 'no "server: client K:" line')"
      return
    }
  done
}
