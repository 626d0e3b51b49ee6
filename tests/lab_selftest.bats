#!/usr/bin/env bats
# tests/lab_selftest.bats - how make lab-selftest judges a run of rdma-core's
# tests (scripts/maintainers/lab_selftest_summary.py). Runs on the host, on logs made
# here: nothing boots a guest.

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
  LOG=$BATS_TEST_TMPDIR/selftest.log
  EXPECTED=$BATS_TEST_TMPDIR/expected.txt
  printf '%s\n' '# a comment' \
    'bookworm  tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write  error  no atomic write before 6.2' >"$EXPECTED"
}

# result ID OUTCOME [DETAIL]: one test's line, as the guest prints it.
result() {
  printf 'LAB_SELFTEST_RESULT ["%s", "%s", "%s"]\n' "$1" "$2" "${3:-}" >>"$LOG"
}

# a_run [RAN]: a log with the header, two passes, two skips and the
# atomic-write error, then "Ran RAN tests" (default 5).
# shellcheck disable=SC2120 # RAN is optional: most tests want the default
a_run() {
  echo "selftest: kernel 6.1.0-57-amd64, rdma-core's tests from python3-pyverbs 44.0-2" >"$LOG"
  result tests.test_pd.PDTest.test_alloc_pd passed
  result tests.test_rdmacm.CMTestCase.test_rdmacm_sync_traffic passed
  result tests.test_efa.EfaTest.test_a skipped "Can not run the test over non EFA device"
  result tests.test_efa.EfaTest.test_b skipped "Can not run the test over non EFA device"
  result tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write error "PyverbsRDMAError: Completion status is local QP operation error"
  echo "Ran ${1:-5} tests in 200.1s" >>"$LOG"
}

summary() {
  run /usr/bin/python3 -I scripts/maintainers/lab_selftest_summary.py "$1" "$LOG" "$EXPECTED"
}

@test "a failure listed for this kernel is expected: the summary counts passes, failures and skips by reason, and succeeds" {
  a_run
  summary bookworm
  assert_success
  assert_line "lab-selftest on bookworm (6.1.0-57-amd64): 5 tests: 2 passed, 1 failed or errors, 2 skipped"
  assert_line "     2  Can not run the test over non EFA device"
  assert_line --partial "  expected  tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write: error: PyverbsRDMAError"
  assert_line "            (no atomic write before 6.2)"
  assert_line "2 passed, 0 failed, 2 skipped"
  assert_line "lab-selftest: as expected on bookworm"
}

@test "the same failure on a kernel it is not listed for fails the target and is named" {
  a_run
  summary trixie
  assert_failure 1
  assert_line --partial "  UNEXPECTED  tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write: error:"
  assert_line "2 passed, 1 failed, 2 skipped"
  assert_line "lab-selftest: FAILED:"
}

@test "a listed failure that now passes fails the target, asking to remove it from the list" {
  echo "selftest: kernel 6.1.0-57-amd64, x" >"$LOG"
  result tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write passed
  echo "Ran 1 test in 1.0s" >>"$LOG"
  summary bookworm
  assert_failure 1
  assert_line --partial "is listed as a known error on bookworm (no atomic write before 6.2), but it passed: remove it from"
}

@test "a test skipped because the lab's device has no net interface fails the target" {
  a_run
  result tests.test_rdmacm.CMTestCase.test_rdmacm_async_read skipped "Device rxe0 doesn't have net interface"
  summary bookworm
  assert_failure 1
  assert_line "  1 test(s) skipped for a reason that is the lab's: Device rxe0 doesn't have net interface"
}

@test "a run that never reached unittest's closing line fails the target" {
  a_run
  sed -i '/^Ran /d' "$LOG"
  summary bookworm
  assert_failure 1
  assert_line --partial 'the suite did not finish (no "Ran N tests" line'
}

@test "a malformed line in the list of expected failures is refused with its line number" {
  a_run
  echo "bookworm tests.x passed because" >>"$EXPECTED"
  summary bookworm
  assert_failure
  assert_output --partial "expected.txt:3: want KERNELS TEST-ID failed|error|racy REASON"
}

@test "a racy test listed for this kernel is expected whether it fails or passes" {
  echo "trixie  tests.test_cq.CQTest.test_resize_cq  racy  by timing" >>"$EXPECTED"
  local outcome
  for outcome in failed passed; do
    echo "selftest: kernel 6.12.118+deb13-amd64, x" >"$LOG"
    result tests.test_cq.CQTest.test_resize_cq "$outcome" "AssertionError: PyverbsRDMAError not raised"
    echo "Ran 1 test in 1.0s" >>"$LOG"
    summary trixie
    assert_success
    assert_line "lab-selftest: as expected on trixie"
  done
}
