#!/usr/bin/env bats
# tests/setup_rxe.bats - what scripts/setup_rxe.sh does, on a fake system.
#
# Runs on any host: modprobe, rdma, ip, id, ... are stubs that log their
# arguments (tests/helpers/stubs/), and sysfs is a fake tree built per test
# (tests/helpers/fake_sysfs.bash). Nothing here touches the kernel.
# The same script on a real kernel: tests/setup_rxe_lab.bats.

# shellcheck disable=SC2030,SC2031 # each @test runs in its own process: what one sets stays in it, as meant
bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  bats_load_library bats-file
  load helpers/stubs
  stubs_setup
}

teardown() {
  # a background "kernel" started by a test (old sysfs knobs), if still there
  if [[ -n ${KERNEL_PID:-} ]]; then kill "$KERNEL_PID" 2>/dev/null || true; fi
}

# --- help and misuse ------------------------------------------------------------

@test "--help prints usage with every default and exits 0" {
  # The real defaults: none of the overrides this suite exports.
  run -0 env -u RXE_WAIT_SECS -u SYSFS_ROOT -u PROC_ROOT -u IBV_CONFIG_DIR -u SETUP_RXE_EUID \
    PATH="$STUB_BIN:$SYS_BIN" "$SETUP_RXE" --help
  assert_line --partial "up [NETDEV]"
  assert_line --partial "down [RXEDEV]"
  assert_line --partial "status"
  assert_line --regexp "^  RXE_WAIT_SECS=10 +seconds .up. waits for PORT_ACTIVE$"
  assert_line --regexp "^  SYSFS_ROOT=/sys +where sysfs is mounted$"
  assert_line --regexp "^  IBV_CONFIG_DIR=/etc/libibverbs.d +where rxe.driver \(ibverbs-providers\) lives$"
  assert_line --partial "wait up to 10 s for the port to be ACTIVE"
  assert_output --partial "Default NETDEV: the first interface (by ifindex) that is up"
  assert_equal "$(cat "$STUB_LOG")" ""
}

@test "-h after a command prints usage too and runs nothing" {
  run -0 setup_rxe up -h
  assert_line --partial "Usage: scripts/setup_rxe.sh COMMAND [ARG]"
  assert_equal "$(cat "$STUB_LOG")" ""
}

@test "no command is misuse: one line on stderr, exit 2" {
  run -2 --separate-stderr setup_rxe
  assert_output ""
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" "setup_rxe: missing command: up, down or status (see --help)"
}

@test "an unknown command is misuse: exit 2 and nothing runs" {
  run -2 --separate-stderr setup_rxe start
  assert_equal "$stderr" "setup_rxe: unknown command: start (see --help)"
  assert_equal "$(cat "$STUB_LOG")" ""
}

@test "an unknown option is misuse: exit 2" {
  run -2 --separate-stderr setup_rxe up --force dummy0
  assert_equal "$stderr" "setup_rxe: unknown option: --force (see --help)"
  run -2 --separate-stderr setup_rxe -x
  assert_equal "$stderr" "setup_rxe: unknown option: -x (see --help)"
}

@test "too many arguments is misuse: exit 2" {
  run -2 --separate-stderr setup_rxe up dummy0 dummy1
  assert_equal "$stderr" "setup_rxe: too many arguments for up: dummy0 dummy1 (see --help)"
  run -2 --separate-stderr setup_rxe status rxe0
  assert_equal "$stderr" "setup_rxe: too many arguments for status: rxe0 (see --help)"
}

# --- up ---------------------------------------------------------------------------

@test "up dummy0 loads rdma_rxe, adds rxe0 and prints device, MTU and GID index" {
  given_dummy0
  run -0 --separate-stderr setup_rxe up dummy0
  assert_ran "modprobe rdma_rxe"
  assert_ran "rdma link add rxe0 type rxe netdev dummy0"
  assert_line "Loaded rdma_rxe."
  assert_line "Added rxe0 on dummy0 (rdma link add rxe0 type rxe netdev dummy0)."
  assert_line "device: rxe0"
  assert_line "netdev: dummy0"
  assert_line "ipv4: 192.0.2.10"
  assert_line "state: ACTIVE"
  assert_line "active_mtu: 1024"
  assert_line "gid_index: 1"
  assert_line "gid: 0000:0000:0000:0000:0000:ffff:c000:020a"
  assert_line "Use it as: -d rxe0 -g 1   (for example: ibv_rc_pingpong -d rxe0 -g 1)"
  assert_equal "$(rxe_devices_in_sysfs)" "rxe0 dummy0"
}

