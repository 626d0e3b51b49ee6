#!/usr/bin/env bats
# The workbook's Wireshark profile (docs/wireshark-profile/RDMA-Workbook), its
# installer, the ladder that reads the profile's columns, and the captures
# shipped in docs/captures/ (scripts/capture/shipped.sh). Runs on the host: the
# profile and ladder tests need only tshark; "the shipped captures are
# current" boots a pair of lab guests per lesson and compares the wire.

# shellcheck disable=SC2030,SC2031 # each @test runs in its own process: what one sets stays in it, as meant
bats_require_minimum_version 1.5.0

setup_file() {
  cd "$BATS_TEST_DIRNAME/.." || return 1
  make -s all
}

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  bats_load_library bats-file
  cd "$BATS_TEST_DIRNAME/.." || return 1
  command -v tshark >/dev/null || fail "tshark is missing: make deps (or apt-get install tshark) installs it"
}

# ws_tshark ARGS...: tshark with the repo's profile and nothing of the user's
# own configuration (a configuration folder of its own), warnings dropped.
ws_tshark() {
  mkdir -p "$BATS_TEST_TMPDIR/conf/wireshark/profiles"
  ln -sfn "$PWD/docs/wireshark-profile/RDMA-Workbook" "$BATS_TEST_TMPDIR/conf/wireshark/profiles/RDMA-Workbook"
  XDG_CONFIG_HOME=$BATS_TEST_TMPDIR/conf tshark -C RDMA-Workbook "$@" 2>/dev/null
}

# tshark on a capture, without its "running as root" warning on stderr.
tshark_quiet() {
  tshark "$@" 2>/dev/null
}

# pcap NAME LINES: a pcap of RoCE v2 packets from 192.0.2.1 to 192.0.2.2, one
# packet (BTH onwards, then the ICRC) per line of hex as text2pcap reads it.
pcap() {
  text2pcap -q -4 192.0.2.1,192.0.2.2 -u 4791,4791 - "$BATS_TEST_TMPDIR/$1.pcap" <<<"$2"
}

# --- the profile -------------------------------------------------------------

@test "the profile loads in tshark and its columns show a shipped capture's opcode, QP, PSN, RETH and ImmDt" {
  run ws_tshark -r docs/captures/lesson5.pcapng -Y 'infiniband.bth.opcode == 11' -T fields -E separator='|' \
    -e _ws.col.Opcode -e "_ws.col.Dest QP" -e _ws.col.PSN -e "_ws.col.RETH VA" -e _ws.col.rkey -e "_ws.col.DMA len" -e _ws.col.ImmDt
  assert_success
  assert_output --regexp '^Reliable Connection \(RC\) - RDMA WRITE Only with Immediate\|0x000011\|[0-9]+\|0x[0-9a-f]{16}\|0x[0-9a-f]{8}\|19\|00000013$'
  # Without -T fields tshark prints the profile's columns, not its defaults.
  run ws_tshark -r docs/captures/lesson5.pcapng -Y 'infiniband.bth.opcode == 17'
  assert_output --regexp 'Reliable Connection \(RC\) - Acknowledge 0x000011 [0-9]+ Ack 1 +RC Acknowledge'
}

@test "the profile's columns show a shipped capture's AtomicETH and AtomicAckETH" {
  run ws_tshark -r docs/captures/lesson7.pcapng -Y 'infiniband.bth.opcode == 18' -T fields -E separator='|' \
    -e _ws.col.Opcode -e _ws.col.Orig -e _ws.col.AETH
  assert_line 'Reliable Connection (RC) - ATOMIC Acknowledge|0|Ack'
  assert_line 'Reliable Connection (RC) - ATOMIC Acknowledge|2|Ack'
  run ws_tshark -r docs/captures/lesson7.pcapng -Y 'infiniband.bth.opcode == 20' -T fields -E separator='|' \
    -e _ws.col.Swap/Add -e _ws.col.Compare
  assert_line '1|0'
}

