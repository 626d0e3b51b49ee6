# Grader of exercise 12.2: the multicast receivers detach every QP before it is destroyed, and exit cleanly.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="before the result line, before main() returns: ibv_detach_mcast(qp[i].get(), &group_gid, 0) for every receiver QP, and print the line"

grade() {
  local i qp line
  ex_server "$1" -p "$EX_PORT" --timeout 10
  ex_wait_line "$EX_SERVER_OUT" "waiting for a sender" || {
    ex_fail "the receivers to say 'waiting for a sender'" "$(ex_tail "$EX_SERVER_OUT")"
    return
  }
  ex_run "$1" -p "$EX_PORT" --timeout 10 127.0.0.1
  ex_wait_server
  ex_line "$EX_SERVER_OUT" '^result: each of 3 receivers got all 3 datagrams$' >/dev/null || {
    ex_fail "result: each of 3 receivers got all 3 datagrams" "$(ex_tail "$EX_SERVER_OUT" 2)"
    return
  }
  for i in 1 2 3; do
    qp=$(sed -n "s/^receiver $i: UD QP \\(0x[0-9a-f]*\\) is RTS.*/\\1/p" "$EX_SERVER_OUT")
    line=$(ex_line "$EX_SERVER_OUT" "^receiver $i: QP 0x[0-9a-f]+ detached") || {
      ex_fail "receiver $i: QP $qp detached from ::ffff:239.1.2.3" "no such line"
      return
    }
    [[ $line == "receiver $i: QP $qp detached from ::ffff:239.1.2.3" ]] || {
      ex_fail "receiver $i: QP $qp detached from ::ffff:239.1.2.3" "$line"
      return
    }
  done
  line=$(grep -m1 -E 'failed|EBUSY' "$EX_SERVER_OUT") && {
    ex_fail "no release that fails on the way out" "$line"
    return
  }
  ((EX_STATUS == 0 && EX_SERVER_STATUS == 0)) ||
    ex_fail "both sides exit 0" "sender exit $EX_STATUS, receivers exit $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
}
