#!/usr/bin/env bats
# bats file_tags=lab
# tests/grade.bats - `make grade` proves every grader right, both ways: the
# untouched starters FAIL with what was expected, what happened and a hint;
# the reference solutions PASS. Runs on the host; scripts/exercises/grade.sh builds the
# exercises here and grades them on real rxe (one lab guest per run when this
# host has no RDMA device).

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  bats_load_library bats-file
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

# Every exercise's number, from the folders beside the lessons: "1.1 1.2 ...".
exercises() {
  local d
  for d in lessons/[0-9][0-9]_*/exercises/[0-9]*.[0-9]*/; do basename "$d"; done | sort -t. -k1,1n -k2,2n
}

# Assert that $output has, for each exercise, exactly one "$1 N.M ..." line,
# or one "SKIP N.M ..." line for an exercise of a lesson whose run.conf says
# what its device needs (lesson 16: ODP, which the default kernel's rxe lacks).
assert_one_line_per_exercise() {
  local n
  for n in $(exercises); do
    [[ $(grep -cE "^($1|SKIP) ${n//./\\.} " <<<"$output") == 1 ]] || fail "no single '$1 $n' line in:"$'\n'"$output"
    if grep -qE "^SKIP ${n//./\\.} " <<<"$output"; then
      grep -q '^needs=' lessons/*/exercises/"$n"/../../run.conf || fail "$n was skipped, but its lesson needs nothing"
    fi
  done
}

# "" or ", K skipped (...)": what grade.sh's last line adds for skipped exercises.
skipped_suffix() {
  local k
  k=$(grep -c '^SKIP ' <<<"$output")
  ((k == 0)) || echo ", $k skipped (their lesson needs what this device lacks)"
}

@test "every lesson has at least two graded exercises, each with a task, a starter, a grader and a solution" {
  local lesson n dir count starter="$BATS_TEST_TMPDIR/starter.cpp" solution="$BATS_TEST_TMPDIR/solution.cpp"
  for lesson in lessons/[0-9][0-9]_*/; do
    count=0
    for dir in "$lesson"exercises/[0-9]*.[0-9]*/; do
      [[ -d $dir ]] || continue
      n=$(basename "$dir")
      count=$((count + 1))
      assert_file_exists "$dir/README.md"
      [[ -f $dir/starter.patch || -f $dir/starter.cpp ]] || fail "$dir has neither starter.patch nor starter.cpp"
      assert_file_exists "$dir/grade.bash"
      assert_file_exists "${lesson}exercises/solutions/ex${n/./_}.patch"
      scripts/exercises/exercise.sh source "$n" starter "$starter" || fail "the starter of $n cannot be made"
      scripts/exercises/exercise.sh source "$n" solution "$solution" || fail "the solution of $n cannot be made"
      grep -q "TODO($n)" "$starter" || fail "the starter of $n has no TODO($n)"
      head -n1 "$dir/README.md" | grep -qE "^# $n .+ \((extend|break and diagnose|measure)\)$" ||
        fail "$dir/README.md's first line is not '# $n Title (kind)'"
      head -n1 "$solution" | grep -q SPOILER || fail "the solution of $n does not say it is a spoiler"
      ! grep -n "TODO" "$solution" || fail "the solution of $n still has a TODO marker (above)"
    done
    ((count >= 2)) || fail "$lesson has $count graded exercises; every lesson needs at least two"
  done
}

@test "each lesson page ends with its graded exercises, linking every one" {
  local lesson num page dir n
  for lesson in lessons/[0-9][0-9]_*/; do
    num=$(basename "$lesson" | sed -E 's/^0*([0-9]+)_.*/\1/')
    page=$(compgen -G "docs/lesson$num-*.md") || fail "lesson $num has no page in docs/"
    grep -q '^## Graded exercises$' "$page" || fail "$page has no '## Graded exercises' section"
    for dir in "$lesson"exercises/[0-9]*.[0-9]*/; do
      n=$(basename "$dir")
      grep -qF "](../${dir}README.md)" "$page" || fail "$page does not link exercise $n (../${dir}README.md)"
    done
  done
}

@test "make grade on the untouched starters: every exercise FAILs, saying what was expected, what happened and a hint" {
  run make --no-print-directory grade
  assert_failure
  local m
  m=$(($(exercises | wc -l) - $(grep -c '^SKIP ' <<<"$output")))
  assert_one_line_per_exercise FAIL
  refute_output --regexp '^PASS '
  assert_equal "$(grep -c '^  expected: ' <<<"$output")" "$m"
  assert_equal "$(grep -c '^  what happened: ' <<<"$output")" "$m"
  assert_equal "$(grep -c '^  hint: ' <<<"$output")" "$m"
  assert_line "grade: 0 of $m exercises pass$(skipped_suffix)"
}

