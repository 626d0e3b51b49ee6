# Grader of exercise 17.1: --budget MS picks the ACK timeout from a time budget, and a dead peer fails a WRITE within it.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="the smallest exponent e (1..31) with (retry + 1) * 4.096 us * 2^e >= MS; then print 'client: a dead peer fails a WRITE after about X ms ((R + 1) x T ms)' before the stream"

grade() {
  local line pid waited

  # 1. A budget of 500 ms at retry_cnt 6: 7 x 134.2 ms (2^15), as 7 x 67.1 ms (2^14) falls short.
  ex_serve "$1" -p "$EX_PORT" --timeout 20 || return
  ex_run "$1" -p "$EX_PORT" --timeout 20 --budget 500 -n 2 127.0.0.1
  ex_wait_server
  line=$(ex_line "$EX_OUT" '^client: server QP ')
  [[ $line == *"ACK timeout 134.2 ms, retry_cnt 6" ]] || {
    ex_fail "with --budget 500: 'ACK timeout 134.2 ms, retry_cnt 6' (exponent 15: 7 x 67.1 ms is only 469.8 ms)" \
      "${line:-no 'client: server QP' line}: $(ex_tail "$EX_OUT")"
    return
  }
  line="client: a dead peer fails a WRITE after about 939.5 ms ((6 + 1) x 134.2 ms)"
  grep -qxF -- "$line" "$EX_OUT" || {
    ex_fail "the client prints: $line" "$(ex_line "$EX_OUT" 'dead peer' || echo 'no such line')"
    return
  }
  ((EX_STATUS == 0 && EX_SERVER_STATUS == 0)) || {
    ex_fail "both sides exit 0 after the stream" "client exit $EX_STATUS: $(ex_tail "$EX_OUT"); server exit $EX_SERVER_STATUS"
    return
  }

  # 2. --budget 50 --retry 2: 3 x 16.8 ms (2^12). The server dies in the middle of a long
  # stream: the WRITE in flight fails with IBV_WC_RETRY_EXC_ERR (12).
  ex_serve "$1" -p "$((EX_PORT + 1))" --timeout 20 || return
  timeout 30 "${EX_RX[@]}" "$1" -p "$((EX_PORT + 1))" --timeout 20 --budget 50 --retry 2 -n 100000 127.0.0.1 >"$EX_OUT" 2>&1 &
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
  line="client: a dead peer fails a WRITE after about 50.3 ms ((2 + 1) x 16.8 ms)"
  grep -qxF -- "$line" "$EX_OUT" || {
    ex_fail "with --budget 50 --retry 2 the client prints: $line" "$(ex_line "$EX_OUT" 'dead peer|ACK timeout' || echo 'no such line')"
    return
  }
  line=$(ex_line "$EX_OUT" '^client: WRITE [0-9]+ of 100000 failed after ')
  # A killed server's QP and MR are released by its kernel in either order:
  # QP first, and nothing answers (12); MR first, and its QP refuses (10).
  if ((EX_STATUS != 1)) || [[ $line != *"status 12 (IBV_WC_RETRY_EXC_ERR"* && $line != *"status 10 (IBV_WC_REM_ACCESS_ERR"* ]]; then
    ex_fail "with the server killed mid-stream: 'client: WRITE N of 100000 failed after S s: status 12 (IBV_WC_RETRY_EXC_ERR, ...)' (or 10, IBV_WC_REM_ACCESS_ERR, when the dying server's MR went first), exit 1" \
      "client exit $EX_STATUS: ${line:-$(ex_tail "$EX_OUT")}"
    return
  fi
  waited=$(sed -n 's/.* failed after \([0-9.]*\) s: status 12 .*/\1/p' <<<"$line")
  [[ -z $waited ]] || echo "grade: the dead server was noticed $waited s after the failed WRITE was posted (the promise: about 0.05 s)"

  # 3. -u and --budget together are misuse.
  ex_run "$1" -p "$((EX_PORT + 2))" -u 14 --budget 500 127.0.0.1
  ((EX_STATUS == 2)) || ex_fail "-u 14 --budget 500: misuse, exit 2" "exit $EX_STATUS: $(ex_tail "$EX_OUT")"
}
