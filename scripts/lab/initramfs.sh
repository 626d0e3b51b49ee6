# shellcheck shell=bash
# lab/initramfs.sh: the guest's initramfs, built once per kernel into the
# cache (part of scripts/lab.sh; sourced, never run).

# Modules the guest needs, by name; the initramfs gets them and their
# dependencies. 9p over virtio reaches the host's root; sch_netem is the
# impaired cable of `lab.sh pair --netem-a`; veth joins lesson 18's two
# network namespaces inside one guest; the rest is RDMA.
readonly GUEST_MODULES="virtio_pci 9pnet_virtio 9p overlay virtio_net dummy virtio_console sch_netem veth
    crc32_generic ib_core ib_uverbs rdma_rxe rdma_ucm rdma_cm ib_cm iw_cm"

# The initramfs's /init: load what reaching the per-run share needs, then
# hand over to lab_guest.sh from that share. Kept tiny: the logic lives in
# scripts/lab_guest.sh, which is read fresh on every boot.
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

# build_initramfs KDIR KVER: the initramfs for kernel version KVER, built
# once as KDIR/initramfs-<hash>.cpio; prints its path.
# The hash covers /init and the module list, so changing either rebuilds.
build_initramfs() {
  local kdir=$1 kver=$2
  local hash staging module file rel applet
  hash=$({
    initramfs_init
    echo "$GUEST_MODULES"
  } | sha256sum | cut -c1-12)
  if [[ -e $kdir/initramfs-$hash.cpio ]]; then
    echo "$kdir/initramfs-$hash.cpio"
    return
  fi

  staging=$(mktemp -d "$kdir/initramfs.XXXXXX")
  mkdir -p "$staging"/{bin,sbin,proc,sys,dev,lib/modules/"$kver"}
  cp "$(command -v busybox)" "$staging/bin/busybox"
  for applet in $(busybox --list); do
    [[ -e $staging/bin/$applet ]] || ln -s busybox "$staging/bin/$applet"
  done
  # The kernel runs /sbin/modprobe for modules it wants (request_module).
  ln -s ../bin/busybox "$staging/sbin/modprobe"

  # Each module and its dependencies, copied at their usual paths; a
  # module shipped xz-compressed (.ko.xz, trixie on) is decompressed, as
  # busybox's insmod loads only plain .ko files. crc32_generic is gone in
  # 7.x (crc32 is a library there): where it is missing, it is not needed.
  for module in $GUEST_MODULES; do
    modprobe -d "$kdir/root" -S "$kver" --show-depends "$module" 2>/dev/null ||
      [[ $module == crc32_generic ]] ||
      fail "linux-image-$kver has no module $module"
  done | awk '$1 == "insmod" { print $2 }' | sort -u | while read -r file; do
    rel=${file#"$kdir/root"}
    mkdir -p "$staging/$(dirname "$rel")"
    case $file in
      *.ko.xz) xz -dc "$file" >"$staging/${rel%.xz}" ;;
      *) cp "$file" "$staging/$rel" ;;
    esac
  done
  for file in modules.builtin modules.builtin.modinfo modules.order; do
    [[ ! -e $kdir/root/lib/modules/$kver/$file ]] ||
      cp "$kdir/root/lib/modules/$kver/$file" "$staging/lib/modules/$kver/"
  done
  depmod -b "$staging" "$kver"

  initramfs_init >"$staging/init"
  chmod +x "$staging/init"
  # Uncompressed: unpacking is faster than decompressing under TCG.
  (cd "$staging" && find . | cpio -o -H newc --quiet) >"$kdir/initramfs-$hash.cpio.tmp"
  mv "$kdir/initramfs-$hash.cpio.tmp" "$kdir/initramfs-$hash.cpio"
  rm -rf "$staging"
  echo "$kdir/initramfs-$hash.cpio"
}