@test "the profile's AETH column says ACK, RNR NAK with its timer, and NAK with its error" {
  # Syndromes 0x1f (ACK, 31 credits), 0x2e (RNR NAK, timer 14), 0x62 (NAK, code 2).
  pcap acks '000000 11 00 ff ff 00 00 00 11 00 00 00 2a 1f 00 00 01 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 2b 2e 00 00 01 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 2c 62 00 00 01 de ad be ef'
  run ws_tshark -r "$BATS_TEST_TMPDIR/acks.pcap" -T fields -e _ws.col.AETH
  assert_output 'Ack
RNR Nak,1.28 ms
Nak,Remote Access Error'
}

@test "every colouring rule of the profile compiles" {
  run ws_tshark -r docs/captures/lesson4.pcapng --color
  assert_success
  XDG_CONFIG_HOME=$BATS_TEST_TMPDIR/conf run --separate-stderr tshark -C RDMA-Workbook -r docs/captures/lesson4.pcapng --color
  refute_output --partial "Could not compile"
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  [[ $stderr != *"Could not compile"* ]] || fail "$stderr"
  run grep -c '^@' docs/wireshark-profile/RDMA-Workbook/colorfilters
  assert [ "$output" -ge 6 ]
}

@test "the profile switches off every payload heuristic, by names tshark knows, so a SEND stays a SEND" {
  local name names
  names=$(sed -n 's/^\([a-z_]*\),0$/\1/p' docs/wireshark-profile/RDMA-Workbook/heuristic_protos)
  [[ $names == *rpcrdma_infiniband* && $names == *eth_over_ib* ]] || fail "heuristic_protos: $names"
  # tshark refuses a heuristic name it does not know, and takes each of these.
  for name in $names; do
    run -0 tshark --disable-heuristic "$name" -r docs/captures/lesson4.pcapng -c 1
    refute_output --partial "No such protocol"
  done
  run -1 tshark --disable-heuristic no_such_heuristic -r docs/captures/lesson4.pcapng -c 1
  assert_output --partial "No such protocol no_such_heuristic"
  # Lesson 11's 2-byte SENDs: without the profile one passes for "PPP Multiplexing"; in the ladder each is a SEND.
  run -0 scripts/capture/ladder.sh docs/captures/lesson11.pcapng 192.0.2.1 192.0.2.2
  refute_output --partial "PPP"
  [[ $(grep -c 'RC Send Only (op 4)' <<<"$output") -ge 200 ]]
}

# --- installing it -------------------------------------------------------------

@test "make wireshark-profile installs the profile, and again keeps the first as a backup, asking nothing" {
  export HOME=$BATS_TEST_TMPDIR/home XDG_CONFIG_HOME=
  mkdir -p "$HOME"
  run -0 make -s wireshark-profile </dev/null
  dest=$HOME/.config/wireshark/profiles/RDMA-Workbook
  assert_output --partial "installed the profile RDMA-Workbook in $dest"
  run diff -r docs/wireshark-profile/RDMA-Workbook "$dest"
  assert_success
  echo "# changed by the learner" >>"$dest/colorfilters"
  run -0 scripts/capture/wireshark_profile.sh </dev/null
  assert_output --regexp "kept the profile that was there as $dest\.backup-[0-9]{8}-[0-9]{6}"
  backups=("$dest".backup-*)
  assert_equal "${#backups[@]}" 1
  assert_file_contains "${backups[0]}/colorfilters" "changed by the learner"
  run diff -r docs/wireshark-profile/RDMA-Workbook "$dest"
  assert_success
  run -0 scripts/capture/wireshark_profile.sh </dev/null # a third time in the same second: a second backup
  backups=("$dest".backup-*)
  assert_equal "${#backups[@]}" 2
}

@test "the installer uses XDG_CONFIG_HOME, and ~/.wireshark where only that older folder exists" {
  export HOME=$BATS_TEST_TMPDIR/home XDG_CONFIG_HOME=$BATS_TEST_TMPDIR/xdg
  mkdir -p "$HOME"
  run -0 scripts/capture/wireshark_profile.sh
  assert_file_exists "$XDG_CONFIG_HOME/wireshark/profiles/RDMA-Workbook/preferences"
  export XDG_CONFIG_HOME=
  mkdir -p "$HOME/.wireshark"
  run -0 scripts/capture/wireshark_profile.sh
  assert_file_exists "$HOME/.wireshark/profiles/RDMA-Workbook/preferences"
  assert_dir_not_exists "$HOME/.config/wireshark"
}

# --- the ladder reads the profile ------------------------------------------------

