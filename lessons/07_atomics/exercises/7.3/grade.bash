# Grader of exercise 7.3: atomics refused by the server's MR complete with
# IBV_WC_REM_ACCESS_ERR (10), refused by its QP with IBV_WC_REM_INV_REQ_ERR (9);
# either way the server's QP ends in ERR and its counter stays 0. Allowed, the
# adds count as in lesson 7.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="--refuse mr: ibv_reg_mr with IBV_ACCESS_LOCAL_WRITE alone; --refuse qp: qp_access 0 for wb::qp_to_init, the MR unchanged"

# run_pair PORT PROGRAM [SERVER ARGS...]: a server (with those arguments), then one client doing 2 adds.
run_pair() {
  local port=$1 program=$2
  shift 2
  ex_server "$program" -p "$port" --timeout 10 "$@"
  if ! ex_wait_line "$EX_SERVER_OUT" "waiting for client 1 of 1"; then
    ex_fail "the server ($*) to print 'waiting for client 1 of 1'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  ex_run "$program" -p "$port" --timeout 10 127.0.0.1 -n 2
  ex_wait_server
}

# check_refused WHERE STATUS: the client's first add failed with STATUS ("NAME (N"), the server's QP is ERR, counter 0.
check_refused() {
  local where=$1 status=$2 got
  got=$(ex_line "$EX_OUT" '^client: FETCH_AND_ADD: ' || ex_tail "$EX_OUT")
  if [[ $got != "client: FETCH_AND_ADD: $status, "* ]]; then
    ex_fail "with the server's --refuse $where: 'client: FETCH_AND_ADD: $status, ...)'" "$got"
    return
  fi
  if ((EX_STATUS != 1)) || ! ex_line "$EX_OUT" "^result: error: .*${status//(/\\(}\\)" >/dev/null; then
    ex_fail "with --refuse $where the client ends with 'result: error: ... $status)' and exit status 1" \
      "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" "^server: client 1's QP 0x[0-9a-f]+ is now " || ex_tail "$EX_SERVER_OUT")
  if ((EX_SERVER_STATUS != 0)) || [[ ! $got =~ is\ now\ IBV_QPS_ERR$ ]] ||
    ! ex_line "$EX_SERVER_OUT" '^result: counter = 0$' >/dev/null; then
    ex_fail "with --refuse $where the server's QP is IBV_QPS_ERR after DONE, 'result: counter = 0', exit status 0" \
      "exit status $EX_SERVER_STATUS: $got; $(ex_line "$EX_SERVER_OUT" '^result:' || echo 'no result line')"
  fi
}

grade() {
  # 1. The MR refuses: its rkey grants no atomic. IBV_WC_REM_ACCESS_ERR is 10 in enum ibv_wc_status.
  run_pair "$EX_PORT" "$1" --refuse mr || return
  check_refused mr "IBV_WC_REM_ACCESS_ERR (10" || return
  # 2. The QP refuses: the request is invalid on it. IBV_WC_REM_INV_REQ_ERR is 9.
  run_pair "$((EX_PORT + 1))" "$1" --refuse qp || return
  check_refused qp "IBV_WC_REM_INV_REQ_ERR (9" || return
  # 3. Neither refuses: lesson 7's adds.
  run_pair "$((EX_PORT + 2))" "$1" || return
  if ((EX_STATUS != 0)) || ! ex_line "$EX_OUT" '^result: fetch_and_add old values: 0 1;' >/dev/null; then
    ex_fail "without --refuse: 'result: fetch_and_add old values: 0 1; ...' and exit status 0" \
      "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  if ((EX_SERVER_STATUS != 0)) || ! ex_line "$EX_SERVER_OUT" '^result: counter = 2$' >/dev/null; then
    ex_fail "without --refuse the server: 'result: counter = 2' and exit status 0" \
      "exit status $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
  fi
}
