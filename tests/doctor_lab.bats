#!/usr/bin/env bats
# bats file_tags=lane:device
# tests/doctor_lab.bats - scripts/doctor.sh against real breakages, in a lab
# guest of its own (run on the host).
#
# setup_file boots ONE guest and runs tests/helpers/doctor_breakages.sh in
# it: the doctor on the healthy guest, then each thing broken for real in
# turn (a memlock limit, a netdev with no address, the device deleted, the
# provider hidden, the port down, a firewall rule, rdma_cm on 127.0.0.1),
# the doctor after each, and the thing put back; then one `lab.sh pair` run
# with the two guests' MTUs apart. The guests are thrown away after, so no
# other suite's guest is touched. Each test reads one framed section of
# that run (or the pair's [b] lines). The same checks against stubs:
# tests/doctor.bats.
#
#   bats tests/doctor_lab.bats

bats_require_minimum_version 1.5.0

setup_file() {
  local top cache kroot=''
  top=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
  # The lab's unpacked kernel package holds the netfilter modules the
  # guest's initramfs lacks (for the firewall breakage).
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/lab
  [[ -r $cache/current-package ]] && kroot="$cache/$(<"$cache/current-package")/root"
  (cd "$top" && make -s lesson9) >/dev/null
  (cd "$top" && scripts/lab.sh run --timeout 600 -- tests/helpers/doctor_breakages.sh "$kroot") \
    >"$BATS_FILE_TMPDIR/out" 2>&1
  echo $? >"$BATS_FILE_TMPDIR/status"
  # The two hosts' MTUs apart: one pair run. a (MTU 1500) serves lesson 9
  # and rping; b raises its MTU to 9000 (active_mtu 4096) and runs the
  # doctor with --peer a.
  # shellcheck disable=SC2016 # expanded in the guests
  (cd "$top" && scripts/lab.sh pair --timeout 400 --ready listening \
    --a './lesson9 --timeout 45 >/dev/null 2>&1 & timeout 45 rping -s -S 8192 -C 1 >/dev/null 2>&1 & sleep 1; echo listening; wait' \
    --b 'ip link set eth0 mtu 9000 && sleep 1 && scripts/doctor.sh --peer 192.0.2.1; echo "doctor exit $?"') \
    >"$BATS_FILE_TMPDIR/pair" 2>&1
}

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
}

