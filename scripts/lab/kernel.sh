# shellcheck shell=bash
# lab/kernel.sh: the lab's kernel, fetched and unpacked once into the cache,
# and everything a boot needs (part of scripts/lab.sh; sourced, never run).

# prepare_lab: fetch the kernel, build the initramfs, choose the
# accelerator; print the lab as three lines: kernel, initramfs, kvm|tcg.
# Safe to run concurrently: the cache is locked meanwhile.
prepare_lab() {
  local cache suite kcache kdir kver kernel initramfs accel
  cache=$(cache_dir)
  suite=$(lab_suite)
  kcache=$(suite_cache "$suite")
  private_dir "$cache" --create
  private_dir "$kcache" --create
  exec 9>"$cache/lock"
  flock 9
  kdir=$(fetch_kernel "$suite" "$kcache")
  kver=${kdir##*/linux-image-}
  kernel=$(boot_kernel "$kdir" "$kver")
  initramfs=$(build_initramfs "$kdir" "$kver")
  accel=$(choose_accel "$kdir" "$kernel" "$initramfs")
  exec 9>&-
  printf '%s\n' "$kernel" "$initramfs" "$accel"
}

# fetch_kernel SUITE KCACHE: the folder of SUITE's current kernel in
# KCACHE (suite_cache), downloaded and unpacked there once (never
# installed: nothing touches /boot). Offline, the newest kernel already
# there.
fetch_kernel() {
  local suite=$1 kcache=$2 package kdir
  [[ $kcache == "$(cache_dir)" ]] || private_apt "$suite" "$kcache"
  package=$(kernel_package "$kcache") || true
  if [[ -z $package ]] && refresh_apt_lists "$kcache"; then
    # No apt metadata yet (a fresh machine): refreshed once, ask again.
    package=$(kernel_package "$kcache") || true
  fi
  if [[ -z $package ]]; then
    # No apt metadata (offline?): fall back to the newest cached kernel.
    package=$(find "$kcache" -mindepth 1 -maxdepth 1 -name 'linux-image-*' -printf '%f\n' | sort -V | tail -n 1)
    [[ -n $package ]] ||
      fail "no Debian kernel package found for $suite (apt-cache depends linux-image-amd64): run apt-get update, or fetch on a Debian host"
  fi
  kdir=$(kernel_dir "$kcache" "$package")
  if [[ ! -e $kdir/unpacked ]]; then
    echo "lab.sh: fetching $package ($suite) into $kdir (once)" >&2
    if ! download_kernel "$kcache" "$package" "$kdir"; then
      # Old package lists can name a kernel the mirror no longer has:
      # refresh them once, then fetch whatever they name now.
      refresh_apt_lists "$kcache" || fail "apt-get download $package failed: see $kdir/download.log"
      package=$(kernel_package "$kcache") || true
      kdir=$(kernel_dir "$kcache" "$package")
      download_kernel "$kcache" "$package" "$kdir" ||
        fail "apt-get download $package failed: see $kdir/download.log"
    fi
    unpack_kernel "$kdir" "${package#linux-image-}"
    # Older kernels' folders of this suite (400 MB each) are no longer used.
    find "$kcache" -mindepth 1 -maxdepth 1 -name 'linux-image-*' \
      ! -name "$package" -exec rm -rf {} +
  fi
  echo "$kdir"
}

# unpack_kernel KDIR KVER: the downloaded packages' files under KDIR/root,
# depmod'ed; KDIR/unpacked marks it done. Trixie's and later kernels keep
# their modules in /usr/lib/modules: KDIR/root/lib points there, as on a
# merged-/usr system, for depmod -b and modprobe -d.
unpack_kernel() {
  local kdir=$1 kver=$2 deb
  for deb in "$kdir"/download/*.deb; do
    dpkg -x "$deb" "$kdir/root"
  done
  if [[ ! -e $kdir/root/lib && -d $kdir/root/usr/lib/modules ]]; then
    ln -s usr/lib "$kdir/root/lib"
  fi
  depmod -b "$kdir/root" "$kver"
  rm -rf "$kdir/download"
  compgen -G "$kdir/root/lib/modules/$kver/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*" >/dev/null ||
    fail "linux-image-$kver has no rdma_rxe module"
  touch "$kdir/unpacked"
}

# kernel_file KDIR KVER NAME: the kernel's file NAME (vmlinuz, config,
# System.map): /boot/NAME-KVER, or /usr/lib/modules/KVER/NAME where 7.x's
# split packages put it.
kernel_file() {
  local kdir=$1 kver=$2 name=$3
  if [[ -e $kdir/root/boot/$name-$kver ]]; then
    echo "$kdir/root/boot/$name-$kver"
  else
    echo "$kdir/root/lib/modules/$kver/$name"
  fi
}

# kernel_version KERNEL: the version of the kernel file KERNEL (a path in
# its cache folder, linux-image-VERSION), e.g. 6.1.0-57-amd64.
kernel_version() {
  [[ $1 =~ /linux-image-([^/]+)/ ]] && echo "${BASH_REMATCH[1]}"
}

# boot_kernel KDIR KVER: the kernel file qemu boots. The ELF vmlinux when
# the kernel boots through PVH: no real-mode setup, no decompression (which
# alone takes about 2 s under TCG). Else the compressed vmlinuz.
boot_kernel() {
  local kdir=$1 kver=$2 vmlinuz
  vmlinuz=$(kernel_file "$kdir" "$kver" vmlinuz)
  if [[ -e $kdir/vmlinux ]] ||
    { grep -q '^CONFIG_PVH=y' "$(kernel_file "$kdir" "$kver" config)" &&
      extract_vmlinux "$vmlinuz" "$kdir/vmlinux"; }; then
    echo "$kdir/vmlinux"
  else
    echo "$vmlinuz"
  fi
}

# extract_vmlinux BZIMAGE OUT: unpack the ELF kernel from BZIMAGE into
# OUT; false if none is found. Tries each xz header in the file (bookworm's
# kernels), then each zstd one (trixie's and later), like the kernel's own
# scripts/extract-vmlinux.
extract_vmlinux() {
  local bzimage=$1 out=$2 offset magic tool
  for magic in $'\xfd7zXZ' $'\x28\xb5\x2f\xfd'; do
    tool=xz
    [[ $magic == $'\xfd7zXZ' ]] || tool=zstd
    command -v "$tool" >/dev/null || continue
    while read -r offset; do
      tail -c +$((offset + 1)) "$bzimage" | "$tool" -dc >"$out.tmp" 2>/dev/null || true
      if [[ $(head -c 4 "$out.tmp" | od -An -c | tr -d ' ') == 177ELF ]]; then
        mv "$out.tmp" "$out"
        return 0
      fi
    done < <(LC_ALL=C grep -abo "$magic" "$bzimage" | cut -d: -f1)
  done
  rm -f "$out.tmp"
  return 1
}
