#!/usr/bin/env bash
# lab.sh: the workbook's Soft-RoCE lab, for hosts whose kernel has no RDMA.
#
# Boots a throw-away qemu guest running Debian's stock kernel (which has
# rdma_rxe), with the host's root shared read-only over 9p, so that lessons
# and tests built on the host run unchanged inside, against a real rxe0.
# See docs/lab.md.
#
# Usage:
#   scripts/lab.sh run [--timeout SECS] -- CMD [ARGS...]
#   scripts/lab.sh shell
#   scripts/lab.sh pair [--pcap FILE] [--timeout SECS] [--ready TEXT] --a 'CMD' --b 'CMD'
#                       (and [--netem-a SPEC] [--netem-b SPEC]: a lossy cable)
#   scripts/lab.sh fetch
#   scripts/lab.sh up [--pair]
#   scripts/lab.sh exec [--timeout SECS] [--up] [--guest a|b] -- CMD [ARGS...]
#   scripts/lab.sh status [--pair]
#   scripts/lab.sh down [--pair]
#   scripts/lab.sh xfer
#   scripts/lab.sh -h
#
#   run    boot a guest (no NIC; rxe0 on dummy0 = 192.0.2.1/24), run CMD there
#          with cwd = the current folder if inside the checkout, else the
#          checkout's top; stream its stdout/stderr; exit with its status.
#          Default timeout 600 s.
#   shell  the same guest with an interactive bash on this terminal
#          (exit or Ctrl-D powers it off; Ctrl-A X kills it).
#   pair   two guests, a (192.0.2.1) and b (192.0.2.2), joined by a virtual
#          cable, rxe0 on eth0 in each; b starts its command once a has
#          started its own, or with --ready TEXT once a has printed a line
#          containing TEXT (its server listens). Output lines are prefixed
#          "[a] " / "[b] ".
#          --pcap FILE writes every frame on the cable to FILE.
#          --netem-a SPEC (or LAB_NETEM_A; --netem-b, LAB_NETEM_B for b)
#          impairs a's egress on the cable for the run: tc qdisc replace dev
#          eth0 root netem SPEC in the guest, e.g. 'loss 1%', 'delay 10ms
#          reorder 25%' (tc-netem(8)); removed when the command ends.
#          Exit status: a's if non-zero, else b's. Default timeout 600 s.
#   fetch  download and unpack the kernel, build the initramfs (run, shell
#          and pair do this on demand). Cache:
#          ${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/lab/
#   up     boot a guest that stays up (rxe0 on dummy0 = 192.0.2.1/24, as run's)
#          and return once it is ready; one per checkout. Already up: says
#          so and succeeds. It stops by itself after LAB_IDLE seconds with
#          no command running (default 1800), or with down.
#   exec   run CMD in the lab that is up, with cwd as for run; its stdout and
#          stderr kept apart, its exit status passed through; several at
#          once (a server in the background and its client). A signal to
#          exec reaches CMD. Default timeout 600 s: then CMD is killed in
#          the guest and exec exits 124. --up: with no lab up, bring one up
#          for CMD alone and take it down after. Exit 125 when no lab is up
#          or the guest died (it says which).
#   status say whether a lab is up (exit 0) or not (exit 3), and why not.
#   down   stop the lab; no qemu process is left. Nothing up: succeeds.
#   --pair with up, status, down: the two guests of pair, staying up, in
#          the folder LAB_PAIR_DIR names; exec --guest a|b runs in one of
#          them, and pair runs its commands there (no boot) while they are up
#          (when LAB_KERNEL and LAB_CPUS, if set, match them).
#   xfer   print the folder the lab's guest may write, seen at the same path
#          on both sides (tests/run.sh puts Bats' TMPDIR there).
#
# Inside the guest: LAB=1, PATH, TERM, HOME=/tmp/home (a tmpfs), and in pair
# mode LAB_ROLE (a|b), LAB_ADDR and LAB_PEER_ADDR; plus every variable named
# in LAB_ENV (space-separated names), e.g. LAB_ENV="BATS_LIB_PATH CFLAGS".
#
# LAB_KERNEL=bookworm|trixie|trixie-backports: the guest's Debian kernel,
# for every command (default: the host's own suite; bookworm where the host
# is none of these). Each is fetched once (a suite other than the host's
# through apt lists of its own in the cache) and works offline after.
# Last fetched: bookworm 6.1.0-57, trixie 6.12.118, trixie-backports 7.3.4.
# A lab that is up keeps its kernel: up or exec with another LAB_KERNEL
# refuses (exit 2) until down.
#
# Environment: LAB_CPUS sets the guest's vCPUs (default 2 for up, capped
# at this host's cores, 1 for run, shell and pair); LAB_IDLE (seconds) the
# idle stop of up; LAB_UP_DIR the folder of the lab that stays up (default:
# one per checkout in the cache). LAB_ACCEL=tcg|kvm forces the accelerator (default: kvm only if
# a probe boot shows it works here, remembered in the cache). LAB_KEEP=1
# keeps the per-run folder (console log) in $TMPDIR. LAB_KERNEL_ARGS adds to
# the guest kernel's command line (e.g. loglevel=7 to watch it boot).
# LAB_CPUS=N gives each guest N vCPUs, 1 to this host's cores (default 1:
# the fastest boot); lesson 11's runs take 2, so that a busy poller does not
# hold the only vCPU that rxe's work and its peer need (docs/lab.md).
#
# Exit status: CMD's own; 2 misuse; 124 timeout; 125 the lab itself failed.

