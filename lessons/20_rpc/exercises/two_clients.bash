# Shared by the graders of exercises 20.1 and 20.2 (sourced): a server for
# two clients (-t 8), then two clients of N requests at once, one with -t 8
# (its output in $EX_OUT) and one with -t OTHER (in $EX_TMP/other.out); both
# clients' and the server's result lines checked. Status 1, after ex_fail,
# when anything is off.
# shellcheck shell=bash

# two_clients PROGRAM N OTHER
two_clients() {
  local program=$1 n=$2 other=$3 other_out=$EX_TMP/other.out other_pid other_status=0 got
  ex_server "$program" -p "$EX_PORT" --timeout 20 -c 2 -t 8
  ex_wait_line "$EX_SERVER_OUT" "waiting for 2 clients" ||
    ex_fail "the server to print 'waiting for 2 clients'" "$(ex_tail "$EX_SERVER_OUT")" || return
  timeout 60 "${EX_RX[@]}" "$program" -p "$EX_PORT" --timeout 20 127.0.0.1 -n "$n" -t "$other" >"$other_out" 2>&1 &
  other_pid=$!
  ex_run "$program" -p "$EX_PORT" --timeout 20 127.0.0.1 -n "$n" -t 8
  wait "$other_pid" || other_status=$?
  ex_wait_server 30
  ((EX_STATUS == 0 && other_status == 0 && EX_SERVER_STATUS == 0)) ||
    ex_fail "both clients (-t 8 and -t $other, -n $n each) and the server exit 0" \
      "client -t 8 exit $EX_STATUS: $(ex_tail "$EX_OUT"); client -t $other exit $other_status: $(ex_tail "$other_out"); server exit $EX_SERVER_STATUS" ||
    return
  for got in "$EX_OUT" "$other_out"; do
    ex_line "$got" "^result: $n requests answered \\([0-9]+ PUTs, [0-9]+ GETs\\), every response checked; " >/dev/null ||
      ex_fail "each client's result: $n requests answered (P PUTs, G GETs), every response checked; ..." \
        "$(ex_line "$got" '^result: ' || ex_tail "$got")" || return
  done
  got=$(ex_line "$EX_SERVER_OUT" '^result: ') || got="no result line"
  [[ $got == "result: served $((2 * n)) requests from 2 clients, each said goodbye" ]] ||
    ex_fail "the server's result: served $((2 * n)) requests from 2 clients, each said goodbye" "$got"
}
