#!/usr/bin/env bats
# bats file_tags=guest
#
# tests/setup_rxe_lab.bats - scripts/setup_rxe.sh on a real kernel's rdma_rxe.
#
# Expects the lab's scene: root, rxe0 on dummy0 (192.0.2.1/24), as
# scripts/lab.sh sets it up. Run it with `make check`, or by hand:
#   scripts/lab.sh run -- bats tests/setup_rxe_lab.bats
# Each test starts from that scene, whatever the test before it left (see
# setup), so the tests pass in any order and alone (bats -f). The suites
# that run after this one in the same guest get the scene back too.
# The same script against stubs, on any host: tests/setup_rxe.bats.

bats_require_minimum_version 1.5.0

LAB_HINT="run via make check or scripts/lab.sh run -- bats tests/setup_rxe_lab.bats"

setup_file() {
  bats_load_library bats-support
  if [[ -z ${LAB:-} ]] && ! compgen -G '/sys/class/infiniband/*/parent' >/dev/null; then
    fail "no rxe device on this host and not in the lab: $LAB_HINT"
  fi
  [[ $(id -u) == 0 ]] || fail "these tests add and remove rxe devices: they need root ($LAB_HINT)"
  [[ $(cat /sys/class/infiniband/rxe0/parent 2>/dev/null) == dummy0 ]] ||
    fail "these tests expect rxe0 on dummy0, as the lab sets it up: $LAB_HINT"
}

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  bats_load_library bats-file
  SETUP_RXE="$BATS_TEST_DIRNAME/../scripts/setup_rxe.sh"
  lab_scene
}

teardown_file() {
  SETUP_RXE="$BATS_TEST_DIRNAME/../scripts/setup_rxe.sh"
  lab_scene
}

# lab_scene: make the lab's scene, from whatever state: no rxe device but
# rxe0 on dummy0, ACTIVE; no dummy1; dummy0's MTU 1500. Touches only what
# differs, so that a test that left the scene alone costs nothing.
lab_scene() {
  local parent dev
  for parent in /sys/class/infiniband/*/parent; do
    [[ -e $parent ]] || continue
    dev=${parent%/parent}
    dev=${dev##*/}
    [[ $dev == rxe0 && $(<"$parent") == dummy0 ]] && continue
    "$SETUP_RXE" down "$dev" >/dev/null
  done
  if [[ -e /sys/class/net/dummy1 ]]; then
    ip link del dummy1
  fi
  if [[ $(</sys/class/net/dummy0/mtu) != 1500 ]]; then
    ip link set dummy0 mtu 1500
  fi
  if [[ ! -e /sys/class/infiniband/rxe0 ]]; then
    "$SETUP_RXE" up dummy0 >/dev/null
  fi
}

# rdma_links_on NETDEV: how many RDMA links `rdma -j link` shows on NETDEV.
rdma_links_on() {
  rdma -j link show | grep -o "\"netdev\":\"$1\"" | grep -c . || true
}

# value KEY: the value of the "KEY: value" line in $output.
value() {
  local line
  while IFS= read -r line; do
    [[ $line == "$1: "* ]] && {
      echo "${line#"$1: "}"
      return
    }
  done <<<"$output"
}

@test "status shows rxe0 on dummy0, ACTIVE, with a RoCE v2 GID for 192.0.2.1" {
  run -0 "$SETUP_RXE" status
  assert_line "rxe0: netdev dummy0, port 1 ACTIVE, active_mtu 1024"
  assert_line --regexp '^  gid [0-9]+: 0000:0000:0000:0000:0000:ffff:c000:0201 \(RoCE v2\)$'
}

@test "the kernel names rxe0's netdev in sysfs 'parent', which setup_rxe.sh relies on" {
  assert_file_exists /sys/class/infiniband/rxe0/parent
  assert_equal "$(cat /sys/class/infiniband/rxe0/parent)" dummy0
  # and rdma agrees
  assert_equal "$(rdma_links_on dummy0)" 1
  run -0 rdma link show rxe0/1
  assert_output --partial "netdev dummy0"
}

@test "up dummy0 again is idempotent: still exactly one rxe device on dummy0" {
  run -0 "$SETUP_RXE" up dummy0
  assert_line "dummy0 already has rxe device rxe0; not adding another."
  assert_line "device: rxe0"
  assert_line "state: ACTIVE"
  assert_equal "$(rdma_links_on dummy0)" 1
}

