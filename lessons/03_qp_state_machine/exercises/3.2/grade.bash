# Grader of exercise 3.2: a QP moved to ERR flushes what is posted on it, and sends nothing.
# shellcheck disable=SC2034 # HINT is read by scripts/exercises/grade_lib.bash
HINT="ibv_modify_qp(qa.get(), &attr, IBV_QP_STATE) with .qp_state = IBV_QPS_ERR, then ibv_post_send (wr_id 3) and complete(); the same for B with a receive (wr_id 4)"

grade() {
  local sent_before recvs_before
  sent_before=$(ex_counter sent_pkts)
  recvs_before=$(ex_counter rdma_recvs)
  ex_run "$1" -d "$EX_DEV"
  local sent=$(($(ex_counter sent_pkts) - sent_before)) recvs=$(($(ex_counter rdma_recvs) - recvs_before))
  ((EX_STATUS == 0)) || {
    ex_fail "exit status 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  local want got
  for want in "A's SEND: IBV_WC_SUCCESS (0," "B's RECV: IBV_WC_SUCCESS (0," "QP A is now ERR" \
    "A's second SEND: IBV_WC_WR_FLUSH_ERR (5," "QP B is now ERR" "B's second RECV: IBV_WC_WR_FLUSH_ERR (5,"; do
    grep -qF -- "$want" "$EX_OUT" && continue
    got=$(ex_line "$EX_OUT" "^${want%%:*}") || got=$(ex_line "$EX_OUT" "^${want% is now*} is now") ||
      got="no such line; the last lines: $(ex_tail "$EX_OUT" 2)"
    ex_fail "a line '$want ...'" "$got"
    return
  done
  ((sent == 2 && recvs == 1)) || {
    ex_fail "sent_pkts +2 (the first SEND and its ACK; a flushed SEND is never sent) and rdma_recvs +1" \
      "sent_pkts +$sent, rdma_recvs +$recvs"
    return
  }
}
