# Grader of exercise 8.2: both sides exit within seconds of their result
# (ibv_destroy_cq returns only once every CQ event taken has been
# acknowledged, exactly once) and say how many events they took and acked.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="run the client under gdb, interrupt it once it hangs and read the backtrace (the README shows how, in the lab): which verb under main waits, and for what? man ibv_get_cq_event, NOTES"

readonly kExitSeconds=5 # a side that is not gone this long after its work is done hangs

# "events: E, acknowledged: A, ..." from FILE, checked: A == E >= 1. Prints what is wrong, if anything.
acks_wrong() {
  local line
  line=$(ex_line "$1" '^events: ') || {
    echo "no line 'events: E, acknowledged: A, ...'"
    return
  }
  if [[ ! $line =~ ^events:\ ([0-9]+),\ acknowledged:\ ([0-9]+), ]] ||
    ((BASH_REMATCH[1] < 1 || BASH_REMATCH[1] != BASH_REMATCH[2])); then
    echo "'$line'"
  fi
}

grade() {
  local n=$((20 + RANDOM % 21)) a=$((RANDOM % 100)) b=$((RANDOM % 100)) got wrong
  ex_serve "$1" -p "$EX_PORT" --timeout 10 || return
  # The client's work takes well under a second; timeout stops it if it hangs.
  ex_run timeout "$kExitSeconds" "$1" -p "$EX_PORT" --timeout 5 -n "$n" 127.0.0.1 "$a" "$b"
  ex_wait_server "$kExitSeconds"

  got=$(ex_line "$EX_OUT" '^result: ' || echo 'no "result:" line')
  if ((EX_STATUS == 124)); then
    ex_fail "the client to exit 0 once it has printed its result" \
      "it printed '$got', then was still running $kExitSeconds s later (stopped): it hangs on its way out"
    return
  fi
  if ((EX_STATUS != 0)) || [[ $got != "result: $a + $b = $((a + b))" ]]; then
    ex_fail "the client (-n $n): 'result: $a + $b = $((a + b))' and exit status 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^result: ' || echo 'no "result:" line')
  if ((EX_SERVER_STATUS == 124)); then
    ex_fail "the server to exit 0 once it has printed its result" \
      "it printed '$got', then was still running $kExitSeconds s after the client had finished (stopped): it hangs on its way out"
    return
  fi
  if ((EX_SERVER_STATUS != 0)) || [[ $got != "result: served $n requests" ]]; then
    ex_fail "the server: 'result: served $n requests' and exit status 0" "exit status $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  wrong=$(acks_wrong "$EX_OUT")
  if [[ -n $wrong ]]; then
    ex_fail "the client: 'events: E, acknowledged: E, ...' (every event it took, acknowledged once)" "$wrong"
    return
  fi
  wrong=$(acks_wrong "$EX_SERVER_OUT")
  [[ -z $wrong ]] ||
    ex_fail "the server: 'events: E, acknowledged: E, ...' (every event it took, acknowledged once)" "$wrong"
}
