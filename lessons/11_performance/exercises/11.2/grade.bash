# Grader of exercise 11.2: min, typical (median), p99 and max of the client's own samples, halved.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="std::sort(rtt), median = middle sample (mean of the two middle ones for even n), p99 = rtt[ceil(0.99 n) - 1], min = rtt.front(), max = rtt.back(); print each / 2 / 1000 with %.2f"

# expected FILE: the line the client should print, computed here from the
# samples it wrote (ns, one a line).
expected() {
  sort -n "$1" | awk '{ s[NR] = $1 } END {
    n = NR; med = (n % 2) ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
    i = int(0.99 * n); if (i < 0.99 * n) i++
    printf "client: 2 B: min %.2f us, typical %.2f us, p99 %.2f us, max %.2f us (half round trips)\n",
      s[1] / 2000, med / 2000, s[i] / 2000, s[n] / 2000 }'
}

# check N PORT PROGRAM: one run of N round trips, and its numbers.
check() {
  local n=$1 port=$2 prog=$3 want line
  ex_serve "$prog" -p "$port" --timeout 20 -n "$n" || return 1
  ex_run "$prog" -p "$port" --timeout 20 -n "$n" -D "$EX_TMP/samples" 127.0.0.1
  ex_wait_server
  if [[ ! -s $EX_TMP/samples ]] || (($(wc -l <"$EX_TMP/samples") != n)); then
    ex_fail "with -n $n: $n samples in the -D file" "client exit $EX_STATUS: $(ex_tail "$EX_OUT")"
    return 1
  fi
  want=$(expected "$EX_TMP/samples")
  line=$(ex_line "$EX_OUT" '^client: 2 B: ') || true
  [[ $line == "$want" ]] || {
    ex_fail "with -n $n, from your own samples: $want" "${line:-no 'client: 2 B:' line}"
    return 1
  }
  line=$(ex_line "$EX_OUT" '^result: ') || true
  [[ $want =~ typical\ ([0-9.]+)\ us ]]
  want="result: send lat 2 B: typical ${BASH_REMATCH[1]} us (n=$n)"
  [[ $line == "$want" ]] || {
    ex_fail "with -n $n: $want" "${line:-no result line}"
    return 1
  }
}

grade() {
  check 200 "$EX_PORT" "$1" || return
  check 101 "$((EX_PORT + 1))" "$1"
}