@test "ladder.sh decodes each of the 32 RNR NAK timer values in ms as Wireshark does" {
  local hex="" t
  for t in $(seq 0 31); do
    hex+=$(printf '000000 11 00 ff ff 00 00 00 11 00 00 00 %02x %02x 00 00 01 de ad be ef\n' "$t" $((0x20 | t)))$'\n'
  done
  pcap rnr "$hex"
  run -0 scripts/capture/ladder.sh "$BATS_TEST_TMPDIR/rnr.pcap"
  assert_line --index 1 --partial "AETH RNR NAK timer 655.36 ms (0) msn=1"
  assert_line --index 13 --partial "AETH RNR NAK timer 0.64 ms (12) msn=1"
  assert_line --index 32 --partial "AETH RNR NAK timer 491.52 ms (31) msn=1"
  ladder=$(sed -n 's/.*AETH RNR NAK timer \([0-9.]*\) ms.*/\1 ms/p' <<<"$output")
  run ws_tshark -r "$BATS_TEST_TMPDIR/rnr.pcap" -T fields -e _ws.col.AETH
  # shellcheck disable=SC2001 # ^ anchors each line of the output, which ${output//...} cannot
  assert_equal "$ladder" "$(sed 's/^RNR Nak,//' <<<"$output")"
}

@test "ladder.sh names each NAK's error" {
  pcap naks '000000 11 00 ff ff 00 00 00 11 00 00 00 01 60 00 00 01 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 02 61 00 00 01 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 03 62 00 00 01 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 04 63 00 00 01 de ad be ef'
  run -0 scripts/capture/ladder.sh "$BATS_TEST_TMPDIR/naks.pcap"
  assert_line --index 1 --regexp ' psn 1  AETH NAK PSN sequence error \(0\) msn=1$'
  assert_line --index 2 --regexp ' psn 2  AETH NAK invalid request \(1\) msn=1$'
  assert_line --index 3 --regexp ' psn 3  AETH NAK remote access error \(2\) msn=1$'
  assert_line --index 4 --regexp ' psn 4  AETH NAK remote operational error \(3\) msn=1$'
}

@test "ladder.sh marks a request sent again to the same address, QP and PSN as RETRANSMIT, and nothing else" {
  # SEND Only to QP 0x11 PSN 5; its ACK; the same SEND again; a SEND to QP
  # 0x12 with PSN 5; an ACK again for PSN 5 (a response is never marked).
  pcap resend '000000 04 00 ff ff 00 00 00 11 80 00 00 05 32 33 00 00 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 05 1f 00 00 01 de ad be ef
000000 04 00 ff ff 00 00 00 11 80 00 00 05 32 33 00 00 de ad be ef
000000 04 00 ff ff 00 00 00 12 80 00 00 05 32 33 00 00 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 05 1f 00 00 01 de ad be ef'
  run -0 scripts/capture/ladder.sh "$BATS_TEST_TMPDIR/resend.pcap" 192.0.2.1 192.0.2.2
  assert_line --index 1 --regexp 'RC Send Only \(op 4\)  dest qp 0x000011 psn 5$'
  assert_line --index 3 --regexp 'RC Send Only \(op 4\)  dest qp 0x000011 psn 5  RETRANSMIT \(first: frame 1\)$'
  assert_line --index 4 --regexp 'dest qp 0x000012 psn 5$'
  assert_line --index 5 --regexp 'AETH ACK msn=1$'
  run grep -c RETRANSMIT <<<"$output"
  assert_output 1
}

@test "ladder.sh refuses a profile that lacks a column it prints, naming the column" {
  mkdir -p "$BATS_TEST_TMPDIR/repo/scripts/capture" "$BATS_TEST_TMPDIR/repo/docs/wireshark-profile"
  cp scripts/capture/ladder.sh "$BATS_TEST_TMPDIR/repo/scripts/capture/"
  cp -R docs/wireshark-profile/RDMA-Workbook "$BATS_TEST_TMPDIR/repo/docs/wireshark-profile/"
  sed -i '/"ImmDt", /d' "$BATS_TEST_TMPDIR/repo/docs/wireshark-profile/RDMA-Workbook/preferences"
  run -1 "$BATS_TEST_TMPDIR/repo/scripts/capture/ladder.sh" docs/captures/lesson5.pcapng
  assert_output "ladder.sh: the profile $BATS_TEST_TMPDIR/repo/docs/wireshark-profile/RDMA-Workbook has no column \"ImmDt\""
}

