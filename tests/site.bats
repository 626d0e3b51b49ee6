#!/usr/bin/env bats
# bats file_tags=lane:device
# tests/site.bats - make site: the workbook as a site (scripts/site/build.sh), built
# once for this file and opened in headless Chromium as a reader would
# (tests/helpers/site_browser.py, Debian's chromium, chromium-driver and
# python3-selenium), with every request the browser makes recorded: one
# that would leave this machine fails the test. Runs on the host, needs no
# RDMA device and no lab; about a minute in all (the build 10-15 s, the
# browser's visit of the diagram pages and the search the rest).

bats_require_minimum_version 1.5.0

setup_file() {
  cd "$BATS_TEST_DIRNAME/.." || return 1
  make --no-print-directory site >"$BATS_FILE_TMPDIR/build.log" 2>&1 || {
    cat "$BATS_FILE_TMPDIR/build.log" >&3
    return 1
  }
  # Debian's python3: python3-selenium is installed for it, not for another python3 on PATH.
  /usr/bin/python3 tests/helpers/site_browser.py build/site >"$BATS_FILE_TMPDIR/browser.txt" 2>"$BATS_FILE_TMPDIR/browser.err" || {
    cat "$BATS_FILE_TMPDIR/browser.err" >&3
    return 1
  }
}

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  bats_load_library bats-file
  cd "$BATS_TEST_DIRNAME/.." || return 1
  browser=$BATS_FILE_TMPDIR/browser.txt
}

