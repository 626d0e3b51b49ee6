# Grader of exercise 11.1: -l N posts N WRs per ibv_post_send call, and strace sees one write() per call.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="build k = min(batch, n - posted) WRs while posted + k - completed <= kDepth, chain them with .next, post them with one ibv_post_send, then ++calls and posted += k"

# One server and one client run under strace; $1 the program, $2 the TCP
# port, the rest the options of both sides. write() syscalls in $writes.
run_pair() {
  local prog=$1 port=$2
  shift 2
  ex_serve "$prog" -p "$port" --timeout 20 "$@" || return 1
  ex_run strace -f -c -e trace=write -o "$EX_TMP/strace" "$prog" -p "$port" --timeout 20 "$@" 127.0.0.1
  ex_wait_server
  writes=$(awk '$NF == "write" { print $4 }' "$EX_TMP/strace")
}

grade() {
  local line writes
  command -v strace >/dev/null || {
    ex_fail "strace installed (apt-get install strace): the grader counts the doorbells with it" "no strace here"
    return
  }
  run_pair "$1" "$EX_PORT" -l 8 -n 2000 || return
  line=$(ex_line "$EX_OUT" '^client: [0-9]+ ibv_post_send calls') || true
  [[ $line == "client: 250 ibv_post_send calls for 2000 WRs" ]] || {
    ex_fail "with -l 8 -n 2000: client: 250 ibv_post_send calls for 2000 WRs" \
      "${line:-no such line}; client exit $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  ex_line "$EX_OUT" '^result: write bw 64 B: [0-9.]+ MiB/s \(n=2000\)$' >/dev/null || {
    ex_fail "with -l 8: result: write bw 64 B: X MiB/s (n=2000)" "$(ex_tail "$EX_OUT")"
    return
  }
  if ! [[ $writes =~ ^[0-9]+$ ]] || ((writes > 280)); then
    ex_fail "with -l 8: at most 280 write() syscalls (250 doorbells and the output)" "strace counted '${writes:-none}'"
    return
  fi
  run_pair "$1" "$((EX_PORT + 1))" -l 7 -n 100 || return
  line=$(ex_line "$EX_OUT" '^client: [0-9]+ ibv_post_send calls') || true
  [[ $line == "client: 15 ibv_post_send calls for 100 WRs" ]] ||
    ex_fail "with -l 7 -n 100: client: 15 ibv_post_send calls for 100 WRs (14 of 7 and one of 2)" \
      "${line:-no such line}; client exit $EX_STATUS: $(ex_tail "$EX_OUT")"
}
