#!/usr/bin/env bats
# bats file_tags=rxe
# Lesson 2 registers memory with least privilege and shows the rules by
# trying them: what is refused, with which errno, and why.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  lesson_setup
}
teardown() { lesson_teardown; }

hex='0x[0-9a-f]{8}'

@test "each MR gets exactly the access its use needs, with its address, length, lkey and rkey" {
  run --separate-stderr rx ./lesson2
  assert_success
  assert_line "device: $RDMA_DEV (opened with wb::open_device, lesson 1's walk)"
  assert_line --regexp "^  send source   addr 0x[0-9a-f]+ length   4096 lkey $hex rkey $hex access 0 \(local read only\)$"
  assert_line --regexp "^  recv target   addr 0x[0-9a-f]+ length   4096 lkey $hex rkey $hex access LOCAL_WRITE$"
  assert_line --regexp "^  write target  addr 0x[0-9a-f]+ length   4096 lkey $hex rkey $hex access LOCAL_WRITE\|REMOTE_WRITE$"
  assert_line --regexp "^  read source   addr 0x[0-9a-f]+ length   4096 lkey $hex rkey $hex access REMOTE_READ$"
  assert_line --regexp "^  atomic target addr 0x[0-9a-f]+ length      8 lkey $hex rkey $hex access LOCAL_WRITE\|REMOTE_ATOMIC$"
}

@test "two MRs over the same memory have the same address but their own keys" {
  run --separate-stderr rx ./lesson2
  assert_success
  local write read
  write=$(grep '^  write target' <<<"$output")
  read=$(grep '^  read source' <<<"$output")
  [ "$(awk '{print $4}' <<<"$write")" = "$(awk '{print $4}' <<<"$read")" ] || fail "different addresses: $write / $read"
  [ "$(awk '{print $10}' <<<"$write")" != "$(awk '{print $10}' <<<"$read")" ] || fail "the same rkey twice: $write / $read"
}

@test "REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is refused with EINVAL" {
  run --separate-stderr rx ./lesson2
  assert_success
  assert_output --partial "  ibv_reg_mr(pd, exposed, page, IBV_ACCESS_REMOTE_WRITE)
    -> refused: EINVAL (Invalid argument)
    rule: REMOTE_WRITE needs LOCAL_WRITE"
  assert_output --partial "  ibv_reg_mr(pd, counter, 8, IBV_ACCESS_REMOTE_ATOMIC)
    -> refused: EINVAL (Invalid argument)"
}

@test "memory that does not exist cannot be registered" {
  run --separate-stderr rx ./lesson2
  assert_success
  assert_output --partial "  ibv_reg_mr(pd, nullptr, page, IBV_ACCESS_LOCAL_WRITE)
    -> refused: EFAULT (Bad address)"
}

@test "lesson 2 prints the RLIMIT_MEMLOCK that ulimit -l set" {
  local hard want_hard
  hard=$(rx_sh 'ulimit -H -l') # KiB, or "unlimited"
  if [ "$hard" = unlimited ]; then want_hard=unlimited; else want_hard="$((hard * 1024)) bytes ($hard KiB)"; fi
  run --separate-stderr rx bash -c 'ulimit -S -l 4096 && ./lesson2'
  assert_success
  assert_line "RLIMIT_MEMLOCK (getrlimit): soft 4194304 bytes (4096 KiB), hard $want_hard"
  assert_line "  setrlimit: soft limit restored to 4194304 bytes (4096 KiB)"
}

@test "a registration over a lowered RLIMIT_MEMLOCK fails with ENOMEM without CAP_IPC_LOCK" {
  run --separate-stderr rx ./lesson2
  assert_success
  assert_line "  setrlimit: soft limit lowered to 65536 bytes (64 KiB); now registering 1024 KiB:"
  assert_output --partial "  ibv_reg_mr(pd, big, 1 MiB, IBV_ACCESS_LOCAL_WRITE)
    -> refused: ENOMEM (Cannot allocate memory)"
}

@test "CAP_IPC_LOCK (root) lifts the limit, and lesson 2 says whether this process has it" {
  run --separate-stderr rx ./lesson2
  assert_success
  if [ "$(rx id -u)" -eq 0 ]; then
    assert_line "  CAP_IPC_LOCK: yes (root or granted): the kernel does not apply the limit"
    assert_line --regexp "^  with CAP_IPC_LOCK: ibv_reg_mr succeeded \(lkey $hex\): the capability bypasses the limit$"
    assert_line "  CAP_IPC_LOCK dropped from the effective set (capset), as for an ordinary user:"
  else
    assert_line "  CAP_IPC_LOCK: no: every ibv_reg_mr must fit under the soft limit"
    refute_line --partial "with CAP_IPC_LOCK:"
  fi
}

@test "a PD with MRs in it cannot be freed, and the result line names every refusal" {
  run --separate-stderr rx ./lesson2
  assert_success
  assert_line "  ibv_dealloc_pd(pd) with 5 MRs still in it -> refused: EBUSY (Device or resource busy)"
  assert_equal "${lines[${#lines[@]} - 1]}" "result: 5 MRs registered with least privilege; refused as the rules say: REMOTE_WRITE without LOCAL_WRITE EINVAL, REMOTE_ATOMIC without LOCAL_WRITE EINVAL, unmapped memory EFAULT, 1 MiB over a 64 KiB RLIMIT_MEMLOCK ENOMEM, a PD with MRs EBUSY"
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" "" # the handles' deleters released everything without complaint
}

@test "a device that does not exist is named, with the devices that do" {
  run --separate-stderr rx ./lesson2 -d nosuch0
  assert_failure 1
  assert_equal "$stderr" "lesson2: no RDMA device named 'nosuch0'
lesson2: check: the devices here are: $RDMA_DEV"
}

@test "lesson 2 takes no host: misuse is one line and exit 2; -h exits 0" {
  run --separate-stderr rx ./lesson2 127.0.0.1
  assert_failure 2
  assert_equal "$stderr" "lesson2: unexpected argument '127.0.0.1': lesson 2 takes no host (see lesson2 -h)"
  run --separate-stderr rx ./lesson2 -h
  assert_success
  assert_line --partial "(default: the first device found)"
}
