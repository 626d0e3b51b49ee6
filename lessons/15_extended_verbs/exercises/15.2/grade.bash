# Grader of exercise 15.2: -T asks for completion timestamps; a device without them refuses, and the sum goes on.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="ibv_create_cq_ex returns NULL with errno EOPNOTSUPP when the device has no completion timestamps (./lesson15_probe says 'completion timestamps no'); print the refusal with wb::errno_str(errno), clear IBV_WC_EX_WITH_COMPLETION_TIMESTAMP from wc_flags and create the CQ again"

grade() {
  local a=$((RANDOM + 1)) b=$((RANDOM + 1)) has_ts=yes side file want
  # The truth: does the device keep completion timestamps? (ibv_devinfo -v)
  ex_rx ibv_devinfo -v -d "$EX_DEV" | grep -q "completion_timestamp_mask not supported" && has_ts=no
  ex_serve "$1" -T -p "$EX_PORT" --timeout 10 || return
  ex_run "$1" -T -p "$EX_PORT" --timeout 10 127.0.0.1 "$a" "$b"
  ex_wait_server
  ((EX_STATUS == 0 && EX_SERVER_STATUS == 0)) || {
    ex_fail "both sides, run with -T, exit 0" \
      "client exit $EX_STATUS ($(ex_tail "$EX_OUT" 1)); server exit $EX_SERVER_STATUS ($(ex_tail "$EX_SERVER_OUT" 1))"
    return
  }
  want="result: $a + $b = $((a + b))"
  grep -qxF -- "$want" "$EX_OUT" || {
    ex_fail "the client to print '$want'" "$(ex_tail "$EX_OUT" 1)"
    return
  }
  for side in server client; do
    file=$EX_OUT
    [[ $side == server ]] && file=$EX_SERVER_OUT
    if [[ $has_ts == no ]]; then
      want="$side: completion timestamps refused by ibv_create_cq_ex: EOPNOTSUPP (Operation not supported)"
      grep -qxF -- "$want" "$file" || {
        ex_fail "$want (ibv_devinfo -v: completion_timestamp_mask not supported)" \
          "$(ex_line "$file" 'timestamp' || echo "no line about timestamps from the $side")"
        return
      }
      if ex_line "$file" '^  completion timestamp: ' >/dev/null; then
        ex_fail "no 'completion timestamp:' line from the $side: its device has none" "$(ex_line "$file" '^  completion timestamp: ')"
        return
      fi
    else
      (($(grep -c '^  completion timestamp: [0-9]' "$file") >= 2)) || {
        ex_fail "a '  completion timestamp: N' line for each of the $side's two completions (the device has timestamps)" \
          "$(grep -c '^  completion timestamp: ' "$file") such lines"
        return
      }
    fi
  done
}
