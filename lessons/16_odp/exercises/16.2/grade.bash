# Grader of exercise 16.2: the client's two fetch-and-adds on a page only
# its READs touched return 0 and 1, and the server's CPU finds 2 there.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="IBV_ODP_SUPPORT_ATOMIC in the server's check, IBV_ACCESS_REMOTE_ATOMIC in kRemote (MR and QP), IBV_WR_ATOMIC_FETCH_AND_ADD twice on peer.addr + 2 * half - kPage"

grade() {
  local got
  ex_serve "$1" -p "$EX_PORT" --timeout 20 || return
  ex_run "$1" -p "$EX_PORT" --timeout 20 127.0.0.1
  ex_wait_server
  got=$(ex_line "$EX_OUT" '^client: fetch-and-add ' || ex_tail "$EX_OUT")
  if ((EX_STATUS != 0)) || [[ $got != "client: fetch-and-add on the last page returned 0, then 1" ]]; then
    ex_fail "client: fetch-and-add on the last page returned 0, then 1 (and exit 0)" "exit status $EX_STATUS: $got"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" "^server: the last page's counter " || ex_tail "$EX_SERVER_OUT")
  if ((EX_SERVER_STATUS != 0)) || [[ $got != "server: the last page's counter holds 2" ]]; then
    ex_fail "server: the last page's counter holds 2 (and exit 0)" "exit status $EX_SERVER_STATUS: $got"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^result: ' || ex_tail "$EX_SERVER_OUT")
  if [[ $got != "result: all 512 pages the client wrote hold its 1024 bytes" ]]; then
    ex_fail "result: all 512 pages the client wrote hold its 1024 bytes" "$got"
  fi
}