# section NAME: that section's doctor output as $output and $lines, its
# exit status as $section_status.
section() {
  local out status
  [[ $(<"$BATS_FILE_TMPDIR/status") == 0 ]] ||
    fail "the lab run failed (status $(<"$BATS_FILE_TMPDIR/status")):"$'\n'"$(tail -20 "$BATS_FILE_TMPDIR/out")"
  out=$(sed -n "/^#@ begin $1\$/,/^#@ end $1 /p" "$BATS_FILE_TMPDIR/out")
  [[ -n $out ]] || fail "no section $1 in the lab run:"$'\n'"$(tail -20 "$BATS_FILE_TMPDIR/out")"
  status=$(tail -1 <<<"$out")
  section_status=${status##* }
  run sed '1d;$d' <<<"$out"
}

@test "a healthy lab guest gets every check OK and exit status 0" {
  section healthy
  refute_line --regexp "^(WARN|FAIL)"
  assert_line --regexp "^OK    devices   rdma link show: rxe0/1 on dummy0 \(ACTIVE\)$"
  assert_line --regexp "^OK    gid       .*GID index 1 = ::ffff:192\.0\.2\.1 \(RoCE v2, IPv4-mapped\)"
  assert_line --regexp "^doctor: 17 checks: 1[67] OK, 0 WARN, 0 FAIL"
  assert_equal "$section_status" 0
}

@test "--peer with lesson 9's and rping's servers on the guest's own address: route, connect and transfer are OK" {
  section peer_ok
  assert_line --regexp "^OK    route     ip route get 192\.0\.2\.1: .*\(dummy0 carries an RDMA device\)$"
  assert_line --regexp "^OK    connect   \./lesson9 192\.0\.2\.1 1 2: connected through rdma_cm and got 'result: 1 \+ 2 = 3'"
  assert_line --regexp "^OK    transfer  rping -c -a 192\.0\.2\.1 -S 8192 -C 1: the 8192-byte RDMA transfer completed"
  assert_equal "$section_status" 0
}

@test "a 64 KiB memlock limit without CAP_IPC_LOCK: FAIL memlock, fixed by ulimit -l" {
  section memlock
  assert_line --regexp "^FAIL  memlock   /proc/self/limits: locked memory 64 KiB \(ulimit -l\).*cause: .*ENOMEM.*; fix: ulimit -l unlimited "
  assert_line --regexp "^doctor: .* 1 FAIL"
  assert_equal "$section_status" 1
}

@test "a netdev with no address: FAIL netdev, fixed by ip addr add" {
  section no_address
  assert_line --regexp "^FAIL  netdev    ip addr show dev dummy0: up, MTU 1500, but no IP address; .*fix: sudo ip addr add 192\.0\.2\.1/24 dev dummy0"
  assert_line --regexp "^WARN  gid       .*rxe0/1 has no IPv4-mapped RoCE v2 GID"
  assert_equal "$section_status" 1
}

@test "the device deleted: FAIL devices, fixed by setup_rxe.sh up" {
  section deleted
  assert_line --regexp "^FAIL  devices   rdma link show: no RDMA device, although rdma_rxe is loaded; .*fix: sudo scripts/setup_rxe.sh up"
  assert_line --regexp "^SKIP  port      no RDMA device to look at$"
  assert_equal "$section_status" 1
}

@test "the provider libraries hidden: FAIL verbs, fixed by reinstalling ibverbs-providers" {
  section no_provider
  assert_line --regexp "^FAIL  verbs     ibv_devinfo -l: libibverbs does not list rxe0, which the kernel has .* 0 provider libraries; .*fix: sudo apt install --reinstall ibverbs-providers"
  assert_line --regexp "^OK    devices   rdma link show: rxe0/1 on dummy0"
  assert_equal "$section_status" 1
}

@test "IBV_CONFIG_DIR pointing at an empty folder does not hide rxe from rdma-core 44's libibverbs" {
  # libibverbs 44 reads no such variable (its only config directory is the
  # compiled-in /etc/libibverbs.d; strings shows RDMAV_DRIVERS, IBV_DRIVERS),
  # so librxe still loads and the doctor rightly says OK.
  section empty_config_dir
  assert_line --regexp "^OK    verbs     ibv_devinfo -l: libibverbs lists rxe0"
}

@test "the port down (ip link set dummy0 down): FAIL port and netdev, fixed by ip link set dummy0 up" {
  section port_down
  assert_line "FAIL  port      rdma link show: rxe0/1 state DOWN, physical_state DISABLED on dummy0; cause: the netdev under it, dummy0, is down: the port is DOWN with it and every lesson fails with 'port 1 is down, not ACTIVE'; fix: sudo ip link set dummy0 up"
  assert_line --regexp "^FAIL  netdev    .*dummy0 is down; .*fix: sudo ip link set dummy0 up$"
  assert_equal "$section_status" 1
}

@test "an nft rule dropping UDP 4791: FAIL firewall, fixed by deleting that rule by its handle" {
  section firewall
  if [[ $output == skipped:* ]]; then skip "${output#skipped: }"; fi
  assert_line --regexp "^FAIL  firewall  nft -a list ruleset: table inet wb_doctor_test chain input: 'udp dport 4791 drop'; .*fix: sudo nft delete rule inet wb_doctor_test input handle [0-9]+$"
  assert_equal "$section_status" 1
}

@test "rdma_cm on 127.0.0.1: FAIL route, whose fix names the guest's RDMA address" {
  section loopback
  assert_line --regexp "^FAIL  route     --peer 127\.0\.0\.1: a loopback address; .*fix: \./lesson9 192\.0\.2\.1 2 3 "
  assert_line --regexp "^SKIP  connect   the route to 127\.0\.0\.1 failed"
  assert_equal "$section_status" 1
}

@test "after every breakage is put back, the doctor is all OK again" {
  section restored
  refute_line --regexp "^(WARN|FAIL)"
  assert_equal "$section_status" 0
}

@test "two hosts' MTUs apart (9000 here, 1500 there): connect is OK but the 8 KiB transfer stalls: FAIL transfer, naming the MTU" {
  run sed -n 's/^\[b\] //p' "$BATS_FILE_TMPDIR/pair"
  assert_line --regexp "^OK    mtu       eth0 MTU 9000, ibv_devinfo: rxe0/1 active_mtu 4096"
  assert_line --regexp "^OK    connect   \./lesson9 192\.0\.2\.1 1 2: connected through rdma_cm"
  assert_line --regexp "^FAIL  transfer  rping -c -a 192\.0\.2\.1 -S 8192 -C 1: connected, but the 8192-byte transfer did not complete in 15 s \(here: eth0 MTU 9000\); cause: the two hosts' MTUs differ.*fix: the same MTU on both hosts: sudo ip link set eth0 mtu M"
  assert_line "doctor exit 1"
}
