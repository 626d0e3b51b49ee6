# Grader of exercise 2.2: VmPin counts every registration of the same pages, and so does RLIMIT_MEMLOCK.
# shellcheck disable=SC2034 # HINT is read by scripts/exercises/grade_lib.bash
HINT="register buf twice with ibv_reg_mr (the same pointer, the same length), print VmPin after each, then ibv_dereg_mr both"

# The number of kB in the line of FILE that starts with PREFIX ("VmPin before:").
vmpin_of() {
  sed -n "s/^$2 \([0-9]\{1,\}\) kB.*/\1/p" "$1" | head -n1
}

# The addr printed in the line of FILE that starts with PREFIX.
addr_of() {
  sed -n "s/^$2 [0-9]* kB (addr \(0x[0-9a-f]*\),.*/\1/p" "$1" | head -n1
}

grade() {
  ex_run "$1" -d "$EX_DEV"
  ((EX_STATUS == 0)) || {
    ex_fail "exit status 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  local before first second after
  before=$(vmpin_of "$EX_OUT" "VmPin before:")
  first=$(vmpin_of "$EX_OUT" "VmPin after the first registration:")
  second=$(vmpin_of "$EX_OUT" "VmPin after the second registration:")
  after=$(vmpin_of "$EX_OUT" "VmPin after deregistering both:")
  [[ -n $before && -n $first && -n $second && -n $after ]] || {
    ex_fail "four lines 'VmPin before: N kB', 'VmPin after the first registration: N kB (addr ..., lkey ...)', '... the second registration ...', 'VmPin after deregistering both: N kB'" \
      "$(grep -c '^VmPin' "$EX_OUT") of them; the last lines: $(ex_tail "$EX_OUT" 3)"
    return
  }
  local addr1 addr2
  addr1=$(addr_of "$EX_OUT" "VmPin after the first registration:")
  addr2=$(addr_of "$EX_OUT" "VmPin after the second registration:")
  [[ -n $addr1 && $addr1 == "$addr2" ]] || {
    ex_fail "both registrations of the same buffer: the same '(addr 0x...' in both lines" "addr '$addr1' and '$addr2'"
    return
  }
  ((first - before == 1024 && second - first == 1024 && after == before)) || {
    ex_fail "+1024 kB for each registration of 1 MiB, and back to $before kB after ibv_dereg_mr" \
      "VmPin $before, $first, $second, $after kB"
    return
  }

  # The kernel's own count: with RLIMIT_MEMLOCK at 1.5 MiB over what was
  # pinned before, the first 1 MiB fits and the same 1 MiB again does not.
  # Root has CAP_IPC_LOCK, which bypasses the limit: drop it for this run.
  local limit=$(((before + 1536) * 1024)) drop=()
  ((EX_EUID == 0)) && drop=(setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock)
  ex_run prlimit --memlock="$limit:$limit" "${drop[@]}" "$1" -d "$EX_DEV"
  local limited=$EX_STATUS
  if ((limited == 0)) || ! grep -q '^VmPin after the first registration:' "$EX_OUT" ||
    ! grep -q 'ENOMEM' "$EX_OUT"; then
    ex_fail "under a 1.5 MiB RLIMIT_MEMLOCK: the first registration succeeds and the second fails with ENOMEM (exit 1)" \
      "exit status $limited: $(ex_tail "$EX_OUT" 2)"
    return
  fi
}