@test "up starts no program that sysfs, /proc or bash can stand in for: only modprobe, rdma link add and ip" {
  given_dummy0
  run -0 setup_rxe up dummy0
  assert_equal "$(cat "$STUB_LOG")" "$(printf '%s\n' \
    "modprobe rdma_rxe" \
    "rdma link add rxe0 type rxe netdev dummy0" \
    "ip -o -4 addr show dev dummy0")"
}

@test "up skips modprobe when rdma_rxe is already loaded" {
  given_dummy0
  fake_module_loaded
  run -0 setup_rxe up dummy0
  refute_ran "modprobe"
  assert_line "rdma_rxe is already loaded."
  assert_line "device: rxe0"
}

@test "up twice on the same netdev adds rxe0 only once" {
  given_dummy0
  run -0 setup_rxe up dummy0
  run -0 setup_rxe up dummy0
  assert_equal "$(ran_count "rdma link add")" 1
  assert_line "dummy0 already has rxe device rxe0; not adding another."
  assert_line "device: rxe0"
  assert_line "gid_index: 1"
  assert_equal "$(rxe_devices_in_sysfs)" "rxe0 dummy0"
}

@test "up on a netdev that already has an rxe device under another name reports that one" {
  given_dummy0
  fake_module_loaded
  fake_rxe roce7 dummy0
  run -0 setup_rxe up dummy0
  refute_ran "rdma link add"
  assert_line "dummy0 already has rxe device roce7; not adding another."
  assert_line "device: roce7"
}

@test "up names the new device rxe1 when rxe0 is taken by another netdev" {
  given_dummy0
  fake_netdev dummy1 --ipv4 192.0.2.11
  fake_module_loaded
  fake_rxe rxe0 dummy0
  run -0 setup_rxe up dummy1
  assert_ran "rdma link add rxe1 type rxe netdev dummy1"
  assert_line "device: rxe1"
  assert_line "gid: 0000:0000:0000:0000:0000:ffff:c000:020b"
  assert_equal "$(rxe_devices_in_sysfs)" $'rxe0 dummy0\nrxe1 dummy1'
}

@test "the GID index is found by type and IPv4 value, not hard-coded (index 3 here)" {
  given_dummy0
  # 0 link-local v1, 1 link-local v2, 2 IPv4-mapped v1, 3 IPv4-mapped v2
  export FAKE_GID_LAYOUT=v1v2
  run -0 setup_rxe up dummy0
  assert_line "gid_index: 3"
  assert_line "gid: 0000:0000:0000:0000:0000:ffff:c000:020a"
  assert_line "Use it as: -d rxe0 -g 3   (for example: ibv_rc_pingpong -d rxe0 -g 3)"
}

@test "a netdev without IPv4 gets a warning and the first RoCE v2 GID" {
  fake_netdev dummy0
  run -0 --separate-stderr setup_rxe up dummy0
  assert_line "ipv4: none"
  assert_line "gid_index: 0"
  assert_line "gid: fe80:0000:0000:0000:0200:5eff:fe00:0a01"
  [[ $stderr == *"dummy0 has no IPv4 address, so there is no IPv4-mapped GID; add one: ip addr add 192.0.2.10/24 dev dummy0"* ]]
}

@test "active_mtu follows rxe's rule from sysfs, with no ibv_devinfo: netdev MTU 1500 gives 1024, 9000 gives 4096" {
  given_dummy0
  fake_netdev dummy1 --ipv4 192.0.2.11 --mtu 9000
  fake_netdev dummy2 --ipv4 192.0.2.12 --mtu 1100
  run -0 setup_rxe up dummy0
  assert_line "active_mtu: 1024"
  run -0 setup_rxe up dummy1
  assert_line "active_mtu: 4096"
  run -0 setup_rxe up dummy2
  assert_line "active_mtu: 512"
  refute_ran "ibv_devinfo"
}

