#!/usr/bin/env bats
# tests/run.sh, the runner behind `make check`: it counts skips apart, counts
# the tests a broken file never ran as failed, and turns a hang into a
# failure. Each test writes small suites into its own folder and runs
# tests/run.sh on them (on this host: they have no file tags).
bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
  S=$BATS_TEST_TMPDIR
  # The runs of tests/run.sh below bound their tiny suites' tests by 60 s,
  # not by this test's own bound (360 s, which they would inherit). Seen once
  # in a fresh-clone make check (2026-12-04): the third test waited out its
  # 360 s, and passes in under a second alone. The likely cause, from
  # reading bats-exec-test (not reproduced in 150 instant tests under load):
  # Bats 1.8 starts a watchdog `sleep BATS_TEST_TIMEOUT &` per test, and a
  # test that ends before the watchdog's subshell has set its trap leaves
  # that sleep behind, holding the output pipe `run` reads to its end. With
  # 60 s, such a stray costs at most 60 s, never the test.
  export BATS_TEST_TIMEOUT=60
}

# suite NAME LINE...: write $S/NAME.bats, one argument a line. (Never a
# line that starts with @test here: Bats would take it for one of ours.)
suite() {
  local name=$1
  shift
  printf '%s\n' "$@" >"$S/$name.bats"
}

@test "a skipped test is counted as skipped, not as passed" {
  suite a '@test "passes" { true; }' '@test "is skipped" { skip "on purpose"; }'
  run -0 tests/run.sh "$S/a.bats"
  assert_equal "${lines[${#lines[@]} - 1]}" "1 passed, 0 failed, 1 skipped"
}

@test "a failing test fails the run and is counted" {
  suite a '@test "fails" { false; }' '@test "passes" { true; }'
  run -1 tests/run.sh "$S/a.bats"
  assert_equal "${lines[${#lines[@]} - 1]}" "1 passed, 1 failed, 0 skipped"
}

@test "the tests a failing setup_file hid count as failed, even beside a failing teardown_file" {
  # One Bats run over both files would report 4 results for 4 tests here.
  suite a 'setup_file() { false; }' '@test "a1" { true; }' '@test "a2" { true; }'
  suite b 'teardown_file() { false; }' '@test "b1" { true; }' '@test "b2" { true; }'
  run -1 tests/run.sh "$S/a.bats" "$S/b.bats"
  assert_line "tests/run.sh: $S/a.bats reported 0 of its 2 tests: the other 2 count as failed"
  assert_equal "${lines[${#lines[@]} - 1]}" "2 passed, 3 failed, 0 skipped"
}

@test "a test that outlives BATS_TEST_TIMEOUT is a counted failure, and the run goes on" {
  suite a '@test "hangs" { sleep 60 3>&-; }' '@test "passes" { true; }'
  SECONDS=0
  BATS_TEST_TIMEOUT=2 run -1 tests/run.sh "$S/a.bats"
  ((SECONDS < 30))
  assert_line --regexp '^not ok 1 hangs # timeout after 2s$'
  assert_equal "${lines[${#lines[@]} - 1]}" "1 passed, 1 failed, 0 skipped"
}

@test "a BATS_TEST_TIMEOUT that is not a number is refused before anything runs, and runs no command" {
  suite a '@test "passes" { true; }'
  # shellcheck disable=SC2016 # the $(...) is the attack: it must stay text
  BATS_TEST_TIMEOUT='x[$(touch '"$S"'/pwned)]' run -2 tests/run.sh "$S/a.bats"
  assert_output "tests/run.sh: BATS_TEST_TIMEOUT must be a whole number of seconds, 1 to 999999, not 'x[\$(touch $S/pwned)]'"
  [[ ! -e $S/pwned ]] || fail "a command in BATS_TEST_TIMEOUT ran"
}

@test "a lesson older than its source is rebuilt before any test runs" {
  suite a '@test "passes" { true; }'
  touch lessons/01_device_query/lesson1.cpp
  run -0 tests/run.sh "$S/a.bats"
  assert_line "== building (make all units): a lesson or unit program is older than its sources"
  [[ ./lesson1 -nt lessons/01_device_query/lesson1.cpp ]] || fail "./lesson1 was not rebuilt"
  assert_equal "${lines[${#lines[@]} - 1]}" "1 passed, 0 failed, 0 skipped"
}

@test "when the build fails, nothing is tested and the run exits 2" {
  # A stub make: everything is stale, and building fails.
  mkdir "$S/bin"
  # shellcheck disable=SC2016 # the stub make's own lines, expanded when it runs
  printf '%s\n' '#!/bin/sh' 'echo "make $*" >>"$STUB_LOG"' '[ "$1" = -q ] && exit 1' 'echo "make: *** error" >&2; exit 2' >"$S/bin/make"
  chmod +x "$S/bin/make"
  suite a '@test "passes" { true; }'
  STUB_LOG="$S/make.log" PATH="$S/bin:$PATH" run -2 tests/run.sh "$S/a.bats"
  assert_line "tests/run.sh: the build failed; not testing the old binaries (fix the build, or run make)"
  refute_line --partial "passes"
  assert_equal "$(cat "$S/make.log")" "make -q all units
make --no-print-directory -j2 all units"
}

@test "a suite that does not exist is a usage error" {
  run -2 tests/run.sh "$S/nosuch.bats"
  assert_output "tests/run.sh: no such suite: $S/nosuch.bats"
}

@test "a suite's Bats file tags choose its lane: rxe the shared lab, lab and vcpus: or kernel: a second lab, none this host" {
  suite lesson '# bats file_tags=rxe' '@test "t" { true; }'
  suite grader '# bats file_tags=lab' '@test "t" { true; }'
  suite busy '# bats file_tags=rxe,vcpus:2' '@test "t" { true; }'
  suite odp '# bats file_tags=rxe, kernel:trixie-backports' '@test "t" { true; }'
  suite capture '# bats file_tags=pair' '@test "t" { true; }'
  suite device '# bats file_tags=guest' '@test "t" { true; }'
  suite late '# bats file_tags=lane:device' '@test "t" { true; }'
  suite unit '@test "t" { true; }'
  run -0 tests/run.sh --lanes "$S"/{unit,late,device,capture,odp,busy,grader,lesson}.bats
  # On a host with an RDMA device the lab suites share it, in the device lane.
  local second=lab
  ! compgen -G '/sys/class/infiniband/*' >/dev/null || second=device
  assert_line "device rxe $S/lesson.bats"
  assert_line "$second lab:2 $S/busy.bats"
  assert_line "$second lab:1 $S/grader.bats"
  assert_line "$second lab:1:trixie-backports $S/odp.bats"
  assert_line "device lane:device $S/late.bats"
  assert_line "lab guest $S/device.bats"
  assert_line "host pair $S/capture.bats"
  assert_line "host host $S/unit.bats"
  assert_equal "${#lines[@]}" 8
  # The tags are Bats' own: bats --filter-tags selects by the same lines.
  run -0 bats --count --filter-tags rxe "$S"/*.bats
  assert_output 3
}

@test "an unknown file tag is refused before anything is built or run" {
  suite a '# bats file_tags=rxe,runs-on:rxe' '@test "passes" { true; }'
  run -2 tests/run.sh "$S/a.bats"
  assert_output "tests/run.sh: $S/a.bats: unknown file tag 'runs-on:rxe' (the tags are listed at the top of tests/run.sh)"
}
