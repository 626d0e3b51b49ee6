# shellcheck shell=bash
# lab/accel.sh: KVM or TCG (part of scripts/lab.sh; sourced, never run).

# choose_accel KDIR KERNEL INITRAMFS: print kvm or tcg.
# TCG works everywhere. KVM is much faster where it works, but on some hosts
# (nested virtualisation) a KVM guest hangs before its first line. So probe
# once: boot KERNEL with KVM to INITRAMFS and back; remember the verdict in
# KDIR/accel. LAB_ACCEL, if set, decides instead.
choose_accel() {
  local kdir=$1 kernel=$2 initramfs=$3
  local verdict_file=$kdir/accel verdict=${LAB_ACCEL:-}
  if [[ -z $verdict && -s $verdict_file ]]; then
    verdict=$(cat "$verdict_file")
  fi
  if [[ -z $verdict ]]; then
    verdict=tcg
    if kvm_boots "$kernel" "$initramfs"; then
      verdict=kvm
    fi
    echo "$verdict" >"$verdict_file"
  fi
  [[ $verdict == kvm || $verdict == tcg ]] ||
    misuse "LAB_ACCEL must be tcg or kvm, not '$verdict'"
  echo "$verdict"
}

# kvm_boots KERNEL INITRAMFS: true if /dev/kvm is ours and a KVM guest
# reaches the initramfs's /init within 20 s.
kvm_boots() {
  local console
  [[ -r /dev/kvm && -w /dev/kvm ]] || return 1
  echo "lab.sh: checking whether KVM works here (once, up to 20 s)" >&2
  # Whatever qemu's status (a hung guest is killed), the console decides.
  console=$(timeout -k 2 20 qemu-system-x86_64 -nodefaults -no-user-config \
    -display none -accel kvm -cpu host -m 256M -no-reboot \
    -kernel "$1" -initrd "$2" \
    -append "console=ttyS0 quiet panic=-1 reboot=t lab.probe" \
    -serial stdio </dev/null 2>/dev/null) || true
  [[ $console == *LAB_PROBE_OK* ]]
}

# accel_args ACCEL: qemu's arguments for kvm or tcg, NUL-separated.
accel_args() {
  case $1 in
    kvm) printf '%s\0' -accel kvm -cpu host ;;
    tcg) printf '%s\0' -accel tcg,thread=multi -cpu max ;;
  esac
}
