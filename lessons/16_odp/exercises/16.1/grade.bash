# Grader of exercise 16.1: where ibv_advise_mr is refused, the server faults
# the WRITE half in from the CPU before the client comes: nothing new becomes
# resident while the client WRITEs, and its bytes still land.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="after the refused ibv_advise_mr: madvise(mem.get(), region / 2, MADV_POPULATE_WRITE), checked, and the line it prints"

grade() {
  local got grew
  ex_serve "$1" -p "$EX_PORT" --timeout 20 || return
  ex_run "$1" -p "$EX_PORT" --timeout 20 127.0.0.1
  ex_wait_server
  if ((EX_STATUS != 0 || EX_SERVER_STATUS != 0)); then
    ex_fail "server and client to exit 0" \
      "client $EX_STATUS: $(ex_tail "$EX_OUT"); server $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  if ! ex_line "$EX_SERVER_OUT" '^server: prefetched 2048 KiB with madvise\(MADV_POPULATE_WRITE\)$' >/dev/null; then
    ex_fail "server: prefetched 2048 KiB with madvise(MADV_POPULATE_WRITE)" "$(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^server: VmRSS .* after ' || ex_tail "$EX_SERVER_OUT")
  grew=$(sed -n 's/.*after (+\([0-9]*\) kB).*/\1/p' <<<"$got")
  if [[ -z $grew ]] || ((grew >= 256)); then
    ex_fail "the server's VmRSS to grow by less than 256 kB while the client WRITEs (the half was prefetched)" "$got"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^result: ' || ex_tail "$EX_SERVER_OUT")
  if [[ $got != "result: all 512 pages the client wrote hold its 1024 bytes" ]]; then
    ex_fail "result: all 512 pages the client wrote hold its 1024 bytes" "$got"
  fi
}
