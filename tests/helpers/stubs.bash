# stubs.bash - a sandbox per test for scripts that drive system tools.
#
# Load it inside setup():  load helpers/stubs; stubs_setup
#
# Each test gets, under BATS_TEST_TMPDIR:
#   bin/       copies of tests/helpers/stubs/* (modprobe, rdma, ip, id, uname,
#              sleep, ibv_devinfo); a test may delete one to make it "missing".
#              setup_rxe.sh runs neither id (SETUP_RXE_EUID plays the user)
#              nor ibv_devinfo: their stubs catch a call that comes back.
#   sysbin/    links to the few real tools the script and stubs need (bash,
#              cat, flock, ...). No other real tool is reachable: /usr/bin holds the
#              real rdma and ibv_devinfo, which must never run here.
#   sys/       a fake sysfs (SYSFS_ROOT), built with tests/helpers/fake_sysfs.bash
#   proc/self/limits   only the memlock line (PROC_ROOT); see fake_memlock
#   etc/libibverbs.d/rxe.driver   as ibverbs-providers installs it
#   calls.log  one line per stub call: "rdma link add rxe0 type rxe netdev dummy0"
#
# Run the script under test with `run setup_rxe ARGS`: only that command sees
# the stub PATH; Bats itself keeps the real one.

STUBS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SETUP_RXE="$(cd "$STUBS_DIR/../.." && pwd)/scripts/setup_rxe.sh"
export FAKE_SYSFS_LIB="$STUBS_DIR/fake_sysfs.bash"
# shellcheck source=tests/helpers/fake_sysfs.bash
source "$FAKE_SYSFS_LIB"

stubs_setup() {
  local t
  export SYSFS_ROOT="$BATS_TEST_TMPDIR/sys"
  export PROC_ROOT="$BATS_TEST_TMPDIR/proc"
  export IBV_CONFIG_DIR="$BATS_TEST_TMPDIR/etc/libibverbs.d"
  export FAKE_STATE="$BATS_TEST_TMPDIR/state"
  export STUB_LOG="$BATS_TEST_TMPDIR/calls.log"
  export HOME="$BATS_TEST_TMPDIR/home"
  export RXE_WAIT_SECS=2
  export SETUP_RXE_EUID=0 # root, whoever runs the tests; a test may play a user
  STUB_BIN="$BATS_TEST_TMPDIR/bin"
  SYS_BIN="$BATS_TEST_TMPDIR/sysbin"
  mkdir -p "$SYSFS_ROOT/class/net" "$SYSFS_ROOT/class/infiniband" "$SYSFS_ROOT/module" \
    "$IBV_CONFIG_DIR" "$FAKE_STATE" "$HOME" "$STUB_BIN" "$SYS_BIN"
  : >"$STUB_LOG"
  echo "driver rxe" >"$IBV_CONFIG_DIR/rxe.driver"
  cp "$STUBS_DIR"/stubs/* "$STUB_BIN/"
  for t in bash cat flock grep mkdir rm rmdir; do ln -s "$(command -v "$t")" "$SYS_BIN/$t"; done
  fake_memlock unlimited
  # Every test starts with lo, as on any host.
  fake_netdev lo --ifindex 1 --type 772 --mtu 65536 --ipv4 127.0.0.1
}

# setup_rxe ARGS: run scripts/setup_rxe.sh with only stubs and sysbin on PATH.
setup_rxe() { PATH="$STUB_BIN:$SYS_BIN" "$SETUP_RXE" "$@"; }

# fake_memlock BYTES|unlimited: the soft RLIMIT_MEMLOCK (`ulimit -l` x 1024),
# as /proc/self/limits shows it.
fake_memlock() {
  mkdir -p "$PROC_ROOT/self"
  printf '%-26s%-21s%-21s%-10s\n' "Limit" "Soft Limit" "Hard Limit" "Units" \
    "Max locked memory" "$1" "$1" "bytes" >"$PROC_ROOT/self/limits"
}

# A dummy0 with 192.0.2.10, the usual scene for `up`.
given_dummy0() { fake_netdev dummy0 --ipv4 192.0.2.10 "$@"; }

# assert_ran "CMD ARGS": that exact call is in the stub log.
assert_ran() {
  grep -qxF -- "$1" "$STUB_LOG" ||
    fail "expected \`$1\` to have run; the stubs saw:"$'\n'"$(cat "$STUB_LOG")"
}

# ran_count "CMD ARGS": how many logged calls start with that text.
ran_count() {
  local line n=0
  while IFS= read -r line; do [[ $line == "$1"* ]] && n=$((n + 1)); done <"$STUB_LOG"
  echo "$n"
}

# refute_ran "CMD ARGS": no logged call starts with that text.
refute_ran() {
  (($(ran_count "$1") == 0)) ||
    fail "expected nothing starting with \`$1\` to have run; the stubs saw:"$'\n'"$(cat "$STUB_LOG")"
}

# rxe_devices_in_sysfs: "DEV NETDEV" for each fake rxe device, sorted.
rxe_devices_in_sysfs() {
  local p
  for p in "$SYSFS_ROOT"/class/infiniband/*/parent; do
    [[ -e $p ]] && echo "$(basename "$(dirname "$p")") $(<"$p")"
  done
  return 0
}