# --- the shipped captures ----------------------------------------------------------

@test "every lesson with a peer has a small shipped capture whose comment says what was run" {
  run -0 scripts/capture/shipped.sh --list
  assert_line 4
  assert_line 9
  local items=("${lines[@]}") item file
  for item in "${items[@]}"; do
    if [[ $item == *:* ]]; then file=docs/captures/lesson${item%%:*}-${item#*:}.pcapng; else file=docs/captures/lesson$item.pcapng; fi
    assert_file_exists "$file"
    [[ $(stat -c %s "$file") -lt 65536 ]] || fail "$file is larger than 64 KiB"
    run -0 capinfos -k "$file"
    assert_output --partial "RDMA Verbs Workbook, make capture LESSON=${item%%:*}"
    # (lesson 10's retry is one SEND sent 7 times: one line of signature, 7 packets)
    [[ $(tshark -r "$file" -Y infiniband 2>/dev/null | wc -l) -ge 2 ]] || fail "$file has fewer than 2 RoCE packets"
    [[ $(scripts/capture/shipped.sh --signature "$file" | wc -l) -ge 1 ]] || fail "$file has no RoCE packet in its signature"
  done
  # A shipped file no lesson makes is stale.
  for file in docs/captures/*.pcapng; do
    item=${file#docs/captures/lesson}
    item=${item%.pcapng}
    item=${item/-/:}
    [[ " ${items[*]} " == *" $item "* ]] || fail "$file: no lesson makes it (scripts/capture/shipped.sh --list)"
  done
}

@test "a recorded capture says in its comment what ran, and marks each request sent again for the profile's colour" {
  # A SEND, its ACK, the same SEND again (a retransmission), another QP's SEND, an ACK.
  pcap resend '000000 04 00 ff ff 00 00 00 11 80 00 00 05 32 33 00 00 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 05 1f 00 00 01 de ad be ef
000000 04 00 ff ff 00 00 00 11 80 00 00 05 32 33 00 00 de ad be ef
000000 04 00 ff ff 00 00 00 12 80 00 00 05 32 33 00 00 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 05 1f 00 00 01 de ad be ef'
  local shipped=$BATS_TEST_TMPDIR/shipped
  CAPTURES_DIR=$shipped run -0 scripts/capture/shipped.sh --from "$BATS_TEST_TMPDIR/resend.pcap" 4
  assert_output --regexp "^$shipped/lesson4.pcapng +5 RoCE packets, [0-9]+ bytes$"
  run -0 capinfos -k "$shipped/lesson4.pcapng"
  assert_output --partial 'make capture LESSON=4: guest a (192.0.2.1) ran the server "./lesson4 --timeout 60", guest b (192.0.2.2) the client "./lesson4 --timeout 60 192.0.2.1 2 3"'
  run tshark_quiet -r "$shipped/lesson4.pcapng" -Y frame.comment -T fields -e frame.number -e frame.comment
  assert_output "3	RETRANSMIT: this request's destination QP and PSN were first sent in frame 1"
  # The profile's colouring rule for retransmissions matches that packet, and only it.
  assert_file_contains docs/wireshark-profile/RDMA-Workbook/colorfilters '@frame.comment contains "RETRANSMIT"@'
  run ws_tshark -r "$shipped/lesson4.pcapng" -Y 'frame.comment contains "RETRANSMIT"' -T fields -e frame.number
  assert_output 3
}

@test "capture/shipped.sh refuses an unknown capture and an unknown option, exit 2, before booting anything" {
  run -2 scripts/capture/shipped.sh 2
  assert_output --regexp "^capture/shipped.sh: no capture '2'; the captures are: 4 5 6 7 8 9"
  run -2 scripts/capture/shipped.sh --nope
  assert_output "capture/shipped.sh: unknown option '--nope' (see scripts/capture/shipped.sh -h)"
}

# A PATH holding the host's commands but the ones named: what a machine without them sees.
path_without() {
  local dir=$BATS_TEST_TMPDIR/path f
  mkdir -p "$dir"
  for f in /usr/local/bin/* /usr/bin/* /bin/* /usr/sbin/* /sbin/*; do
    [[ -e $dir/${f##*/} ]] || ln -s "$f" "$dir/${f##*/}"
  done
  for f in "$@"; do rm -f "$dir/$f"; done
  echo "$dir"
}

