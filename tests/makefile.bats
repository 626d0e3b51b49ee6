#!/usr/bin/env bats
# tests/makefile.bats - what the Makefile does with the variables a target
# takes (make capture LESSON=N) and how it builds. Runs on the host: nothing
# here boots a guest or needs an RDMA device.

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  bats_load_library bats-file
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

# --- LESSON is text, never shell or make syntax ----------------------------

@test "make capture LESSON='x; touch FILE' runs no shell command and reports the misuse" {
  run make capture LESSON="x; touch $BATS_TEST_TMPDIR/pwn"
  assert_failure
  assert_output --partial "LESSON='x; touch $BATS_TEST_TMPDIR/pwn' is not one plain word"
  assert_file_not_exists "$BATS_TEST_TMPDIR/pwn"
}

@test "make -n capture LESSON='\$(shell touch FILE)' runs no make function, even in a dry run, and reports the misuse" {
  run make -n capture LESSON="\$(shell touch $BATS_TEST_TMPDIR/pwn2)"
  assert_failure
  assert_output --partial "LESSON='\$(shell touch $BATS_TEST_TMPDIR/pwn2)' is not one plain word"
  assert_file_not_exists "$BATS_TEST_TMPDIR/pwn2"
}

@test "LESSON from the environment is held to the same rule" {
  LESSON="\$(shell touch $BATS_TEST_TMPDIR/pwn3)" run make -n capture
  assert_failure
  assert_output --partial "is not one plain word"
  assert_file_not_exists "$BATS_TEST_TMPDIR/pwn3"
}

@test "make capture passes LESSON and SCENARIO to the script as quoted values, never pasted into the shell line" {
  run make -n capture LESSON=10 SCENARIO=rnr
  assert_success
  # shellcheck disable=SC2016 # the recipe's text, $LESSON unexpanded
  assert_line 'scripts/capture/lesson.sh "$LESSON" "$SCENARIO"'
  refute_output --partial "capture/lesson.sh 10"
  refute_output --partial "rnr"
}

@test "make capture SCENARIO='x; touch FILE' runs no shell command and reports the misuse" {
  run make capture LESSON=10 SCENARIO="x; touch $BATS_TEST_TMPDIR/pwn4"
  assert_failure
  assert_output --partial "SCENARIO='x; touch $BATS_TEST_TMPDIR/pwn4' is not one plain word"
  assert_file_not_exists "$BATS_TEST_TMPDIR/pwn4"
}

@test "a command-line variable outside the four (KERNELS, CXXFLAGS, any) is text: no make function in it runs" {
  local pwn="$BATS_TEST_TMPDIR/pwn5"
  # clean uses none of them; check-kernels' recipe runs a sub-make even
  # under -n, and make exports every command-line variable to it.
  run -0 make -n clean KERNELS="\$(shell touch $pwn.kernels)"
  run -0 make -n clean CXXFLAGS="\$(shell touch $pwn.cxxflags)"
  run -0 make -n check-kernels KERNELS="\$(shell touch $pwn.check)" NO_SUCH_VAR="\$(shell touch $pwn.any)"
  assert_line "scripts/maintainers/check_kernels.sh"
  assert_file_not_exists "$pwn.kernels"
  assert_file_not_exists "$pwn.cxxflags"
  assert_file_not_exists "$pwn.check"
  assert_file_not_exists "$pwn.any"
  # A plain value still reaches the compiler.
  run -0 make -n -B lesson1 CXXFLAGS='-O1 -g'
  assert_output --partial "g++ -O1 -g -std=c++20"
}

@test "make -n with other CXXFLAGS writes nothing: the next make has nothing to rebuild" {
  # The suites run programs while this one runs: a dry run that left the
  # flags stamp changed made the next make relink them under a lesson the
  # lab was starting ("setsid: can't execute 'build/tests/silent_server':
  # Permission denied", make check, 2026-12-05).
  make --no-print-directory -s lesson1
  local stamp
  stamp=$(<build/pch/flags)
  run -0 make -n lesson1 CXXFLAGS='-O1 -g'
  assert_equal "$(<build/pch/flags)" "$stamp"
  run -0 make -q lesson1
}

# --- parallel by default ----------------------------------------------------

# MAKEFLAGS as a recipe of a top-level make sees it (a target added with
# --eval). Under `make check` this test runs inside a make: forget it.
recipe_makeflags() {
  # shellcheck disable=SC2016 # $$MAKEFLAGS is for make, not for this shell
  env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS make -s --no-print-directory --eval 'show-makeflags: ; @echo "$$MAKEFLAGS"' "$@" show-makeflags
}

@test "make builds with one job per core by default" {
  run recipe_makeflags
  assert_success
  assert_output --regexp "(^| )-j$(nproc)( |$)"
}

@test "make -j1 on the command line wins over the default" {
  run recipe_makeflags -j1
  assert_success
  assert_output --regexp "(^| )-j1( |$)"
}

@test "make help prints every target the Makefile's header names, one a line, and is not the default goal" {
  run make -s --no-print-directory help
  assert_success
  local target
  while read -r target; do
    assert_line --partial "  make $target "
  done < <(sed -n 's/^#   make \([^ ]*\).*/\1/p' Makefile)
  run make -n --no-print-directory
  refute_output --partial "make tour"
}

@test "make CXXFLAGS=... on the command line replaces only the optimisation flags: C++20, the warnings and rdma-core's flags stay" {
  run -0 make -n -B CXXFLAGS='-O1 -g -fsanitize=address,undefined' lesson1
  assert_line --regexp '^g\+\+ -O1 -g -fsanitize=address,undefined -std=c\+\+20 -Wall -Wextra -Werror -Icommon .*lessons/01_device_query/lesson1\.cpp build/libworkbook\.a .*-libverbs -lrdmacm'
  refute_output --partial "-O2"
  CXXFLAGS=-O0 run -0 make -n -B lesson1
  assert_line --regexp '^g\+\+ -O0 -std=c\+\+20 -Wall -Wextra -Werror -Icommon .*lesson1\.cpp .*-libverbs -lrdmacm'
}

@test "the top level holds only what the design names: Makefile, README.md, lessons, common, scripts, tests, docs, .ci" {
  run -0 git -C "$BATS_TEST_DIRNAME/.." ls-files
  assert_equal "$(cut -d/ -f1 <<<"$output" | LC_ALL=C sort -u | paste -sd' ')" ".ci .gitignore Makefile README.md common docs lessons scripts tests"
}