@test "the GID index up prints is the RoCE v2 GID of 192.0.2.1, as sysfs and ibv_devinfo -v say" {
  run -0 "$SETUP_RXE" up dummy0
  idx=$(value gid_index)
  [[ $idx =~ ^[0-9]+$ ]] || fail "no gid_index line in: $output"
  assert_equal "$(value gid)" "0000:0000:0000:0000:0000:ffff:c000:0201"
  assert_equal "$(cat "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$idx")" "RoCE v2"
  assert_equal "$(cat "/sys/class/infiniband/rxe0/ports/1/gids/$idx")" "0000:0000:0000:0000:0000:ffff:c000:0201"
  run -0 ibv_devinfo -v -d rxe0
  assert_line --regexp "GID\[ *$idx\]:[[:space:]]+::ffff:192\.0\.2\.1, RoCE v2"
}

@test "active_mtu that up prints is ibv_devinfo's: 1024 on a 1500-byte dummy0" {
  assert_equal "$(cat /sys/class/net/dummy0/mtu)" 1500
  run -0 "$SETUP_RXE" up dummy0
  assert_line "active_mtu: 1024"
  run -0 ibv_devinfo -d rxe0
  assert_line --regexp 'active_mtu:[[:space:]]+1024 \(3\)'
}

@test "active_mtu, which setup_rxe.sh computes from the netdev MTU (- 80, rounded down), is the kernel's at every edge" {
  for mtu in 1103 1104 2128 4175 4176 600 500; do
    ip link set dummy0 mtu "$mtu"
    kernel=$(ibv_devinfo -d rxe0 | sed -n 's/.*active_mtu:[[:space:]]*\([0-9]*\).*/\1/p')
    run -0 "$SETUP_RXE" status
    assert_line "rxe0: netdev dummy0, port 1 ACTIVE, active_mtu $kernel"
  done
}

@test "up reports no missing provider: ibv_devices lists rxe0" {
  run -0 --separate-stderr "$SETUP_RXE" up dummy0
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  [[ $stderr != *"rxe.driver"* ]] || fail "unexpected provider warning: $stderr"
  run -0 ibv_devices
  assert_output --partial "rxe0"
}

@test "up without NETDEV picks dummy0, the lab's only up Ethernet-type interface with IPv4" {
  run -0 "$SETUP_RXE" up
  assert_line "No NETDEV given: picked dummy0, the first interface (by ifindex) that is up, Ethernet-type and has an IPv4 address (192.0.2.1)."
  assert_line "device: rxe0"
  assert_equal "$(rdma_links_on dummy0)" 1
}

@test "down rxe0 removes it, and up dummy0 brings it back ACTIVE" {
  run -0 "$SETUP_RXE" down rxe0
  assert_output "Removed rxe0 (was on dummy0)."
  assert_equal "$(rdma_links_on dummy0)" 0
  assert_file_not_exists /sys/class/infiniband/rxe0
  run -0 "$SETUP_RXE" status
  assert_output "no rxe devices"
  run -0 "$SETUP_RXE" down rxe0
  assert_output "No RDMA device named rxe0; nothing to remove."

  run -0 "$SETUP_RXE" up dummy0
  assert_line "Added rxe0 on dummy0 (rdma link add rxe0 type rxe netdev dummy0)."
  assert_line "state: ACTIVE"
  assert_equal "$(cat /sys/class/infiniband/rxe0/ports/1/state)" "4: ACTIVE"
  assert_equal "$(rdma_links_on dummy0)" 1
}

@test "up lo is refused because lo is not Ethernet-type, and nothing is added" {
  run -1 --separate-stderr "$SETUP_RXE" up lo
  assert_output ""
  [[ $stderr == *"lo is not Ethernet-type (ARPHRD type 772, loopback); rxe needs an Ethernet-type netdev."* ]] ||
    fail "unexpected stderr: $stderr"
  assert_equal "$(rdma_links_on lo)" 0
}

@test "a second dummy gets its own rxe device with its own RoCE v2 GID" {
  ip link add dummy1 type dummy
  ip addr add 192.0.2.11/24 dev dummy1
  ip link set dummy1 up
  run -0 "$SETUP_RXE" up dummy1
  assert_line "Added rxe1 on dummy1 (rdma link add rxe1 type rxe netdev dummy1)."
  assert_line "device: rxe1"
  assert_line "state: ACTIVE"
  assert_line "gid: 0000:0000:0000:0000:0000:ffff:c000:020b"
  idx=$(value gid_index)
  assert_equal "$(cat "/sys/class/infiniband/rxe1/ports/1/gids/$idx")" "0000:0000:0000:0000:0000:ffff:c000:020b"
  assert_equal "$(rdma_links_on dummy1)" 1
  assert_equal "$(rdma_links_on dummy0)" 1

  run -0 "$SETUP_RXE" down rxe1
  assert_output "Removed rxe1 (was on dummy1)."
  assert_equal "$(rdma_links_on dummy1)" 0
  assert_equal "$(rdma_links_on dummy0)" 1
}
