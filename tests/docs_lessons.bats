#!/usr/bin/env bats
# tests/docs_lessons.bats - the pages know every lesson there is: the number
# of lessons, their list and the ranges the pages state (README.md,
# docs/concepts.md, docs/lab.md, docs/wireshark.md, the site's contents) are
# checked against lessons/, never against a number typed here. A new
# lessons/NN_topic/ folder fails these tests until the pages take it in.
# Runs on the host.

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
  pages=(README.md docs/concepts.md docs/lab.md docs/wireshark.md)
}

# lessons: the lesson numbers, one a line, in order (lessons/NN_topic/).
lessons() {
  local d
  for d in lessons/[0-9][0-9]_*/; do
    d=${d#lessons/}
    echo "$((10#${d%%_*}))"
  done
}

# two_process: the lessons whose run.conf names a client (a server and a client).
two_process() {
  local n
  for n in $(lessons); do
    grep -q '^client=.' lessons/"$(printf %02d "$n")"_*/run.conf 2>/dev/null && echo "$n"
  done
  return 0
}

# page_of N: lesson N's page, docs/lessonN-*.md.
page_of() { compgen -G "docs/lesson$1-*.md" | head -1; }

@test "every lesson folder has its page in docs/" {
  local n
  for n in $(lessons); do
    [[ -n $(page_of "$n") ]] || fail "lessons/ has lesson $n, docs/ has no lesson$n-*.md"
  done
}

@test "README's table has a row for every lesson, in order, each linking its page" {
  run -0 sed -n 's/^| \([0-9][0-9]*\) | .*](\(docs\/lesson[0-9]*-[^)#]*\.md\)) |$/\1 \2/p' README.md
  local expected="" n
  for n in $(lessons); do expected+="$n $(page_of "$n")"$'\n'; done
  assert_output "${expected%$'\n'}"
}

@test "concepts.md's list of the lessons names every lesson, in order, each linking its page" {
  # shellcheck disable=SC2016 # awk's own $1 and $0
  run -0 awk '/^## The lessons/ { on = 1; next } /^## / { on = 0 } on && /^[0-9]+\. \[/ { sub(/\.$/, "", $1); match($0, /\]\([^)]*\)/); print $1, "docs/" substr($0, RSTART + 2, RLENGTH - 3) }' docs/concepts.md
  local expected="" n
  for n in $(lessons); do expected+="$n $(page_of "$n")"$'\n'; done
  assert_output "${expected%$'\n'}"
}

@test "the site's contents list every lesson, in order, after the introduction and the concepts" {
  run -0 python3 scripts/site/prepare.py "$BATS_TEST_TMPDIR/site"
  run -0 sed -n 's/^ *- .*: "\(docs\/lesson[0-9]*-.*\.md\)"$/\1/p' "$BATS_TEST_TMPDIR/site/mkdocs.yml"
  local expected="" n
  for n in $(lessons); do expected+="$(page_of "$n")"$'\n'; done
  assert_output "${expected%$'\n'}"
}

# counts FILE...: "FILE: N" for every count of lessons the pages state
# ("seventeen numbered lessons", "all 15 lessons"), N as a number.
counts() {
  perl -ne '
    BEGIN {
      my @w = qw(zero one two three four five six seven eight nine ten eleven twelve
        thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty);
      %n = map { $w[$_] => $_ } 0 .. $#w;
      $n{"twenty-$w[$_]"} = 20 + $_ for 1 .. 9;
    }
    my $word = join "|", sort { length $b <=> length $a } keys %n;
    while (/\b(\d+|$word)\s+(?:numbered\s+|graded\s+)?lessons\b/gi) {
      my $v = lc $1;
      print "$ARGV: ", ($v =~ /^\d+$/ ? $v : $n{$v}), "\n";
    }' "$@"
}

@test "a count of lessons the pages state is the number of lesson folders" {
  local total line
  total=$(lessons | wc -l)
  run -0 counts "${pages[@]}"
  while IFS= read -r line; do
    [[ -z $line || ${line##*: } == "$total" ]] || fail "${line%%: *} says ${line##*: } lessons; lessons/ has $total"
  done <<<"$output"
}

@test "the count check reads number words and digits" {
  printf 'Seventeen numbered lessons here, and all 15 lessons there.\n' >"$BATS_TEST_TMPDIR/p.md"
  run -0 counts "$BATS_TEST_TMPDIR/p.md"
  assert_line "$BATS_TEST_TMPDIR/p.md: 17"
  assert_line "$BATS_TEST_TMPDIR/p.md: 15"
}

@test "a range of lessons the pages state ends at a lesson that exists, and a range of the two-process lessons ends at the last of them" {
  local last last2 line page a b
  last=$(lessons | tail -1) last2=$(two_process | tail -1)
  # "lessons 4 to 8", "lessons 10-17", "lesson 4 to 15": PAGE:LINE: A B
  # shellcheck disable=SC2016 # perl's own $ARGV, $. and $1
  run -0 perl -ne 'while (/\blessons?\s+(\d+)\s*(?:to|-|–)\s*(\d+)\b/gi) { print "$ARGV:$.: $1 $2\n" } close ARGV if eof' "${pages[@]}"
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    b=${line##* } page=${line%%: *}
    ((b <= last)) || fail "$page names lesson $b; the last lesson is $last"
  done <<<"$output"
  # A sentence about the two-process lessons that gives a range: "the
  # two-process lessons, 4 to 17".
  run grep -n -o -E 'two-process lessons[^.]{0,40}[0-9]+ *(to|-) *[0-9]+' "${pages[@]}"
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    b=${line##*[^0-9]} a=${line%%:*}
    ((b == last2)) || fail "$a: '$line' ends at $b; the last two-process lesson is $last2"
  done <<<"$output"
}

@test "wireshark.md lists a shipped capture for every two-process lesson and for every scenario its run.conf captures" {
  local n conf s scenarios
  for n in $(two_process); do
    conf=$(compgen -G "lessons/$(printf %02d "$n")_*/run.conf")
    if grep -q '^captures=' "$conf"; then
      read -ra scenarios < <(sed -n 's/^captures=//p' "$conf")
      for s in "${scenarios[@]}"; do
        grep -q "](captures/lesson$n-$s.pcapng)" docs/wireshark.md || fail "wireshark.md does not list captures/lesson$n-$s.pcapng"
        [[ -f docs/captures/lesson$n-$s.pcapng ]] || fail "docs/captures/lesson$n-$s.pcapng is not shipped"
      done
    else
      grep -q "](captures/lesson$n.pcapng)" docs/wireshark.md || fail "wireshark.md does not list captures/lesson$n.pcapng"
      [[ -f docs/captures/lesson$n.pcapng ]] || fail "docs/captures/lesson$n.pcapng is not shipped"
    fi
  done
}

@test "every two-process lesson has a Wireshark picture that screenshots.sh takes and its page shows" {
  local n item pic
  for n in $(two_process); do
    item=$(awk -v n="$n" '$1 == n || index($1, n ":") == 1 { print $1; exit }' <(sed -n "/^shots='/,/^'/p" scripts/maintainers/screenshots.sh))
    [[ -n $item ]] || fail "scripts/maintainers/screenshots.sh's table has no picture of lesson $n"
    pic=img/lesson${item/:/-}-wireshark.png
    [[ -f docs/$pic ]] || fail "docs/$pic is missing: scripts/maintainers/screenshots.sh $item"
    grep -q "]($pic)" "$(page_of "$n")" || fail "$(page_of "$n") does not show $pic"
  done
}
