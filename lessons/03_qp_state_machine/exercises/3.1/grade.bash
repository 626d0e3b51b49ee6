# Grader of exercise 3.1: a SEND with no receive posted and rnr_retry 0 fails with status 13 after one RNR NAK.
# shellcheck disable=SC2034 # HINT is read by scripts/exercises/grade_lib.bash
HINT="move ibv_post_recv on B to after A's SEND completed, and set rnr_retry = 0 in the RTR -> RTS attributes"

grade() {
  local names=(send_rnr_err rcvd_rnr_err retry_rnr_exceeded_err rdma_recvs) before=() delta=() i
  for i in "${!names[@]}"; do before[i]=$(ex_counter "${names[i]}"); done
  ex_run "$1" -d "$EX_DEV"
  for i in "${!names[@]}"; do delta[i]=$(($(ex_counter "${names[i]}") - before[i])); done
  local counters="send_rnr_err +${delta[0]}, rcvd_rnr_err +${delta[1]}, retry_rnr_exceeded_err +${delta[2]}, rdma_recvs +${delta[3]}"

  ((EX_STATUS == 0)) || {
    ex_fail "exit status 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT"); counters $counters"
    return
  }
  local sent
  sent=$(ex_line "$EX_OUT" "^A's SEND: ") || sent="no line \"A's SEND: ...\""
  [[ $sent == "A's SEND: IBV_WC_RNR_RETRY_EXC_ERR (13,"* ]] || {
    ex_fail "A's SEND: IBV_WC_RNR_RETRY_EXC_ERR (13, RNR retry counter exceeded)" "$sent; counters $counters"
    return
  }
  ((delta[0] >= 1 && delta[1] == 1 && delta[2] == 1 && delta[3] == 0)) || {
    ex_fail "on the port: send_rnr_err +1 or more, rcvd_rnr_err +1 (rnr_retry 0: one RNR NAK, no resend), retry_rnr_exceeded_err +1, rdma_recvs +0" \
      "$counters"
    return
  }
  ex_line "$EX_OUT" '^QP A is now ERR' >/dev/null || {
    ex_fail "QP A is now ERR (ibv_query_qp)" "$(ex_line "$EX_OUT" '^QP A is now' || echo 'no "QP A is now" line')"
    return
  }
  if ! ex_line "$EX_OUT" "^ibv_post_recv on B, after A's SEND completed" >/dev/null ||
    ! ex_line "$EX_OUT" "^B's receive: no completion" >/dev/null; then
    ex_fail "ibv_post_recv on B after A's SEND completed, then \"B's receive: no completion within 200 ms\"" \
      "$(ex_tail "$EX_OUT" 3)"
    return
  fi
}
