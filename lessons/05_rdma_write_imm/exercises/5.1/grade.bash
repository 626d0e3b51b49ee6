# Grader of exercise 5.1: a plain WRITE then a SEND of the length; the server reads the message intact.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="client: write_wr (IBV_WR_RDMA_WRITE, send_flags 0, .next = &send_wr) and send_wr (IBV_WR_SEND, SIGNALED, 4 bytes of htonl(length)); server: a receive with a registered 4-byte buffer, IBV_WC_RECV, ntohl of what arrived"

grade() {
  local msg="graded $RANDOM: a plain WRITE, then a SEND" line sends recvs
  sends=$(ex_counter rdma_sends) recvs=$(ex_counter rdma_recvs)

  # 1. An honest client: the server prints exactly what was written.
  ex_serve "$1" -p "$EX_PORT" --timeout 10 || return
  ex_run "$1" -p "$EX_PORT" --timeout 10 127.0.0.1 "$msg"
  ex_wait_server
  line=$(ex_line "$EX_SERVER_OUT" '^server: completion ')
  [[ $line == "server: completion IBV_WC_RECV, 4 bytes" ]] || {
    ex_fail "the server's completion: 'server: completion IBV_WC_RECV, 4 bytes' (the SEND of the length)" \
      "${line:-no 'server: completion' line}; server exit $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
    return
  }
  line="result: received ${#msg} bytes: \"$msg\""
  grep -qxF -- "$line" "$EX_SERVER_OUT" || {
    ex_fail "the server prints: $line" "$(ex_line "$EX_SERVER_OUT" '^result:' | cut -c1-300 | grep . || echo 'no "result:" line')"
    return
  }
  ((EX_STATUS == 0 && EX_SERVER_STATUS == 0)) || {
    ex_fail "both sides exit 0" "client exit $EX_STATUS: $(ex_tail "$EX_OUT"); server exit $EX_SERVER_STATUS"
    return
  }
  # rxe counts SENDs in rdma_sends (a WRITE, with immediate or not, is not one) and consumed receives in rdma_recvs.
  local dsends=$(($(ex_counter rdma_sends) - sends)) drecvs=$(($(ex_counter rdma_recvs) - recvs))
  ((dsends == 1 && drecvs == 1)) || {
    ex_fail "rdma_sends +1 (the one SEND) and rdma_recvs +1 (the one receive it consumed)" \
      "rdma_sends +$dsends, rdma_recvs +$drecvs"
    return
  }

  # 2. A lying client (-L): the server must not read beyond its 64-byte buffer.
  ex_serve "$1" -p "$((EX_PORT + 1))" --timeout 10 -s 64 || return
  ex_run "$1" -p "$((EX_PORT + 1))" --timeout 10 -L 5000 127.0.0.1 "$msg"
  ex_wait_server
  if ((EX_SERVER_STATUS != 1)) || ! ex_line "$EX_SERVER_OUT" '^result: error: .*5000' >/dev/null; then
    ex_fail "with the client's -L 5000 and the server's -s 64: the server refuses, 'result: error: ...5000...', exit 1" \
      "server exit $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT" | cut -c1-300)"
  fi
}