# The lesson numbers of the pages in docs/, in order: 1 2 ... N.
lesson_numbers() {
  local f
  for f in docs/lesson[0-9]*-*.md; do
    f=${f#docs/lesson}
    echo "${f%%-*}"
  done | sort -n | paste -sd' '
}

@test "make site builds a page for README and every page of docs/, and every link, image and capture of the site resolves" {
  assert_file_exists build/site/index.html
  local f
  for f in docs/*.md; do
    assert_file_exists "build/site/${f%.md}.html"
  done
  run -0 python3 scripts/site/check_links.py build/site
  assert_output --regexp '^pages [0-9]+, links [0-9]+, external [0-9]+, broken 0$'
  # Each capture a page links to is in the site, the same bytes: downloadable from the page.
  run -0 grep -ohE '\]\(captures/[^)]+\.pcapng\)' docs/*.md
  local n=0 link
  while read -r link; do
    link=${link#](}
    link=${link%)}
    cmp "docs/$link" "build/site/docs/$link"
    n=$((n + 1))
  done <<<"$output"
  ((n >= 19))
  run -0 grep -c 'href="captures/lesson10-rnr.pcapng"' build/site/docs/lesson10-failures.html
}

@test "the link checker names a missing page, a missing anchor and a script loaded from the network" {
  cp -r build/site "$BATS_TEST_TMPDIR/site"
  local page=$BATS_TEST_TMPDIR/site/docs/concepts.html
  sed -i 's|</body>|<a href="no-such-page.html">x</a><a href="lesson4-send-recv.html#no-such-heading">y</a><script src="https://cdn.example/x.js"></script></body>|' "$page"
  run -1 python3 scripts/site/check_links.py "$BATS_TEST_TMPDIR/site"
  assert_line 'docs/concepts.html: missing file no-such-page.html'
  assert_line 'docs/concepts.html: missing anchor lesson4-send-recv.html#no-such-heading'
  assert_line 'docs/concepts.html: loads from the network https://cdn.example/x.js'
  assert_line --regexp 'broken 3$'
}

@test "the contents list the introduction, concepts, every lesson of docs/ in order, then the lab, Soft-RoCE, Wireshark, the rxe facts and the lab's internals" {
  run -0 grep '^contents: ' "$browser"
  local contents=${output#contents: }
  # The lessons as the browser showed them, by number.
  run -0 grep -oE 'Lesson [0-9]+:' <<<"$contents"
  assert_equal "$(tr -dc '0-9\n' <<<"$output" | paste -sd' ')" "$(lesson_numbers)"
  assert_equal "$(lesson_numbers | cut -d' ' -f1)" 1
  [[ $contents == "Introduction | Concepts | Lesson 1: "* ]]
  [[ $contents == *"Lesson $(lesson_numbers | awk '{ print $NF }'): "*" | The Soft-RoCE lab | Soft-RoCE | Seeing the wire | rxe by kernel | "* ]]
  [[ $contents == *" | rxe by kernel | The lab's internals"* ]]
}

@test "lesson 4's page shows its sequence diagram as SVG, not as source text" {
  run -0 grep -x 'page docs/lesson4-send-recv.html: diagrams 1 svg 1 error 0 source-shown 0' "$browser"
  run -0 grep -x 'diagram docs/lesson4-send-recv.html: sequence' "$browser"
}

@test "every Mermaid diagram of docs/ is drawn as SVG on its page" {
  local f n checked=0
  for f in docs/*.md; do
    n=$(grep -c '^```mermaid' "$f") || continue
    run -0 grep -x "page ${f%.md}.html: diagrams $n svg $n error 0 source-shown 0" "$browser"
    checked=$((checked + n))
  done
  ((checked >= 16))
}

@test "a search for RNR finds lessons 4 and 10" {
  run -0 grep '^search RNR: ' "$browser"
  assert_output --partial ' docs/lesson4-send-recv.html'
  assert_output --partial ' docs/lesson10-failures.html'
}

@test "no request leaves the machine: the recorder that every other address went to heard nothing" {
  run -0 grep -E '^(served|outside)' "$browser"
  assert_line 'outside 0'
  # The pages did load: from the site's own server on 127.0.0.1.
  run -0 grep -oE '^served [0-9]+$' "$browser"
  ((${output#served } >= 17))
}

@test "the contents are made from README's table and the pages there: a row without its page is left out, a page not in the table goes in by its number" {
  cp -r README.md docs scripts "$BATS_TEST_TMPDIR/"
  cd "$BATS_TEST_TMPDIR" || return 1
  echo '# Lesson 98: a page not yet in the table' >docs/lesson98-new.md
  # shellcheck disable=SC2016 # a table row's text: its backticks are Markdown
  sed -i 's#^| 15 | .*#&\n| 99 | no page yet | `./lesson99` | x | [lesson99](docs/lesson99-missing.md) |#' README.md
  run -0 grep -c 'lesson99-missing' README.md
  run -0 --separate-stderr python3 scripts/site/prepare.py out
  # shellcheck disable=SC2154 # $stderr is set by run --separate-stderr
  assert_equal "$stderr" "$(printf '%s\n' \
    "prepare.py: README's row for lesson 99 names docs/lesson99-missing.md, which is not there: left out of the contents" \
    "prepare.py: docs/lesson98-new.md is not in README's table yet: in the contents as lesson 98")"
  run -0 grep -E '^  - "(Lesson (1|4|15|98):|The Soft-RoCE lab)' out/mkdocs.yml
  assert_equal "$(cut -d: -f1 <<<"$output" | paste -sd,)" '  - "Lesson 1,  - "Lesson 4,  - "Lesson 15,  - "Lesson 98,  - "The Soft-RoCE lab"'
  assert_line '  - "Lesson 98: a page not yet in the table": "docs/lesson98-new.md"'
  run -1 grep -c lesson99 out/mkdocs.yml
  assert_file_exists out/pages/docs/lesson98-new.md
}

@test "a cached Mermaid bundle that does not match its pinned SHA-512 is never used: it is fetched again" {
  local cache="$BATS_TEST_TMPDIR/cache/rdma-workbook/site"
  mkdir -p "$cache" "$BATS_TEST_TMPDIR/bin"
  echo 'alert("not mermaid")' >"$cache/mermaid-12.3.0.min.js"
  # An npm that cannot reach the registry: the fetch fails, and the site is
  # not built with the changed copy.
  printf '#!/bin/sh\nexit 1\n' >"$BATS_TEST_TMPDIR/bin/npm"
  chmod +x "$BATS_TEST_TMPDIR/bin/npm"
  XDG_CACHE_HOME="$BATS_TEST_TMPDIR/cache" PATH="$BATS_TEST_TMPDIR/bin:$PATH" run -1 --separate-stderr scripts/site/build.sh
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "${stderr_lines[0]}" "site/build.sh: $cache/mermaid-12.3.0.min.js does not match the SHA-512 pinned in scripts/site/build.sh: fetching it again"
  assert_equal "${stderr_lines[1]}" "site/build.sh: npm pack mermaid@12.3.0 failed: is the npm registry reachable?"
  assert_file_not_exists "$cache/mermaid-12.3.0.min.js"
}
