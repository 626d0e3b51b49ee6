#!/usr/bin/env bats
# tests/docs.bats - the pages hold together: every link between README.md and
# docs/*.md lands on a file and a heading that exist, every scripts/ path
# that a file names is there (a renamed script leaves no old name behind),
# and each of the facts issue 25 settled is told the one way the lab
# measured it. Runs on the host.

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

@test "every link between the pages (README and docs/) lands on a page and a heading that exist" {
  run python3 tests/helpers/doc_links.py
  assert_success
  assert_output "broken 0"
}

@test "a broken anchor is reported, naming the page and the link" {
  cp -r README.md docs "$BATS_TEST_TMPDIR/"
  mkdir -p "$BATS_TEST_TMPDIR/tests/helpers"
  cp tests/helpers/doc_links.py "$BATS_TEST_TMPDIR/tests/helpers/"
  echo 'See [nowhere](lesson3-qp-state-machine.md#no-such-heading).' >>"$BATS_TEST_TMPDIR/docs/concepts.md"
  cd "$BATS_TEST_TMPDIR" || return 1
  run python3 tests/helpers/doc_links.py
  assert_failure 1
  assert_line "docs/concepts.md: missing anchor lesson3-qp-state-machine.md#no-such-heading"
  assert_line "broken 1"
}

# named_scripts: "FILE: PATH" for every scripts/...(.sh|.bash|.py) path that
# a file in git (tracked, or new and not ignored) names.
named_scripts() {
  # shellcheck disable=SC2016 # perl's own $ARGV and $1
  git ls-files -z --cached --others --exclude-standard |
    xargs -0 perl -ne 'print "$ARGV: $1\n" while m{(?<![\w./-])(scripts/[\w./-]*\w\.(?:sh|bash|py))(?![\w-])}g' 2>/dev/null
}

@test "every scripts/ path named in the Makefile, scripts, tests, docs and lessons exists" {
  local line file path
  run -0 named_scripts
  assert_line --partial ": scripts/setup_rxe.sh"
  while IFS= read -r line; do
    file=${line%%: *} path=${line#*: }
    [[ -e $path ]] || fail "$file names $path, which does not exist"
  done <<<"$output"
}

@test "no page says that capture works only for lessons 4 to 10, or that rxe gained ODP in 6.14" {
  run grep -n -e '4 *to 10 today' -e 'ODP[^.]*6\.14' -e '6\.14[^.]*ODP' README.md docs/*.md
  assert_failure 1
}

@test "the status-12 rows that name the path MTU say it succeeds on rxe within one host and link to lesson 10's measurement" {
  # The rows of lessons 3, 4, 6 and 8 that name the MTU under status 12 all link to lesson 10's measurement.
  local f
  for f in docs/lesson3-qp-state-machine.md docs/lesson4-send-recv.md docs/lesson6-rdma-read.md docs/lesson8-event-driven-cq.md; do
    run grep -n 'retry counter exceeded (12' "$f"
    assert_success
    if grep -qi 'mtu' <<<"$output"; then
      assert_output --partial 'lesson10-failures.md#mtu-a-path-mtu-larger-than-the-link'
      assert_output --partial 'within one host'
    fi
  done
}

@test "every lab one-liner that starts a lesson in the background ends with && wait, so its exit status is the lesson's" {
  # README's rule: the client's status when it fails, the server's otherwise.
  # A bare `wait` returns 0 and `; wait $!` loses the client's failure. A
  # one-liner may go on to a second line (lesson 13's), so each is read with
  # the line after it.
  run awk '/lab\.sh run -- bash [^\/]*-c .*&/ { l = $0; getline n; if ((l n) !~ /&& wait/) print FILENAME ":" FNR - 1 ": " l }' README.md docs/*.md
  assert_success
  assert_output ''
}

@test "every lab one-liner that waits for \$! quotes its command in single quotes, so that the guest's shell expands it, not the host's" {
  # In double quotes the host's shell would put its own $! (empty, or a
  # host job) into the command before the guest ever saw it.
  run grep -n 'lab\.sh run -- bash [^"]*-c "[^"]*\$!' README.md docs/*.md
  assert_failure 1
  assert_output ''
}

@test "no file of the tree holds a merge's conflict markers" {
  # A conflict resolved in some files and committed in others leaves its
  # markers in a page, where nothing else would notice them.
  run git grep -nE '^(<<<<<<< |>>>>>>> )'
  assert_failure 1
  assert_output ''
}