@test "without NETDEV, up picks the first up Ethernet-type interface with IPv4 by ifindex and says why" {
  fake_netdev eth0 --ifindex 2 --ipv4 10.0.0.2 --down   # down
  fake_netdev eth1 --ifindex 3                          # no IPv4
  fake_netdev ib0 --ifindex 4 --type 32 --ipv4 10.1.0.2 # IPoIB, not Ethernet
  fake_netdev veth9 --ifindex 5 --ipv4 10.2.0.2         # this one
  fake_netdev br0 --ifindex 6 --ipv4 10.3.0.2           # first by name, later by ifindex
  run -0 setup_rxe up
  assert_line "No NETDEV given: picked veth9, the first interface (by ifindex) that is up, Ethernet-type and has an IPv4 address (10.2.0.2)."
  assert_ran "rdma link add rxe0 type rxe netdev veth9"
  assert_line "netdev: veth9"
  assert_line "gid: 0000:0000:0000:0000:0000:ffff:0a02:0002"
}

@test "without NETDEV, up warns when the interface it picked is a hardware or Wi-Fi NIC, and names the dummy way" {
  fake_netdev wlan0 --ipv4 10.4.0.2
  mkdir "$SYSFS_ROOT/class/net/wlan0/device" "$SYSFS_ROOT/class/net/wlan0/wireless"
  run -0 --separate-stderr setup_rxe up
  assert_line "No NETDEV given: picked wlan0, the first interface (by ifindex) that is up, Ethernet-type and has an IPv4 address (10.4.0.2)."
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  [[ $stderr == *"warning: wlan0 is a Wi-Fi NIC, likely this host's link to its network: RoCE v2 (UDP 4791) will run on that network."* ]] ||
    fail "no warning about the Wi-Fi NIC: $stderr"
  [[ $stderr == *"ip link add dummy0 type dummy"* ]] || fail "no dummy suggested: $stderr"
}

@test "without NETDEV and no usable interface, up fails, suggests a dummy and changes nothing" {
  fake_netdev eth0 --down --ipv4 10.0.0.2
  run -1 --separate-stderr setup_rxe up
  assert_output ""
  [[ $stderr == *"error: no NETDEV given and no interface is up, Ethernet-type and has an IPv4 address."* ]]
  [[ $stderr == *"ip link add dummy0 type dummy && ip addr add 192.0.2.10/24 dev dummy0 && ip link set dummy0 up"* ]]
  refute_ran "modprobe"
  refute_ran "rdma"
}

@test "up waits for PORT_ACTIVE and fails after RXE_WAIT_SECS when the port stays DOWN" {
  given_dummy0
  export FAKE_PORT_STATE="1: DOWN" RXE_WAIT_SECS=1
  run -1 --separate-stderr setup_rxe up dummy0
  [[ $stderr == *"error: rxe0 port 1 is DOWN, not ACTIVE, after 1 s; is dummy0 up with a carrier?"* ]]
  [[ $stderr == *"rxe0 was left in place; remove it with: scripts/setup_rxe.sh down rxe0"* ]]
  refute_line --partial "gid_index:"
  # bounded: 5 polls a second, plus the last look
  assert_equal "$(grep -c . "$FAKE_STATE/sleeps")" 6
}

@test "up fails naming the netdev when rdma link add succeeds but no rxe device appears" {
  given_dummy0
  export FAKE_RDMA_ADD_NOOP=1 RXE_WAIT_SECS=1
  run -1 --separate-stderr setup_rxe up dummy0
  assert_ran "rdma link add rxe0 type rxe netdev dummy0"
  assert_equal "$stderr" "setup_rxe: error: no rxe device appeared on dummy0 within 1 s."
  refute_line --partial "device:"
  assert_equal "$(grep -c . "$FAKE_STATE/sleeps")" 6
}

