# tests/helpers/netns_pair.bash - lesson 18's suites: the two namespaces of
# lessons/18_netns/netns_pair.sh, made in the lab guest for one test and removed after.
# Load after helpers/lesson, then call pair_up in a test and pair_down in
# teardown. Only in the lab: on a host's own device the test skips, since
# the namespaces, veths and rxe devices would be the host's.
# shellcheck shell=bash

# The addresses netns_pair.sh gives ns_a and ns_b (read by the suites).
# shellcheck disable=SC2034
A_IP=198.51.100.1
B_IP=198.51.100.2
PAIR_MADE=

pair_up() {
  ((${#RX[@]})) || skip "makes network namespaces and rxe devices: runs only in the lab (make check, tests/run.sh)"
  PAIR_MADE=1
  rx lessons/18_netns/netns_pair.sh down
  rx lessons/18_netns/netns_pair.sh up >"$BATS_TEST_TMPDIR/pair.out" 2>&1 || {
    cat "$BATS_TEST_TMPDIR/pair.out" >&2
    fail "lessons/18_netns/netns_pair.sh up failed"
  }
}

# Removes the namespaces (and with them the veths and rxe devices) and puts
# the netns mode back to shared, as every other suite expects it.
pair_down() {
  [[ -n $PAIR_MADE ]] || return 0
  rx lessons/18_netns/netns_pair.sh down
  rx rdma system set netns shared
}
