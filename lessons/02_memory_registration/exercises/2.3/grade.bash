# Grader of exercise 2.3: after ibv_dereg_mr and ibv_reg_mr again, the new rkey reads the page and the old one is refused.
# shellcheck disable=SC2034 # HINT is read by scripts/exercises/grade_lib.bash
HINT="page_mr.reset() deregisters; page_mr.reset(CHECK_PTR(ibv_reg_mr(pd.get(), page.get(), page_size, IBV_ACCESS_REMOTE_READ))) registers the page again"

grade() {
  local text="grader text $RANDOM$RANDOM" sent_before
  sent_before=$(ex_counter sent_pkts)
  ex_run "$1" -d "$EX_DEV" -m "$text"
  local sent=$(($(ex_counter sent_pkts) - sent_before))
  ((EX_STATUS == 0)) || {
    ex_fail "exit status 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  local keys old new
  keys=$(sed -n "s/^B's page: rkey \(0x[0-9a-f]*\) before, \(0x[0-9a-f]*\) after.*/\1 \2/p" "$EX_OUT")
  old=${keys% *} new=${keys#* }
  [[ -n $keys ]] || {
    ex_fail "a line \"B's page: rkey 0x... before, 0x... after ...\"" "$(ex_tail "$EX_OUT" 3)"
    return
  }
  local read_old read_new
  read_old=$(ex_line "$EX_OUT" "^READ with the old rkey") || read_old="no line \"READ with the old rkey ...\""
  [[ $read_old == "READ with the old rkey $old: IBV_WC_REM_ACCESS_ERR (10,"* ]] || {
    ex_fail "READ with the old rkey $old: IBV_WC_REM_ACCESS_ERR (10, remote access error)" "$read_old"
    return
  }
  [[ $old != "$new" ]] || {
    ex_fail "a new rkey after ibv_dereg_mr and ibv_reg_mr again" "rkey $old before and after"
    return
  }
  read_new=$(ex_line "$EX_OUT" "^READ with the new rkey") || read_new="no line \"READ with the new rkey ...\""
  [[ $read_new == "READ with the new rkey $new: IBV_WC_SUCCESS (0, success), read back \"$text\"" ]] || {
    ex_fail "READ with the new rkey $new: IBV_WC_SUCCESS (0, success), read back \"$text\"" "$read_new"
    return
  }
  ((sent == 4)) || {
    ex_fail "sent_pkts +4 on the port: two READ requests, a READ response and a NAK" "sent_pkts +$sent"
    return
  }
}
