#!/usr/bin/env bash
# wireshark_profile.sh - install the workbook's Wireshark profile, "RDMA-Workbook".
#
#   scripts/capture/wireshark_profile.sh        (what `make wireshark-profile` runs)
#
# Copies docs/wireshark-profile/RDMA-Workbook/ into Wireshark's profile folder:
# $XDG_CONFIG_HOME/wireshark/profiles/ (~/.config/wireshark/profiles/), or
# ~/.wireshark/profiles/ where only that older folder exists. Then pick it in
# Wireshark (Edit > Configuration Profiles, or the "Profile:" field at the
# bottom right) or start `wireshark -C RDMA-Workbook FILE`. It asks nothing:
# an installed profile of that name is moved aside first, to
# RDMA-Workbook.backup-YYYYMMDD-HHMMSS beside it (Wireshark lists it as one
# more profile), so no column or rule you changed is lost.
#
# Exit status: 0 installed; 1 the copy failed.
set -euo pipefail

case ${1:-} in
  -h | --help)
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  "") ;;
  *)
    echo "wireshark_profile.sh: no arguments expected (see scripts/capture/wireshark_profile.sh -h)" >&2
    exit 2
    ;;
esac

src=$(cd "$(dirname "$0")/../.." && pwd)/docs/wireshark-profile/RDMA-Workbook
# Where Wireshark looks (wsutil/filesystem.c): the XDG folder, unless only
# the legacy ~/.wireshark exists.
conf=${XDG_CONFIG_HOME:-$HOME/.config}/wireshark
if [[ ! -d $conf && -d $HOME/.wireshark ]]; then conf=$HOME/.wireshark; fi
dest=$conf/profiles/RDMA-Workbook

mkdir -p "$conf/profiles"
if [[ -e $dest ]]; then
  backup=$dest.backup-$(date +%Y%m%d-%H%M%S)
  n=1
  while [[ -e $backup ]]; do # two installs in one second
    n=$((n + 1))
    backup=$dest.backup-$(date +%Y%m%d-%H%M%S)-$n
  done
  mv "$dest" "$backup"
  echo "wireshark_profile.sh: kept the profile that was there as $backup"
fi
cp -R "$src" "$dest"
echo "wireshark_profile.sh: installed the profile RDMA-Workbook in $dest"
echo "  open a capture with it: wireshark -C RDMA-Workbook docs/captures/lesson4.pcapng"
