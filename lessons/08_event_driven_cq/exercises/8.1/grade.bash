# Grader of exercise 8.1: a client armed for solicited completions only
# wakes for the answers (flagged IBV_SEND_SOLICITED by the server), never for
# its own SEND completions, yet still drains all 2N of them.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="the client passes 1 to ibv_req_notify_cq (the first arm and every re-arm); the server's answers carry IBV_SEND_SIGNALED | IBV_SEND_SOLICITED"

grade() {
  local n=$((3 + RANDOM % 4)) a=$((RANDOM % 100)) b=$((RANDOM % 100))
  # -w 300: the server answers 300 ms after the requests came, so the
  # client's N SEND completions are all in its CQ well before any answer.
  ex_serve "$1" -p "$EX_PORT" --timeout 10 -w 300 || return
  ex_run "$1" -p "$EX_PORT" --timeout 5 -n "$n" 127.0.0.1 "$a" "$b"
  ex_wait_server

  if ((EX_STATUS != 0)); then
    ex_fail "the client (-n $n) to exit 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  local got
  got=$(ex_line "$EX_OUT" '^result: ' || echo 'no "result:" line')
  if [[ $got != "result: $a + $b = $((a + b))" ]]; then
    ex_fail "the client: 'result: $a + $b = $((a + b))'" "$got"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^result: ' || ex_tail "$EX_SERVER_OUT")
  if ((EX_SERVER_STATUS != 0)) || [[ $got != "result: served $n requests" ]]; then
    ex_fail "the server: 'result: served $n requests' and exit status 0" "exit status $EX_SERVER_STATUS: $got"
    return
  fi
  # An event the client woke for whose drain found only its own SENDs.
  local sends_only
  sends_only=$(grep -E '^client: event [0-9]+: [0-9]+ completions? \([0-9]+ x IBV_WC_SEND\)$' "$EX_OUT" | head -n1)
  if [[ -n $sends_only ]]; then
    ex_fail "no client event for its own SEND completions: each event raised by an answer (IBV_WC_RECV)" \
      "'$sends_only'"
    return
  fi
  # events <= N: only the N answers can raise one; completions: N SENDs + N RECVs, all drained.
  local line events completions
  line=$(ex_line "$EX_OUT" '^events: ') || {
    ex_fail "the client's line 'events: E, completions: C, empty events: X'" "$(ex_tail "$EX_OUT")"
    return
  }
  events=$(sed -E 's/^events: ([0-9]+), completions: ([0-9]+),.*/\1/' <<<"$line")
  completions=$(sed -E 's/^events: ([0-9]+), completions: ([0-9]+),.*/\2/' <<<"$line")
  if [[ ! $events =~ ^[0-9]+$ ]] || ((events < 1 || events > n || completions != 2 * n)); then
    ex_fail "the client: 1 to $n events (one per answer at most), completions: $((2 * n)) ($n SENDs, $n RECVs)" "'$line'"
    return
  fi
  ex_line "$EX_OUT" '^client: .*CQ armed \(solicited only\)' >/dev/null ||
    ex_fail "the client to say 'CQ armed (solicited only)'" "$(ex_line "$EX_OUT" 'CQ armed' || echo 'no "CQ armed" line')"
}
