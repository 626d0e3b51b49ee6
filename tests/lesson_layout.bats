#!/usr/bin/env bats
# tests/lesson_layout.bats - each lesson stands alone: the verbs a lesson's
# header lists under "Verbs it introduces" are called in that lesson's folder,
# and common/ holds only what the programs of two or more lessons use
# (STYLE.md, third review). Runs on the host: it reads the sources.

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

layout() { /usr/bin/python3 -I -S tests/helpers/lesson_layout.py "$@"; }

# A copy of lessons/ and common/ to break on purpose.
copy_tree() {
  mkdir -p "$BATS_TEST_TMPDIR/tree"
  cp -r lessons common "$BATS_TEST_TMPDIR/tree/"
}

@test "every verb a lesson's header introduces is called in that lesson's folder" {
  run layout verbs
  assert_success
  assert_output "findings 0"
}

@test "a verb listed in a header but called only elsewhere is named, with its lesson" {
  copy_tree
  sed -i 's|^// Verbs it introduces:$|// Verbs it introduces:\n//     ibv_alloc_dm (device memory)|' "$BATS_TEST_TMPDIR/tree/lessons/14_memory_windows/lesson14.cpp"
  run -1 layout verbs "$BATS_TEST_TMPDIR/tree"
  assert_line "14_memory_windows: lesson14.cpp lists ibv_alloc_dm under \"Verbs it introduces\", but no file of 14_memory_windows/ calls it"
  assert_line "findings 1"
}

@test "a verb named only in a comment or a string does not count as called" {
  copy_tree
  local f=$BATS_TEST_TMPDIR/tree/lessons/14_memory_windows/lesson14.cpp
  sed -i 's|^// Verbs it introduces:$|// Verbs it introduces:\n//     ibv_alloc_dm (device memory)|' "$f"
  printf '%s\n' '// ibv_alloc_dm( in a comment' 'static const char* kNote = "ibv_alloc_dm(";' >>"$f"
  run -1 layout verbs "$BATS_TEST_TMPDIR/tree"
  assert_line --partial "lists ibv_alloc_dm under"
}

@test "every common/ file is used by the programs of two or more lessons" {
  run layout common
  assert_success
  assert_output "findings 0"
}

@test "a common/ file that one lesson alone uses is named" {
  copy_tree
  printf '%s\n' '#pragma once' 'namespace wb { inline int only_lesson14() { return 14; } }' >"$BATS_TEST_TMPDIR/tree/common/only14.hpp"
  sed -i '0,/^#include "/s//#include "only14.hpp"\n#include "/' "$BATS_TEST_TMPDIR/tree/lessons/14_memory_windows/lesson14.cpp"
  run -1 layout common "$BATS_TEST_TMPDIR/tree"
  assert_line "common/only14.*: used by the programs of 14_memory_windows only: code one lesson uses belongs in that lesson's folder"
}
