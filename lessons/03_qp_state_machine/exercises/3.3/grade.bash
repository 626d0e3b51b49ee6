# Grader of exercise 3.3: with B's rq_psn behind A's sq_psn, A gives up after (retry_cnt + 1) ACK timeouts.
# shellcheck disable=SC2034 # HINT is read by scripts/exercises/grade_lib.bash
HINT="b_expects = (psn_a - kPsnGap) & 0xFFFFFF; .retry_cnt = retry_cnt; predicted_ms = lround((retry_cnt + 1) * 4.096e-3 * (1 << kTimeout))"

# One run with -r RETRY; returns 1 (after ex_fail) when anything is off.
grade_run() {
  local program=$1 retry=$2
  local names=(out_of_seq_request completer_retry_err retry_exceeded_err rdma_recvs) before=() d=() i
  for i in "${!names[@]}"; do before[i]=$(ex_counter "${names[i]}"); done
  ex_run "$program" -d "$EX_DEV" -r "$retry"
  for i in "${!names[@]}"; do d[i]=$(($(ex_counter "${names[i]}") - before[i])); done
  local counters="out_of_seq_request +${d[0]}, completer_retry_err +${d[1]}, retry_exceeded_err +${d[2]}, rdma_recvs +${d[3]}"

  ((EX_STATUS == 0)) || {
    ex_fail "with -r $retry: exit status 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  local sent
  sent=$(ex_line "$EX_OUT" "^A's SEND: ") || sent="no line \"A's SEND: ...\""
  [[ $sent == "A's SEND: IBV_WC_RETRY_EXC_ERR (12,"* ]] || {
    ex_fail "with -r $retry: A's SEND: IBV_WC_RETRY_EXC_ERR (12, transport retry counter exceeded)" "$sent; counters $counters"
    return
  }
  # (retry + 1) tries x 4.096 us x 2^14 = 67.108864 ms a try; the printed value rounded (1 ms either way).
  local want=$(((retry + 1) * 67108864 / 1000000)) line said_retry said_ms measured
  line=$(ex_line "$EX_OUT" 'retry_cnt [0-9]+: predicted [0-9]+ ms') || line='no "retry_cnt R: predicted P ms" line'
  said_retry=$(sed -n 's/.*retry_cnt \([0-9]*\): predicted.*/\1/p' <<<"$line")
  said_ms=$(sed -n 's/.*: predicted \([0-9]*\) ms.*/\1/p' <<<"$line")
  if [[ $said_retry != "$retry" || -z $said_ms ]] || ((said_ms < want || said_ms > want + 1)); then
    ex_fail "with -r $retry: 'QP A in RTS, timeout 14, retry_cnt $retry: predicted $want or $((want + 1)) ms'" "$line"
    return
  fi
  measured=$(sed -n "s/^A's SEND: .* after \([0-9]*\) ms$/\1/p" <<<"$sent")
  if [[ -z $measured ]] || ((measured * 10 < said_ms * 9 || measured * 2 > said_ms * 3 + 100)); then
    ex_fail "with -r $retry: A's SEND failing after about $said_ms ms (0.9 to 1.5 times the prediction, + 50 ms)" "$sent"
    return
  fi
  ((d[0] >= 1 && d[1] == retry && d[2] == 1 && d[3] == 0)) || {
    ex_fail "with -r $retry: out_of_seq_request +1 or more, completer_retry_err +$retry, retry_exceeded_err +1, rdma_recvs +0" \
      "$counters"
    return
  }
}

grade() {
  grade_run "$1" 6 && grade_run "$1" 1
}
