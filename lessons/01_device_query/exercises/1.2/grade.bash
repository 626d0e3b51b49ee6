# Grader of exercise 1.2: the used slots, addresses and types are the kernel's, and the counts add up.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="ibv_query_gid_ex returns 0 for a used slot and ENODATA for an empty one; count the second, print the first"

# "0000:...:c000:0201" or "::ffff:192.0.2.1" -> the full 32-hex-digit form.
exploded() { python3 -I -S -c 'import ipaddress, sys; print(ipaddress.ip_address(sys.argv[1]).exploded)' "$1"; }

grade() {
  ex_run "$1" -d "$EX_DEV"
  ((EX_STATUS == 0)) || {
    ex_fail "exit status 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  local want="" got="" line index addr type total slots
  # The kernel's used slots, where the device is: a type can be read only
  # for those. (read, not $(cat): a thousand forks take a minute in an
  # emulated guest.) First line: the number of slots.
  # shellcheck disable=SC2016 # $1 is the inner bash's argument
  slots=$(ex_sh 'sys=/sys/class/infiniband/$1/ports/1; s=("$sys"/gids/*); echo "${#s[@]}"
    for ((i = 0; i < ${#s[@]}; i++)); do
      { read -r t <"$sys/gid_attrs/types/$i"; } 2>/dev/null || continue
      read -r a <"$sys/gids/$i"; echo "$i $a $t"
    done' _ "$EX_DEV")
  {
    read -r total
    while read -r index addr type; do
      want+="$index $(exploded "$addr") $type"$'\n'
    done
  } <<<"$slots"
  while read -r line; do
    [[ $line =~ ^gid\[([0-9]+)\]\ ([0-9a-fA-F:.]+)\ (.+)$ ]] || continue
    got+="${BASH_REMATCH[1]} $(exploded "${BASH_REMATCH[2]}") ${BASH_REMATCH[3]}"$'\n'
  done <"$EX_OUT"
  [[ -n $got ]] || {
    ex_fail "a line 'gid[INDEX] ADDRESS TYPE' per used slot: $(echo -n "$want" | tr '\n' ';')" "no 'gid[...]' line"
    return
  }
  [[ $got == "$want" ]] || {
    ex_fail "the kernel's used slots (index address type): $(echo -n "$want" | tr '\n' ';')" \
      "$(echo -n "$got" | tr '\n' ';')"
    return
  }
  local used
  used=$(echo -n "$want" | grep -c .)
  ex_line "$EX_OUT" "^slots: $used used, $((total - used)) empty \(ENODATA\)\$" >/dev/null ||
    ex_fail "slots: $used used, $((total - used)) empty (ENODATA)" \
      "$(ex_line "$EX_OUT" '^slots:' || echo 'no "slots:" line')"
}
