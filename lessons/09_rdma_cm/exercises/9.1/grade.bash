# Grader of exercise 9.1: A and B ride in the ConnectRequest's private data,
# the sum in the ConnectReply's; both sides print the sum, and the port
# counters show the five CM messages and no SEND of ours.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="rdma_conn_param.private_data = &request (client) / &answer.response (server), private_data_len = 16; copy ev->param.conn.private_data before rdma_ack_cm_event; its private_data_len is the CM message's room, not 16: use the first 16 bytes"

# An IPv4 address of the RDMA netdev under EX_DEV (the lab: 192.0.2.1 on dummy0).
rdma_ip() {
  # shellcheck disable=SC2016 # $1 is the inner bash's argument
  ex_sh 'netdev=$(rdma link show "$1/1" | sed -n "s/.* netdev \([^ ]*\).*/\1/p")
    ip -4 -o addr show dev "$netdev"' _ "$EX_DEV" | awk '{ sub(/\/.*/, "", $4); print $4; exit }'
}

grade() {
  local host a=$((RANDOM % 2000 - 1000)) b=$((RANDOM % 2000 - 1000)) got
  host=$(rdma_ip)
  [[ -n $host ]] || {
    ex_fail "an IPv4 address on $EX_DEV's netdev (rdma link show)" "none"
    return
  }
  local names=(rdma_sends rdma_recvs) before=() delta=() i
  for i in "${!names[@]}"; do before[i]=$(ex_counter "${names[i]}"); done
  ex_server "$1" -p "$EX_PORT" --timeout 10
  if ! ex_wait_line "$EX_SERVER_OUT" "listening on"; then
    ex_fail "the server to print 'server: listening on ...'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  ex_run "$1" -p "$EX_PORT" --timeout 5 "$host" -- "$a" "$b"
  ex_wait_server
  for i in "${!names[@]}"; do delta[i]=$(($(ex_counter "${names[i]}") - before[i])); done

  got=$(ex_line "$EX_OUT" '^result: ' || ex_tail "$EX_OUT")
  if ((EX_STATUS != 0)) || [[ $got != "result: $a + $b = $((a + b))" ]]; then
    ex_fail "the client ($host $a $b): 'result: $a + $b = $((a + b))' and exit status 0" "exit status $EX_STATUS: $got"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^result: ' || ex_tail "$EX_SERVER_OUT")
  if ((EX_SERVER_STATUS != 0)) || [[ $got != "result: $a + $b = $((a + b))" ]]; then
    ex_fail "the server: 'result: $a + $b = $((a + b))' and exit status 0" "exit status $EX_SERVER_STATUS: $got"
    return
  fi
  # rxe counts every message it sends and receives, the CM's too (UD SENDs to
  # QP1): ConnectRequest, ConnectReply, ReadyToUse, DisconnectRequest and
  # DisconnectReply make 5 each way on one host. A SEND of ours adds to both.
  if ((delta[0] != 5 || delta[1] != 5)); then
    ex_fail "rdma_sends +5 and rdma_recvs +5 on the port: the five CM messages, no SEND of ours" \
      "rdma_sends +${delta[0]}, rdma_recvs +${delta[1]}"
    return
  fi
  # The length an event reports is the CM message's room for private data,
  # not what the peer sent: on InfiniBand and RoCE a ConnectRequest has 92
  # bytes, of which rdma_cm's own header takes 36; a ConnectReply has 196.
  got=$(ex_line "$EX_SERVER_OUT" '^server: the ConnectRequest carried ' || echo "no such line")
  if [[ $got != "server: the ConnectRequest carried 56 bytes of private data" ]]; then
    ex_fail "the server: 'server: the ConnectRequest carried 56 bytes of private data' (the event's private_data_len: 92 - 36)" \
      "$got"
    return
  fi
  got=$(ex_line "$EX_OUT" '^client: the ConnectReply carried ' || echo "no such line")
  [[ $got == "client: the ConnectReply carried 196 bytes of private data" ]] ||
    ex_fail "the client: 'client: the ConnectReply carried 196 bytes of private data' (the event's private_data_len)" "$got"
}
