#!/usr/bin/env bash
# lab.sh: the workbook's Soft-RoCE lab, for hosts whose kernel has no RDMA.
# A throw-away qemu guest boots Debian's stock kernel (which has rdma_rxe)
# with the host's root shared read-only, so that what you built here runs
# there unchanged against a real rxe0 (192.0.2.1/24 on dummy0). docs/lab.md.
#
# Usage:
#   scripts/lab.sh run [--timeout SECS] -- CMD [ARGS...]
#   scripts/lab.sh shell
#   scripts/lab.sh pair [--pcap FILE] [--timeout SECS] [--ready TEXT] --a 'CMD' --b 'CMD'
#                       (and [--netem-a SPEC] [--netem-b SPEC]: a lossy cable)
#   scripts/lab.sh fetch
#   scripts/lab.sh up [--pair] | status [--pair] | down [--pair] | xfer
#   scripts/lab.sh exec [--timeout SECS] [--up] [--guest a|b] -- CMD [ARGS...]
#
#   run    boot a guest, run CMD in it (cwd: this folder if inside the
#          checkout, else its top), stream its stdout and stderr, exit with
#          its status. Default timeout 600 s.
#   shell  the same guest, an interactive bash here (exit powers it off).
#   pair   two guests, a (192.0.2.1) and b (192.0.2.2), on one cable, each
#          running its command; b starts once a has, or once a printed a
#          line containing --ready TEXT. Lines are prefixed "[a] ", "[b] ".
#          --pcap FILE: every frame on the cable.
#          --netem-a SPEC (or LAB_NETEM_A; --netem-b, LAB_NETEM_B for b):
#          tc qdisc replace dev eth0 root netem SPEC in the guest for the
#          run (tc-netem(8)), e.g. 'loss 1%'.
#          Exit status: a's if non-zero, else b's. Default timeout 600 s.
#   fetch  download the kernel and build the initramfs (the others do it
#          when needed) into ${XDG_CACHE_HOME:-~/.cache}/rdma-workbook/lab/.
#   up     boot a guest that stays up (one per checkout), return when it is
#          ready. It stops with down (whoever runs it), or after LAB_IDLE s
#          unused.
#   exec   run CMD in it (cwd as for run), stdout and stderr apart, its
#          status passed through; a signal to exec reaches CMD. Default
#          timeout 600 s, then 124. --up: bring a lab up for CMD alone.
#          125: no lab is up, or it died.
#   --pair two guests that stay up, in LAB_PAIR_DIR; exec --guest a|b runs
#          in one; pair runs there while they are up.
#   status exit 0 if up, 3 if not, saying why. xfer: the folder the guest
#          may write, at the same path on both sides.
#
# In the guest: LAB=1, PATH, TERM, HOME=/tmp/home, in pair mode LAB_ROLE,
# LAB_ADDR and LAB_PEER_ADDR, and the variables LAB_ENV names.
# LAB_KERNEL=bookworm|trixie|trixie-backports: the guest's Debian kernel,
#   default the host's suite, else bookworm (an up lab keeps its own).
# LAB_CPUS: vCPUs, 1 to this host's cores (default 2 for up, else 1).
# LAB_IDLE: seconds an up lab waits unused before it stops (1800).
# LAB_UP_DIR: the up lab's folder (default one per checkout in the cache).
# LAB_ACCEL=tcg|kvm (default: kvm if a probe boot works, remembered).
# LAB_KEEP=1 keeps run's folder (console log); LAB_KERNEL_ARGS adds to the
#   guest kernel's command line.
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
# depmod and modprobe (kmod) and qemu-ga are in /usr/sbin, which a Debian
# user's PATH lacks (root's has it): look there too.
PATH=$PATH:/usr/sbin:/sbin

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
