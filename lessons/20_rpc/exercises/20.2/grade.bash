# Grader of exercise 20.2: responses by SEND. Two clients of N requests,
# every response checked; rxe counts both ends on one device, so the
# requests and the responses are now 4N SENDs and 4N receives, and no
# WRITE with immediate is left (it counted as a receive, not as a SEND).
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="server: .opcode = IBV_WR_SEND, no imm_data or wr.rdma; client: each receive scatters into a ring slot (wr_id = slot), a response completes as IBV_WC_RECV, find the open request by its seq"

grade() {
  local n=200 other_out=$EX_TMP/other.out other_pid other_status=0 got sends recvs
  sends=$(ex_counter rdma_sends) recvs=$(ex_counter rdma_recvs)
  ex_server "$1" -p "$EX_PORT" --timeout 20 -c 2 -t 8
  ex_wait_line "$EX_SERVER_OUT" "waiting for 2 clients" || {
    ex_fail "the server to print 'waiting for 2 clients'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  }
  timeout 60 "${EX_RX[@]}" "$1" -p "$EX_PORT" --timeout 20 127.0.0.1 -n "$n" -t 4 >"$other_out" 2>&1 &
  other_pid=$!
  ex_run "$1" -p "$EX_PORT" --timeout 20 127.0.0.1 -n "$n" -t 8
  wait "$other_pid" || other_status=$?
  ex_wait_server 30
  ((EX_STATUS == 0 && other_status == 0 && EX_SERVER_STATUS == 0)) || {
    ex_fail "both clients (-t 8 and -t 4, -n $n each) and the server exit 0" \
      "client -t 8 exit $EX_STATUS: $(ex_tail "$EX_OUT"); client -t 4 exit $other_status: $(ex_tail "$other_out"); server exit $EX_SERVER_STATUS"
    return
  }
  for got in "$EX_OUT" "$other_out"; do
    ex_line "$got" "^result: $n requests answered \\([0-9]+ PUTs, [0-9]+ GETs\\), every response checked; " >/dev/null || {
      ex_fail "each client's result: $n requests answered (P PUTs, G GETs), every response checked; ..." \
        "$(ex_line "$got" '^result: ' || ex_tail "$got")"
      return
    }
  done
  got=$(ex_line "$EX_SERVER_OUT" '^result: ') || got="no result line"
  [[ $got == "result: served $((2 * n)) requests from 2 clients, each said goodbye" ]] || {
    ex_fail "the server's result: served $((2 * n)) requests from 2 clients, each said goodbye" "$got"
    return
  }
  # rdma_sends counts SENDs only; rdma_recvs every receive consumed, by a
  # SEND or by a WRITE with immediate. Lesson 20 makes 2N and 4N here.
  local dsends=$(($(ex_counter rdma_sends) - sends)) drecvs=$(($(ex_counter rdma_recvs) - recvs))
  ((dsends == 4 * n && drecvs == 4 * n)) ||
    ex_fail "rdma_sends and rdma_recvs up by $((4 * n)) each ($((2 * n)) requests and $((2 * n)) responses, all SENDs)" \
      "rdma_sends +$dsends, rdma_recvs +$drecvs$( ((dsends == 2 * n)) && echo ": the responses are not SENDs")"
}
