#!/usr/bin/env bash
# capture/shipped.sh - record every two-process lesson's wire into docs/captures/,
# and check that the recorded captures are still what the lessons send.
#
#   scripts/capture/shipped.sh [ITEM...]          record (what `make captures` runs)
#   scripts/capture/shipped.sh --check [ITEM...]  re-capture and compare, write nothing
#   scripts/capture/shipped.sh --list             the items, one a line
#   scripts/capture/shipped.sh --signature FILE   a capture's RoCE packets, one a line
#   scripts/capture/shipped.sh --from PCAP ITEM   record PCAP (e.g. what `make capture`
#                                          just wrote) as ITEM's, booting nothing
#   scripts/capture/shipped.sh --compare PCAP ITEM  compare PCAP (what `make capture`
#                                          just wrote) with ITEM's shipped file
#
# An ITEM is a lesson number (4) or a lesson's scenario (10:rnr). Without
# items: every lesson whose run.conf names a client (scripts/lessons/run_conf.sh),
# so a lesson is recorded as soon as it lands. A lesson whose run.conf has
#   captures=rnr nak retry
# is recorded once per scenario, each as `make capture LESSON=N
# SCENARIO=NAME` runs it, into docs/captures/lessonN-NAME.pcapng; any other
# lesson once, into docs/captures/lessonN.pcapng.
#
# Each recording is `make capture LESSON=N` (scripts/capture/lesson.sh): two
# lab guests, the server on guest a (192.0.2.1), the client on guest b
# (192.0.2.2), every frame on the cable between them. It is written as pcapng
# with a capture comment that says what was run, and a packet comment
# "RETRANSMIT ..." on each request the ladder marks as sent again (the
# RDMA-Workbook profile colours them).
#
# The signature of a capture is the RoCE packets each side sent, its
# requests in order, then its answers in order (the client's, then the
# server's), each as "SOURCE -> DESTINATION op OPCODE [AETH verdict]", the verdict as the profile's AETH column shows it
# ("Ack", "RNR Nak,1.28 ms", "Nak,Remote Access Error"); a packet repeating
# an earlier one (a retransmission, or its answer) is left out. --check
# passes when a fresh capture has the shipped file's signature; --compare
# when the capture given has it.
#
# Exit status: 0 done (or current); 1 a capture failed or differs, or a tool
# or the lab is missing (the message says how to get it); 2 misuse.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck disable=SC1091 # scripts/lessons/run_conf.sh, checked on its own
source scripts/lessons/run_conf.sh

# Where the shipped captures are (CAPTURES_DIR: another folder, for a test).
out_dir=${CAPTURES_DIR:-docs/captures}
server_ip=192.0.2.1 client_ip=192.0.2.2 # as scripts/capture/lesson.sh sets them

# netns ITEM: true when the item's lesson captures in one guest between two
# network namespaces (run.conf's capture=netns, lesson 18); then the two
# addresses are lessons/18_netns/netns_pair.sh's, as capture/lesson.sh sets them.
# Either way it sets server_ip and client_ip for the item.
netns() {
  server_ip=192.0.2.1 client_ip=192.0.2.2
  [[ $(run_text "$(lesson_dir "${1%%:*}")" capture) == netns ]] || return 1
  server_ip=198.51.100.1 client_ip=198.51.100.2
}

misuse() {
  echo "capture/shipped.sh: $*" >&2
  exit 2
}
fail() {
  echo "capture/shipped.sh: $*" >&2
  exit 1
}

