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
#   scripts/lab.sh pair [--pcap FILE] [--timeout SECS] --a 'CMD' --b 'CMD'
#   scripts/lab.sh fetch
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
#          started its own. Output lines are prefixed "[a] " / "[b] ".
#          --pcap FILE writes every frame on the cable to FILE.
#          Exit status: a's if non-zero, else b's. Default timeout 600 s.
#   fetch  download and unpack the kernel, build the initramfs (run, shell
#          and pair do this on demand). Cache:
#          ${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/lab/
#
# Inside the guest: LAB=1, PATH, TERM, HOME=/tmp/home (a tmpfs), and in pair
# mode LAB_ROLE (a|b), LAB_ADDR and LAB_PEER_ADDR; plus every variable named
# in LAB_ENV (space-separated names), e.g. LAB_ENV="BATS_LIB_PATH CFLAGS".
#
# Environment: LAB_ACCEL=tcg|kvm forces the accelerator (default: kvm only if
# a probe boot shows it works here, remembered in the cache). LAB_KEEP=1
# keeps the per-run folder (console log) in $TMPDIR. LAB_KERNEL_ARGS adds to
# the guest kernel's command line (e.g. loglevel=7 to watch it boot).
#
# Exit status: CMD's own; 2 misuse; 124 timeout; 125 the lab itself failed.

# qemu's options are comma-separated lists, not mistaken bash arrays:
# shellcheck disable=SC2054
set -euo pipefail

SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SELF_DIR
readonly STATUS_TIMEOUT=124
readonly STATUS_LAB_FAILED=125

usage() {
  sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
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

# ---------------------------------------------------------------- host checks

check_host() {
  [ "$(uname -m)" = x86_64 ] ||
    fail "the lab needs an x86_64 host (this is $(uname -m))"
  command -v qemu-system-x86_64 >/dev/null ||
    fail "qemu-system-x86_64 not found: run scripts/install_deps.sh (package qemu-system-x86)"
  command -v busybox >/dev/null ||
    fail "busybox not found: run scripts/install_deps.sh (package busybox-static)"
  if ldd "$(command -v busybox)" >/dev/null 2>&1; then
    fail "busybox is dynamically linked: install busybox-static (scripts/install_deps.sh)"
  fi
  for tool in cpio depmod modprobe apt-get dpkg flock timeout; do
    command -v "$tool" >/dev/null ||
      fail "$tool not found: run scripts/install_deps.sh"
  done
}

# The checkout: the git top-level that holds this script.
checkout_top() {
  git -C "$SELF_DIR" rev-parse --show-toplevel 2>/dev/null ||
    (cd "$SELF_DIR/.." && pwd)
}

# ------------------------------------------------------------ kernel + initramfs

cache_dir() {
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/lab"
}

# Debian's current generic kernel package, e.g. linux-image-6.1.0-56-amd64.
# apt-cache takes over half a second, so the answer is remembered in the
# cache until apt's package lists change (apt-get update).
kernel_package() {
  local remembered
  remembered="$(cache_dir)/current-package"
  if [ -s "$remembered" ] && [ "$remembered" -nt /var/lib/apt/lists ] &&
    [ "$remembered" -nt /var/cache/apt/pkgcache.bin ]; then
    cat "$remembered"
    return
  fi
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }' |
    tee "$remembered"
}

# Modules the guest needs, by name; the initramfs gets them and their
# dependencies. 9p over virtio reaches the host's root; the rest is RDMA.
readonly GUEST_MODULES="virtio_pci 9pnet_virtio 9p overlay virtio_net dummy
    crc32_generic ib_core ib_uverbs rdma_rxe rdma_ucm rdma_cm ib_cm iw_cm"

# The initramfs's /init: load what reaching the per-run share needs, then
# hand over to lab-guest.sh from that share. Kept tiny: the logic lives in
# scripts/lab-guest.sh, which is read fresh on every boot.
initramfs_init() {
  cat <<'EOF'
#!/bin/sh
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
case "$(cat /proc/cmdline)" in
    *lab.probe*) echo LAB_PROBE_OK; reboot -f ;;
