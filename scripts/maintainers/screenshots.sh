#!/usr/bin/env bash
# screenshots.sh - take the lesson pages' Wireshark pictures, for real.
#
#   scripts/maintainers/screenshots.sh [ITEM...]     default: every item in the table below
#
# For each ITEM (a lesson number, or a lesson's scenario as 10:rnr) it opens
# the shipped capture docs/captures/lessonN[-NAME].pcapng (or, for a capture
# recorded by hand, docs/captures/by-hand/lessonN-NAME.pcapng) in Wireshark (the
# Debian package wireshark-qt) with the workbook's profile RDMA-Workbook, on
# a virtual screen (Xvfb, 1920x1080), shows the RoCE packets and the
# out-of-band exchange, selects the item's packet (the first one its filter
# below matches), expands its InfiniBand headers, and writes the window to
# docs/img/lessonN[-NAME]-wireshark.png (ImageMagick's import, 128 colours). Keystrokes
# and the click into the headers pane go through xdotool.
#
# What is missing (wireshark-qt, xvfb, imagemagick, xdotool) is installed
# first with apt-get, through sudo when not root: none of it is needed by
# make check. Wireshark runs with a throw-away HOME and configuration folder,
# so your own Wireshark settings are neither read nor changed.
#
# Exit status: 0 every picture taken; 1 one failed (or a capture is not
# shipped: make captures); 2 misuse.
set -euo pipefail
cd "$(dirname "$0")/../.."

# ITEM, then the display filter whose first match is the packet shown.
# Lesson 17's is the NAK "PSN sequence error" that the go-back-N resends
# (yellow: their RETRANSMIT comments) follow at once, 0.09 s into the stream.
shots='
4       infiniband.bth.opcode == 4
5       infiniband.bth.opcode == 11
6       infiniband.bth.opcode == 12
7       infiniband.bth.opcode == 20
8       infiniband.bth.opcode == 4
9       infiniband.bth.opcode == 100
10:rnr  infiniband.aeth.syndrome.opcode == 1
11      infiniband.bth.opcode == 4
12      infiniband.deth.q_key == 0x01234567
13      infiniband.aeth.syndrome.opcode == 1
14      infiniband.bth.opcode == 23
15      infiniband.bth.opcode == 4
16      infiniband.bth.opcode == 10
17:loss infiniband.aeth.syndrome.opcode == 3 && frame.time_relative > 0.09
18      infiniband.bth.opcode == 100
19      infiniband.bth.opcode == 11
20      infiniband.bth.opcode == 11
'
# What the packet list shows: the RoCE packets and the TCP segments with data.
view='infiniband || tcp.len > 0'
width=1920 height=1080
# Where the first row of the headers pane is, with the profile's
# gui.geometry_main_upper_pane (300) in a window of this size.
details_y=570

misuse() {
  echo "screenshots.sh: $*" >&2
  exit 2
}

