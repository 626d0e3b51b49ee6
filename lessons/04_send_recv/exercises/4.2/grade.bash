# Grader of exercise 4.2: a late receive and rnr_retry 0 give IBV_WC_RNR_RETRY_EXC_ERR (13); rnr_retry 7 survives it.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="server: send \"RTR!\", sleep kLate, then post_receive; client: your own qp_to_rts with .rnr_retry = rnr_retry, and a hand-written ibv_poll_cq loop that prints the status before it fails"

# One server and one client run; $1 the program, $2 the TCP port, $3 the client's --rnr-retry; A and B in $a and $b.
run_pair() {
  ex_serve "$1" -p "$2" --timeout 10 || return 1
  ex_run "$1" -p "$2" --timeout 10 --rnr-retry "$3" 127.0.0.1 -- "$a" "$b"
  ex_wait_server
}

# The change of a port counter since the snapshot in $before_NAME.
delta() {
  local name=before_$1
  echo $(($(ex_counter "$1") - ${!name}))
}

grade() {
  local a=$((RANDOM + 1)) b=$((RANDOM + 1)) line
  local before_send_rnr_err before_rcvd_rnr_err before_retry_rnr_exceeded_err
  before_send_rnr_err=$(ex_counter send_rnr_err) before_rcvd_rnr_err=$(ex_counter rcvd_rnr_err)
  before_retry_rnr_exceeded_err=$(ex_counter retry_rnr_exceeded_err)

  # 1. rnr_retry 0: the first RNR NAK ends the SEND.
  run_pair "$1" "$EX_PORT" 0 || return
  line=$(ex_line "$EX_OUT" '^client: QP 0x[0-9a-f]+ is RTS, rnr_retry ')
  [[ $line == *"rnr_retry 0 (ibv_query_qp)" ]] || {
    ex_fail "with --rnr-retry 0: the client's QP holds rnr_retry 0 (ibv_query_qp)" "${line:-no 'client: QP ... is RTS' line}"
    return
  }
  line=$(ex_line "$EX_OUT" '^client: SEND completed with ') || {
    ex_fail "with --rnr-retry 0: client: SEND completed with IBV_WC_RNR_RETRY_EXC_ERR (13)" \
      "no 'client: SEND completed with' line; client exit $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  [[ $line == "client: SEND completed with IBV_WC_RNR_RETRY_EXC_ERR (13)" ]] || {
    ex_fail "with --rnr-retry 0: client: SEND completed with IBV_WC_RNR_RETRY_EXC_ERR (13)" "$line"
    return
  }
  ((EX_STATUS == 1)) || {
    ex_fail "with --rnr-retry 0: the client exits 1 after its SEND failed" "client exit $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  if ((EX_SERVER_STATUS != 1)) || ! grep -q 'closed the connection' "$EX_SERVER_OUT"; then
    ex_fail "with --rnr-retry 0: the server exits 1: its client closed the connection (its request never arrived)" \
      "server exit $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  local sent rcvd gave_up
  sent=$(delta send_rnr_err) rcvd=$(delta rcvd_rnr_err) gave_up=$(delta retry_rnr_exceeded_err)
  ((sent >= 1 && rcvd >= 1 && gave_up == 1)) || {
    ex_fail "with --rnr-retry 0: send_rnr_err and rcvd_rnr_err up (the RNR NAK), retry_rnr_exceeded_err up by 1" \
      "send_rnr_err +$sent, rcvd_rnr_err +$rcvd, retry_rnr_exceeded_err +$gave_up"
    return
  }

  # 2. rnr_retry 7: the same late receive, resent until it is there.
  before_rcvd_rnr_err=$(ex_counter rcvd_rnr_err)
  run_pair "$1" "$((EX_PORT + 1))" 7 || return
  line=$(ex_line "$EX_OUT" '^client: SEND completed with ')
  [[ $line == "client: SEND completed with IBV_WC_SUCCESS (0)" ]] || {
    ex_fail "with --rnr-retry 7: client: SEND completed with IBV_WC_SUCCESS (0)" "${line:-no such line}; client exit $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  line="result: $a + $b = $((a + b))"
  if ! grep -qxF -- "$line" "$EX_OUT" || ! grep -qxF -- "$line" "$EX_SERVER_OUT" ||
    ((EX_STATUS != 0 || EX_SERVER_STATUS != 0)); then
    ex_fail "with --rnr-retry 7: '$line' from both sides, both exit 0" \
      "client exit $EX_STATUS: $(ex_tail "$EX_OUT"); server exit $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  rcvd=$(delta rcvd_rnr_err)
  ((rcvd >= 1)) ||
    ex_fail "with --rnr-retry 7: rcvd_rnr_err up (the server still posted late: RNR NAKs, resent and survived)" \
      "rcvd_rnr_err +$rcvd: the SEND never met a missing receive"
}
