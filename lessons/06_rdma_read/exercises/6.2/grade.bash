# Grader of exercise 6.2: a READ one byte past the server's MR is refused by
# the server's NIC (IBV_WC_REM_ACCESS_ERR, 10), which moves its QP to ERR; the
# READ of exactly what was offered still works.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="with --past-end post sge.length = peer.length + 1; on the server, wb::query_state(qp.get()) after DONE"

# run_pair PORT TEXT PROGRAM [CLIENT ARGS...]: a server exposing TEXT, then one client.
run_pair() {
  local port=$1 text=$2 program=$3
  shift 3
  ex_serve "$program" -p "$port" --timeout 10 --message "$text" || return
  ex_run "$program" -p "$port" --timeout 10 127.0.0.1 "$@"
  ex_wait_server
}

# The server's "server: QP 0x... is now ..." line, or its last lines.
server_qp_line() {
  ex_line "$EX_SERVER_OUT" '^server: QP 0x[0-9a-f]+ is now ' || ex_tail "$EX_SERVER_OUT"
}

grade() {
  # A text of the grader's choosing, so that its length is not the lesson's 30.
  local text="graded read $RANDOM of what was offered" got
  local len=${#text}
  local past=$((len + 1))

  # 1. One byte too many. IBV_WC_REM_ACCESS_ERR is 10 in enum ibv_wc_status (verbs.h).
  run_pair "$EX_PORT" "$text" "$1" --past-end || return
  got=$(ex_line "$EX_OUT" '^client: completion of the READ' || ex_tail "$EX_OUT")
  if [[ $got != "client: completion of the READ of $past bytes: IBV_WC_REM_ACCESS_ERR (10, "* ]]; then
    ex_fail "with --past-end: 'client: completion of the READ of $past bytes: IBV_WC_REM_ACCESS_ERR (10, ...)' (the server registered $len)" "$got"
    return
  fi
  if ((EX_STATUS != 1)) || ! ex_line "$EX_OUT" '^result: error: .*IBV_WC_REM_ACCESS_ERR \(10\)' >/dev/null; then
    ex_fail "with --past-end the client ends with 'result: error: ... IBV_WC_REM_ACCESS_ERR (10)' and exit status 1" \
      "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  got=$(server_qp_line)
  if ((EX_SERVER_STATUS != 0)) || [[ ! $got =~ ^server:\ QP\ 0x[0-9a-f]+\ is\ now\ IBV_QPS_ERR$ ]]; then
    ex_fail "the server, after DONE: 'server: QP 0x... is now IBV_QPS_ERR' (its NIC refused the READ) and exit status 0" \
      "exit status $EX_SERVER_STATUS: $got"
    return
  fi

  # 2. The fix: exactly what was offered, and the server's QP stays RTS.
  run_pair "$((EX_PORT + 1))" "$text" "$1" || return
  if ((EX_STATUS != 0)) || ! ex_line "$EX_OUT" "^result: read $len bytes: \"$text\"\$" >/dev/null; then
    ex_fail "without --past-end: 'result: read $len bytes: \"$text\"' and exit status 0" \
      "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  got=$(server_qp_line)
  if ((EX_SERVER_STATUS != 0)) || [[ ! $got =~ ^server:\ QP\ 0x[0-9a-f]+\ is\ now\ IBV_QPS_RTS$ ]]; then
    ex_fail "without --past-end the server's QP stays RTS: 'server: QP 0x... is now IBV_QPS_RTS', exit status 0" \
      "exit status $EX_SERVER_STATUS: $got"
  fi
}