@test "up fails when the rxe device shows no RoCE v2 GID, and points to status" {
  given_dummy0
  export FAKE_GID_LAYOUT=v1only RXE_WAIT_SECS=1
  run -1 --separate-stderr setup_rxe up dummy0
  assert_equal "$stderr" "setup_rxe: error: rxe0 has no RoCE v2 GID for 192.0.2.10 after 1 s (see: scripts/setup_rxe.sh status)."
  refute_line --partial "gid_index:"
}

@test "two ups at once on two netdevs get rxe0 and rxe1: choosing the name and adding it are locked" {
  given_dummy0
  fake_netdev dummy1 --ipv4 192.0.2.11
  fake_module_loaded
  # Each add takes 0.5 s before the kernel looks at the name: without the
  # lock both ups choose rxe0, and the second add is refused.
  export FAKE_RDMA_ADD_DELAY=0.5
  setup_rxe up dummy0 >"$BATS_TEST_TMPDIR/up0.out" 2>&1 3>&- &
  local up0=$!
  run -0 setup_rxe up dummy1
  wait "$up0" || fail "up dummy0 failed: $(cat "$BATS_TEST_TMPDIR/up0.out")"
  # Whichever went first has rxe0; each netdev has its own device.
  run -0 rxe_devices_in_sysfs
  assert_equal "${#lines[@]}" 2
  assert_regex "${lines[0]}" '^rxe0 dummy[01]$'
  assert_regex "${lines[1]}" '^rxe1 dummy[01]$'
  assert_not_equal "${lines[0]#rxe0 }" "${lines[1]#rxe1 }"
  assert_equal "$(ran_count "rdma link add")" 2
}

@test "rdma link add failing is reported with rdma's own message" {
  given_dummy0
  export FAKE_RDMA_ADD_ERR="error: Invalid argument"
  run -1 --separate-stderr setup_rxe up dummy0
  assert_equal "$stderr" "setup_rxe: error: rdma link add rxe0 type rxe netdev dummy0 failed: error: Invalid argument"
}

# --- up: refusals, each before anything changes ------------------------------------

@test "up as a normal user fails, says to use sudo, and runs nothing else" {
  given_dummy0
  export SETUP_RXE_EUID=1000
  run -1 --separate-stderr setup_rxe up dummy0
  assert_output ""
  assert_equal "$stderr" "$(printf '%s\n' "setup_rxe: error: up needs root: run it with sudo." "  sudo scripts/setup_rxe.sh up")"
  assert_equal "$(cat "$STUB_LOG")" ""
}

@test "up on a missing netdev fails naming it, and changes nothing" {
  run -1 --separate-stderr setup_rxe up eth9
  assert_equal "$stderr" "setup_rxe: error: no network interface named 'eth9' (list them: ip -br link)."
  refute_ran "modprobe"
  refute_ran "rdma"
}

@test "a netdev name that is a path is refused like a missing one" {
  run -1 --separate-stderr setup_rxe up ../net/lo
  assert_equal "$stderr" "setup_rxe: error: no network interface named '../net/lo' (list them: ip -br link)."
}

@test "lo is refused because it is not Ethernet-type, with a dummy suggested" {
  run -1 --separate-stderr setup_rxe up lo
  assert_output ""
  assert_equal "$stderr" "$(printf '%s\n' \
    "setup_rxe: error: lo is not Ethernet-type (ARPHRD type 772, loopback); rxe needs an Ethernet-type netdev." \
    "  For a local playground create a dummy one:" \
    "  ip link add dummy0 type dummy && ip addr add 192.0.2.10/24 dev dummy0 && ip link set dummy0 up")"
  refute_ran "modprobe"
  refute_ran "rdma"
}

@test "a down netdev is refused with the command that brings it up" {
  given_dummy0 --down
  run -1 --separate-stderr setup_rxe up dummy0
  assert_equal "$stderr" "$(printf '%s\n' "setup_rxe: error: dummy0 is down; rxe's port only becomes ACTIVE on an up interface." "  ip link set dummy0 up")"
  refute_ran "modprobe"
}