# filter_of ITEM: its line in the table, or nothing.
filter_of() { awk -v i="$1" '$1 == i { $1 = ""; sub(/^ +/, ""); print }' <<<"$shots"; }
# capture_of ITEM: the shipped capture (as scripts/capture/shipped.sh names it),
# or the one recorded by hand (lesson 17's lossy runs: docs/captures/by-hand/).
capture_of() {
  local name=lesson$1
  [[ $1 != *:* ]] || name=lesson${1%%:*}-${1#*:}
  if [[ -r docs/captures/by-hand/$name.pcapng ]]; then
    echo "docs/captures/by-hand/$name.pcapng"
  else
    echo "docs/captures/$name.pcapng"
  fi
}
# picture_of ITEM: the PNG it becomes.
picture_of() {
  if [[ $1 == *:* ]]; then echo "docs/img/lesson${1%%:*}-${1#*:}-wireshark.png"; else echo "docs/img/lesson$1-wireshark.png"; fi
}

case ${1:-} in
  -h | --help)
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac
items=("$@")
if [[ ${#items[@]} -eq 0 ]]; then
  # Every item in the table whose capture is shipped.
  while read -r i _; do
    [[ -n $i ]] || continue
    if [[ -r $(capture_of "$i") ]]; then
      items+=("$i")
    else
      echo "screenshots.sh: skipping $i: $(capture_of "$i") is not shipped yet (make captures)"
    fi
  done <<<"$shots"
fi
for i in "${items[@]}"; do
  [[ -n $(filter_of "$i") ]] || misuse "no picture '$i' in the table; it has: $(awk 'NF { printf "%s ", $1 }' <<<"$shots")"
done

# --- what Wireshark on a virtual screen needs -----------------------------
need=()
command -v wireshark >/dev/null || need+=(wireshark-qt)
command -v Xvfb >/dev/null || need+=(xvfb)
[[ -x /usr/bin/import ]] || need+=(imagemagick) # /usr/local/bin may hold a stand-in convert, never import
command -v xdotool >/dev/null || need+=(xdotool)
command -v tshark >/dev/null || need+=(tshark)
if [[ ${#need[@]} -gt 0 ]]; then
  command -v apt-get >/dev/null ||
    { echo "screenshots.sh: not a Debian/Ubuntu system: install ${need[*]} (or their equivalents)" >&2 && exit 1; }
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null ||
      { echo "screenshots.sh: missing ${need[*]} and no sudo; as root run: apt-get install ${need[*]}" >&2 && exit 1; }
    sudo=(sudo)
  fi
  echo "screenshots.sh: installing ${need[*]}"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# --- a virtual screen and a throw-away Wireshark configuration -------------
tmp=$(mktemp -d)
xvfb_pid="" ws_pid=""
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  [[ -z $ws_pid ]] || kill "$ws_pid" 2>/dev/null || true
  [[ -z $xvfb_pid ]] || kill "$xvfb_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
# Xvfb picks a free display number and writes it to fd 3.
Xvfb -displayfd 3 -screen 0 "${width}x${height}x24" -nolisten tcp 3>"$tmp/display" >"$tmp/xvfb.log" 2>&1 &
xvfb_pid=$!
for _ in $(seq 50); do
  [[ -s $tmp/display ]] && break
  sleep 0.1
done
[[ -s $tmp/display ]] || {
  echo "screenshots.sh: Xvfb did not start; it said:" >&2
  cat "$tmp/xvfb.log" >&2
  exit 1
}
DISPLAY=:$(<"$tmp/display")
export DISPLAY
mkdir -p "$tmp/home" "$tmp/config/wireshark/profiles"
cp -R docs/wireshark-profile/RDMA-Workbook "$tmp/config/wireshark/profiles/"
# The main window fills the screen; no warning about running as root.
cat >"$tmp/config/wireshark/recent_common" <<RECENT
gui.geometry_main_x: 0
gui.geometry_main_y: 0
gui.geometry_main_width: $width
gui.geometry_main_height: $height
gui.geometry_main_maximized: FALSE
privs.warn_if_elevated: FALSE
RECENT

# shoot ITEM: one picture.
shoot() {
  local file frame png win
  file=$(capture_of "$1") png=$(picture_of "$1")
  [[ -r $file ]] || {
    echo "screenshots.sh: $file is not shipped: make captures" >&2
    return 1
  }
  frame=$(tshark -r "$file" -Y "$(filter_of "$1")" -T fields -e frame.number 2>/dev/null | head -1)
  [[ -n $frame ]] || {
    echo "screenshots.sh: no packet in $file matches $(filter_of "$1")" >&2
    return 1
  }
  HOME=$tmp/home XDG_CONFIG_HOME=$tmp/config XDG_RUNTIME_DIR=$tmp \
    wireshark -C RDMA-Workbook -r "$file" -Y "$view" -g "$frame" >"$tmp/wireshark.log" 2>&1 &
  ws_pid=$!
  win=$(timeout 60 xdotool search --sync --onlyvisible --name "${file##*/}" | head -1) || true
  [[ -n $win ]] || {
    echo "screenshots.sh: Wireshark's window for $file did not appear; it said:" >&2
    cat "$tmp/wireshark.log" >&2
    return 1
  }
  sleep 3 # let it draw the packet list
  # Into the headers pane (a click gives the window the keyboard).
  xdotool mousemove --window "$win" 200 "$details_y" click 1
  sleep 0.3
  # -g leaves a late packet on the list's last row: ten packets on and back
  # (Ctrl+Down, Ctrl+Up: Go > Next, Previous Packet) shows what follows it.
  xdotool key --repeat 10 --delay 50 ctrl+Down
  xdotool key --repeat 10 --delay 50 ctrl+Up
  sleep 0.5
  # The headers pane's fifth top row is InfiniBand (Frame, Ethernet, IPv4,
  # UDP, InfiniBand); Shift+Right expands it and every header under it.
  xdotool key Home Down Down Down Down
  sleep 0.3
  xdotool key shift+Right
  sleep 1
  mkdir -p "${png%/*}"
  # 128 colours, undithered: half the bytes, the text as sharp.
  import -window "$win" -colors 128 +dither "PNG8:$png"
  kill "$ws_pid"
  wait "$ws_pid" 2>/dev/null || true
  ws_pid=""
  echo "$png: $file, frame $frame selected ($(filter_of "$1"))"
}

status=0
for i in "${items[@]}"; do shoot "$i" || status=1; done
exit "$status"
