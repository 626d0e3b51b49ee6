# Grader of exercise 13.2: the server whose SRQ stopped being refilled serves
# two clients' 40 requests with an SRQ of 4, the limit event raised again and again.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="the SRQ limit is one-shot: the device sets srq_limit to 0 as it raises the event; what must refill_if_due() do, before it posts the receives?"

grade() {
  local client2_out=$EX_TMP/client2.out client2_pid client2_status=0 result
  ex_server "$1" -p "$EX_PORT" --timeout 5 -c 2 -r 4 --limit 1
  ex_wait_line "$EX_SERVER_OUT" "waiting for client 1 of 2" || {
    ex_fail "the server to print 'waiting for client 1 of 2'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  }
  timeout 30 "${EX_RX[@]}" "$1" -p "$EX_PORT" --timeout 10 127.0.0.1 -n 20 >"$client2_out" 2>&1 &
  client2_pid=$!
  ex_run "$1" -p "$EX_PORT" --timeout 10 127.0.0.1 -n 20
  wait "$client2_pid" || client2_status=$?
  ex_wait_server
  result=$(ex_line "$EX_SERVER_OUT" '^result: served ') || result="no result line: $(ex_tail "$EX_SERVER_OUT")"
  [[ $result =~ ^result:\ served\ 40\ requests\ from\ 2\ clients\ with\ one\ SRQ\ of\ 4\ receives\;\ limit\ reached\ ([0-9]+)\ times?$ ]] || {
    ex_fail "result: served 40 requests from 2 clients with one SRQ of 4 receives; limit reached K times" "$result"
    return
  }
  ((BASH_REMATCH[1] >= 2)) || {
    ex_fail "the limit reached at least twice (40 requests through 4 receives)" "$result"
    return
  }
  ((EX_STATUS == 0 && client2_status == 0 && EX_SERVER_STATUS == 0)) ||
    ex_fail "both clients and the server exit 0" \
      "client exit $EX_STATUS: $(ex_tail "$EX_OUT"); the other client: exit $client2_status; server exit $EX_SERVER_STATUS"
}
