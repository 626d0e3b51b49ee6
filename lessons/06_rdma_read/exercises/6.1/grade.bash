# Grader of exercise 6.1: the client's pattern, RDMA-written over the start of
# the server's text, is what the server's CPU finds there afterwards, and what
# the client READs back (followed by the rest of the server's text).
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="server: ibv_reg_mr with LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ and REMOTE_WRITE | REMOTE_READ in wb::qp_to_init; client: an IBV_WR_RDMA_WRITE from out_mr, polled, before the READ"

grade() {
  # Texts of the grader's choosing: what the server exposes, what the client writes over its start.
  local text="the server's own bytes $RANDOM, untouched after the pattern"
  local pattern="graded-$RANDOM"
  local expect=$pattern${text:${#pattern}}
  local got
  ex_serve "$1" -p "$EX_PORT" --timeout 10 --message "$text" || return
  ex_run "$1" -p "$EX_PORT" --timeout 10 127.0.0.1 --write "$pattern"
  ex_wait_server

  # The client: both operations succeeded, and the read-back is the pattern, then the server's own bytes.
  if ((EX_STATUS != 0)); then
    ex_fail "the client (--write '$pattern') to WRITE it, READ back \"$expect\" and exit 0" \
      "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  got=$(ex_line "$EX_OUT" '^result: ' || ex_tail "$EX_OUT")
  if [[ $got != "result: wrote ${#pattern} bytes, read back ${#text} bytes, the first ${#pattern} match: \"$expect\"" ]]; then
    ex_fail "result: wrote ${#pattern} bytes, read back ${#text} bytes, the first ${#pattern} match: \"$expect\"" "$got"
    return
  fi
  # The server's CPU, after DONE, reads its own memory: the truth about the WRITE.
  got=$(ex_line "$EX_SERVER_OUT" '^server: buffer now holds ' || ex_tail "$EX_SERVER_OUT")
  if ((EX_SERVER_STATUS != 0)) || [[ $got != "server: buffer now holds \"$expect\"" ]]; then
    ex_fail "the server, after DONE: 'server: buffer now holds \"$expect\"' and exit status 0" \
      "exit status $EX_SERVER_STATUS: $got"
  fi
}