# items: every lesson with a client, "N" or "N:SCENARIO" per run.conf's captures=.
items() {
  local n dir s
  for n in $(lesson_numbers); do
    dir=$(lesson_dir "$n")
    [[ -n $(run_text "$dir" client) ]] || continue
    mapfile -t scenarios < <(run_words "$dir" captures)
    if [[ ${#scenarios[@]} -eq 0 ]]; then
      echo "$n"
    else
      for s in "${scenarios[@]}"; do echo "$n:$s"; done
    fi
  done
}

# file ITEM: where the item's capture is shipped.
file() {
  local n=${1%%:*} s=${1#*:}
  if [[ $1 == *:* ]]; then echo "$out_dir/lesson$n-$s.pcapng"; else echo "$out_dir/lesson$n.pcapng"; fi
}

# signature FILE: the RoCE packets each side sent, one a line: who sends to
# whom, the BTH opcode, the AETH verdict (read through the profile, as the
# ladder reads it). Each side's requests in order (SEND, WRITE, READ Request,
# atomics, MADs), then its answers in order (Acknowledge, READ Response,
# Atomic Acknowledge: opcodes 13-18): the client's, then the server's. How
# the streams interleave is a race (lesson 8's client sends its second
# request while acknowledging the first response), and a loaded machine
# retransmits on its own (an ACK later than the 67 ms timeout), so neither
# is compared: a packet that repeats an earlier one (same sender, QP, PSN,
# opcode and verdict) is left out.
# With RACES "rnr" (run.conf's races=rnr), the answers a race decides are
# left out too: whether a SEND found the receive queue empty (an RNR NAK,
# and the PSN sequence NAK its resend may meet), which load moves.
signature() {
  local conf status=0 races=${2:-}
  conf=$(mktemp -d)
  mkdir -p "$conf/wireshark/profiles"
  ln -s "$PWD/docs/wireshark-profile/RDMA-Workbook" "$conf/wireshark/profiles/RDMA-Workbook"
  XDG_CONFIG_HOME=$conf tshark -C RDMA-Workbook -r "$1" -Y infiniband -T fields -E separator='|' \
    -e ip.src -e ip.dst -e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.bth.opcode -e _ws.col.AETH 2>/dev/null |
    awk -F'|' -v S="$server_ip" -v C="$client_ip" -v races=" $races " '
      function who(ip) { return ip == S ? "server" : ip == C ? "client" : ip }
      races ~ / rnr / && ($6 ~ /^RNR Nak/ || $6 == "Nak,PSN Sequence Error") { next }
      {
        line = sprintf("%s -> %s op %s%s", who($1), who($2), $5, $6 == "" ? "" : " " $6)
        if ((line SUBSEP $3 SUBSEP $4) in seen) next      # a retransmission, or its answer again
        seen[line, $3, $4] = 1
        s = ($1 == C ? 0 : 2) + ($5 >= 13 && $5 <= 18)    # 0, 1: client requests, answers; 2, 3: server
        stream[s, ++n[s]] = line
      }
      END { for (s = 0; s < 4; s++) for (i = 1; i <= n[s]; i++) print stream[s, i] }' || status=$?
  rm -rf "$conf"
  return "$status"
}

# what_ran ITEM: the capture comment's account of the run.
what_ran() {
  local n=${1%%:*} dir server client
  dir=$(lesson_dir "$n")
  if [[ $1 == *:* ]]; then
    printf 'make capture LESSON=%s SCENARIO=%s (the scenario as lessons/%s/run.conf and %s.cpp define it)' \
      "$n" "${1#*:}" "${dir#lessons/}" "$(scenario_program "$dir" "$n" "${1#*:}")"
  elif netns "$1"; then
    server=$(run_words "$dir" server | xargs -r printf ' %q')
    client=$(run_words "$dir" client "$server_ip" | xargs -r printf ' %q')
    printf 'make capture LESSON=%s: in one guest, network namespace ns_a (%s) ran the server "./lesson%s --timeout 60 --netns ns_a%s", ns_b (%s) the client "./lesson%s --timeout 60 --netns ns_b%s"' \
      "$n" "$server_ip" "$n" "$server" "$client_ip" "$n" "$client"
  else
    server=$(run_words "$dir" server | xargs -r printf ' %q')
    client=$(run_words "$dir" client "$server_ip" | xargs -r printf ' %q')
    printf 'make capture LESSON=%s: guest a (%s) ran the server "./lesson%s --timeout 60%s", guest b (%s) the client "./lesson%s --timeout 60%s"' \
      "$n" "$server_ip" "$n" "$server" "$client_ip" "$n" "$client"
  fi
}

# capture ITEM: run it across two guests; print the raw pcap's path.
# (capture/lesson.sh starts guest b's client once guest a's server has
# printed its ready= line, so the two never race.)
capture() {
  local n=${1%%:*} scenario="" log pcap
  [[ $1 != *:* ]] || scenario=${1#*:}
  log=$(mktemp)
  if ! scripts/capture/lesson.sh "$n" "$scenario" >"$log" 2>&1; then
    sed 's/^/  | /' "$log" >&2
    rm -f "$log"
    fail "the capture of $1 failed (its output is above)"
  fi
  # capture/lesson.sh says where the wire went: "..., wire -> captures/lessonN.pcap".
  pcap=$(sed -n 's/^capture: .*, wire -> //p' "$log" | tail -1)
  rm -f "$log"
  [[ -s $pcap ]] || fail "the capture of $1 wrote no pcap"
  echo "$pcap"
}

# record ITEM: capture it and write the shipped pcapng.
record() {
  local pcap
  pcap=$(capture "$1") || return 1
  write "$1" "$pcap"
}

# write ITEM PCAP: PCAP as ITEM's shipped pcapng, with its comments.
write() {
  local pcap=$2 dest marks=() frame first where="two qemu guests joined by a virtual cable (scripts/lab.sh pair)"
  dest=$(file "$1")
  ! netns "$1" || where="one qemu guest, two network namespaces joined by a veth pair (lessons/18_netns/netns_pair.sh), seen on the veth"
  # A packet comment on each retransmitted request, as the ladder finds them.
  while read -r frame first; do
    marks+=(-a "$frame:RETRANSMIT: this request's destination QP and PSN were first sent in frame $first")
  done < <(scripts/capture/ladder.sh "$pcap" "$server_ip" "$client_ip" |
    sed -n 's/^ *\([0-9][0-9]*\) .*RETRANSMIT (first: frame \([0-9]*\)).*/\1 \2/p')
  mkdir -p "$out_dir"
  # Shipped captures stay under 64 KiB: one whose payloads make it larger
  # (lesson 16's 1 KiB a page) keeps each frame's first 160 bytes, every
  # header up to and past the RETH and AETH, and its real lengths; its
  # comment says so.
  local snap=() cut=""
  if (($(stat -c %s "$pcap") > 60000)); then
    snap=(-s 160)
    cut=" Each frame is cut to its first 160 bytes (its headers; the lengths are the real ones) to keep the file small."
  fi
  editcap -F pcapng "${snap[@]}" "${marks[@]}" --discard-capture-comment --capture-comment "RDMA Verbs Workbook, $(what_ran "$1"). Soft-RoCE (rxe) in $where, recorded by make captures.$cut Open it with the RDMA-Workbook profile: docs/wireshark.md." \
    "$pcap" "$dest"
  printf '%-36s %3s RoCE packets, %s bytes\n' "$dest" "$(tshark -r "$dest" -Y infiniband 2>/dev/null | wc -l)" "$(stat -c %s "$dest")"
}

# check ITEM: capture it again and compare it with the shipped file.
check() {
  local pcap
  [[ -r $(file "$1") ]] || {
    echo "$1: no shipped capture $(file "$1"): run make captures"
    return 1
  }
  pcap=$(capture "$1") || return 1
  compare "$1" "$pcap"
}

# compare ITEM PCAP: PCAP's signature against ITEM's shipped file's.
compare() {
  local dest races
  dest=$(file "$1")
  netns "$1" || true
  races=$(run_text "$(lesson_dir "${1%%:*}")" races)
  [[ -r $dest ]] || {
    echo "$1: no shipped capture $dest: run make captures"
    return 1
  }
  if diff -u --label "$dest (shipped)" --label "$2 (now)" <(signature "$dest" "$races") <(signature "$2" "$races"); then
    echo "$1: current ($(signature "$dest" "$races" | wc -l) distinct RoCE packets as shipped in $dest${races:+; races=$races left out})"
  else
    echo "$1: the wire changed since $dest was recorded: run make captures"
    return 1
  fi
}

# What each mode needs, said before anything boots.
need_tools() {
  local t
  for t in tshark editcap; do
    command -v "$t" >/dev/null ||
      fail "$t is missing: install the Debian package tshark (make deps, or apt-get install tshark)"
  done
}
need_lab() {
  command -v qemu-system-x86_64 >/dev/null ||
    fail "the lab needs qemu-system-x86_64 (Debian package qemu-system-x86): make deps, and docs/lab.md"
}

mode=record
case ${1:-} in
  -h | --help)
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  --list)
    items
    exit 0
    ;;
  --signature)
    [[ $# -eq 2 ]] || misuse "--signature takes one capture file"
    [[ -r $2 ]] || fail "cannot read $2"
    need_tools
    signature "$2"
    exit 0
    ;;
  --check)
    mode=check
    shift
    ;;
  --from)
    [[ $# -eq 3 ]] || misuse "--from takes a capture file and an item: --from captures/lesson4.pcap 4"
    [[ -r $2 ]] || fail "cannot read $2"
    mapfile -t known < <(items)
    [[ " ${known[*]} " == *" $3 "* ]] || misuse "no capture '$3'; the captures are: ${known[*]}"
    need_tools
    write "$3" "$2"
    exit 0
    ;;
  --compare)
    [[ $# -eq 3 ]] || misuse "--compare takes a capture file and an item: --compare captures/lesson4.pcap 4"
    [[ -r $2 ]] || fail "cannot read $2"
    mapfile -t known < <(items)
    [[ " ${known[*]} " == *" $3 "* ]] || misuse "no capture '$3'; the captures are: ${known[*]}"
    need_tools
    compare "$3" "$2"
    exit
    ;;
  -*) misuse "unknown option '$1' (see scripts/capture/shipped.sh -h)" ;;
esac

mapfile -t known < <(items)
todo=("$@")
[[ ${#todo[@]} -gt 0 ]] || todo=("${known[@]}")
for i in "${todo[@]}"; do
  [[ " ${known[*]} " == *" $i "* ]] ||
    misuse "no capture '$i'; the captures are: ${known[*]}"
done
need_tools
need_lab
[[ $mode == check ]] || make -s all

status=0
for i in "${todo[@]}"; do
  if [[ $mode == check ]]; then check "$i" || status=1; else record "$i" || status=1; fi
done
exit "$status"
