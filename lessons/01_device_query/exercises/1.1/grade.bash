# Grader of exercise 1.1: the "cap:" lines name exactly the flags ibv_devinfo -v lists.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="one table of {IBV_DEVICE_..., \"IBV_DEVICE_...\"} pairs in the order of enum ibv_device_cap_flags, and one loop testing flags & flag"

grade() {
  ex_run "$1" -d "$EX_DEV"
  ((EX_STATUS == 0)) || {
    ex_fail "exit status 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  # ibv_devinfo -v: the names under device_cap_flags, tab-indented, without the IBV_DEVICE_ prefix.
  local want got
  want=$(ex_rx ibv_devinfo -v -d "$EX_DEV" | awk '/device_cap_flags:/ { on = 1; next }
    on && /^\t\t\t\t\t[A-Z_0-9]+$/ { gsub(/\t/, ""); print "IBV_DEVICE_" $0; next } on { exit }' | sort)
  got=$(sed -n 's/^cap: \(IBV_DEVICE_[A-Z_0-9]*\)$/\1/p' "$EX_OUT" | sort)
  [[ -n $got ]] || {
    ex_fail "a line 'cap: IBV_DEVICE_...' per flag: $(echo "$want" | tr '\n' ' ')" "no 'cap: IBV_DEVICE_...' line"
    return
  }
  [[ $got == "$want" ]] || {
    ex_fail "exactly the flags ibv_devinfo -v lists: $(echo "$want" | tr '\n' ' ')" \
      "missing: $(comm -23 <(echo "$want") <(echo "$got") | tr '\n' ' ')extra: $(comm -13 <(echo "$want") <(echo "$got") | tr '\n' ' ')"
    return
  }
  local mw=no
  grep -qx IBV_DEVICE_MEM_WINDOW <<<"$want" && mw=yes
  ex_line "$EX_OUT" "^memory windows: $mw\$" >/dev/null ||
    ex_fail "memory windows: $mw" "$(ex_line "$EX_OUT" '^memory windows' || echo 'no "memory windows:" line')"
}