# The parts, one job each, sourced below from scripts/lab/:
#   apt.sh        which Debian kernel, and its download
#   kernel.sh     the cached kernel: unpack once, boot it uncompressed
#   initramfs.sh  the guest's initramfs: busybox, modules, a tiny /init
#   accel.sh      KVM or TCG
#   qemu.sh       qemu's command line, a guest's start, its exit status
#   rundir.sh     the per-run folder and the files the guest reads there
#   cmd_run.sh, cmd_shell.sh, cmd_pair.sh, cmd_fetch.sh, cmd_up.sh (up,
#                 exec, status, down, xfer): the subcommands
#   agent.py      up's supervisor and exec's client (qemu's guest agent)
# They pass values as arguments and on stdout; the only globals are the
# constants set here.

set -euo pipefail
# The parts hand values back on stdout, through $(...): keep -e in there.
shopt -s inherit_errexit

SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SELF_DIR
# shellcheck disable=SC2034 # used by the parts
readonly STATUS_TIMEOUT=124
readonly STATUS_LAB_FAILED=125

usage() {
  sed -n '2,/^$/s/^# \{0,1\}//p' "$SELF_DIR/lab.sh"
}

# Misuse: one line on stderr, exit 2.
misuse() {
  echo "lab.sh: $*; see scripts/lab.sh -h" >&2
  exit 2
}

# The lab cannot do its job: one line saying what to do, exit 125.
fail() {
  echo "lab.sh: $*" >&2
  exit "$STATUS_LAB_FAILED"
}

# parse_timeout VALUE: VALUE if it is a whole number of seconds, else misuse.
parse_timeout() {
  [[ $1 =~ ^[1-9][0-9]*$ ]] || misuse "--timeout needs a number of seconds, not '$1'"
  echo "$1"
}

# The checkout: the git top-level that holds this script.
checkout_top() {
  git -C "$SELF_DIR" rev-parse --show-toplevel 2>/dev/null ||
    (cd "$SELF_DIR/.." && pwd)
}

# The lab's own checks, before anything is fetched or booted.
check_host() {
  [[ $(uname -m) == x86_64 ]] ||
    fail "the lab needs an x86_64 host (this is $(uname -m))"
  command -v qemu-system-x86_64 >/dev/null ||
    fail "qemu-system-x86_64 not found: run scripts/install_deps.sh (package qemu-system-x86)"
  command -v busybox >/dev/null ||
    fail "busybox not found: run scripts/install_deps.sh (package busybox-static)"
  if ldd "$(command -v busybox)" >/dev/null 2>&1; then
    fail "busybox is dynamically linked: install busybox-static (scripts/install_deps.sh)"
  fi
  local tool
  guest_cpus >/dev/null
  for tool in cpio depmod modprobe apt-get dpkg flock timeout setpriv; do
    command -v "$tool" >/dev/null ||
      fail "$tool not found: run scripts/install_deps.sh"
  done
}

CHECKOUT=$(checkout_top)
# shellcheck disable=SC2034 # used by the parts
readonly CHECKOUT

for part in apt kernel initramfs accel qemu rundir cmd_run cmd_shell cmd_pair cmd_fetch cmd_up; do
  # shellcheck source=/dev/null
  source "$SELF_DIR/lab/$part.sh"
done

case "${1:-}" in
  run | shell | pair | fetch | up | exec | status | down | xfer) "cmd_$1" "${@:2}" ;;
  -h | --help | help) usage ;;
  "") misuse "no command (run, shell, pair, fetch, up, exec, status, down)" ;;
  *) misuse "unknown command '$1' (run, shell, pair, fetch, up, exec, status, down)" ;;
esac
