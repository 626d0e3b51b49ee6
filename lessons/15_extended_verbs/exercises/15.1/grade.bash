# Grader of exercise 15.1: each RECV completion names its QP, read from the extended CQ.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="create both CQs with wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM, and between ibv_start_poll and ibv_end_poll set wc.qp_num = ibv_wc_read_qp_num(cq)"

# What a side's exit status says, for "what happened".
exit_text() {
  case $1 in
    0) echo "exit 0" ;;
    139) echo "exit 139, a segmentation fault: a reader (ibv_wc_read_*) of a field the CQ was not created to hold?" ;;
    *) echo "exit $1" ;;
  esac
}

grade() {
  local a=$((RANDOM + 1)) b=$((RANDOM + 1)) server_qp client_qp want
  ex_serve "$1" -p "$EX_PORT" --timeout 10 || return
  ex_run "$1" -p "$EX_PORT" --timeout 10 127.0.0.1 "$a" "$b"
  ex_wait_server
  ((EX_STATUS == 0 && EX_SERVER_STATUS == 0)) || {
    ex_fail "both sides exit 0" \
      "client $(exit_text "$EX_STATUS") ($(ex_tail "$EX_OUT" 1)); server $(exit_text "$EX_SERVER_STATUS") ($(ex_tail "$EX_SERVER_OUT" 1))"
    return
  }
  want="result: $a + $b = $((a + b))"
  grep -qxF -- "$want" "$EX_OUT" || {
    ex_fail "the client to print '$want'" "$(ex_tail "$EX_OUT" 1)"
    return
  }
  # The truth about the QPs: the server prints its own ("server: QP 0x.. is
  # RTS") and the client's, as the exchange told it ("server: peer ... is QP 0x..").
  server_qp=$(sed -n 's/^server: QP \(0x[0-9a-f]*\) is RTS.*/\1/p' "$EX_SERVER_OUT")
  client_qp=$(sed -n 's/^server: peer .* is QP \(0x[0-9a-f]*\)$/\1/p' "$EX_SERVER_OUT")
  [[ -n $server_qp && -n $client_qp ]] || {
    ex_fail "the server's lines 'server: peer ... is QP 0x..' and 'server: QP 0x.. is RTS'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  }
  # A RECV completion's qp_num is the QP that received: the server's for the
  # request, the client's for the response.
  want="server: completion IBV_WC_RECV, 16 bytes, QP $server_qp"
  grep -qxF -- "$want" "$EX_SERVER_OUT" || {
    ex_fail "$want (the server's own QP)" "$(ex_line "$EX_SERVER_OUT" '^server: completion' || echo 'no completion line')"
    return
  }
  want="client: completion IBV_WC_RECV, 16 bytes, QP $client_qp"
  grep -qxF -- "$want" "$EX_OUT" ||
    ex_fail "$want (the client's own QP, the server's peer)" \
      "$(ex_line "$EX_OUT" '^client: completion' || echo 'no completion line')"
}
