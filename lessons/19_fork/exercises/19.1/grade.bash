# Grader of exercise 19.1: in fork-safe mode, the payload registered in a
# page of its own; the note beside it is copied into the child, which reads
# it and exits 0.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="a page of its own for the payload: wb::Buffer payload = wb::alloc_buffer(sizeof req->payload), registered instead of req->payload"

grade() {
  local got
  ex_run "$1" --fork-safe
  if ((EX_STATUS != 0)); then
    ex_fail "ex19_1 --fork-safe to exit 0" "status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  fi
  if ! ex_line "$EX_OUT" '^step 3: ibv_fork_init\(\) = 0' >/dev/null; then
    ex_fail "step 3: ibv_fork_init() = 0 (fork-safe mode kept)" "$(ex_tail "$EX_OUT")"
    return
  fi
  got=$(ex_line "$EX_OUT" '^step 3: registered the payload' || ex_tail "$EX_OUT")
  if [[ ! $got =~ its\ page\ is\ VM_DONTCOPY.*the\ note.s\ page\ \(0x[0-9a-f]+\)\ is\ copied\ into\ a\ child$ ]]; then
    ex_fail "the payload's page VM_DONTCOPY, the note's page copied into a child" "$got"
    return
  fi
  if ! ex_line "$EX_OUT" '^step 3: child [0-9]+: the note reads "a note beside the payload"$' >/dev/null; then
    ex_fail "step 3: child N: the note reads \"a note beside the payload\"" "$(ex_tail "$EX_OUT")"
    return
  fi
  got=$(ex_line "$EX_OUT" '^step 3: child [0-9]+, which read the note' || ex_tail "$EX_OUT")
  if [[ ! $got =~ which\ read\ the\ note,\ exited\ with\ status\ 0$ ]]; then
    ex_fail "step 3: child N, which read the note, exited with status 0" "$got"
  fi
}
