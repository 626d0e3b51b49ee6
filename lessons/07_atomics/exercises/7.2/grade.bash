# Grader of exercise 7.2: N FETCH_AND_ADDs of +5 then N of -1 leave the
# server's counter at 4N, and the old values the client prints step by 5,
# then back by 1.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="two loops of N: compare_add = 5, then compare_add = UINT64_MAX (-1 as a uint64_t: the 64-bit sum wraps); print \"+5\" or \"-1\" in each line"

grade() {
  local n=$((4 + RANDOM % 5)) i want got
  # The lines one client alone must print: old values 0, 5, ..., 5(N-1), then 5N, 5N-1, ..., 4N+1.
  want=$(
    for ((i = 1; i <= n; i++)); do echo "client: fetch_and_add #$i: +5, old value $((5 * (i - 1)))"; done
    for ((i = 1; i <= n; i++)); do echo "client: fetch_and_add #$((n + i)): -1, old value $((5 * n - i + 1))"; done
  )
  ex_server "$1" -p "$EX_PORT" --timeout 10
  if ! ex_wait_line "$EX_SERVER_OUT" "waiting for client 1 of 1"; then
    ex_fail "the server to print 'waiting for client 1 of 1'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  ex_run "$1" -p "$EX_PORT" --timeout 10 127.0.0.1 -n "$n"
  ex_wait_server

  if ((EX_STATUS != 0)); then
    ex_fail "the client (-n $n) to exit 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  got=$(grep -E '^client: fetch_and_add #' "$EX_OUT")
  if [[ $got != "$want" ]]; then
    local -a w g
    local k=0
    mapfile -t w <<<"$want"
    mapfile -t g <<<"$got"
    while [[ ${w[k]} == "${g[k]:-}" ]]; do k=$((k + 1)); done
    ex_fail "${#w[@]} lines, '${w[0]}' to '${w[-1]}'; line $((k + 1)): '${w[k]}'" \
      "$(grep -c '^client: fetch_and_add #' "$EX_OUT") lines; line $((k + 1)): '${g[k]:-(none)}'"
    return
  fi
  # The server's CPU reads the counter after DONE: N * 5 - N * 1.
  got=$(ex_line "$EX_SERVER_OUT" '^result: counter = ' || ex_tail "$EX_SERVER_OUT")
  if ((EX_SERVER_STATUS != 0)) || [[ $got != "result: counter = $((4 * n))" ]]; then
    ex_fail "the server: 'result: counter = $((4 * n))' ($n x 5 - $n x 1) and exit status 0" \
      "exit status $EX_SERVER_STATUS: $got"
  fi
}
