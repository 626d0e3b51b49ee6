# Grader of exercise 10.2: after IBV_WC_RNR_RETRY_EXC_ERR, A goes RESET, INIT, RTR, RTS and the second SEND arrives.
# shellcheck disable=SC2034 # HINT is read by scripts/exercises/grade_lib.bash
HINT="for A and B: ibv_modify_qp to IBV_QPS_RESET (mask IBV_QP_STATE), wb::qp_to_init, post B's receive, fresh PSNs, wb::qp_to_rtr, wb::qp_to_rts; print_state after each"

grade() {
  local text="grader text $RANDOM$RANDOM" line got states before
  before=$(ex_counter retry_rnr_exceeded_err)
  ex_run "$1" -d "$EX_DEV" --message "$text"
  local gave_up=$(($(ex_counter retry_rnr_exceeded_err) - before))
  line="A: first SEND: IBV_WC_RNR_RETRY_EXC_ERR (13, RNR retry counter exceeded)"
  got=$(ex_line "$EX_OUT" "^A: first SEND: ") || got="no 'A: first SEND: ...' line; exit $EX_STATUS: $(ex_tail "$EX_OUT")"
  [[ $got == "$line" ]] || {
    ex_fail "$line" "$got"
    return
  }
  states=$(sed -n 's/^A: QP is //p' "$EX_OUT" | paste -sd' ')
  [[ $states == "IBV_QPS_ERR IBV_QPS_RESET IBV_QPS_INIT IBV_QPS_RTR IBV_QPS_RTS" ]] || {
    ex_fail "A: QP is IBV_QPS_ERR, then RESET, INIT, RTR, RTS (one 'A: QP is' line each)" "A's states: ${states:-none}"
    return
  }
  for line in "A: second SEND" "B: RECV"; do
    got=$(ex_line "$EX_OUT" "^$line: ") || got="no '$line: ...' line; exit $EX_STATUS: $(ex_tail "$EX_OUT")"
    [[ $got == "$line: IBV_WC_SUCCESS (0, success)" ]] || {
      ex_fail "$line: IBV_WC_SUCCESS (0, success)" "$got"
      return
    }
  done
  line="result: recovered: B received \"$text\""
  if ! grep -qxF -- "$line" "$EX_OUT" || ((EX_STATUS != 0)); then
    ex_fail "$line, exit 0" "exit $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  ((gave_up == 1)) || ex_fail "retry_rnr_exceeded_err +1: one RNR failure" "retry_rnr_exceeded_err +$gave_up"
}
