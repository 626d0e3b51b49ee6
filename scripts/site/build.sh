#!/usr/bin/env bash
# site/build.sh - build the workbook as a static site: `make site`.
#
#   scripts/site/build.sh                 build build/site/ (then open build/site/index.html,
#                                         or: cd build/site && python3 -m http.server)
#   scripts/site/build.sh --screenshots   build, then take docs/img/site/lesson4.png and
#                                         docs/img/site/search.png again in headless Chromium
#   scripts/site/build.sh -h              this text
#
# The pages are the Markdown of README.md and docs/, unchanged: GitHub shows
# the same files. scripts/site/prepare.py lays them out in build/site-src/
# with the contents in reading order, Debian's mkdocs and mkdocs-material
# build them with mkdocs' own search, and scripts/site/check_links.py
# checks every link, image and download of the result.
#
# Offline: no page loads anything from the network. Fonts are the system's
# (material's font: false), the search index is a file of the site, and
# Mermaid, which Debian does not package, comes from the npm registry at
# the version pinned below, checked against its SHA-512, once: it is kept in
# ${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/site/ and copied into
# build/site/assets/mermaid/ (5 MiB: not committed).
set -euo pipefail
cd "$(dirname "$0")/../.."

MERMAID_VERSION=12.3.0
# sha512sum of mermaid-12.3.0.tgz as the registry serves it (npm's integrity field, in hex),
# and of package/dist/mermaid.min.js in it, the one file the site takes: the
# cached copy is checked against it on every use.
MERMAID_JS_SHA512=09a127e8359827530cd261404fd9ef273777cf980fb174ccef0ce9adbf30c7ad795b34e74d2ac6adb2a4654a9ed6cdb89695b6ed7e07948ad216f426ff292a64
MERMAID_SHA512=e35d774dd5de2c0b0caee27bf4ea452f93bcf8b4c55e142a676eb4ac5ded8149a2340b519b852e99ed3823eeb93d137ac99ebd2787fcad56165bccd193ae5463

usage() { sed -n '2,9s/^# \{0,1\}//p' "$0"; }

shots=""
case ${1:-} in
  "") ;;
  --screenshots) shots=1 ;;
  -h | --help)
    usage
    exit 0
    ;;
  *)
    echo "site/build.sh: unknown argument '$1' (scripts/site/build.sh -h)" >&2
    exit 2
    ;;
esac

for tool in mkdocs npm; do
  command -v "$tool" >/dev/null || {
    echo "site/build.sh: $tool is missing: scripts/install_deps.sh site installs it (make site does)" >&2
    exit 1
  }
done

# Mermaid's browser bundle, fetched once into the cache (flock: one fetch at
# a time), and checked on every use: a cached copy that changed is fetched
# again, never copied into the site.
cache=${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/site
mermaid_js=$cache/mermaid-$MERMAID_VERSION.min.js
# mermaid_ok FILE: FILE is the pinned mermaid.min.js.
mermaid_ok() {
  echo "$MERMAID_JS_SHA512  $1" | sha512sum -c --status
}
fetch_mermaid() {
  local tmp tgz
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064 # $tmp is meant to be expanded now
  trap "rm -rf '$tmp'" RETURN
  echo "site/build.sh: fetching mermaid@$MERMAID_VERSION from the npm registry (once; kept in $cache)"
  if ! (cd "$tmp" && npm pack --silent "mermaid@$MERMAID_VERSION" >/dev/null); then
    echo "site/build.sh: npm pack mermaid@$MERMAID_VERSION failed: is the npm registry reachable?" >&2
    return 1
  fi
  tgz=$tmp/mermaid-$MERMAID_VERSION.tgz
  if ! echo "$MERMAID_SHA512  $tgz" | sha512sum -c --status; then
    echo "site/build.sh: mermaid-$MERMAID_VERSION.tgz does not match the SHA-512 pinned in scripts/site/build.sh" >&2
    return 1
  fi
  tar -xzf "$tgz" -C "$tmp" package/dist/mermaid.min.js package/LICENSE
  mermaid_ok "$tmp/package/dist/mermaid.min.js" || {
    echo "site/build.sh: mermaid.min.js in the package does not match the SHA-512 pinned in scripts/site/build.sh" >&2
    return 1
  }
  cp "$tmp/package/LICENSE" "$cache/mermaid-$MERMAID_VERSION.LICENSE"
  mv "$tmp/package/dist/mermaid.min.js" "$mermaid_js"
}
mkdir -p "$cache"
(
  flock 9
  if [[ -e $mermaid_js ]] && ! mermaid_ok "$mermaid_js"; then
    echo "site/build.sh: $mermaid_js does not match the SHA-512 pinned in scripts/site/build.sh: fetching it again" >&2
    rm -f "$mermaid_js"
  fi
  [[ -s $mermaid_js ]] || fetch_mermaid
) 9>"$cache/.lock"

src=build/site-src
python3 scripts/site/prepare.py "$src"
mkdir -p "$src/pages/assets/site" "$src/pages/assets/mermaid"
cp scripts/site/mermaid-init.js scripts/site/site.css "$src/pages/assets/site/"
cp "$mermaid_js" "$src/pages/assets/mermaid/mermaid.min.js"
cp "$cache/mermaid-$MERMAID_VERSION.LICENSE" "$src/pages/assets/mermaid/LICENSE"

rm -rf build/site
# mkdocs' INFO lines name every page that is not in the contents (the
# exercises): only its warnings are shown.
if ! mkdocs build -q -f "$src/mkdocs.yml"; then
  echo "site/build.sh: mkdocs build failed" >&2
  exit 1
fi

# Broken links are reported, not fatal: a page being written may link to
# one that is not there yet (tests/site.bats wants none).
python3 scripts/site/check_links.py build/site || true
echo "site/build.sh: build/site/index.html ($(find build/site -name '*.html' | wc -l) pages); search works over http: cd build/site && python3 -m http.server"

if [[ -n $shots ]]; then
  mkdir -p docs/img/site
  # Debian's python3, for which python3-selenium is installed.
  /usr/bin/python3 tests/helpers/site_browser.py build/site --screenshots docs/img/site
fi
