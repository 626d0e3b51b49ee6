#!/usr/bin/env bats
# bats file_tags=rxe,kernel:trixie-backports
#
# Lesson 16: on-demand paging. The server exposes memory it never touched,
# registered with IBV_ACCESS_ON_DEMAND under a 64 KiB memlock limit; the
# client WRITEs and READs every page of it, twice. It runs for real on the
# RDMA device: tests/run.sh boots a lab with trixie-backports' kernel for
# this file (its kernel: file tag), where rxe has ODP. On a device without
# ODP (rxe before Linux 6.15) the server's refusal is what is tested, and
# the tests that need ODP skip, each naming the kernel they need.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  load helpers/fake_peer
  lesson_setup
}
teardown() { lesson_teardown; }

# The device must page on demand (ibv_devinfo -v: general_odp_caps). In
# the lab that is tests/run.sh's promise (this file's kernel: tag boots
# trixie-backports for it), so a lab without ODP is a failure; only a
# host's own device without ODP skips, saying why.
needs_odp() {
  # shellcheck disable=SC2016 # expanded by the inner shell
  rx_sh 'ibv_devinfo -v -d "$1" | grep -A1 general_odp_caps: | grep -q ODP_SUPPORT' _ "$RDMA_DEV" && return 0
  ((${#RX[@]} == 0)) || fail "the lab's device has no on-demand paging: run this suite through tests/run.sh (it boots LAB_KERNEL=trixie-backports for it), or in a lab up with LAB_KERNEL=trixie-backports"
  skip "this host's device has no on-demand paging (rxe from Linux 6.15; in the lab: LAB_KERNEL=trixie-backports)"
}

@test "the server reports the device's odp_caps, and refuses with the kernel it needs where they lack WRITE and READ" {
  run --separate-stderr rx ./lesson16 -p "$PORT" --timeout 1
  assert_failure 1 # with ODP: no client came within 1 s
  # shellcheck disable=SC2016 # expanded by the inner shell
  if rx_sh 'ibv_devinfo -v -d "$1" | grep -A1 general_odp_caps: | grep -q ODP_SUPPORT' _ "$RDMA_DEV"; then
    assert_line "odp: general_caps 0x1: ODP_SUPPORT yes, ODP_SUPPORT_IMPLICIT no"
    assert_line --regexp '^odp: rc_odp_caps 0x[0-9a-f]+ \(SEND RECV WRITE READ .*\), ud_odp_caps '
    # Past the check it registers, then waits 1 s for a client that never comes.
    assert_line --partial "server: waiting for a client"
  else
    assert_line "odp: general_caps 0x0: ODP_SUPPORT no, ODP_SUPPORT_IMPLICIT no"
    # shellcheck disable=SC2154 # stderr, stderr_lines: set by Bats' run --separate-stderr
    [[ ${stderr_lines[0]} == "lesson16: $RDMA_DEV cannot page RC WRITE and READ on demand (no ODP on this kernel, "* ]] ||
      fail "stderr: $stderr"
    [[ ${stderr_lines[1]} == *"rxe has ODP from Linux 6.15"*"LAB_KERNEL=trixie-backports scripts/lab.sh up"* ]] ||
      fail "stderr: $stderr"
    refute_output --partial "server: waiting for a client"
  fi
}

@test "without ON_DEMAND the region is refused under the 64 KiB memlock limit; with it, it registers and pins nothing" {
  needs_odp
  run --separate-stderr rx ./lesson16 -p "$PORT" --timeout 1 -s 67108864
  assert_failure 1 # no client came within 1 s
  assert_line "server: RLIMIT_MEMLOCK soft limit now 64 KiB, CAP_IPC_LOCK dropped (as for a user)"
  assert_line "server: ibv_reg_mr(65536 KiB, no ON_DEMAND) -> ENOMEM (Cannot allocate memory): pinning must fit under the limit"
  assert_line --regexp '^server: ibv_reg_mr\(65536 KiB, ON_DEMAND\) -> rkey 0x[0-9a-f]+ in [0-9.]+ ms; VmPin 0 kB, VmRSS [0-9]+ kB$'
  assert_line --regexp '^server: ibv_reg_mr\(1536 MiB, ON_DEMAND\) -> lkey 0x[0-9a-f]+ in [0-9.]+ ms; VmPin 0 kB$'
  # 7.3's rxe has no implicit ODP (general_caps says so) and rdma-core 44's rxe no prefetch.
  assert_line "server: implicit ODP MR ibv_reg_mr(NULL, SIZE_MAX, ON_DEMAND) -> EOPNOTSUPP (Operation not supported)"
  assert_line --regexp '^server: ibv_advise_mr\(PREFETCH_WRITE, 1 MiB\) -> (done|EOPNOTSUPP .*rdma-core 59\))$'
}

@test "a client WRITEs and READs every page the server never touched; its bytes land, and only the WRITE half becomes resident" {
  needs_odp
  start_server ./lesson16 -p "$PORT" --timeout 30
  wait_for_server_line "waiting for a client" 20
  run --separate-stderr rx ./lesson16 -p "$PORT" --timeout 30 127.0.0.1
  assert_success
  assert_line --regexp '^client: WRITE 512 pages: median +[0-9]+ us first touch, +[0-9]+ us again \([0-9.]+x\); [0-9]+ resent$'
  assert_line --regexp '^client: READ  512 pages: median +[0-9]+ us first touch, +[0-9]+ us again \([0-9.]+x\); [0-9]+ resent$'
  # Memory nobody wrote reads as zeros, through the NIC as through the CPU.
  assert_line --regexp '^result: first touch against again, median per page: WRITE [0-9.]+x, READ [0-9.]+x; the never-written pages READ as zeros \(1024 of 1024 bytes\)$'
  wait_server 30
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "result: all 512 pages the client wrote hold its 1024 bytes"
  # The WRITE half's 512 pages (2048 kB) became resident; the READ half
  # (the shared zero page) and the pinned count did not move.
  local after
  after=$(grep -m1 '^server: VmRSS .* after' "$SERVER_OUT")
  [[ $after =~ \(\+([0-9]+)\ kB\),\ VmPin\ 0\ kB$ ]] || fail "no VmRSS line with VmPin 0: $after"
  ((BASH_REMATCH[1] >= 2048 && BASH_REMATCH[1] < 2048 + 512)) || fail "resident grew by ${BASH_REMATCH[1]} kB, not about 2048: $after"
}

@test "a client refuses what no lesson-16 server offers: too little, too much, odd pages, an address inside a page" {
  # A server's -s: 131072..1073741824 bytes, a multiple of 8192, at a page's
  # start. 0xffffe000 is 4 GiB less 8 KiB: two halves of whole pages, but
  # not one a lesson-16 server offers (before the bound, the client set out
  # to WRITE and READ 2 GiB of pages, each twice).
  local offer
  for offer in "0x7f0000001000 4096" "0x7f0000001000 0xffffe000" "0x7f0000001000 0x21000" "0x7f0000001800 131072"; do
    # shellcheck disable=SC2086 # ADDR LENGTH: two words on purpose
    start_fake_server offer 16 $offer
    run --separate-stderr rx ./lesson16 -p "$PORT" --timeout 10 127.0.0.1
    assert_failure 1
    assert_equal "${stderr_lines[0]}" "lesson16: no lesson-16 server offers that: it offers 131072..1073741824 bytes, a multiple of 8192, at a page's start"
    assert_line --regexp "^client: server QP 0x123 offers [0-9]+ bytes at 0x7f000000[0-9a-f]{4}, rkey 0x1234$"
    refute_output --partial "result:"
    wait_server 10
  done
}

@test "-h states every default and the kernel the server needs" {
  run ./lesson16 -h
  assert_success
  assert_line --partial "-s, --size=BYTES      server: bytes of never-touched memory to expose, a multiple of 8192,"
  assert_line --partial "131072..1073741824 (default: 4194304 = 4 MiB)"
  assert_line --partial "(default: 18515)"
  assert_line --partial "LAB_KERNEL=trixie-backports"
  assert_line --partial "exits 1"
}

@test "misuse is one line on stderr and exit 2: -s out of range or not whole pages, -s on the client, two hosts" {
  run --separate-stderr ./lesson16 -s 100
  assert_failure 2
  assert_equal "$stderr" "lesson16: -s: '100' is out of range 131072..1073741824 (see lesson16 -h)"
  # -s is in bytes (it was KiB): 4096 is 4 KiB, too small.
  run --separate-stderr ./lesson16 -s 4096
  assert_failure 2
  assert_equal "$stderr" "lesson16: -s: '4096' is out of range 131072..1073741824 (see lesson16 -h)"
  run --separate-stderr ./lesson16 -s 200000
  assert_failure 2
  assert_equal "$stderr" "lesson16: -s: '200000' is not a multiple of 8192 (two halves of whole pages) (see lesson16 -h)"
  run --separate-stderr ./lesson16 -s 8 127.0.0.1
  assert_failure 2
  assert_equal "$stderr" "lesson16: -s is a server option; the client uses what the server exposes (see lesson16 -h)"
  run --separate-stderr ./lesson16 a b
  assert_failure 2
  assert_equal "$stderr" "lesson16: expected at most one argument (HOST), got 2 (see lesson16 -h)"
}
