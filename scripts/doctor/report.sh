# shellcheck shell=bash
# report.sh: the doctor's report line, and the summary that counts them.

# report STATUS CHECK FINDING [CAUSE [FIX]]: one line,
#   STATUS  CHECK     FINDING; cause: CAUSE; fix: FIX
# FINDING starts with what was looked at ("/proc/self/limits: ...").
report() {
  local line
  printf -v line '%-4s  %-8s  %s' "$1" "$2" "$3"
  [[ -z ${4:-} ]] || line+="; cause: $4"
  [[ -z ${5:-} ]] || line+="; fix: $5"
  printf '%s\n' "$line"
}

# skip_checks "CHECK..." WHY: a SKIP line for each check that has nothing to
# look at.
skip_checks() {
  local c
  for c in $1; do report SKIP "$c" "$2"; done
}

# tally: pass the report lines through, then the summary; status 1 if any
# line is a FAIL.
tally() {
  local line ok=0 warn=0 failed=0 skipped=0
  while IFS= read -r line; do
    printf '%s\n' "$line"
    case ${line%% *} in
      OK) ok=$((ok + 1)) ;;
      WARN) warn=$((warn + 1)) ;;
      FAIL) failed=$((failed + 1)) ;;
      SKIP) skipped=$((skipped + 1)) ;;
    esac
  done
  printf 'doctor: %d checks: %d OK, %d WARN, %d FAIL, %d skipped%s\n' \
    $((ok + warn + failed + skipped)) "$ok" "$warn" "$failed" "$skipped" \
    "$( ((failed == 0)) && echo ": nothing failed" || echo ": fix each FAIL above, then run make doctor again")"
  ((failed == 0))
}

# rd FILE: FILE's first line on stdout; false if it cannot be read.
rd() {
  local l
  { IFS= read -r l <"$1"; } 2>/dev/null || [[ -n ${l:-} ]] || return 1
  printf '%s\n' "$l"
}

# is_ip_address TEXT: an IPv4 or IPv6 address written as numbers.
is_ip_address() {
  [[ $1 =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ || ($1 =~ ^[0-9A-Fa-f:.]+$ && $1 == *:*) ]]
}
