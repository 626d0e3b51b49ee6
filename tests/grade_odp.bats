#!/usr/bin/env bats
# bats file_tags=lab,kernel:trixie-backports
# tests/grade_odp.bats - lesson 16's graders proven both ways where they can
# run: a device with on-demand paging. tests/run.sh boots a lab with
# trixie-backports' kernel for this file (its kernel: file tag); on the
# default kernel tests/grade.bats sees them SKIP, with the kernel they need.

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

@test "on the backports kernel, lesson 16's untouched starters FAIL, saying what was expected" {
  local ex
  for ex in 16.1 16.2; do
    run make --no-print-directory grade EX="$ex"
    assert_failure
    assert_line --regexp "^FAIL ${ex//./\\.} "
    assert_line --partial "  expected: "
    assert_line "grade: 0 of 1 exercises pass"
  done
}

@test "on the backports kernel, lesson 16's reference solutions PASS" {
  local ex
  for ex in 16.1 16.2; do
    run make --no-print-directory grade EX="$ex" SOLUTIONS=1
    assert_success
    assert_line --regexp "^PASS ${ex//./\\.} "
    assert_equal "${lines[-1]}" "grade: 1 of 1 exercises pass"
  done
}