@test "make grade SOLUTIONS=1: every reference solution PASSes, and make exits 0" {
  run make --no-print-directory grade SOLUTIONS=1
  assert_success
  local m
  m=$(($(exercises | wc -l) - $(grep -c '^SKIP ' <<<"$output")))
  assert_one_line_per_exercise PASS
  refute_output --regexp '^FAIL '
  assert_equal "${lines[-1]}" "grade: $m of $m exercises pass$(skipped_suffix)"
}

@test "make grade EX=1.1 grades that exercise alone" {
  run make --no-print-directory grade EX=1.1 SOLUTIONS=1
  assert_success
  assert_line --regexp '^PASS 1\.1 '
  assert_equal "$(grep -cE '^(PASS|FAIL) ' <<<"$output")" 1
  assert_equal "${lines[-1]}" "grade: 1 of 1 exercises pass"
}

@test "an unknown exercise is refused with the list of real ones, before anything is built or booted" {
  run scripts/exercises/grade.sh 9.99
  assert_equal "$status" 2
  assert_output --partial "grade: there is no exercise 9.99; there are: 1.1 1.2 "
  refute_output --partial "Soft-RoCE lab"
  run scripts/exercises/grade.sh four
  assert_equal "$status" 2
  assert_output "grade: EX must look like 4.2, not 'four'"
}

@test "a starter that no longer compiles is a FAIL with the compiler's first error, and nothing boots" {
  # A copy of the tree, so that the real starter stays untouched.
  local copy="$BATS_TEST_TMPDIR/tree"
  mkdir -p "$copy"
  git ls-files -z | xargs -0 cp --parents -t "$copy"
  cd "$copy" || return 1
  scripts/exercises/exercise.sh files 1.1
  echo 'this is not C++;' >>lessons/01_device_query/exercises/1.1/ex1_1.cpp
  run scripts/exercises/grade.sh 1.1
  assert_failure 1
  assert_line "FAIL 1.1 Name every capability flag (extend)"
  assert_line "  expected: lessons/01_device_query/exercises/1.1/ex1_1.cpp to compile"
  assert_line --regexp "^  what happened: the compiler's first error: .*ex1_1\.cpp:[0-9]+:[0-9]+: error: "
  refute_output --partial "Soft-RoCE lab"
  assert_equal "${lines[-1]}" "grade: 0 of 1 exercises pass"
}

@test "make grade EX and SOLUTIONS are text, never shell or make syntax" {
  run make grade EX="x; touch $BATS_TEST_TMPDIR/pwn"
  assert_failure
  assert_output --partial "is not one plain word"
  assert_file_not_exists "$BATS_TEST_TMPDIR/pwn"
  run make -n grade SOLUTIONS="\$(shell touch $BATS_TEST_TMPDIR/pwn2)"
  assert_failure
  assert_output --partial "is not one plain word"
  assert_file_not_exists "$BATS_TEST_TMPDIR/pwn2"
}

# A fake exercise 9.9 in $BATS_TEST_TMPDIR/ex, whose grader prints $1 and
# fails; its LIST line in $BATS_TEST_TMPDIR/list.
fake_exercise() {
  mkdir -p "$BATS_TEST_TMPDIR/ex"
  echo "# 9.9 a fake exercise" >"$BATS_TEST_TMPDIR/ex/README.md"
  printf 'ex_grade() { printf %%s %q; return 1; }\n' "$1" >"$BATS_TEST_TMPDIR/ex/grade.bash"
  printf '9.9\t%s\t/bin/true\n' "$BATS_TEST_TMPDIR/ex" >"$BATS_TEST_TMPDIR/list"
}

@test "the grader's report shows the control bytes a program printed as ^X, never raw" {
  fake_exercise $'clear\e[2J\rPASS 9.9 forged\x9b'
  run -0 scripts/exercises/grade_run.sh "$BATS_TEST_TMPDIR/list"
  assert_line "FAIL 9.9 a fake exercise"
  assert_line '  clear^[[2J^MPASS 9.9 forged'$'M-^['
  [[ $output != *$'\e'* && $output != *$'\r'* ]] || fail "a raw control byte reached the report"
}

@test "the grader stops when mktemp cannot make its report file, instead of writing nowhere" {
  fake_exercise "whatever"
  TMPDIR=$BATS_TEST_TMPDIR/no-such-folder run -1 scripts/exercises/grade_run.sh "$BATS_TEST_TMPDIR/list"
  assert_output --partial "mktemp"
  refute_line --partial "FAIL 9.9"
}