esac
modprobe -a 9pnet_virtio 9p virtio_pci
mkdir -p /lab
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 labrun /lab; then
    exec sh /lab/guest.sh
fi
echo "LAB_SETUP_FAILED: cannot mount the per-run share (9p tag labrun)"
reboot -f
EOF
}

# Build initramfs-<hash>.cpio in kernel folder $1 for kernel version $2.
# The hash covers /init and the module list, so changing either rebuilds.
build_initramfs() {
  local kdir=$1 kver=$2
  local hash staging module file
  hash=$({
    initramfs_init
    echo "$GUEST_MODULES"
  } | sha256sum | cut -c1-12)
  [ -e "$kdir/initramfs-$hash.cpio" ] && {
    echo "$kdir/initramfs-$hash.cpio"
    return
  }

  staging=$(mktemp -d "$kdir/initramfs.XXXXXX")
  mkdir -p "$staging"/{bin,sbin,proc,sys,dev,lib/modules/"$kver"}
  cp "$(command -v busybox)" "$staging/bin/busybox"
  for applet in $(busybox --list); do
    [ -e "$staging/bin/$applet" ] || ln -s busybox "$staging/bin/$applet"
  done
  # The kernel runs /sbin/modprobe for modules it wants (request_module).
  ln -s ../bin/busybox "$staging/sbin/modprobe"

  # Each module and its dependencies, copied at their usual paths.
  for module in $GUEST_MODULES; do
    modprobe -d "$kdir/root" -S "$kver" --show-depends "$module" |
      awk '$1 == "insmod" { print $2 }'
  done | sort -u | while read -r file; do
    mkdir -p "$staging/$(dirname "${file#"$kdir/root"}")"
    cp "$file" "$staging/${file#"$kdir/root"}"
  done
  cp "$kdir/root/lib/modules/$kver"/modules.{builtin,builtin.modinfo,order} \
    "$staging/lib/modules/$kver/"
  depmod -b "$staging" "$kver"

  initramfs_init >"$staging/init"
  chmod +x "$staging/init"
  # Uncompressed: unpacking is faster than decompressing under TCG.
  (cd "$staging" && find . | cpio -o -H newc --quiet) >"$kdir/initramfs-$hash.cpio.tmp"
  mv "$kdir/initramfs-$hash.cpio.tmp" "$kdir/initramfs-$hash.cpio"
  rm -rf "$staging"
  echo "$kdir/initramfs-$hash.cpio"
}

# Unpack the ELF kernel from the xz-compressed bzImage $1 into $2. qemu
# boots an ELF kernel through PVH: no real-mode setup, no decompression
# (which alone takes about 2 s under TCG). Tries each xz header in the file,
# like the kernel's own scripts/extract-vmlinux.
extract_vmlinux() {
  local bzimage=$1 out=$2 offset
  command -v xz >/dev/null || return 1
  while read -r offset; do
    tail -c +$((offset + 1)) "$bzimage" | xz -dc >"$out.tmp" 2>/dev/null || true
    if [ "$(head -c 4 "$out.tmp" | od -An -c | tr -d ' ')" = 177ELF ]; then
      mv "$out.tmp" "$out"
      return 0
    fi
  done < <(LC_ALL=C grep -abo $'\xfd7zXZ' "$bzimage" | cut -d: -f1)
  rm -f "$out.tmp"
  return 1
}

# apt-get update, as root or through sudo; false if neither is possible.
refresh_apt_lists() {
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || return 1
    sudo=(sudo)
  fi
  echo "lab.sh: refreshing apt's package lists (apt-get update)" >&2
  "${sudo[@]}" apt-get update -qq >&2
}

# The cache folder of kernel package $2 in cache $1. The folder is deleted
# and made afresh, so refuse anything but a kernel package's name: an empty
# one would make it the cache itself.
kernel_dir() {
  local cache=$1 package=$2
  [[ $package =~ ^linux-image-[0-9][A-Za-z0-9.+~-]*$ ]] ||
    fail "apt names no kernel package ('$package' from apt-cache depends linux-image-amd64): run apt-get update, or fetch on a Debian host"
  echo "$cache/$package"
}

# apt-get download package $1 into a fresh kernel folder $2; false if apt fails.
download_kernel() {
  local package=$1 kdir=$2
  rm -rf -- "$kdir"
  mkdir -p "$kdir/download"
  (cd "$kdir/download" && apt-get download "$package" >"$kdir/download.log" 2>&1)
}

# Download and unpack the kernel package (never installed: nothing touches
# /boot), depmod it, build the initramfs. Safe to run concurrently: the
# cache is locked. Sets KERNEL, INITRAMFS, KDIR.
fetch_kernel() {
  local cache package kver
  cache=$(cache_dir)
  mkdir -p "$cache"
  exec 9>"$cache/lock"
  flock 9

  package=$(kernel_package) || true
  if [ -z "$package" ] && refresh_apt_lists; then
    # No apt metadata yet (a fresh machine): refreshed once, ask again.
    rm -f "$cache/current-package"
    package=$(kernel_package) || true
  fi
  if [ -z "$package" ]; then
    # No apt metadata (offline?): fall back to the newest cached kernel.
    package=$(find "$cache" -mindepth 1 -maxdepth 1 -name 'linux-image-*' -printf '%f\n' | sort -V | tail -n 1)
    [ -n "$package" ] ||
      fail "no Debian kernel package found (apt-cache depends linux-image-amd64): run apt-get update, or fetch on a Debian host"
  fi
  KDIR=$(kernel_dir "$cache" "$package")

  if [ ! -e "$KDIR/unpacked" ]; then
    echo "lab.sh: fetching $package into $KDIR (once)" >&2
    if ! download_kernel "$package" "$KDIR"; then
      # Old package lists can name a kernel the mirror no longer has:
      # refresh them once, then fetch whatever they name now.
      refresh_apt_lists || fail "apt-get download $package failed: see $KDIR/download.log"
      rm -f "$cache/current-package"
      package=$(kernel_package) || true
      KDIR=$(kernel_dir "$cache" "$package")
      download_kernel "$package" "$KDIR" ||
        fail "apt-get download $package failed: see $KDIR/download.log"
    fi
    kver=${package#linux-image-}
    dpkg -x "$KDIR"/download/*.deb "$KDIR/root"
    depmod -b "$KDIR/root" "$kver"
    rm -rf "$KDIR/download"
    [ -e "$KDIR/root/lib/modules/$kver/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko" ] ||
      fail "$package has no rdma_rxe module"
    touch "$KDIR/unpacked"
    # Older kernels' folders (400 MB each) are no longer used.
    find "$cache" -mindepth 1 -maxdepth 1 -name 'linux-image-*' \
      ! -name "$package" -exec rm -rf {} +
  fi
  kver=${package#linux-image-}
  KERNEL="$KDIR/root/boot/vmlinuz-$kver"
  if [ -e "$KDIR/vmlinux" ]; then
    KERNEL="$KDIR/vmlinux"
  elif grep -q '^CONFIG_PVH=y' "$KDIR/root/boot/config-$kver" &&
    extract_vmlinux "$KERNEL" "$KDIR/vmlinux"; then
    KERNEL="$KDIR/vmlinux"
  fi
  INITRAMFS=$(build_initramfs "$KDIR" "$kver")

  choose_accel
  exec 9>&-
}

# ------------------------------------------------------------------------ qemu

# TCG works everywhere. KVM is much faster where it works, but on some hosts
# (nested virtualisation) a KVM guest hangs before its first line. So probe
# once: boot with KVM to the initramfs and back; remember the verdict in the
# cache. Sets ACCEL_ARGS.
choose_accel() {
  local verdict_file="$KDIR/accel" verdict="${LAB_ACCEL:-}"
  if [ -z "$verdict" ] && [ -s "$verdict_file" ]; then
    verdict=$(cat "$verdict_file")
  fi
  if [ -z "$verdict" ]; then
    verdict=tcg
    if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
      echo "lab.sh: checking whether KVM works here (once, up to 20 s)" >&2
      if timeout -k 2 20 qemu-system-x86_64 -nodefaults -no-user-config \
        -display none -accel kvm -cpu host -m 256M -no-reboot \
        -kernel "$KERNEL" -initrd "$INITRAMFS" \
        -append "console=ttyS0 quiet panic=-1 reboot=t lab.probe" \
        -serial stdio </dev/null 2>/dev/null | grep -q LAB_PROBE_OK; then
        verdict=kvm
      fi
    fi
    echo "$verdict" >"$verdict_file"
  fi
  case "$verdict" in
    kvm) ACCEL_ARGS=(-accel kvm -cpu host) ;;
    tcg) ACCEL_ARGS=(-accel tcg,thread=multi -cpu max) ;;
    *) misuse "LAB_ACCEL must be tcg or kvm, not '$verdict'" ;;
  esac
}

readonly KERNEL_SKIPS="cryptomgr.notests initcall_blacklist=crypto_kdf108_init,init_kprobe_trace"

# qemu arguments shared by every guest: $1 = role (a|b), $2 = run folder.
qemu_base_args() {
  local role=$1 rundir=$2
  QEMU_ARGS=(
    -nodefaults -no-user-config -display none -no-reboot
    "${ACCEL_ARGS[@]}" -m 1024M
    -kernel "$KERNEL" -initrd "$INITRAMFS"
    # quiet: the console is a slow serial port. acpi=off: skips ACPI
    # table parsing and IRQ link setup (-0.4 s), nothing here needs it.
    # panic=-1 reboot=t: a panic or a reboot ends qemu at once.
    # cryptomgr.notests and the initcall_blacklist skip the slowest
    # boot-time self-tests (crypto algorithms: 175 ms, the SP800-108
    # KDF: 115 ms) and kprobe tracing setup (55 ms), per initcall_debug.
    -append "console=ttyS0 quiet acpi=off panic=-1 reboot=t $KERNEL_SKIPS lab.role=$role ${LAB_KERNEL_ARGS:-}"
    # The host's root, read-only; multidevs=remap keeps inode numbers
    # unique across the host's mounts.
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
    -virtfs "local,path=$CHECKOUT,mount_tag=checkout,security_model=none,readonly=on,multidevs=remap"
    # The per-run share: guest.sh, the command, the conf. Read-only: the
    # host writes there, so the guest must not plant symlinks in it.
    -virtfs "local,path=$rundir/share,mount_tag=labrun,security_model=none,readonly=on"
  )
  if [ -e /usr/share/qemu/qboot.rom ]; then
    QEMU_ARGS+=(-bios /usr/share/qemu/qboot.rom)
  fi
}

# Write the guest's conf and command script into the run folder.
#   $1 role, $2 rundir, $3 mode, $4 netdev, $5 address; rest: the command.
write_guest_files() {
  local role=$1 rundir=$2 mode=$3 netdev=$4 addr=$5
  shift 5
  local name size share=$rundir/share
  cp "$SELF_DIR/lab-guest.sh" "$share/guest.sh"
  {
    printf 'MODE=%q\n' "$mode"
    printf 'CHECKOUT=%q\n' "$CHECKOUT"
    printf 'NETDEV=%q\n' "$netdev"
    printf 'ADDR=%q\n' "$addr"
    if [ "$mode" = shell ] && size=$(stty size 2>/dev/null); then
      printf 'ROWS=%q\nCOLS=%q\n' "${size% *}" "${size#* }"
    fi
  } >"$share/$role.conf"
  {
    echo "# The command lab.sh runs in the guest (bash, env reset)."
    printf 'export LAB=1 HOME=/tmp/home PATH=%q TERM=%q\n' "$PATH" "${TERM:-dumb}"
    for name in ${LAB_ENV:-}; do
      [[ "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || misuse "LAB_ENV: '$name' is not a variable name"
      if [ -n "${!name+set}" ]; then
        printf 'export %s=%q\n' "$name" "${!name}"
      fi
    done
    if [ "$mode" = pair ]; then
      printf 'export LAB_ROLE=%q LAB_ADDR=%q LAB_PEER_ADDR=%q\n' \
        "$role" "${addr%/*}" "$PEER_ADDR"
    fi
    printf 'cd %q || exit 125\n' "$WORKDIR"
    if [ "$mode" = shell ]; then
      printf 'export PS1=%q\n' 'lab:\w\$ '
      echo "exec bash --norc -i"
    else
      printf 'exec'
      printf ' %q' "$@"
      printf '\n'
    fi
  } >"$share/$role.cmd"
}

# Print the last lines of a console log, to explain a failure.
show_console_tail() {
  echo "---- last lines of the guest console ($1) ----" >&2
  tail -n 25 "$1" | tr -d '\r' >&2
  echo "----" >&2
}

# Read the guest's exit status from its console log; 125 if it has none.
guest_status() {
  local log=$1 status
  status=$(tr -d '\r' <"$log" | sed -n 's/^LAB_EXIT_STATUS=\([0-9]*\)$/\1/p' | tail -n 1)
  echo "${status:-$STATUS_LAB_FAILED}"
}

# Explain why a guest gave no status: setup failure, timeout, or no boot.
#   $1 console log, $2 qemu's (timeout's) status, $3 timeout.
explain_failure() {
  local log=$1 qemu_status=$2 secs=$3 reason
  reason=$(tr -d '\r' <"$log" | sed -n 's/^LAB_SETUP_FAILED: //p' | head -n 1)
  if [ "$qemu_status" = "$STATUS_TIMEOUT" ]; then
    echo "lab.sh: timed out after ${secs} s; guest killed (raise --timeout?)" >&2
  elif [ -n "$reason" ]; then
    echo "lab.sh: guest setup failed: $reason" >&2
  else
    echo "lab.sh: the guest failed to boot or stopped early (qemu status $qemu_status)" >&2
  fi
  show_console_tail "$log"
}

# -------------------------------------------------------------------- commands

RUNDIR=
GUEST_PIDS=()

# On exit, and on Ctrl-C or kill: stop our guests (each `timeout` passes the
# signal on to its qemu), remove the run folder.
cleanup() {
  local pid
  for pid in "${GUEST_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  if [ -n "$RUNDIR" ] && [ -z "${LAB_KEEP:-}" ]; then
    rm -rf "$RUNDIR"
  fi
}

# The per-run folder (mode 700, the host's own: console logs, fifos,
# sockets) and in it share/, which the guests see read-only at /lab.
new_rundir() {
  RUNDIR=$(mktemp -d "${TMPDIR:-/tmp}/lab.XXXXXX")
  mkdir "$RUNDIR/share"
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# Start qemu with QEMU_ARGS under `timeout`, in the background: `wait` can
# be interrupted by Ctrl-C, a foreground child could not (timeout runs in
# its own process group, so the terminal's Ctrl-C never reaches it).
# Sets GUEST_PID. The caller redirects the fds.
start_guest() {
  timeout -k 5 "$TIMEOUT" qemu-system-x86_64 "${QEMU_ARGS[@]}" &
  GUEST_PID=$!
  GUEST_PIDS+=("$GUEST_PID")
}

# Working folder in the guest: the current one if inside the checkout.
# Physical paths: git names the checkout by its real path, not a symlink's.
set_workdir() {
  local here
  here=$(pwd -P)
  case "$here/" in
    "$CHECKOUT"/*) WORKDIR=$here ;;
    *) WORKDIR=$CHECKOUT ;;
  esac
}

parse_timeout() {
  [[ "${1:-}" =~ ^[1-9][0-9]*$ ]] || misuse "--timeout needs a number of seconds, not '${1:-}'"
  TIMEOUT=$1
}

cmd_run() {
  TIMEOUT=600
  while [ $# -gt 0 ]; do
    case "$1" in
      --timeout)
        parse_timeout "${2:-}"
        shift 2
        ;;
      --)
        shift
        break
        ;;
      *) misuse "run: unknown option '$1' (the command goes after --)" ;;
    esac
  done
  [ $# -gt 0 ] || misuse "run: no command (scripts/lab.sh run -- CMD [ARGS...])"

  check_host
  fetch_kernel
  new_rundir
  set_workdir
  write_guest_files a "$RUNDIR" run dummy0 192.0.2.1/24 "$@"
  qemu_base_args a "$RUNDIR"
  QEMU_ARGS+=(
    -nic none
    -serial "file:$RUNDIR/console.log" # ttyS0: console
    # ttyS1 and ttyS2: CMD's stdout and stderr, written straight to our
    # own fds 1 and 2 (passed as 5 and 6: qemu's -add-fd refuses 0-2).
    # append=on: no truncation. Re-opening /dev/stdout instead would clobber
    # a log file we share with other writers.
    -add-fd fd=5,set=5 -chardev file,id=out,path=/dev/fdset/5,append=on -serial chardev:out
    -add-fd fd=6,set=6 -chardev file,id=err,path=/dev/fdset/6,append=on -serial chardev:err
  )
  local qemu_status=0
  : >"$RUNDIR/console.log" # there even if qemu fails to start
  start_guest </dev/null 5>&1 6>&2 3>&-
  wait "$GUEST_PID" || qemu_status=$?
  local status
  status=$(guest_status "$RUNDIR/console.log")
  if ! grep -q '^LAB_EXIT_STATUS=' "$RUNDIR/console.log"; then
    explain_failure "$RUNDIR/console.log" "$qemu_status" "$TIMEOUT"
    [ "$qemu_status" = "$STATUS_TIMEOUT" ] && status=$STATUS_TIMEOUT
  fi
  exit "$status"
}

cmd_shell() {
  [ $# -eq 0 ] || misuse "shell takes no arguments"
  check_host
  fetch_kernel
  new_rundir
  set_workdir
  write_guest_files a "$RUNDIR" shell dummy0 192.0.2.1/24
  qemu_base_args a "$RUNDIR"
  # The console on this terminal; Ctrl-C goes to the guest, Ctrl-A X quits.
  QEMU_ARGS+=(
    -nic none
    -chardev stdio,id=con,mux=on,signal=off
    -serial chardev:con -mon chardev=con
  )
  echo "lab.sh: booting the lab guest; 'exit' powers it off (Ctrl-A X kills it)" >&2
  local qemu_status=0
  qemu-system-x86_64 "${QEMU_ARGS[@]}" || qemu_status=$?
  exit "$qemu_status"
}

cmd_fetch() {
  [ $# -eq 0 ] || misuse "fetch takes no arguments"
  check_host
  fetch_kernel
  echo "lab.sh: kernel $KERNEL"
  echo "lab.sh: initramfs $INITRAMFS"
  echo "lab.sh: accelerator ${ACCEL_ARGS[*]}"
}

# The other guest of a pair.
peer_of() {
  if [ "$1" = a ]; then echo b; else echo a; fi
}

cmd_pair() {
  TIMEOUT=600
  local pcap="" cmd_a="" cmd_b=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --timeout)
        parse_timeout "${2:-}"
        shift 2
        ;;
      --pcap)
        [ -n "${2:-}" ] || misuse "--pcap needs a file name"
        pcap=$2
        shift 2
        ;;
      --a)
        [ -n "${2:-}" ] || misuse "--a needs a command"
        cmd_a=$2
        shift 2
        ;;
      --b)
        [ -n "${2:-}" ] || misuse "--b needs a command"
        cmd_b=$2
        shift 2
        ;;
      *) misuse "pair: unknown argument '$1'" ;;
    esac
  done
  if [ -z "$cmd_a" ] || [ -z "$cmd_b" ]; then
    misuse "pair needs --a 'CMD' and --b 'CMD'"
  fi
  if [ -n "$pcap" ]; then
    # qemu writes the pcap; give it an absolute path.
    case "$pcap" in /*) ;; *) pcap="$PWD/$pcap" ;; esac
    : >"$pcap" || misuse "cannot write --pcap $pcap"
  fi

  check_host
  fetch_kernel
  new_rundir
  set_workdir
  # A Unix socket path must fit in 108 bytes.
  [ ${#RUNDIR} -lt 90 ] || fail "run folder path too long for a socket: set TMPDIR=/tmp"

  # Guest b's share is guest a's: write every file in it before a boots.
  local role
  local -A pid=() cmd=([a]=$cmd_a [b]=$cmd_b) addr=([a]=192.0.2.1 [b]=192.0.2.2)
  for role in a b; do
    PEER_ADDR=${addr[$(peer_of "$role")]}
    write_guest_files "$role" "$RUNDIR" pair eth0 "${addr[$role]}/24" bash -c "${cmd[$role]}"
  done
  # The one folder the guests may write: a.started, which b waits for.
  # The host never opens anything in it.
  mkdir "$RUNDIR/pair"

  for role in a b; do
    qemu_base_args "$role" "$RUNDIR"
    # The virtual cable: each guest sends datagrams to the other's socket.
    QEMU_ARGS+=(
      -virtfs "local,path=$RUNDIR/pair,mount_tag=labpair,security_model=none"
      -netdev "dgram,id=n0,local.type=unix,local.path=$RUNDIR/$role.sock,remote.type=unix,remote.path=$RUNDIR/$(peer_of "$role").sock"
      -device "virtio-net-pci,netdev=n0,mac=52:54:00:00:02:0${addr[$role]##*.}"
      -serial "file:$RUNDIR/console-$role.log"
      -chardev "file,id=out,path=$RUNDIR/stdout-$role.fifo" -serial chardev:out
      -chardev "file,id=err,path=$RUNDIR/stderr-$role.fifo" -serial chardev:err
    )
    if [ "$role" = a ] && [ -n "$pcap" ]; then
      QEMU_ARGS+=(-object "filter-dump,id=f0,netdev=n0,file=$pcap")
    fi
    # The command's stdout and stderr, each line prefixed, to ours.
    mkfifo "$RUNDIR/stdout-$role.fifo" "$RUNDIR/stderr-$role.fifo"
    sed -u "s/^/[$role] /" <"$RUNDIR/stdout-$role.fifo" 3>&- &
    sed -u "s/^/[$role] /" <"$RUNDIR/stderr-$role.fifo" >&2 3>&- &
    : >"$RUNDIR/console-$role.log" # there even if qemu fails to start
    start_guest </dev/null >"$RUNDIR/qemu-$role.log" 2>&1 3>&-
    pid[$role]=$GUEST_PID
  done

  local qemu_status status overall=0
  local -A result=()
  for role in a b; do
    qemu_status=0
    wait "${pid[$role]}" || qemu_status=$?
    # Guest b may still wait for a to start its command: tell it not to.
    touch "$RUNDIR/share/$role.exited"
    status=$(guest_status "$RUNDIR/console-$role.log")
    if ! grep -q '^LAB_EXIT_STATUS=' "$RUNDIR/console-$role.log"; then
      echo "lab.sh: guest $role:" >&2
      explain_failure "$RUNDIR/console-$role.log" "$qemu_status" "$TIMEOUT"
      sed 's/^/qemu: /' "$RUNDIR/qemu-$role.log" >&2
      [ "$qemu_status" = "$STATUS_TIMEOUT" ] && status=$STATUS_TIMEOUT
    fi
    result[$role]=$status
  done
  # A sed still waiting to open its fifo (its qemu never started) would
  # wait forever: open each fifo once read-write (never blocks), close it.
  local fifo fd
  for fifo in "$RUNDIR"/*.fifo; do
    exec {fd}<>"$fifo"
    exec {fd}>&-
  done
  wait # the sed prefixers
  echo "lab.sh: a exited ${result[a]}, b exited ${result[b]}" >&2
  [ "${result[a]}" = 0 ] || overall=${result[a]}
  [ "$overall" != 0 ] || overall=${result[b]}
  exit "$overall"
}

# ------------------------------------------------------------------------ main

CHECKOUT=$(checkout_top)
PEER_ADDR=

case "${1:-}" in
  run)
    shift
    cmd_run "$@"
    ;;
  shell)
    shift
    cmd_shell "$@"
    ;;
  pair)
    shift
    cmd_pair "$@"
    ;;
  fetch)
    shift
    cmd_fetch "$@"
    ;;
  -h | --help | help) usage ;;
  "") misuse "no command (run, shell, pair, fetch)" ;;
  *) misuse "unknown command '$1' (run, shell, pair, fetch)" ;;
esac