@test "capture/shipped.sh without tshark, or without the lab's qemu, says what is missing and how to get it" {
  PATH=$(path_without tshark) run -1 scripts/capture/shipped.sh --check 4
  assert_output "capture/shipped.sh: tshark is missing: install the Debian package tshark (make deps, or apt-get install tshark)"
  PATH=$(path_without qemu-system-x86_64) run -1 scripts/capture/shipped.sh --check 4
  assert_output "capture/shipped.sh: the lab needs qemu-system-x86_64 (Debian package qemu-system-x86): make deps, and docs/lab.md"
}

@test "screenshots.sh refuses a picture it has no table line for, before installing or starting anything" {
  run -2 scripts/maintainers/screenshots.sh 3
  assert_output --regexp "^screenshots.sh: no picture '3' in the table; it has: 4 5 6 7 8 9 10:rnr 11 12 13 14 15"
}

@test "every two-process lesson's page shows its Wireshark picture, and the picture is shipped" {
  local n page png
  for n in 4 5 6 7 8 9 10 11 12 13 14 15; do
    page=$(compgen -G "docs/lesson$n-*.md")
    if [[ $n == 10 ]]; then png=img/lesson10-rnr-wireshark.png; else png=img/lesson$n-wireshark.png; fi
    grep -qF "]($png)" "$page" || fail "$page does not show $png"
    [[ -s docs/$png ]] || fail "docs/$png is not shipped (scripts/maintainers/screenshots.sh)"
  done
}

# Whether each shipped capture is current is checked where the lessons are
# captured anyway: tests/capture.bats and tests/capture_lessonN.bats compare
# their fresh capture with the shipped file (capture/shipped.sh --compare).

@test "a capture whose wire differs from the shipped file fails the check, with the difference" {
  # Lesson 8's shipped file stands in for lesson 4's: lesson 4 sends one
  # request, lesson 8 two, so the check must see two packets missing.
  mkdir -p "$BATS_TEST_TMPDIR/shipped"
  cp docs/captures/lesson8.pcapng "$BATS_TEST_TMPDIR/shipped/lesson4.pcapng"
  CAPTURES_DIR=$BATS_TEST_TMPDIR/shipped run scripts/capture/shipped.sh --compare docs/captures/lesson4.pcapng 4
  assert_failure 1
  assert_line "4: the wire changed since $BATS_TEST_TMPDIR/shipped/lesson4.pcapng was recorded: run make captures"
  assert_line "-client -> server op 4"
  refute_output --partial "current"
}

@test "a capture with the shipped file's wire is current" {
  run scripts/capture/shipped.sh --compare docs/captures/lesson7.pcapng 7
  assert_success
  assert_line --regexp '^7: current \([0-9]+ distinct RoCE packets as shipped in docs/captures/lesson7\.pcapng\)$'
}

@test "a race run.conf names is left out of the check: lesson 13's capture whose SRQ never ran dry is current" {
  # The shipped capture's RNR NAK and the NAK of the resend after it, cut
  # out: the wire of a run where the server kept up with the burst.
  local frames
  frames=$(tshark_quiet -r docs/captures/lesson13.pcapng -Y 'infiniband.aeth.syndrome.opcode != 0' -T fields -e frame.number | paste -sd' ')
  [[ -n $frames ]] || fail "the shipped lesson 13 capture has no NAK to cut"
  # shellcheck disable=SC2086 # one frame number a word
  editcap docs/captures/lesson13.pcapng "$BATS_TEST_TMPDIR/kept_up.pcapng" $frames
  run scripts/capture/shipped.sh --compare "$BATS_TEST_TMPDIR/kept_up.pcapng" 13
  assert_success
  assert_line --regexp '^13: current \([0-9]+ distinct RoCE packets as shipped in docs/captures/lesson13\.pcapng; races=rnr left out\)$'
  # The signature alone, with no race named, keeps the NAKs.
  run -0 scripts/capture/shipped.sh --signature docs/captures/lesson13.pcapng
  assert_line "server -> client op 17 Nak,PSN Sequence Error"
}
