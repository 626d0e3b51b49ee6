# shellcheck shell=bash
# lab/apt.sh: which Debian kernel the lab boots, and its download (part of
# scripts/lab.sh; sourced, never run).

# The kernels the lab knows: LAB_KERNEL names one of them (a Debian suite).
readonly LAB_KERNELS="bookworm trixie trixie-backports"

# The cache: ${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/lab
cache_dir() {
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/rdma-workbook/lab"
}

# host_suite: the host's own Debian suite (VERSION_CODENAME), if it is
# one of LAB_KERNELS; else nothing.
host_suite() {
  local codename
  codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null | tr -d '"')
  [[ " $LAB_KERNELS " == *" $codename "* ]] && echo "$codename"
  return 0
}

# lab_suite: the kernel the lab boots: LAB_KERNEL, by default the host's
# own suite (bookworm where the host is no Debian of ours). Misuse if
# LAB_KERNEL names none of LAB_KERNELS.
lab_suite() {
  local suite=${LAB_KERNEL:-}
  if [[ -z $suite ]]; then
    suite=$(host_suite)
    echo "${suite:-bookworm}"
    return
  fi
  [[ " $LAB_KERNELS " == *" $suite "* ]] ||
    misuse "LAB_KERNEL must be one of ${LAB_KERNELS// /, }, not '$suite'"
  echo "$suite"
}

# suite_cache SUITE: the cache folder of SUITE's kernels. The host's own
# suite uses the host's apt lists and the cache's top (as it always has);
# another suite has a folder of its own, kernels/SUITE, with its private
# apt lists in apt/.
suite_cache() {
  if [[ $1 == "$(host_suite)" ]]; then
    cache_dir
  else
    echo "$(cache_dir)/kernels/$1"
  fi
}

# apt_opts KCACHE: apt's options for the suite whose cache is KCACHE,
# NUL-separated: none for the host's own suite; for another suite, a
# private sources.list, lists and cache inside KCACHE/apt, so that the
# host's apt configuration is never read for sources nor touched.
apt_opts() {
  local apt=$1/apt
  [[ -e $apt/sources.list ]] || return 0
  printf '%s\0' \
    -o "Dir::Etc::sourcelist=$apt/sources.list" \
    -o "Dir::Etc::sourceparts=$apt/sources.list.d" \
    -o "Dir::Etc::preferences=$apt/preferences" \
    -o "Dir::Etc::preferencesparts=$apt/preferences.d" \
    -o "Dir::State::Lists=$apt/lists" \
    -o "Dir::Cache=$apt/cache" \
    -o "Dir::State::status=$apt/status" \
    -o "APT::Sandbox::User=root"
}

# private_apt SUITE KCACHE: KCACHE/apt, the private apt folder of SUITE,
# made once: its sources.list names the host's Debian mirror (deb.debian.org
# if the host names none) and SUITE's archives.
private_apt() {
  local suite=$1 apt=$2/apt mirror keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [[ -e $apt/sources.list ]] && return 0
  mkdir -p "$apt"/{sources.list.d,preferences.d,lists/partial,cache/archives/partial}
  : >"$apt/status"
  mirror=$({ grep -rhsoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ || true; } |
    head -n 1 | tr -d ' ')
  mirror=${mirror:-http://deb.debian.org/debian}
  mirror=${mirror%/}
  {
    case $suite in
      *-backports)
        # Only the backports archive: its kernel is then the candidate.
        echo "deb [signed-by=$keyring] $mirror $suite main"
        ;;
      *)
        echo "deb [signed-by=$keyring] $mirror $suite main"
        echo "deb [signed-by=$keyring] $mirror $suite-updates main"
        echo "deb [signed-by=$keyring] ${mirror}-security $suite-security main"
        ;;
    esac
  } >"$apt/sources.list.tmp"
  mv "$apt/sources.list.tmp" "$apt/sources.list"
}

# apt_lists KCACHE: the folder of the apt lists the suite of KCACHE uses.
apt_lists() {
  if [[ -e $1/apt/sources.list ]]; then echo "$1/apt/lists"; else echo /var/lib/apt/lists; fi
}

# kernel_package KCACHE: the suite's current generic kernel package, e.g.
# linux-image-6.1.0-56-amd64; nothing if apt's lists name none.
# apt-cache takes over half a second, so the answer is remembered in the
# cache until apt's package lists change (apt-get update).
kernel_package() {
  local remembered=$1/current-package lists opts
  lists=$(apt_lists "$1")
  if [[ -s $remembered && -d $lists && $remembered -nt $lists ]] &&
    { [[ $lists != /var/lib/apt/lists ]] || [[ $remembered -nt /var/cache/apt/pkgcache.bin ]]; }; then
    cat "$remembered"
    return
  fi
  mapfile -d '' -t opts < <(apt_opts "$1")
  apt-cache "${opts[@]}" depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }' |
    tee "$remembered"
}

# refresh_apt_lists KCACHE: apt-get update, and forget the remembered
# answer; false if that cannot be done. The host's lists as root or
# through sudo; a private suite's as whoever runs lab.sh (they are its).
refresh_apt_lists() {
  local sudo=() opts
  mapfile -d '' -t opts < <(apt_opts "$1")
  if ((EUID != 0)) && [[ ${#opts[@]} -eq 0 ]]; then
    command -v sudo >/dev/null || return 1
    sudo=(sudo)
  fi
  # A private suite's lists may have been deleted to move to its newer kernel.
  [[ ${#opts[@]} -eq 0 ]] || mkdir -p "$1/apt/lists/partial" "$1/apt/cache/archives/partial"
  echo "lab.sh: refreshing apt's package lists (apt-get update, $(apt_lists "$1"))" >&2
  "${sudo[@]}" apt-get "${opts[@]}" update -qq >&2 || return 1
  rm -f "$1/current-package"
}

# kernel_dir KCACHE PACKAGE: the cache folder of kernel PACKAGE. The folder
# is deleted and made afresh, so refuse anything but a kernel package's
# name: an empty one would make it the cache itself.
kernel_dir() {
  local kcache=$1 package=$2
  [[ $package =~ ^linux-image-[0-9][A-Za-z0-9.+~-]*$ ]] ||
    fail "apt names no kernel package ('$package' from apt-cache depends linux-image-amd64): run apt-get update, or fetch on a Debian host"
  echo "$kcache/$package"
}

# download_kernel KCACHE PACKAGE KDIR: apt-get download PACKAGE into a fresh
# KDIR/download, with the parts it depends on that carry its version
# (7.x splits the image: linux-binary-VER, linux-modules-VER,
# linux-base-VER); apt's words in KDIR/download.log; false if apt fails.
download_kernel() {
  local kcache=$1 package=$2 kdir=$3 opts packages
  local kver=${package#linux-image-}
  mapfile -d '' -t opts < <(apt_opts "$kcache")
  rm -rf -- "$kdir"
  mkdir -p "$kdir/download"
  mapfile -t packages < <(
    echo "$package"
    apt-cache "${opts[@]}" depends "$package" 2>/dev/null |
      awk -v v="-$kver" '$1 == "Depends:" && $2 ~ /^linux-(base|binary|modules)-/ &&
        substr($2, length($2) - length(v) + 1) == v { print $2 }'
  )
  (cd "$kdir/download" && apt-get "${opts[@]}" download "${packages[@]}" >"$kdir/download.log" 2>&1)
}
