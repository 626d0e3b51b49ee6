# Grader of exercise 17.2: -Q N signals one WRITE in N (and the last); every error is still seen.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="send_flags = IBV_SEND_SIGNALED when (i + 1) % N == 0 or i is the last WRITE, else 0; on a completion, done = wr_id + 1; -Q above 8 (the send queue) is misuse"

# stream PORT COUNT N: a server and a client with -Q N; both outputs kept.
stream() {
  ex_serve "$EX_PROGRAM" -p "$1" --timeout 20 || return 1
  ex_run "$EX_PROGRAM" -p "$1" --timeout 20 -n "$2" -Q "$3" 127.0.0.1
  ex_wait_server
}

grade() {
  EX_PROGRAM=$1
  local line n=0 q want pid

  # 1. 16 WRITEs: -Q 4 gives 4 completions, -Q 5 gives 4 too (WRITEs 5, 10, 15 and the last, 16).
  for q in 4 5 1; do
    want=$(((16 + q - 1) / q))
    stream "$((EX_PORT + n++))" 16 "$q" || return
    line="client: $want completions for 16 WRITEs"
    grep -qxF -- "$line" "$EX_OUT" || {
      ex_fail "with -n 16 -Q $q the client prints: $line" \
        "$(ex_line "$EX_OUT" 'completions' || ex_tail "$EX_OUT"); exit $EX_STATUS"
      return
    }
    if ((EX_STATUS != 0 || EX_SERVER_STATUS != 0)) || ! ex_line "$EX_SERVER_OUT" "^result: the buffer holds" >/dev/null; then
      ex_fail "with -Q $q both sides exit 0 and the server's buffer holds the client's pattern" \
        "client exit $EX_STATUS: $(ex_tail "$EX_OUT"); server exit $EX_SERVER_STATUS"
      return
    fi
  done

  # 2. -Q 9 would fill the 8-entry send queue with unsignaled WRITEs: misuse.
  ex_run "$1" -p "$EX_PORT" -Q 9 127.0.0.1
  ((EX_STATUS == 2)) || {
    ex_fail "-Q 9: misuse, exit 2 (8 WRITEs in flight at most, and none of them signaled would never be reaped)" \
      "exit $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }

  # 3. With -Q 8, the server killed mid-stream: the failure still surfaces as status 12.
  ex_serve "$1" -p "$((EX_PORT + 3))" --timeout 20 || return
  timeout 30 "${EX_RX[@]}" "$1" -p "$((EX_PORT + 3))" --timeout 20 -Q 8 --retry 1 -n 100000 127.0.0.1 >"$EX_OUT" 2>&1 &
  pid=$!
  ex_wait_line "$EX_OUT" "client: streaming" || {
    kill "$pid" 2>/dev/null
    ex_fail "the client to start streaming" "$(ex_tail "$EX_OUT")"
    return
  }
  sleep 0.5
  kill -KILL "$EX_SERVER_PID"
  EX_STATUS=0
  wait "$pid" || EX_STATUS=$?
  line=$(ex_line "$EX_OUT" '^client: WRITE [0-9]+ of 100000 failed after ')
  # A killed server's QP and MR are released by its kernel in either order:
  # QP first, and nothing answers (12); MR first, and its QP refuses (10).
  if ((EX_STATUS != 1)) || [[ $line != *"status 12 (IBV_WC_RETRY_EXC_ERR"* && $line != *"status 10 (IBV_WC_REM_ACCESS_ERR"* ]]; then
    ex_fail "with -Q 8 and the server killed mid-stream: 'client: WRITE N of 100000 failed after S s: status 12 (IBV_WC_RETRY_EXC_ERR, ...)' (or 10, IBV_WC_REM_ACCESS_ERR, when the dying server's MR went first), exit 1" \
      "client exit $EX_STATUS: ${line:-$(ex_tail "$EX_OUT")}"
  fi
}
