# Grader of exercise 9.3: a client started a second before its server is
# refused (RDMA_CM_EVENT_REJECTED, reject reason 8), says so, retries with a
# new id and QP, and gets its sum; the port counters confirm each refusal.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="after rdma_connect take the next event with wb::take_cm_event (the lesson's next_cm_event without its check); on RDMA_CM_EVENT_REJECTED with status 8, before --timeout, ack it and start a new attempt from rdma_create_id, inside a loop whose body holds that attempt's id, PD, CQs, QP and MRs"

# An IPv4 address of the RDMA netdev under EX_DEV (the lab: 192.0.2.1 on dummy0).
rdma_ip() {
  # shellcheck disable=SC2016 # $1 is the inner bash's argument
  ex_sh 'netdev=$(rdma link show "$1/1" | sed -n "s/.* netdev \([^ ]*\).*/\1/p")
    ip -4 -o addr show dev "$netdev"' _ "$EX_DEV" | awk '{ sub(/\/.*/, "", $4); print $4; exit }'
}

grade() {
  local host a=$((RANDOM % 2000 - 1000)) b=$((RANDOM % 2000 - 1000)) got client
  host=$(rdma_ip)
  [[ -n $host ]] || {
    ex_fail "an IPv4 address on $EX_DEV's netdev (rdma link show)" "none"
    return
  }
  local sends_before
  sends_before=$(ex_counter rdma_sends)
  # The client first: nothing listens on EX_PORT yet.
  timeout 20 "${EX_RX[@]}" "$1" -p "$EX_PORT" --timeout 10 "$host" -- "$a" "$b" >"$EX_OUT" 2>&1 &
  client=$!
  ex_wait_line "$EX_OUT" "RDMA_CM_EVENT_REJECTED"
  sleep 1
  ex_server "$1" -p "$EX_PORT" --timeout 10
  EX_STATUS=0
  wait "$client" || EX_STATUS=$?
  if ((EX_STATUS != 0)); then
    ex_fail "the client, started 1 s before the server, to retry until it connects, then 'result: $a + $b = $((a + b))', exit 0" \
      "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  ex_wait_server
  local sends=$(($(ex_counter rdma_sends) - sends_before))

  got=$(ex_line "$EX_OUT" '^result: ' || ex_tail "$EX_OUT")
  if [[ $got != "result: $a + $b = $((a + b))" ]]; then
    ex_fail "the client ($host $a $b): 'result: $a + $b = $((a + b))'" "$got"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^result: ' || ex_tail "$EX_SERVER_OUT")
  if ((EX_SERVER_STATUS != 0)) || [[ $got != "result: $a + $b = $((a + b))" ]]; then
    ex_fail "the server: 'result: $a + $b = $((a + b))' and exit status 0" "exit status $EX_SERVER_STATUS: $got"
    return
  fi
  # Every REJECTED event named, with its reason, in an attempt line.
  local rejected named
  rejected=$(grep -c '^cm event: RDMA_CM_EVENT_REJECTED$' "$EX_OUT")
  named=$(grep -cE '^client: attempt [0-9]+: RDMA_CM_EVENT_REJECTED, reject reason 8; retrying$' "$EX_OUT")
  if ((rejected < 1 || named != rejected)); then
    ex_fail "for each 'cm event: RDMA_CM_EVENT_REJECTED' (at least one), 'client: attempt K: RDMA_CM_EVENT_REJECTED, reject reason 8; retrying'" \
      "$rejected REJECTED events, $named such lines"
    return
  fi
  # The wire, counted by rxe: each refused attempt is a ConnectRequest and a
  # Reject (2 CM messages); the connection that worked, lesson 9's 7 messages
  # (ConnectRequest, ConnectReply, ReadyToUse, 2 SENDs, DisconnectRequest, DisconnectReply).
  ((sends == 7 + 2 * rejected)) ||
    ex_fail "rdma_sends +$((7 + 2 * rejected)) on the port: 2 per refused attempt ($rejected), 7 for the connection" \
      "rdma_sends +$sends"
}