@test "a kernel without rdma_rxe gets install advice and a pointer to the lab" {
  given_dummy0
  export FAKE_MODPROBE=notfound
  run -1 --separate-stderr setup_rxe up dummy0
  assert_ran "modprobe rdma_rxe"
  refute_ran "rdma"
  [[ $stderr == *"setup_rxe: error: this kernel (6.1.0-test-cloud-amd64) has no rdma_rxe module."* ]]
  [[ $stderr == *"modprobe said: modprobe: FATAL: Module rdma_rxe not found in directory"* ]]
  [[ $stderr == *"Debian: apt install linux-image-amd64 (the generic kernel; -cloud kernels lack rdma_rxe)"* ]]
  # shellcheck disable=SC2016 # the literal text setup_rxe.sh prints
  [[ $stderr == *'Ubuntu: apt install linux-modules-extra-$(uname -r)'* ]]
  [[ $stderr == *"WSL2 and containers usually cannot load kernel modules"* ]]
  [[ $stderr == *"scripts/lab.sh shell, or scripts/lab.sh run -- CMD (docs/lab.md)"* ]]
}

@test "a module that cannot be loaded shows modprobe's own message" {
  given_dummy0
  export FAKE_MODPROBE=fail
  run -1 --separate-stderr setup_rxe up dummy0
  assert_equal "${stderr##*$'\n'}" "setup_rxe: error: could not load rdma_rxe: modprobe: ERROR: could not insert 'rdma_rxe': Operation not permitted"
  refute_ran "rdma"
}

@test "with an rdma tool too old for 'link add', up writes the netdev to the old sysfs knob" {
  given_dummy0
  fake_module_loaded --old
  export FAKE_RDMA_OLD=1
  # Play the old kernel: a write to parameters/add creates the device.
  knob="$SYSFS_ROOT/module/rdma_rxe/parameters/add"
  rm "$knob" && mkfifo "$knob"
  (read -r nd <"$knob" && fake_rxe rxe0 "$nd") 3>&- &
  KERNEL_PID=$!
  run -0 setup_rxe up dummy0
  # tried first; the old tool says "Unknown link command 'add'."
  assert_ran "rdma link add rxe0 type rxe netdev dummy0"
  assert_line "Added an rxe device on dummy0 (old kernel: via /sys/module/rdma_rxe/parameters/add)."
  assert_line "device: rxe0"
  assert_line "gid_index: 1"
}

@test "with no rdma tool and no sysfs knob, up says to install iproute2 >= 5.1" {
  given_dummy0
  rm "$STUB_BIN/rdma"
  run -1 --separate-stderr setup_rxe up dummy0
  [[ $stderr == *"error: the rdma tool is missing or too old to add links (no 'rdma link add')."* ]]
  [[ $stderr == *"Install iproute2 >= 5.1 (Debian/Ubuntu: apt install iproute2)."* ]]
  assert_equal "$(rxe_devices_in_sysfs)" ""
}

@test "an rdma tool too old and a kernel past 5.17 (no knob) also points to iproute2 >= 5.1" {
  given_dummy0
  export FAKE_RDMA_OLD=1
  run -1 --separate-stderr setup_rxe up dummy0
  assert_ran "rdma link add rxe0 type rxe netdev dummy0"
  [[ $stderr == *"Install iproute2 >= 5.1"* ]]
  assert_equal "$(rxe_devices_in_sysfs)" ""
}

# --- up: warnings that do not stop it -----------------------------------------------

@test "a low memlock limit is warned about on stderr, and up still succeeds" {
  given_dummy0
  fake_memlock $((8192 * 1024)) # Docker's default
  run -0 --separate-stderr setup_rxe up dummy0
  [[ $stderr == *"warning: locked-memory limit is 8192 KiB (ulimit -l); ibv_reg_mr fails with ENOMEM beyond it. Raise it (limits.conf, or docker run --ulimit memlock=-1) to at least 64 MiB."* ]]
  assert_line "device: rxe0"
}

