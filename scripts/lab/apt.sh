# shellcheck shell=bash
# lab/apt.sh: which Debian kernel the lab boots, and its download (part of
# scripts/lab.sh; sourced, never run).

# The cache: ${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/lab
cache_dir() {
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/lab"
}

# kernel_package CACHE: Debian's current generic kernel package, e.g.
# linux-image-6.1.0-56-amd64; nothing if apt's lists name none.
# apt-cache takes over half a second, so the answer is remembered in the
# cache until apt's package lists change (apt-get update).
kernel_package() {
  local remembered=$1/current-package
  if [[ -s $remembered && $remembered -nt /var/lib/apt/lists &&
    $remembered -nt /var/cache/apt/pkgcache.bin ]]; then
    cat "$remembered"
    return
  fi
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }' |
    tee "$remembered"
}

# refresh_apt_lists CACHE: apt-get update, as root or through sudo, and
# forget the remembered answer; false if neither root nor sudo.
refresh_apt_lists() {
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || return 1
    sudo=(sudo)
  fi
  echo "lab.sh: refreshing apt's package lists (apt-get update)" >&2
  "${sudo[@]}" apt-get update -qq >&2
  rm -f "$1/current-package"
}

# kernel_dir CACHE PACKAGE: the cache folder of kernel PACKAGE. The folder
# is deleted and made afresh, so refuse anything but a kernel package's
# name: an empty one would make it the cache itself.
kernel_dir() {
  local cache=$1 package=$2
  [[ $package =~ ^linux-image-[0-9][A-Za-z0-9.+~-]*$ ]] ||
    fail "apt names no kernel package ('$package' from apt-cache depends linux-image-amd64): run apt-get update, or fetch on a Debian host"
  echo "$cache/$package"
}

# download_kernel PACKAGE KDIR: apt-get download PACKAGE into a fresh
# KDIR/download, apt's words in KDIR/download.log; false if apt fails.
download_kernel() {
  local package=$1 kdir=$2
  rm -rf -- "$kdir"
  mkdir -p "$kdir/download"
  (cd "$kdir/download" && apt-get download "$package" >"$kdir/download.log" 2>&1)
}
