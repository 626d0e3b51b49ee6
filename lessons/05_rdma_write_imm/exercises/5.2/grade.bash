# Grader of exercise 5.2: one byte past the server's buffer is a remote access error (10) on both sides; 16 of 16 fit.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="client: skip the length check when opt.given('U'); both sides: poll_by_hand, print the status with wc_status_name and its number, and on failure fail_with_qp_state, which calls ibv_query_qp(qp, &attr, IBV_QP_STATE, &init)"

# One server (-s 16) and one client (-U) run; $1 the program, $2 the TCP port, $3 the message.
run_pair() {
  ex_serve "$1" -p "$2" --timeout 10 -s 16 || return 1
  ex_run "$1" -p "$2" --timeout 10 -U 127.0.0.1 "$3"
  ex_wait_server
}

# The line of FILE that starts with PREFIX must be exactly WANT; says which run ($run) otherwise.
expect_line() {
  local file=$1 prefix=$2 want=$3 got
  got=$(grep -m1 -F -- "$prefix" "$file" | cut -c1-300)
  [[ $got == "$want" ]] && return 0
  [[ -n $got ]] || got="no '$prefix' line"
  ex_fail "$run: $want" "$got; client exit $EX_STATUS: $(ex_tail "$EX_OUT"); server exit $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
}

grade() {
  local run recvs msg
  # 1. 17 bytes into 16, unchecked: the server's NIC refuses the WRITE.
  run="17 bytes into the server's 16 (-U)" msg=$(printf '%05d' "$RANDOM")abcdefghijkl
  recvs=$(ex_counter rdma_recvs)
  run_pair "$1" "$EX_PORT" "$msg" || return
  expect_line "$EX_OUT" "client: WRITE completed with " "client: WRITE completed with IBV_WC_REM_ACCESS_ERR (10)" || return
  expect_line "$EX_SERVER_OUT" "server: RECV completed with " "server: RECV completed with IBV_WC_REM_ACCESS_ERR (10)" || return
  expect_line "$EX_OUT" "client: QP state " "client: QP state IBV_QPS_ERR (ibv_query_qp)" || return
  expect_line "$EX_SERVER_OUT" "server: QP state " "server: QP state IBV_QPS_ERR (ibv_query_qp)" || return
  if ((EX_STATUS != 1 || EX_SERVER_STATUS != 1)) || grep -q '^result: received' "$EX_SERVER_OUT"; then
    ex_fail "$run: both sides exit 1, and the server prints no 'result: received'" \
      "client exit $EX_STATUS, server exit $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  local drecvs=$(($(ex_counter rdma_recvs) - recvs))
  ((drecvs == 0)) || {
    ex_fail "$run: rdma_recvs unchanged (the server's NIC accepted nothing)" "rdma_recvs +$drecvs"
    return
  }

  # 2. 16 bytes into 16, unchecked: it fits; nothing may refuse it.
  run="16 bytes into the server's 16 (-U)" msg=${msg:0:16}
  recvs=$(ex_counter rdma_recvs)
  run_pair "$1" "$((EX_PORT + 1))" "$msg" || return
  expect_line "$EX_OUT" "client: WRITE completed with " "client: WRITE completed with IBV_WC_SUCCESS (0)" || return
  expect_line "$EX_SERVER_OUT" "server: RECV completed with " "server: RECV completed with IBV_WC_SUCCESS (0)" || return
  expect_line "$EX_SERVER_OUT" "result: " "result: received 16 bytes: \"$msg\"" || return
  drecvs=$(($(ex_counter rdma_recvs) - recvs))
  ((EX_STATUS == 0 && EX_SERVER_STATUS == 0 && drecvs == 1)) ||
    ex_fail "$run: both sides exit 0, rdma_recvs +1 (the immediate's receive)" \
      "client exit $EX_STATUS, server exit $EX_SERVER_STATUS, rdma_recvs +$drecvs"
}
