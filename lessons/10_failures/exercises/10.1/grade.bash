# Grader of exercise 10.1: with its three mistakes fixed, A's WRITE and SEND and B's RECV succeed and carry the text.
# shellcheck disable=SC2034 # HINT is read by scripts/exercises/grade_lib.bash
HINT="IBV_WC_REM_INV_REQ_ERR (9): B's qp_access_flags; IBV_WC_REM_ACCESS_ERR (10): B's page MR; IBV_WC_REM_OP_ERR (11): B's receive length (docs/lesson10-failures.md)"

grade() {
  local text="grader text $RANDOM$RANDOM" line name
  local before_sent_pkts before_rdma_sends before_rdma_recvs
  for name in sent_pkts rdma_sends rdma_recvs; do printf -v "before_$name" '%s' "$(ex_counter "$name")"; done
  ex_run "$1" -d "$EX_DEV" --message "$text"
  local sent=$(($(ex_counter sent_pkts) - before_sent_pkts))
  local sends=$(($(ex_counter rdma_sends) - before_rdma_sends)) recvs=$(($(ex_counter rdma_recvs) - before_rdma_recvs))
  for line in "A: RDMA WRITE" "A: SEND" "B: RECV"; do
    local got
    got=$(ex_line "$EX_OUT" "^$line: ") || got="no '$line: ...' line; exit $EX_STATUS: $(ex_tail "$EX_OUT")"
    [[ $got == "$line: IBV_WC_SUCCESS (0, success)" ]] || {
      ex_fail "$line: IBV_WC_SUCCESS (0, success)" "$got"
      return
    }
  done
  line="result: B's page holds \"$text\", B's inbox \"$text\""
  if ! grep -qxF -- "$line" "$EX_OUT" || ((EX_STATUS != 0)); then
    ex_fail "$line, exit 0" "exit $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  ((sends == 1 && recvs == 1 && sent == 4)) ||
    ex_fail "rdma_sends +1, rdma_recvs +1, sent_pkts +4 (WRITE, SEND, two ACKs)" \
      "rdma_sends +$sends, rdma_recvs +$recvs, sent_pkts +$sent"
}
