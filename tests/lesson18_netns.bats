#!/usr/bin/env bats
# bats file_tags=rxe,kernel:trixie-backports
#
# Lesson 18 across two network namespaces of one lab guest, on Linux 7.1 or
# later, where rxe has a UDP 4791 socket in every namespace: tests/run.sh
# boots trixie-backports' kernel for this file (its kernel: file tag).
# lessons/18_netns/netns_pair.sh makes ns_a (veth_a 198.51.100.1, rxe_a) and ns_b
# (veth_b 198.51.100.2, rxe_b) for each test, and teardown removes them
# (tests/helpers/netns_pair.bash). The same steps on 6.1, where they fail:
# tests/lesson18_before_7_1.bats.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  load helpers/netns_pair
  lesson_setup
  pair_up
  kernel_at_least 7.1 || fail "the lab runs $(guest_kernel): this file needs 7.1 or later (tests/run.sh boots LAB_KERNEL=trixie-backports for it)"
}
teardown() {
  lesson_teardown
  pair_down
}

@test "the sum crosses from ns_b to ns_a, each side in the namespace it entered with setns" {
  start_server ./lesson18 --netns ns_a -p "$PORT" --timeout 20
  wait_for_server_line "listening on" 20
  run --separate-stderr rx ./lesson18 --netns ns_b -p "$PORT" --timeout 20 "$A_IP" 2 3
  assert_success
  assert_line "netns: entered ns_b (/run/netns/ns_b) with setns(2)"
  assert_line --regexp '^netns: this process is in net:\[[0-9]+\], not the initial namespace \(PID 1.s is net:\[[0-9]+\]\)$'
  assert_line "client: rdma_cm chose rxe_b port 1, GID ::ffff:$B_IP, to reach $A_IP"
  assert_line "result: 2 + 3 = 5"
  wait_server 20
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "netns: entered ns_a (/run/netns/ns_a) with setns(2)"
  assert_line "server: rdma_cm chose rxe_a port 1, GID ::ffff:$A_IP, to reach $B_IP"
  assert_line "result: 2 + 3 = 5"
}

@test "in shared mode a namespace lists every device, and only its own veth's GIDs are in it" {
  run --separate-stderr rx ./lesson18 --netns ns_b -p "$PORT" --timeout 1
  assert_failure 1 # no client within 1 s, after the report
  assert_line "netns: rdma system netns mode shared: every namespace lists every RDMA device"
  assert_line "device $RDMA_DEV: 2 GID(s) (rxe)"
  assert_line "device rxe_a: 2 GID(s) (rxe)"
  assert_line "device rxe_b: 2 GID(s) (rxe)"
  assert_line --regexp "^  port 1 GID\[1\] ::ffff:$B_IP on veth_b \(ifindex [0-9]+\): in this namespace$"
  assert_line --regexp "^  port 1 GID\[1\] ::ffff:$A_IP on veth_a \(ifindex [0-9]+\): NOT in this namespace$"
  assert_line --regexp "^  port 1 GID\[1\] ::ffff:192\.0\.2\.1 on dummy0 \(ifindex [0-9]+\): NOT in this namespace$"
  assert_equal "$(grep -c ': in this namespace$' <<<"$output")" 2 # veth_b's link-local and IPv4 GIDs
}

@test "a process started in the namespace (ip netns exec) sees what --netns sees, and says nothing of entering" {
  # bash -c: rx's first word would be busybox's ip, which has no netns.
  # shellcheck disable=SC2016 # expanded by the inner shell
  run --separate-stderr rx_sh 'exec ip netns exec ns_a ./lesson18 -p "$1" --timeout 1' _ "$PORT"
  assert_failure 1
  refute_line --partial "netns: entered"
  assert_line --regexp '^netns: this process is in net:\[[0-9]+\], not the initial namespace'
  assert_line --regexp "^  port 1 GID\[1\] ::ffff:$A_IP on veth_a \(ifindex [0-9]+\): in this namespace$"
}

@test "each namespace has its own UDP 4791 socket for rxe" {
  local ns
  for ns in ns_a ns_b; do
    # shellcheck disable=SC2016 # expanded by the inner shell
    run rx_sh 'exec ip netns exec "$1" ss -Huln "sport = :4791"' _ "$ns"
    assert_success
    assert_output --partial ":4791"
  done
}

@test "exclusive mode waits for no namespace (EBUSY); then a namespace lists only the device moved into it" {
  run rx rdma system set netns exclusive
  assert_failure
  assert_output --partial "Device or resource busy"
  rx lessons/18_netns/netns_pair.sh down
  rx rdma system set netns exclusive
  rx lessons/18_netns/netns_pair.sh up >/dev/null
  rx rdma dev set rxe_a netns ns_a
  run --separate-stderr rx ./lesson18 --netns ns_a -p "$PORT" --timeout 1
  assert_failure 1
  assert_line "netns: rdma system netns mode exclusive: this namespace lists only the devices moved into it (rdma dev set DEV netns NS)"
  assert_equal "$(grep '^device ' <<<"$output")" "device rxe_a: 2 GID(s) (rxe)"
  # Nothing was moved into ns_b: rxe_b, made there with rdma link add, stayed in the initial namespace.
  run --separate-stderr rx ./lesson18 --netns ns_b -p "$PORT" --timeout 1
  assert_failure 1
  refute_line --partial "device "
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "${stderr_lines[0]}" "lesson18: No RDMA devices: ibv_get_device_list found none from here"
}