@test "an unlimited or large memlock limit gives no memlock warning" {
  given_dummy0
  run -0 --separate-stderr setup_rxe up dummy0
  [[ $stderr != *"locked-memory"* ]]
  fake_memlock $((64 * 1024 * 1024))
  run -0 --separate-stderr setup_rxe up dummy0
  [[ $stderr != *"locked-memory"* ]]
}

@test "missing ibverbs-providers is warned about: ibv_devices would be empty" {
  given_dummy0
  rm "$IBV_CONFIG_DIR/rxe.driver"
  run -0 --separate-stderr setup_rxe up dummy0
  [[ $stderr == *"warning: no $IBV_CONFIG_DIR/rxe.driver: the rxe user-space provider (librxe) is missing, so ibv_devices will list nothing. Install it: apt install ibverbs-providers"* ]]
  assert_line "device: rxe0"
}

@test "up notes exactly once that local traffic stays in rxe's loopback, pointing to docs/wireshark.md" {
  given_dummy0
  run -0 --separate-stderr setup_rxe up dummy0
  assert_equal "$(grep -c "internal loopback" <<<"$stderr")" 1
  [[ $stderr == *"docs/wireshark.md"* ]]
  [[ $output != *"loopback"* ]]
}

@test "a failed up does not bother with the loopback note" {
  given_dummy0
  export FAKE_MODPROBE=notfound
  run -1 --separate-stderr setup_rxe up dummy0
  [[ $stderr != *"loopback"* ]]
}

@test "with providers, memlock and a loaded module in order, stderr holds only the loopback note" {
  given_dummy0
  run -0 --separate-stderr setup_rxe up dummy0
  assert_equal "$stderr" "setup_rxe: note: two processes on this host talk through rxe's internal loopback and never put packets on the wire; to capture RoCE traffic use two hosts or guests (docs/wireshark.md)."
}

# --- down ----------------------------------------------------------------------------

@test "down rxe0 deletes that device only and says so" {
  given_dummy0
  fake_netdev dummy1 --ipv4 192.0.2.11
  fake_module_loaded
  fake_rxe rxe0 dummy0
  fake_rxe rxe1 dummy1
  run -0 setup_rxe down rxe0
  assert_output "Removed rxe0 (was on dummy0)."
  assert_ran "rdma link delete rxe0"
  refute_ran "rdma link delete rxe1"
  assert_equal "$(rxe_devices_in_sysfs)" "rxe1 dummy1"
}

@test "down without an argument deletes every rxe device and leaves other RDMA devices alone" {
  given_dummy0
  fake_netdev dummy1 --ipv4 192.0.2.11
  fake_module_loaded
  fake_rxe rxe0 dummy0
  fake_rxe rxe1 dummy1
  fake_ib_device mlx5_0
  run -0 setup_rxe down
  assert_line "Removed rxe0 (was on dummy0)."
  assert_line "Removed rxe1 (was on dummy1)."
  refute_ran "rdma link delete mlx5_0"
  assert_equal "$(rxe_devices_in_sysfs)" ""
  assert_dir_exists "$SYSFS_ROOT/class/infiniband/mlx5_0"
}

@test "down reports rdma's own message when link delete fails, and the device stays" {
  given_dummy0
  fake_module_loaded
  fake_rxe rxe0 dummy0
  export FAKE_RDMA_DELETE_ERR="error: Operation not permitted"
  run -1 --separate-stderr setup_rxe down rxe0
  assert_output ""
  assert_equal "$stderr" "setup_rxe: error: rdma link delete rxe0 failed: error: Operation not permitted"
  assert_equal "$(rxe_devices_in_sysfs)" "rxe0 dummy0"
}

@test "down with no rxe devices is not an error and says so" {
  run -0 setup_rxe down
  assert_output "No rxe devices; nothing to remove."
  refute_ran "rdma"
}

@test "down of a device that does not exist says there is nothing to remove" {
  run -0 setup_rxe down rxe3
  assert_output "No RDMA device named rxe3; nothing to remove."
  refute_ran "rdma"
}

@test "down refuses an RDMA device that is not rxe" {
  fake_ib_device mlx5_0
  run -1 --separate-stderr setup_rxe down mlx5_0
  assert_equal "$stderr" "setup_rxe: error: mlx5_0 is not an rxe device; not removing it."
  refute_ran "rdma"
  assert_dir_exists "$SYSFS_ROOT/class/infiniband/mlx5_0"
}

