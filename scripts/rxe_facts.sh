#!/usr/bin/env bash
# rxe_facts.sh - measure, on each kernel the lab boots, the rxe behaviours
# the lessons show or depend on, and write docs/rxe.md from what was seen.
#
#   scripts/rxe_facts.sh [KERNEL...]     default: bookworm trixie trixie-backports
#
# For each kernel it brings up a lab of its own (LAB_KERNEL=KERNEL, a
# private LAB_UP_DIR: a lab you have up is not touched), runs there
#   ./lesson15_probe                           the capability matrix
#   build/tests/rxe_facts retry7               a SEND with retry_cnt 7 to nobody
#   build/tests/rxe_facts rnr --retry-cnt 6    an RNR wait (rnr_retry 7, retry_cnt 6)
# keeps each kernel's raw output in build/rxe-facts/KERNEL.txt and writes
# docs/rxe.md from all of them (a kernel not measured this time keeps the
# raw output it had). Takes about 2 minutes per kernel under TCG.
set -euo pipefail
cd "$(dirname "$0")/.."

kernels=("$@")
[[ ${#kernels[@]} -gt 0 ]] || kernels=(bookworm trixie trixie-backports)
out=build/rxe-facts
mkdir -p "$out" build/tests
make -s lesson15_probe build/libworkbook.a
g++ -std=c++20 -O2 -Wall -Wextra -Werror -Wno-missing-field-initializers -Icommon \
  tests/helpers/rxe_facts.cpp build/libworkbook.a -libverbs -lrdmacm -o build/tests/rxe_facts

lab_dir=$(mktemp -d /tmp/rxe-facts.XXXXXX)
trap 'LAB_UP_DIR=$lab_dir/lab scripts/lab.sh down >/dev/null 2>&1 || true; rm -rf "$lab_dir" "$lab_dir/lab.lock"' EXIT
for kernel in "${kernels[@]}"; do
  echo "rxe_facts: $kernel" >&2
  export LAB_KERNEL=$kernel LAB_UP_DIR=$lab_dir/lab
  scripts/lab.sh up
  {
    echo "== kernel"
    scripts/lab.sh exec -- uname -r
    echo "== probe"
    scripts/lab.sh exec -- ./lesson15_probe || true
    echo "== retry7"
    scripts/lab.sh exec -- build/tests/rxe_facts retry7 --wait 15 || true
    echo "== rnr"
    scripts/lab.sh exec -- build/tests/rxe_facts rnr --retry-cnt 6 --rnr-retry 7 --wait 8 || true
  } >"$out/$kernel.txt.tmp" 2>&1
  mv "$out/$kernel.txt.tmp" "$out/$kernel.txt"
  scripts/lab.sh down
done
unset LAB_KERNEL LAB_UP_DIR
/usr/bin/python3 -I scripts/rxe_facts_doc.py "$out" >docs/rxe.md
echo "rxe_facts: wrote docs/rxe.md" >&2
