# Grader of exercise 13.1: ibv_query_srq shows the SRQ limit armed after every
# arming and 0 at every SRQ limit event (the device disarmed it).
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="ibv_srq_attr attr{}; CHECK_RC(ibv_query_srq(srq, &attr)); print attr.srq_limit: after the first arm_srq_limit, after the one in refill_if_due(), and in the IBV_EVENT_SRQ_LIMIT_REACHED case"

grade() {
  local client2_out=$EX_TMP/client2.out client2_pid client2_status=0 result k armed disarmed
  ex_server "$1" -p "$EX_PORT" --timeout 20 -c 2 -r 8 --limit 2
  ex_wait_line "$EX_SERVER_OUT" "waiting for client 1 of 2" || {
    ex_fail "the server to print 'waiting for client 1 of 2'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  }
  timeout 30 "${EX_RX[@]}" "$1" -p "$EX_PORT" --timeout 20 127.0.0.1 -n 10 >"$client2_out" 2>&1 &
  client2_pid=$!
  ex_run "$1" -p "$EX_PORT" --timeout 20 127.0.0.1 -n 10
  wait "$client2_pid" || client2_status=$?
  ex_wait_server
  if ((EX_STATUS != 0 || client2_status != 0 || EX_SERVER_STATUS != 0)); then
    ex_fail "both clients (-n 10) and the server exit 0" \
      "client exit $EX_STATUS: $(ex_tail "$EX_OUT"); the other client: exit $client2_status: $(ex_tail "$client2_out"); server exit $EX_SERVER_STATUS"
    return
  fi
  result=$(ex_line "$EX_SERVER_OUT" '^result: served ') || result="no result line"
  [[ $result =~ ^result:\ served\ 20\ requests\ from\ 2\ clients\ with\ one\ SRQ\ of\ 8\ receives\;\ limit\ reached\ ([0-9]+)\ times?$ ]] || {
    ex_fail "result: served 20 requests from 2 clients with one SRQ of 8 receives; limit reached K time(s)" "$result"
    return
  }
  k=${BASH_REMATCH[1]}
  armed=$(grep -cx 'server: ibv_query_srq: srq_limit 2 (armed)' "$EX_SERVER_OUT")
  disarmed=$(grep -cx 'server: ibv_query_srq: srq_limit 0 (disarmed by the event)' "$EX_SERVER_OUT")
  ((k >= 1)) || {
    ex_fail "the limit reached at least once (20 requests, 8 receives)" "$result"
    return
  }
  ((disarmed == k)) || {
    ex_fail "$k lines 'server: ibv_query_srq: srq_limit 0 (disarmed by the event)', one per event" "$disarmed such lines"
    return
  }
  # One arming at the start and one per refill. Each event asks for a
  # refill, but the last one may come too late to be needed: the clients
  # can be done first. So count the refills the server printed.
  local refills
  refills=$(grep -c '^server: refilled [0-9]* receives; limit re-armed at 2$' "$EX_SERVER_OUT")
  ((armed == refills + 1)) ||
    ex_fail "$((refills + 1)) lines 'server: ibv_query_srq: srq_limit 2 (armed)': after the first arming and after each of the $refills refills" \
      "$armed such lines"
}
