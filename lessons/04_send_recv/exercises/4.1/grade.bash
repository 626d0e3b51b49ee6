# Grader of exercise 4.1: N requests on one connection, every sum right, 2N SENDs and no RNR NAK.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="loop on both sides; the server re-posts its receive after decoding request i and before it SENDs answer i; the client posts the receive for answer i before it SENDs request i"

grade() {
  local n=20 a=$((RANDOM * 1000 + 1)) b=$((-RANDOM - 1)) i want
  local sends recvs rnr
  sends=$(ex_counter rdma_sends) recvs=$(ex_counter rdma_recvs) rnr=$(ex_counter send_rnr_err)
  ex_serve "$1" -p "$EX_PORT" --timeout 10 -n "$n" || return
  ex_run "$1" -p "$EX_PORT" --timeout 10 -n "$n" 127.0.0.1 -- "$a" "$b"
  ex_wait_server
  # Every answer, in order: request i asks for (a+i) + b.
  local -a got
  mapfile -t got < <(grep '^result: ' "$EX_OUT" | cut -c1-200)
  for ((i = 0; i < n; i++)); do
    want="result: $((a + i)) + $b = $((a + i + b))"
    [[ ${got[i]:-} == "$want" ]] || {
      ex_fail "$n result lines from the client, (A+i) + B for i = 0..$((n - 1)); line $((i + 1)): $want" \
        "${#got[@]} result lines; line $((i + 1)): ${got[i]:-none} (client exit $EX_STATUS: $(ex_tail "$EX_OUT" 1 | cut -c1-200))"
      return
    }
  done
  ((${#got[@]} == n)) || {
    ex_fail "exactly $n result lines" "${#got[@]}"
    return
  }
  ((EX_STATUS == 0 && EX_SERVER_STATUS == 0)) || {
    ex_fail "both sides exit 0" "client exit $EX_STATUS, server exit $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
    return
  }
  ex_line "$EX_SERVER_OUT" "^server: served $n requests\$" >/dev/null || {
    ex_fail "server: served $n requests" "$(ex_line "$EX_SERVER_OUT" '^server: served' || echo 'no "server: served" line')"
    return
  }
  # rxe counts both ends on one device: N requests and N answers, each one SEND and one RECV.
  local dsends=$(($(ex_counter rdma_sends) - sends)) drecvs=$(($(ex_counter rdma_recvs) - recvs))
  ((dsends == 2 * n && drecvs == 2 * n)) || {
    ex_fail "the counters rdma_sends and rdma_recvs up by $((2 * n)) each ($n requests + $n answers)" \
      "rdma_sends +$dsends, rdma_recvs +$drecvs"
    return
  }
  # A receive posted too late is not an error (rnr_retry 7 resends), but the NIC counts the RNR NAK.
  local drnr=$(($(ex_counter send_rnr_err) - rnr))
  ((drnr == 0)) ||
    ex_fail "no RNR NAK: send_rnr_err unchanged (every receive posted before the peer could SEND)" \
      "send_rnr_err +$drnr: a SEND found no receive posted and was resent"
}
