# doctor.bash - a sandbox per test for scripts/doctor.sh, on top of stubs.bash.
#
# Load it inside setup():  load helpers/doctor; doctor_setup
#
# Besides what stubs_setup gives (a fake sysfs and /proc, stub commands that
# log to calls.log), each test gets the doctor's own stubs
# (tests/helpers/doctor_stubs/: rdma link show, ibv_devinfo -l and -v, ip
# route get, dpkg-query, modinfo, nft, iptables-save, uname, and the lab's
# tools), a fake /dev (DEV_ROOT), an empty lab cache (LAB_CACHE) and a fake
# checkout for ./lesson9 (CHECKOUT). Then:
#   run doctor ARGS               scripts/doctor.sh with only the stubs on PATH
#   run doctor_check FUNC ARGS    one check function, sourced from scripts/doctor/
#   given_lab_rxe                 the lab's scene: rxe0 on dummy0 (192.0.2.10), ACTIVE

DOCTOR_HELPERS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DOCTOR_SCRIPTS="$(cd "$DOCTOR_HELPERS/../.." && pwd)/scripts"
# shellcheck source=tests/helpers/stubs.bash
source "$DOCTOR_HELPERS/stubs.bash"

doctor_setup() {
  local t
  stubs_setup
  cp "$DOCTOR_HELPERS"/doctor_stubs/* "$STUB_BIN/"
  for t in dirname sed tr wc readlink timeout ldd head stdbuf; do
    ln -sf "$(command -v "$t")" "$SYS_BIN/$t"
  done
  export DEV_ROOT="$BATS_TEST_TMPDIR/dev"
  export LAB_CACHE="$BATS_TEST_TMPDIR/lab-cache"
  export CHECKOUT="$BATS_TEST_TMPDIR/checkout"
  export IBV_PROVIDER_DIR="$BATS_TEST_TMPDIR/usr/lib/libibverbs"
  mkdir -p "$DEV_ROOT" "$LAB_CACHE" "$CHECKOUT" "$IBV_PROVIDER_DIR" "$PROC_ROOT/1/ns"
  mkdir -p "$PROC_ROOT/self/ns"
  ln -s 'net:[4026531840]' "$PROC_ROOT/self/ns/net"
  ln -s 'net:[4026531840]' "$PROC_ROOT/1/ns/net"
  fake_capeff 0000000000000000
  : >"$FAKE_STATE/nft.ruleset"
  # nf_tables loaded: the firewall check reads the (stub) rules.
  mkdir -p "$SYSFS_ROOT/module/nf_tables"
}

# doctor ARGS: scripts/doctor.sh with only stubs and sysbin on PATH.
doctor() { PATH="$STUB_BIN:$SYS_BIN" "$DOCTOR_SCRIPTS/doctor.sh" "$@"; }

# doctor_check FUNC ARGS: one check, with the parts sourced as doctor.sh does.
doctor_check() {
  PATH="$STUB_BIN:$SYS_BIN" bash -c '
    for part in report host device net; do source "$0/doctor/$part.sh"; done
    "$@"' "$DOCTOR_SCRIPTS" "$@"
}

# fake_capeff HEX: the CapEff line of /proc/self/status.
fake_capeff() { printf 'Name:\tbash\nCapEff:\t%s\n' "$1" >"$PROC_ROOT/self/status"; }

# given_lab_rxe: rxe0 on dummy0 (192.0.2.10), ACTIVE, with its device files.
given_lab_rxe() {
  given_dummy0 --mtu 1500
  fake_module_loaded ""
  fake_rxe rxe0 dummy0
  mkdir -p "$DEV_ROOT/infiniband"
  : >"$DEV_ROOT/infiniband/uverbs0"
  : >"$DEV_ROOT/infiniband/rdma_cm"
}

# devinfo_of DEV: what the fake ibv_devinfo -v prints for DEV's port 1.
devinfo_of() { PATH="$STUB_BIN:$SYS_BIN" ibv_devinfo -v -d "$1" -i 1; }
