# Grader of exercise 20.1: two clients at once, one with a window of 8 and
# one with a window of 1; each uses all of its window and no more, every
# response is checked, and the server's count is the clients' sum.
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="in Window::take, credits = std::min(grant, slots); in take_slot, peak = std::max(peak, outstanding); print it in print_result"

# shellcheck source=lessons/20_rpc/exercises/two_clients.bash
source "$(dirname "${BASH_SOURCE[0]}")/../two_clients.bash"

grade() {
  local n=300 narrow_out=$EX_TMP/other.out got
  two_clients "$1" "$n" 1 || return
  # The window as it was used: 1 credit until the first response, then the
  # whole grant at once (the client posts every request its credits allow).
  local window out
  for window in 8 1; do
    out=$EX_OUT
    ((window == 8)) || out=$narrow_out
    got=$(ex_line "$out" '^client: most requests in flight') || got="no 'client: most requests in flight at once: K' line"
    [[ $got == "client: most requests in flight at once: $window" ]] || {
      ex_fail "the client with -t $window: client: most requests in flight at once: $window (its ring's slots, all granted)" "$got"
      return
    }
  done
  # The lesson's own narration says the window opened: request 3 went out
  # while request 2 was still open, so its response is in slot 1, not 0.
  got=$(ex_line "$EX_OUT" '^client: response 3 in slot ') || got="no 'client: response 3 in slot S: ...' line"
  [[ $got == "client: response 3 in slot 1: "* ]] || {
    ex_fail "the client with -t 8: client: response 3 in slot 1: ... (requests 2 and 3 in flight together)" "$got"
  }
}
