#!/usr/bin/env bats
# tests/options.bats - one meaning per option letter across every program
# (rdma-core's pingpong tools' and perftest's meaning where they have one),
# and docs/options.md's table is what the programs' own -h says. Runs on the
# host: it reads ./lesson* -h (tests/run.sh builds them first).

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

@test "each option letter has one meaning in every program, and docs/options.md lists every option as -h prints it" {
  run /usr/bin/python3 -I -S scripts/maintainers/options_table.py --check
  assert_success
  assert_output "problems 0"
}

@test "the pingpong tools' letters keep their meaning: -s a size in bytes, -n a count, -m a path MTU in bytes" {
  run /usr/bin/python3 -I -S scripts/maintainers/options_table.py
  assert_success
  # shellcheck disable=SC2016 # the backquotes are Markdown's, not a command
  refute_line --regexp '^\| `-s, --[a-z-]+=(KIB|N)`'
  # shellcheck disable=SC2016
  refute_line --regexp '^\| `-m, --[a-z-]+=TEXT`'
  refute_line --regexp '^\| `-n, --no-'
}
