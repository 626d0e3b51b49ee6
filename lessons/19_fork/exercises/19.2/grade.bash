# Grader of exercise 19.2: the server's buffer of step 2 mapped MAP_SHARED,
# so the child forked before the client's WRITE sees the bytes too.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="mmap(nullptr, kBufferBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0) for step 2's buffer, in a unique_ptr whose deleter calls munmap"

grade() {
  local got message="written by the peer into the parent's buffer"
  ex_serve "$1" -p "$EX_PORT" --timeout 20 -s 1048576 || return
  ex_run "$1" -p "$EX_PORT" --timeout 20 127.0.0.1
  ex_wait_server
  if ((EX_STATUS != 0 || EX_SERVER_STATUS != 0)); then
    ex_fail "server and client to exit 0" \
      "client $EX_STATUS: $(ex_tail "$EX_OUT"); server $EX_SERVER_STATUS: $(ex_tail "$EX_SERVER_OUT")"
    return
  fi
  if ! ex_line "$EX_OUT" '^result: wrote 44 bytes with immediate 44$' >/dev/null; then
    ex_fail "result: wrote 44 bytes with immediate 44" "$(ex_tail "$EX_OUT")"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^step 2: parent: ' || ex_tail "$EX_SERVER_OUT")
  if [[ $got != "step 2: parent: its buffer holds \"$message\" (44 bytes, the immediate)" ]]; then
    ex_fail "step 2: parent: its buffer holds \"$message\" (44 bytes, the immediate)" "$got"
    return
  fi
  got=$(ex_line "$EX_SERVER_OUT" '^step 2: child [0-9]+: ' || ex_tail "$EX_SERVER_OUT")
  if [[ ! $got =~ ^step\ 2:\ child\ [0-9]+:\ its\ copy\ of\ the\ buffer\ holds\ \"(.*)\"$ ]] ||
    [[ ${BASH_REMATCH[1]} != "$message" ]]; then
    ex_fail "step 2: child N: its copy of the buffer holds \"$message\"" "$got"
    return
  fi
  if ! ex_line "$EX_SERVER_OUT" '^step 2: child [0-9]+ exited with status 0$' >/dev/null; then
    ex_fail "step 2: child N exited with status 0" "$(ex_tail "$EX_SERVER_OUT")"
  fi
}
