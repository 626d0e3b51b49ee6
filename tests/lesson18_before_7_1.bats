#!/usr/bin/env bats
# bats file_tags=rxe,kernel:bookworm
#
# Lesson 18 on bookworm's Linux 6.1, where rxe's UDP 4791 socket lives only
# in the initial network namespace: the same two namespaces as
# tests/lesson18_netns.bats (lessons/18_netns/netns_pair.sh, made in setup, removed
# in teardown), and what fails, as the program reports it. tests/run.sh
# boots a lab of its own with bookworm's kernel for this file (its
# kernel: file tag), so the shared lab's devices are never touched. Then
# the container's other walls (memlock, no /dev/infiniband), -h and misuse,
# which are the same on every kernel.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  load helpers/netns_pair
  lesson_setup
}
teardown() {
  lesson_teardown
  pair_down
}

# The IPv4 address of the first device's netdev (192.0.2.1 in the lab), as lesson 9's suite finds it.
rdma_ip() {
  local netdev
  netdev=$(rx rdma link show "$RDMA_DEV/1" | sed -n 's/.*netdev \([^ ]*\).*/\1/p')
  rx ip -4 -o addr show dev "$netdev" | awk '{ sub("/.*", "", $4); print $4; exit }'
}

# Tests of the namespaces need a kernel before 7.1, where they fail.
needs_before_7_1() {
  pair_up
  ! kernel_at_least 7.1 || fail "the lab runs $(guest_kernel): this file needs a kernel before 7.1 (tests/run.sh boots LAB_KERNEL=bookworm for it)"
}

# shellcheck disable=SC2154 # stderr, stderr_lines: set by Bats' run --separate-stderr
@test "across two namespaces the connect ends in UNREACHABLE (ETIMEDOUT) and the message names the cause and Linux 7.1" {
  needs_before_7_1
  start_server ./lesson18 --netns ns_a -p "$PORT" --timeout 15
  wait_for_server_line "listening on" 20
  SECONDS=0
  run --separate-stderr rx ./lesson18 --netns ns_b -p "$PORT" --timeout 15 "$A_IP" 2 3
  assert_failure 1
  # The event, not our own 15 s wait: 2.5 s in the lab (measured 2026-12-04).
  ((SECONDS < 15)) || fail "the client took ${SECONDS} s: it waited out its --timeout"
  # Address and route resolve: the namespace has the netdev and the GID.
  assert_line --regexp "^  port 1 GID\[1\] ::ffff:$B_IP on veth_b \(ifindex [0-9]+\): in this namespace$"
  assert_line "client: rdma_cm chose rxe_b port 1, GID ::ffff:$B_IP, to reach $A_IP"
  assert_line "cm event: RDMA_CM_EVENT_UNREACHABLE"
  refute_line --partial "result:"
  assert_equal "${stderr_lines[0]}" "lesson18: expected RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_UNREACHABLE (status -110, ETIMEDOUT (Connection timed out))"
  [[ ${stderr_lines[1]} == "lesson18: check: rxe on Linux 6."*" sends and receives RoCE (UDP 4791) only in the initial network namespace, and this process is in another; Linux 7.1 gives rxe a socket per namespace"* ]] ||
    fail "stderr: $stderr"
  # The server never hears of it, and says the same when its wait ends.
  wait_server 30
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line "lesson18: no rdma_cm event within 15 s while waiting for RDMA_CM_EVENT_CONNECT_REQUEST"
  assert_line --partial "Linux 7.1 gives rxe a socket per namespace"
}

@test "rdma link add works inside a namespace, but rxe's UDP 4791 socket is only in the initial one" {
  needs_before_7_1
  run rx_sh 'exec ip netns exec ns_a rdma link show rxe_a/1'
  assert_success
  assert_output --partial "netdev veth_a"
  # shellcheck disable=SC2016 # expanded by the inner shell
  run rx_sh 'exec ip netns exec "$1" ss -Huln "sport = :4791"' _ ns_a
  assert_success
  assert_output ""
  run rx_sh 'exec ss -Huln "sport = :4791"'
  assert_output --partial ":4791"
}

# shellcheck disable=SC2154 # stderr, stderr_lines: set by Bats' run --separate-stderr
@test "exclusive mode: rdma dev set DEV netns is not supported for rxe before 7.1" {
  needs_before_7_1
  rx lessons/18_netns/netns_pair.sh down
  rx rdma system set netns exclusive
  rx lessons/18_netns/netns_pair.sh up >/dev/null
  run rx rdma dev set rxe_a netns ns_a
  assert_failure
  assert_output --partial "Operation not supported"
  run --separate-stderr rx ./lesson18 --netns ns_a -p "$PORT" --timeout 1
  assert_failure 1
  assert_equal "${stderr_lines[0]}" "lesson18: No RDMA devices: ibv_get_device_list found none from here"
}

