# Grader of exercise 14.2: with --mr-key the client holds the MR's rkey, which
# no revoke touches: the READ after the revoke succeeds and the "new" rkey is
# the old one. Without it, the lesson's window is revoked as before.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="with --mr-key add IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE to pool_access, and send mr->rkey in offer()"

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
  # 1. The MR's rkey: nothing the server does to its window reaches it.
  run_pair "$EX_PORT" "$1" -w 1 --mr-key || return
  expected="result: READ inside ok, WRITE inside ok, READ across the end ok, READ after revoke ok, READ after re-bind ok"
  got=$(ex_line "$EX_OUT" '^result:' || ex_tail "$EX_OUT")
  if ((EX_STATUS != 0)) || [[ $got != "$expected" ]]; then
    ex_fail "with --mr-key, the client's '$expected' (the revoke cannot touch an MR's rkey) and exit status 0" \
      "exit status $EX_STATUS: $got"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" "^server: offering the MR's rkey" || ex_tail "$EX_SERVER_OUT")
  if ((EX_SERVER_STATUS != 0)) || [[ ! $got =~ ^server:\ offering\ the\ MR\'s\ rkey\ 0x[0-9a-f]+,\ not\ the\ window\'s\ 0x[0-9a-f]+$ ]]; then
    ex_fail "the server says \"server: offering the MR's rkey 0x..., not the window's 0x...\" and exits 0" \
      "exit status $EX_SERVER_STATUS: $got"
    return
  fi
  got=$(ex_line "$EX_OUT" '^client: the server bound the window again' || ex_tail "$EX_OUT")
  if [[ ! $got =~ rkey\ (0x[0-9a-f]+)\ -\>\ (0x[0-9a-f]+) ]] || [[ ${BASH_REMATCH[1]} != "${BASH_REMATCH[2]}" ]]; then
    ex_fail "with --mr-key the client is offered the same rkey after the re-bind ('rkey 0xK -> 0xK')" "$got"
    return
  fi

  # 2. Without --mr-key, the lesson: the window's rkey dies with the revoke.
  run_pair "$((EX_PORT + 1))" "$1" -w 1 || return
  expected="result: READ inside ok, WRITE inside ok, READ across the end ok, READ after revoke IBV_WC_REM_ACCESS_ERR, READ after re-bind ok"
  got=$(ex_line "$EX_OUT" '^result:' || ex_tail "$EX_OUT")
  if ((EX_STATUS != 0)) || [[ $got != "$expected" ]]; then
    ex_fail "without --mr-key, the lesson's '$expected'" "exit status $EX_STATUS: $got"
  fi
}
