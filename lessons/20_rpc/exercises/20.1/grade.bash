# Grader of exercise 20.1: two clients at once, one with a window of 8 and
# one with a window of 1; each uses all of its window and no more, every
# response is checked, and the server's count is the clients' sum.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="in Window::take, credits = std::min(grant, slots); in take_slot, peak = std::max(peak, outstanding); print it in print_result"

grade() {
  local n=300 narrow_out=$EX_TMP/narrow.out narrow_pid narrow_status=0 got
  ex_server "$1" -p "$EX_PORT" --timeout 20 -c 2 -t 8
  ex_wait_line "$EX_SERVER_OUT" "waiting for 2 clients" || {
    ex_fail "the server to print 'waiting for 2 clients'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  }
  timeout 60 "${EX_RX[@]}" "$1" -p "$EX_PORT" --timeout 20 127.0.0.1 -n "$n" -t 1 >"$narrow_out" 2>&1 &
  narrow_pid=$!
  ex_run "$1" -p "$EX_PORT" --timeout 20 127.0.0.1 -n "$n" -t 8
  wait "$narrow_pid" || narrow_status=$?
  ex_wait_server 30
  ((EX_STATUS == 0 && narrow_status == 0 && EX_SERVER_STATUS == 0)) || {
    ex_fail "both clients (-t 8 and -t 1, -n $n each) and the server exit 0" \
      "client -t 8 exit $EX_STATUS: $(ex_tail "$EX_OUT"); client -t 1 exit $narrow_status: $(ex_tail "$narrow_out"); server exit $EX_SERVER_STATUS"
    return
  }
  for got in "$EX_OUT" "$narrow_out"; do
    ex_line "$got" "^result: $n requests answered \\([0-9]+ PUTs, [0-9]+ GETs\\), every response checked; " >/dev/null || {
      ex_fail "each client's result: $n requests answered (P PUTs, G GETs), every response checked; ..." \
        "$(ex_line "$got" '^result: ' || ex_tail "$got")"
      return
    }
  done
  got=$(ex_line "$EX_SERVER_OUT" '^result: ') || got="no result line"
  [[ $got == "result: served $((2 * n)) requests from 2 clients, each said goodbye" ]] || {
    ex_fail "the server's result: served $((2 * n)) requests from 2 clients, each said goodbye" "$got"
    return
  }
  # The window as it was used: 1 credit until the first response, then the
  # whole grant at once (the client posts every request its credits allow).
  local window out
  for window in 8 1; do
    out=$EX_OUT
    ((window == 8)) || out=$narrow_out
    got=$(ex_line "$out" '^client: most requests in flight') || got="no 'client: most requests in flight at once: K' line"
    [[ $got == "client: most requests in flight at once: $window" ]] || {
      ex_fail "the client with -t $window: client: most requests in flight at once: $window (its ring's slots, all granted)" "$got"
      return
    }
  done
  # The lesson's own narration says the window opened: request 3 went out
  # while request 2 was still open, so its response is in slot 1, not 0.
  got=$(ex_line "$EX_OUT" '^client: response 3 in slot ') || got="no 'client: response 3 in slot S: ...' line"
  [[ $got == "client: response 3 in slot 1: "* ]] || {
    ex_fail "the client with -t 8: client: response 3 in slot 1: ... (requests 2 and 3 in flight together)" "$got"
  }
}
