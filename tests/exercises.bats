#!/usr/bin/env bats
# tests/exercises.bats - each exercise's code has one home (docs/contributing.md):
# a starter is its lesson plus a patch, or a file of its own; a solution is
# its starter plus a patch. Every patch applies exactly to today's lesson and
# starter, or the check names the exercise; the learner's file is made once
# and never overwritten. Runs on the host: nothing here needs an RDMA device.

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  bats_load_library bats-file
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

# copy_tree: the tracked files in a folder of the test's own, and cd there,
# so that nothing here touches the real checkout's files.
copy_tree() {
  local copy=$BATS_TEST_TMPDIR/tree
  mkdir -p "$copy"
  git ls-files -z | xargs -0 cp --parents -t "$copy"
  cd "$copy" || return 1
}

# line_only_in EX: a line number of EX's lesson inside EX's starter patch
# (the first line of a hunk's context) that no other exercise's patch of the
# same lesson covers: editing it breaks EX's patch and no other.
line_only_in() {
  local dir=$1 others
  others=$(for p in "$(dirname "$dir")"/*/starter.patch; do [[ $p == "$dir/starter.patch" ]] || echo "$p"; done)
  local start len
  while read -r start len; do
    # shellcheck disable=SC2086 # $others is a list of paths without spaces
    if [[ -z $others ]] || ! covered "$start" "$len" $others; then
      echo "$start"
      return 0
    fi
  done < <(sed -nE 's/^@@ -([0-9]+),([0-9]+) .*/\1 \2/p' "$dir/starter.patch" | tail -n +2)
  return 1
}

# covered START LEN PATCH...: whether any hunk of the PATCHes touches lines START..START+LEN.
covered() {
  local start=$1 len=$2
  shift 2
  sed -nE 's/^@@ -([0-9]+),([0-9]+) .*/\1 \2/p' "$@" |
    awk -v s="$start" -v e="$((start + len))" '$1 <= e && $1 + $2 >= s { hit = 1 } END { exit !hit }'
}

@test "every starter patch applies exactly to today's lesson, and every solution patch to its starter" {
  run scripts/exercises/exercise.sh check
  assert_output ""
  assert_success
}

@test "a lesson edit inside one exercise's change fails the check, and the check names that exercise alone" {
  copy_tree
  local dir=lessons/13_srq/exercises/13.1 line
  line=$(line_only_in "$dir") || fail "13.1's starter patch has no hunk of its own"
  sed -i "${line}s/\$/ \/\/ edited/" lessons/13_srq/lesson13.cpp
  run scripts/exercises/exercise.sh check
  assert_failure 1
  assert_line "exercise 13.1: its starter patch $dir/starter.patch no longer applies to lessons/13_srq/lesson13.cpp:"
  assert_line --regexp '^exercise: 1 exercise\(s\) whose patch does not apply: 13\.1 '
  refute_output --partial "exercise 13.2:"
}

@test "a starter edit inside its solution's change fails the check by the exercise's name" {
  copy_tree
  # 1.1's starter is a file of its own; its TODO line is inside the solution's change.
  sed -i 's/TODO(1\.1)/TODO (1.1)/' lessons/01_device_query/exercises/1.1/starter.cpp
  run scripts/exercises/exercise.sh check 1.1 1.2
  assert_failure 1
  assert_line "exercise 1.1: its solution patch lessons/01_device_query/exercises/solutions/ex1_1.patch no longer applies to its starter:"
  refute_output --partial "exercise 1.2:"
}

@test "make exercise-refresh carries a lesson edit next to an exercise's change into its patches" {
  copy_tree
  git init -q . && git add -A && git -c user.name=t -c user.email=t@t commit -qm base
  local dir=lessons/13_srq/exercises/13.1 line
  line=$(line_only_in "$dir") || fail "13.1's starter patch has no hunk of its own"
  sed -i "${line}s/\$/ \/\/ edited/" lessons/13_srq/lesson13.cpp
  run scripts/exercises/exercise.sh check 13.1
  assert_failure 1
  run make --no-print-directory -s exercise-refresh
  assert_success
  run scripts/exercises/exercise.sh check
  assert_success
  scripts/exercises/exercise.sh source 13.1 starter "$BATS_TEST_TMPDIR/starter.cpp"
  scripts/exercises/exercise.sh source 13.1 solution "$BATS_TEST_TMPDIR/solution.cpp"
  assert_equal "$(grep -c ' // edited$' "$BATS_TEST_TMPDIR/starter.cpp")" 1
  assert_equal "$(grep -c ' // edited$' "$BATS_TEST_TMPDIR/solution.cpp")" 1
}

@test "the learner's file is made once from its starter; a later make or lesson change leaves its edits alone" {
  copy_tree
  local file=lessons/05_rdma_write_imm/exercises/5.2/ex5_2.cpp
  assert_file_not_exists "$file"
  run make --no-print-directory -s exercise-files
  assert_success
  assert_line "exercise 5.2: made your file $file from lessons/05_rdma_write_imm/lesson5.cpp and lessons/05_rdma_write_imm/exercises/5.2/starter.patch"
  scripts/exercises/exercise.sh source 5.2 starter "$BATS_TEST_TMPDIR/starter.cpp"
  cmp "$file" "$BATS_TEST_TMPDIR/starter.cpp"
  echo '// my own work' >>"$file"
  echo '// a later lesson edit' >>lessons/05_rdma_write_imm/lesson5.cpp
  run make --no-print-directory -s exercise-files
  assert_success
  refute_output --partial "exercise 5.2"
  assert_equal "$(tail -n1 "$file")" "// my own work"
}

@test "the learner's files are ignored by git, the stored starters and patches are not" {
  run git check-ignore lessons/04_send_recv/exercises/4.2/ex4_2.cpp lessons/04_send_recv/exercises/4.2/ex4_2.cpp~
  assert_success
  run git check-ignore lessons/05_rdma_write_imm/exercises/5.2/starter.patch lessons/01_device_query/exercises/1.1/starter.cpp \
    lessons/04_send_recv/exercises/solutions/ex4_2.patch
  assert_failure
}

@test "make exercise-reset EX=N.M starts one over, keeping the old file as exN_M.cpp~; SOLUTIONS=1 puts the solution in it" {
  copy_tree
  local file=lessons/02_memory_registration/exercises/2.1/ex2_1.cpp
  make --no-print-directory -s exercise-files >/dev/null
  echo '// my own work' >>"$file"
  run make --no-print-directory -s exercise-reset EX=2.1
  assert_success
  assert_line "exercise 2.1: your old file is kept as $file~"
  cmp "$file" lessons/02_memory_registration/exercises/2.1/starter.cpp
  assert_equal "$(tail -n1 "$file~")" "// my own work"
  run make --no-print-directory -s exercise-reset EX=2.1 SOLUTIONS=1
  assert_success
  head -n1 "$file" | grep -q SPOILER || fail "$file is not the solution: $(head -n1 "$file")"
  run make --no-print-directory exercise-reset
  assert_failure
  assert_output --partial "make exercise-reset takes an exercise: make exercise-reset EX=4.2"
}

@test "make exercise-save EX=N.M stores an edited file back as the starter's patch, and the solution follows it" {
  copy_tree
  local file=lessons/13_srq/exercises/13.1/ex13_1.cpp
  make --no-print-directory -s exercise-files >/dev/null
  sed -i '3i // a maintainer'"'"'s new line' "$file"
  run make --no-print-directory -s exercise-save EX=13.1
  assert_success
  assert_output --partial "exercise 13.1: $file stored as the starter"
  run scripts/exercises/exercise.sh check
  assert_success
  rm "$file"
  make --no-print-directory -s exercise-files >/dev/null
  assert_equal "$(sed -n 3p "$file")" "// a maintainer's new line"
  scripts/exercises/exercise.sh source 13.1 solution "$BATS_TEST_TMPDIR/solution.cpp"
  assert_equal "$(grep -c "^// a maintainer's new line$" "$BATS_TEST_TMPDIR/solution.cpp")" 1
}

@test "make ex4.2 and make exercise EX=4.2 build that one exercise and no other" {
  local target
  for target in ex4.2 "exercise EX=4.2"; do
    # shellcheck disable=SC2086 # the target is two words on purpose
    run make --no-print-directory -n -B $target
    assert_success
    assert_output --partial "-o build/exercises/starter/ex4_2"
    refute_output --regexp 'build/exercises/(starter|solution)/ex([0-35-9]|4_1)'
  done
}

@test "every exercise README says where its file comes from, and its by-hand hint builds only that exercise" {
  local readme id
  for readme in lessons/*/exercises/[0-9]*.[0-9]*/README.md; do
    id=$(basename "$(dirname "$readme")")
    grep -qF "is made from" "$readme" || fail "$readme does not say where its file comes from"
    ! grep -qE 'make exercises\b' "$readme" || fail "$readme tells you to build every exercise (make exercises)"
    if grep -q 'build/exercises/starter/' "$readme"; then
      grep -qF "make ex$id" "$readme" || fail "$readme runs build/exercises/starter/ without 'make ex$id'"
    fi
  done
}