# shellcheck disable=SC2154 # stderr, stderr_lines: set by Bats' run --separate-stderr
@test "without /dev/infiniband, as in a container started without the device, there are no RDMA devices (ENOENT)" {
  ((${#RX[@]})) || skip "mounts over /dev/infiniband: runs only in the lab"
  run --separate-stderr rx unshare -m bash -c 'mount -t tmpfs none /dev/infiniband && exec ./lesson18 --timeout 1'
  assert_failure 1
  assert_equal "${stderr_lines[0]}" "lesson18: No RDMA devices: ibv_get_device_list found none from here (ENOENT (No such file or directory))"
  [[ ${stderr_lines[1]} == "lesson18: check: in a container: is /dev/infiniband there (docker run --device=/dev/infiniband"* ]] ||
    fail "stderr: $stderr"
}

@test "under a 64 KiB memlock limit without CAP_IPC_LOCK a 1 MiB buffer fails with ENOMEM; a higher limit fixes it" {
  # util-linux's setpriv (busybox's, first in the lab's shell, has no --bounding-set):
  # CAP_IPC_LOCK leaves the bounding set, so root's exec does not get it back.
  local drop=(/usr/bin/setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock /usr/bin/prlimit)
  start_server "${drop[@]}" --memlock=65536 ./lesson18 -s 1048576 -p "$PORT" --timeout 15
  wait_for_server_line "listening on" 20
  run --separate-stderr rx ./lesson18 -p "$PORT" --timeout 15 "$(rdma_ip)" 2 3
  assert_failure 1 # the server, out of memory, rejected the connection
  wait_server 30
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line "memlock: RLIMIT_MEMLOCK 64 KiB; CAP_IPC_LOCK no: ibv_reg_mr pins no more than the limit"
  run cat "$SERVER_ERR"
  assert_line "lesson18: ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE) failed: ENOMEM (Cannot allocate memory)"
  assert_line --partial "--ulimit memlock=-1"
  # The fix: a limit above what the buffers pin (1 MiB and a page, here 2 MiB).
  start_server "${drop[@]}" --memlock=2097152 ./lesson18 -s 1048576 -p "$PORT" --timeout 15
  wait_for_server_line "listening on" 20
  run --separate-stderr rx ./lesson18 -p "$PORT" --timeout 15 "$(rdma_ip)" 2 3
  assert_success
  assert_line "result: 2 + 3 = 5"
  wait_server 30
  assert_equal "$SERVER_STATUS" 0
}

# shellcheck disable=SC2154 # stderr, stderr_lines: set by Bats' run --separate-stderr
@test "--netns naming no namespace fails on its open, saying how to make one" {
  run --separate-stderr rx ./lesson18 --netns nosuch -p "$PORT" --timeout 1
  assert_failure 1
  refute_output --partial "netns: entered"
  assert_equal "$stderr" 'lesson18: open(path.c_str(), O_RDONLY | O_CLOEXEC) failed: ENOENT (No such file or directory)
lesson18: check: is there a namespace of that name? (ip netns list; ip netns add NAME)'
}

@test "-h lists --netns and -s with their defaults and says what --netns needs" {
  run rx ./lesson18 -h
  assert_success
  assert_line --regexp '^      --netns=NAME +enter the network namespace /run/netns/NAME first \(default: stay\)$'
  assert_line --regexp '^  -s, --size=BYTES +server: bytes of its receive buffer, 64\.\.1073741824 \(default: 64\)$'
  assert_output --partial "--netns needs CAP_SYS_ADMIN (root); rxe across namespaces needs Linux 7.1 or later."
}

# shellcheck disable=SC2154 # stderr, stderr_lines: set by Bats' run --separate-stderr
@test "misuse prints one line on stderr and exits 2" {
  run --separate-stderr rx ./lesson18 --netns ../x
  assert_failure 2
  assert_equal "$stderr" "lesson18: --netns: '../x' is not a namespace name (ip netns list) (see lesson18 -h)"
  run --separate-stderr rx ./lesson18 -s 4096 192.0.2.1 2 3
  assert_failure 2
  assert_equal "$stderr" "lesson18: -s is a server option (see lesson18 -h)"
  run --separate-stderr rx ./lesson18 -s 10
  assert_failure 2
  assert_equal "$stderr" "lesson18: -s: '10' is out of range 64..1073741824 (see lesson18 -h)"
  run --separate-stderr rx ./lesson18 -g 1
  assert_failure 2
  assert_equal "$stderr" "lesson18: -g does not apply: rdma_cm picks the port and GID from the IP address (see lesson18 -h)"
}