@test "down as a normal user fails and removes nothing" {
  given_dummy0
  fake_rxe rxe0 dummy0
  export SETUP_RXE_EUID=1000
  run -1 --separate-stderr setup_rxe down rxe0
  assert_equal "$stderr" "$(printf '%s\n' "setup_rxe: error: down needs root: run it with sudo." "  sudo scripts/setup_rxe.sh down")"
  refute_ran "rdma"
  assert_equal "$(rxe_devices_in_sysfs)" "rxe0 dummy0"
}

@test "down then up brings rxe0 back on the same netdev" {
  given_dummy0
  run -0 setup_rxe up dummy0
  run -0 setup_rxe down rxe0
  assert_equal "$(rxe_devices_in_sysfs)" ""
  run -0 setup_rxe up dummy0
  assert_line "device: rxe0"
  assert_equal "$(ran_count "rdma link add rxe0 type rxe netdev dummy0")" 2
}

@test "with an rdma tool too old for 'link delete', down writes to the old sysfs knob" {
  given_dummy0
  fake_module_loaded --old
  fake_rxe rxe0 dummy0
  export FAKE_RDMA_OLD=1
  run -0 setup_rxe down rxe0
  refute_ran "rdma link delete"
  assert_file_contains "$SYSFS_ROOT/module/rdma_rxe/parameters/remove" "^rxe0$"
  assert_output "Removed rxe0 (was on dummy0)."
}

# --- status ---------------------------------------------------------------------------

@test "status with no rxe devices says so and exits 0" {
  fake_module_loaded
  run -0 setup_rxe status
  assert_output "no rxe devices"
}

@test "status without rdma_rxe loaded says so and how to set it up" {
  run -0 setup_rxe status
  assert_output "$(printf '%s\n' "no rxe devices" "rdma_rxe is not loaded; set it up with: sudo scripts/setup_rxe.sh up [NETDEV]")"
}

@test "status lists each rxe device with netdev, port state, active_mtu and typed GIDs" {
  given_dummy0
  fake_netdev dummy1 --ipv4 192.0.2.11
  fake_rxe rxe0 dummy0
  FAKE_GID_LAYOUT=v1v2 fake_rxe rxe1 dummy1
  fake_ib_device mlx5_0
  run -0 setup_rxe status
  assert_output "$(
    cat <<'EOF'
rxe0: netdev dummy0, port 1 ACTIVE, active_mtu 1024
  gid 0: fe80:0000:0000:0000:0200:5eff:fe00:0a01 (RoCE v2)
  gid 1: 0000:0000:0000:0000:0000:ffff:c000:020a (RoCE v2)
  use: -d rxe0 -g 1
rxe1: netdev dummy1, port 1 ACTIVE, active_mtu 1024
  gid 0: fe80:0000:0000:0000:0200:5eff:fe00:0a01 (IB/RoCE v1)
  gid 1: fe80:0000:0000:0000:0200:5eff:fe00:0a01 (RoCE v2)
  gid 2: 0000:0000:0000:0000:0000:ffff:c000:020b (IB/RoCE v1)
  gid 3: 0000:0000:0000:0000:0000:ffff:c000:020b (RoCE v2)
  use: -d rxe1 -g 3
EOF
  )"
}

@test "status shows a port that is not ACTIVE as it is" {
  given_dummy0
  FAKE_PORT_STATE="1: DOWN" fake_rxe rxe0 dummy0
  run -0 setup_rxe status
  assert_line "rxe0: netdev dummy0, port 1 DOWN, active_mtu 1024"
}

@test "status needs no root and changes nothing" {
  given_dummy0
  fake_rxe rxe0 dummy0
  export SETUP_RXE_EUID=1000
  run -0 setup_rxe status
  assert_line --index 0 "rxe0: netdev dummy0, port 1 ACTIVE, active_mtu 1024"
  refute_ran "rdma"
  refute_ran "modprobe"
}
