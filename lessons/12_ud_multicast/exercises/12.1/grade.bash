# Grader of exercise 12.1: the client's UD receive makes room for the 40-byte GRH and reads the answer after it.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="the client's receive must hold the GRH too: ud::kGrhBytes + mtu bytes, as the server's; the response starts at recv_buf.get() + ud::kGrhBytes, byte_len - ud::kGrhBytes bytes long"

grade() {
  local a=$((RANDOM * 1000 + 1)) b=$((-RANDOM - 1)) recvs line
  recvs=$(ex_counter rdma_recvs)
  ex_serve "$1" -p "$EX_PORT" --timeout 10 || return
  ex_run "$1" -p "$EX_PORT" --timeout 10 127.0.0.1 -- "$a" "$b"
  ex_wait_server
  line=$(ex_line "$EX_OUT" '^client: completion ') || {
    ex_fail "client: completion IBV_WC_RECV, 56 bytes = 40 GRH + 16 message" \
      "no 'client: completion' line; client exit $EX_STATUS: $(ex_tail "$EX_OUT" 2)"
    return
  }
  [[ $line == "client: completion IBV_WC_RECV, 56 bytes = 40 GRH + 16 message" ]] || {
    ex_fail "client: completion IBV_WC_RECV, 56 bytes = 40 GRH + 16 message" "$line"
    return
  }
  line=$(ex_line "$EX_OUT" '^result: ')
  [[ $line == "result: $a + $b = $((a + b))" ]] || {
    ex_fail "result: $a + $b = $((a + b))" "${line:-no result line}"
    return
  }
  ! ex_line "$EX_OUT" '^client: no answer within' >/dev/null || {
    ex_fail "the answer to the first try" "$(ex_line "$EX_OUT" '^client: no answer within')"
    return
  }
  ((EX_STATUS == 0 && EX_SERVER_STATUS == 0)) || {
    ex_fail "both sides exit 0" "client exit $EX_STATUS, server exit $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
    return
  }
  local drecvs=$(($(ex_counter rdma_recvs) - recvs))
  ((drecvs == 2)) ||
    ex_fail "rdma_recvs up by exactly 2 (the request and the answer)" "rdma_recvs +$drecvs"
}
