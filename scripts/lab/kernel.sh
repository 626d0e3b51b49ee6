# shellcheck shell=bash
# lab/kernel.sh: the lab's kernel, fetched and unpacked once into the cache,
# and everything a boot needs (part of scripts/lab.sh; sourced, never run).

# prepare_lab: fetch the kernel, build the initramfs, choose the
# accelerator; print the lab as three lines: kernel, initramfs, kvm|tcg.
# Safe to run concurrently: the cache is locked meanwhile.
prepare_lab() {
  local cache kdir kver kernel initramfs accel
  cache=$(cache_dir)
  mkdir -p "$cache"
  exec 9>"$cache/lock"
  flock 9
  kdir=$(fetch_kernel "$cache")
  kver=${kdir##*/linux-image-}
  kernel=$(boot_kernel "$kdir" "$kver")
  initramfs=$(build_initramfs "$kdir" "$kver")
  accel=$(choose_accel "$kdir" "$kernel" "$initramfs")
  exec 9>&-
  printf '%s\n' "$kernel" "$initramfs" "$accel"
}

# fetch_kernel CACHE: the folder of Debian's current kernel in CACHE,
# downloaded and unpacked there once (never installed: nothing touches
# /boot). Offline, the newest kernel already in the cache.
fetch_kernel() {
  local cache=$1 package kdir
  package=$(kernel_package "$cache") || true
  if [[ -z $package ]] && refresh_apt_lists "$cache"; then
    # No apt metadata yet (a fresh machine): refreshed once, ask again.
    package=$(kernel_package "$cache") || true
  fi
  if [[ -z $package ]]; then
    # No apt metadata (offline?): fall back to the newest cached kernel.
    package=$(find "$cache" -mindepth 1 -maxdepth 1 -name 'linux-image-*' -printf '%f\n' | sort -V | tail -n 1)
    [[ -n $package ]] ||
      fail "no Debian kernel package found (apt-cache depends linux-image-amd64): run apt-get update, or fetch on a Debian host"
  fi
  kdir=$(kernel_dir "$cache" "$package")
  if [[ ! -e $kdir/unpacked ]]; then
    echo "lab.sh: fetching $package into $kdir (once)" >&2
    if ! download_kernel "$package" "$kdir"; then
      # Old package lists can name a kernel the mirror no longer has:
      # refresh them once, then fetch whatever they name now.
      refresh_apt_lists "$cache" || fail "apt-get download $package failed: see $kdir/download.log"
      package=$(kernel_package "$cache") || true
      kdir=$(kernel_dir "$cache" "$package")
      download_kernel "$package" "$kdir" ||
        fail "apt-get download $package failed: see $kdir/download.log"
    fi
    unpack_kernel "$kdir" "${package#linux-image-}"
    # Older kernels' folders (400 MB each) are no longer used.
    find "$cache" -mindepth 1 -maxdepth 1 -name 'linux-image-*' \
      ! -name "$package" -exec rm -rf {} +
  fi
  echo "$kdir"
}

# unpack_kernel KDIR KVER: the downloaded package's files under KDIR/root,
# depmod'ed; KDIR/unpacked marks it done.
unpack_kernel() {
  local kdir=$1 kver=$2
  dpkg -x "$kdir"/download/*.deb "$kdir/root"
  depmod -b "$kdir/root" "$kver"
  rm -rf "$kdir/download"
  [[ -e $kdir/root/lib/modules/$kver/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko ]] ||
    fail "linux-image-$kver has no rdma_rxe module"
  touch "$kdir/unpacked"
}

# boot_kernel KDIR KVER: the kernel file qemu boots. The ELF vmlinux when
# the kernel boots through PVH: no real-mode setup, no decompression (which
# alone takes about 2 s under TCG). Else the compressed vmlinuz.
boot_kernel() {
  local kdir=$1 kver=$2
  if [[ -e $kdir/vmlinux ]] ||
    { grep -q '^CONFIG_PVH=y' "$kdir/root/boot/config-$kver" &&
      extract_vmlinux "$kdir/root/boot/vmlinuz-$kver" "$kdir/vmlinux"; }; then
    echo "$kdir/vmlinux"
  else
    echo "$kdir/root/boot/vmlinuz-$kver"
  fi
}

# extract_vmlinux BZIMAGE OUT: unpack the ELF kernel from the xz-compressed
# BZIMAGE into OUT; false if none is found. Tries each xz header in the
# file, like the kernel's own scripts/extract-vmlinux.
extract_vmlinux() {
  local bzimage=$1 out=$2 offset
  command -v xz >/dev/null || return 1
  while read -r offset; do
    tail -c +$((offset + 1)) "$bzimage" | xz -dc >"$out.tmp" 2>/dev/null || true
    if [[ $(head -c 4 "$out.tmp" | od -An -c | tr -d ' ') == 177ELF ]]; then
      mv "$out.tmp" "$out"
      return 0
    fi
  done < <(LC_ALL=C grep -abo $'\xfd7zXZ' "$bzimage" | cut -d: -f1)
  rm -f "$out.tmp"
  return 1
}
