# Grader of exercise 7.1: two clients at once, N locked read-modify-writes
# each, and the server's record ends at exactly (2N, 2N), with the lock free.
# Without the lock the same run loses hundreds of updates (measured on rxe:
# (1356, 1356) instead of (2000, 2000)).
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="before the READ, loop on post_atomic(IBV_WR_ATOMIC_CMP_AND_SWP, lock_addr, compare 0, swap my_id) until it returns 0; after the WRITE, CAS my_id -> 0"

readonly kRounds=1000 # per client: enough that two unlocked clients always collide

grade() {
  local want=$((2 * kRounds)) client2_out=$EX_TMP/client2.out client2_pid client2_status=0 got busy out
  ex_server "$1" -p "$EX_PORT" --timeout 20 -c 2
  if ! ex_wait_line "$EX_SERVER_OUT" "waiting for client 1 of 2"; then
    ex_fail "the server to print 'waiting for client 1 of 2'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  # Two clients at once; the server starts both with GO once both are connected.
  timeout 30 "${EX_RX[@]}" "$1" -p "$EX_PORT" --timeout 20 127.0.0.1 -n "$kRounds" >"$client2_out" 2>&1 &
  client2_pid=$!
  ex_run "$1" -p "$EX_PORT" --timeout 20 127.0.0.1 -n "$kRounds"
  wait "$client2_pid" || client2_status=$?
  ex_wait_server

  if ((EX_STATUS != 0 || client2_status != 0)); then
    ex_fail "both clients (-n $kRounds) exit 0" \
      "exit status $EX_STATUS: $(ex_tail "$EX_OUT"); the other: exit status $client2_status: $(ex_tail "$client2_out")"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^result: record = ' || ex_tail "$EX_SERVER_OUT")
  if [[ $got != "result: record = ($want, $want)" ]]; then
    local lost=
    [[ $got =~ ^result:\ record\ =\ \(([0-9]+), ]] &&
      lost=" ($((want - BASH_REMATCH[1])) updates lost: two clients READ the same value and both WROTE it + 1)"
    ex_fail "the server's 'result: record = ($want, $want)': 2 clients x $kRounds rounds, none lost" "$got$lost"
    return
  fi
  if ((EX_SERVER_STATUS != 0)) || ! ex_line "$EX_SERVER_OUT" '^server: lock word = 0 \(free\)' >/dev/null; then
    ex_fail "the server: 'server: lock word = 0 (free)' and exit status 0" \
      "exit status $EX_SERVER_STATUS: $(ex_line "$EX_SERVER_OUT" '^server: lock word' || ex_tail "$EX_SERVER_OUT")"
    return
  fi
  # Two clients that ran at the same time must have met the lock held at least once.
  busy=0
  for out in "$EX_OUT" "$client2_out"; do
    got=$(ex_line "$out" '^result: id [0-9]+ did [0-9]+ rounds; the lock was busy [0-9]+ times$') || {
      ex_fail "each client's 'result: id I did $kRounds rounds; the lock was busy B times'" "$(ex_tail "$out")"
      return
    }
    [[ $got =~ busy\ ([0-9]+)\ times ]] && busy=$((busy + BASH_REMATCH[1]))
  done
  ((busy > 0)) ||
    ex_fail "the lock found busy at least once (two clients took it $want times at the same time)" \
      "busy 0 times in both clients: was the record updated without taking the lock?"
}
