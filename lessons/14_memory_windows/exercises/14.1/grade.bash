# Grader of exercise 14.1: with -r the window grants READ only, so the
# client's WRITE inside it is refused (IBV_WC_REM_ACCESS_ERR) and the slot
# keeps its text, while every READ goes as in the lesson; without -r nothing changes.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="the window's rights are bind_info.mw_access_flags, set at each bind (the first and the re-bind): with -r pass IBV_ACCESS_REMOTE_READ only"

# run_pair PORT PROGRAM [SERVER ARGS...]: a server with those arguments, then one client.
run_pair() {
  local port=$1 program=$2
  shift 2
  ex_serve "$program" -p "$port" --timeout 10 "$@" || return 1
  ex_run "$program" -p "$port" --timeout 10 127.0.0.1
  ex_wait_server
}

grade() {
  local expected got
  # 1. A read-only type 2 window: the WRITE is refused; the rest is the lesson's.
  run_pair "$EX_PORT" "$1" -r || return
  expected="result: READ inside ok, WRITE inside IBV_WC_REM_ACCESS_ERR, READ across the end ok, READ after revoke IBV_WC_REM_ACCESS_ERR, READ after re-bind ok, READ after SEND_WITH_INV IBV_WC_REM_ACCESS_ERR"
  got=$(ex_line "$EX_OUT" '^result:' || ex_tail "$EX_OUT")
  if ((EX_STATUS != 0)) || [[ $got != "$expected" ]]; then
    ex_fail "with -r, the client's '$expected' and exit status 0" "exit status $EX_STATUS: $got"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^server: slot 5 now holds' || ex_tail "$EX_SERVER_OUT")
  if ((EX_SERVER_STATUS != 0)) || [[ $got != "server: slot 5 now holds \"slot 5 of the server's pool\"" ]]; then
    ex_fail "with -r the slot keeps its text: 'server: slot 5 now holds \"slot 5 of the server's pool\"', exit status 0" \
      "exit status $EX_SERVER_STATUS: $got"
    return
  fi

  # 2. The re-bound type 1 window is read-only too; without -r, the lesson's WRITE works.
  run_pair "$((EX_PORT + 1))" "$1" -r -w 1 || return
  expected="result: READ inside ok, WRITE inside IBV_WC_REM_ACCESS_ERR, READ across the end ok, READ after revoke IBV_WC_REM_ACCESS_ERR, READ after re-bind ok"
  got=$(ex_line "$EX_OUT" '^result:' || ex_tail "$EX_OUT")
  if ((EX_STATUS != 0)) || [[ $got != "$expected" ]]; then
    ex_fail "with -r -w 1, the client's '$expected' and exit status 0" "exit status $EX_STATUS: $got"
    return
  fi
  run_pair "$((EX_PORT + 2))" "$1" || return
  got=$(ex_line "$EX_OUT" '^result:' || ex_tail "$EX_OUT")
  if ((EX_STATUS != 0)) || [[ $got != "result: READ inside ok, WRITE inside ok, "* ]]; then
    ex_fail "without -r, 'result: READ inside ok, WRITE inside ok, ...' as in the lesson" "exit status $EX_STATUS: $got"
  fi
}
