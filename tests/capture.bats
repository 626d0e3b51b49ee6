#!/usr/bin/env bats
# bats file_tags=pair
# Runs on the host; its pairs are the pair of guests tests/run.sh keeps up
# for the suites tagged pair (LAB_PAIR_DIR), or two fresh guests per
# capture when none is up (bats tests/FILE.bats alone).
# make capture LESSON=N: each two-process lesson runs across two lab guests
# joined by a virtual cable, and the capture holds the operations the lesson
# is named for.
# This is also where the lessons are shown to work across two hosts.
# Also here, with nothing booted: capture/lesson.sh's refusals,
# capture/command.sh's options on this host's loopback, and ladder.sh's
# labels on a hand-made pcap.

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

# The lessons whose run.conf names a client, in order, as one line: "4 5 ...".
peer_lessons() {
  local conf n
  for conf in lessons/*/run.conf; do
    grep -q '^client=.' "$conf" || continue
    n=$(basename "$(dirname "$conf")")
    echo $((10#${n%%_*}))
  done | sort -n | paste -sd' '
}

@test "lesson 4 across two guests: the sum is right on both, and the wire carries SENDs and ACKs" {
  capture 4
  assert_output --partial "[b] result: 2 + 3 = 5"
  assert_output --partial "[a] result: 2 + 3 = 5"
  run opcodes 4
  assert_line "4"  # RC SEND Only: the request and the response
  assert_line "17" # RC Acknowledge
  [ "$(grep -cx 4 <<<"$output")" -ge 2 ]
}

@test "lesson 5 across two guests: one RDMA WRITE Only with Immediate carries RETH and ImmDt" {
  capture 5
  assert_output --partial '[a] result: received 19 bytes: "hello over the wire"'
  run opcodes 5
  assert_line "11" # RDMA WRITE Only with Immediate
  assert_line "17"
  refute_line "4" # no SEND: the data arrives by WRITE
  # One WRITE: a resend (its ACK later than the 67 ms timeout, on a loaded
  # host) repeats its PSN, and the ladder marks it RETRANSMIT.
  run bash -c "tshark -r captures/lesson5.pcap -Y 'infiniband.bth.opcode == 11' -T fields -E occurrence=f \
    -e infiniband.bth.psn -e infiniband.reth.dmalen -e infiniband.immdt 2>/dev/null | sort -u | cut -f2-"
  assert_output --regexp '^19[[:space:]]+0*13$' # 19 bytes, immediate = 19 (0x13)
}

@test "lesson 6 across two guests: an RDMA READ Request answered by a READ Response" {
  capture 6
  assert_output --partial '[b] result: read 25 bytes: "text in the server memory"'
  # The ladder: the request carries the server's buffer, the client's DONE follows on TCP.
  assert_output --regexp 'client 192\.0\.2\.2 -> server 192\.0\.2\.1 +RC RDMA Read Request \(op 12\)  dest qp 0x[0-9a-f]+ psn [0-9]+  RETH va=0x[0-9a-f]+ rkey=0x[0-9a-f]+ len=25'
  assert_output --regexp 'server 192\.0\.2\.1 -> client 192\.0\.2\.2 +RC RDMA Read Response Only \(op 16\)'
  assert_output --partial '4 bytes (out-of-band exchange) "DONE"'
  run opcodes 6
  assert_line "12" # RDMA READ Request
  assert_line "16" # RDMA READ Response Only
}

@test "lesson 7 across two guests: FetchAdd and CmpSwap, each answered by an Atomic Acknowledge" {
  capture 7
  assert_output --partial "[a] result: counter = 3"
  # The ladder: each Atomic Acknowledge carries the value before the add: 0, 1, 2.
  assert_output --regexp 'RC Atomic Acknowledge \(op 18\).*AtomicAckETH orig=0 '
  assert_output --regexp 'RC Atomic Acknowledge \(op 18\).*AtomicAckETH orig=2 '
  run opcodes 7
  assert_line "20"                        # FetchAdd
  assert_line "19"                        # CmpSwap
  assert_line "18"                        # ATOMIC Acknowledge
  [ "$(grep -cx 20 <<<"$output")" -eq 3 ] # -n 3: three fetch-and-adds
}

@test "lesson 8 across two guests: two requests, two sums, all by SEND" {
  capture 8
  assert_output --partial "[b] result: 2 + 3 = 5"
  run opcodes 8
  assert_line "4"
  [ "$(grep -cx 4 <<<"$output")" -ge 4 ] # -n 2: two requests and two responses
}

@test "lesson 9 across two guests: the CM's MADs on QP1 connect and disconnect, then SENDs carry the sum" {
  capture 9
  assert_output --partial "[b] result: 2 + 3 = 5"
  run opcodes 9
  assert_line "100" # UD SEND Only: the CM's MADs
  assert_line "4"
  run tshark_quiet -r captures/lesson9.pcap -Y 'infiniband.bth.opcode == 100' -T fields -e infiniband.bth.destqp
  assert_line --regexp '^0x0+1$' # addressed to QP1, the General Services QP
  run tshark_quiet -r captures/lesson9.pcap -Y infiniband
  assert_output --partial "ConnectRequest"
  assert_output --partial "ReadyToUse"
  assert_output --partial "DisconnectRequest"
}

@test "scripts/capture/command.sh on a host whose rxe sits on a real netdev captures the lesson and prints its ladder" {
  # Guest b plays a learner's real host: rxe0 on eth0, the server on another host (guest a).
  run timeout 300 scripts/lab.sh pair --timeout 240 \
    --a "./lesson4 --timeout 60" \
    --b "scripts/capture/command.sh -o /tmp/l4.pcap -- ./lesson4 --timeout 60 192.0.2.1 2 3"
  assert_success
  assert_output --partial "[b] capture/command.sh: capturing on eth0 (udp port 4791 or tcp port 18515) into /tmp/l4.pcap"
  assert_output --partial "[a] result: 2 + 3 = 5"
  assert_output --partial "[b] result: 2 + 3 = 5"
  assert_output --regexp '\[b\] +[0-9]+ +[0-9.]+ +192\.0\.2\.2 -> 192\.0\.2\.1 +RC Send Only \(op 4\)'
  assert_output --regexp '\[b\] +[0-9]+ +[0-9.]+ +192\.0\.2\.1 -> 192\.0\.2\.2 +RC Acknowledge \(op 17\).*AETH ACK'
  refute_output --partial "no RoCE packets captured"
}

@test "scripts/capture/command.sh warns that a peer on the same host puts nothing on the wire, and says so after" {
  # The server's "waiting" line, not a fixed sleep, says when the client may
  # come; both run inside the capture, so tshark's start-up eats no timeout.
  # shellcheck disable=SC2016 # the guest's bash expands this, not ours
  run timeout 200 scripts/lab.sh run --timeout 150 -- scripts/capture/command.sh -o "$BATS_TEST_TMPDIR/l4.pcap" -- bash -c '
    out=$(mktemp)
    ./lesson4 --timeout 30 >"$out" 2>&1 &
    server=$!
    for _ in $(seq 100); do grep -q "waiting for a client" "$out" && break; sleep 0.1; done
    ./lesson4 --timeout 30 127.0.0.1 2 3
    client=$?
    wait "$server"
    echo "server exit status $?"
    sed "s/^/server said: /" "$out"
    exit "$client"'
  assert_success
  assert_line "result: 2 + 3 = 5"
  assert_line "server exit status 0"
  assert_line "server said: result: 2 + 3 = 5"
  assert_output --partial "warning: the peer is on this host; rxe loopback puts nothing on dummy0"
  assert_output --partial "no RoCE packets captured: was the peer on this host (rxe loopback)?"
}

# --- with nothing booted ------------------------------------------------------

@test "make capture refuses a lesson without a peer, with the reason, before booting anything" {
  run -2 make -s capture LESSON=2
  assert_output --partial "capture/lesson.sh: lesson 2 has no peer, so nothing crosses a wire; lessons $(peer_lessons) do"
  refute_output --partial "capture: lesson 2" # the line printed before the guests boot
}

@test "capture/lesson.sh refuses no lesson, an unknown lesson and one without a peer, exit 2, before booting anything" {
  run -2 scripts/capture/lesson.sh
  assert_output "capture/lesson.sh: which lesson? make capture LESSON=N (N is one of $(peer_lessons))"
  for bad in x 0 99 04 '4; true'; do
    run -2 scripts/capture/lesson.sh "$bad"
    assert_output "capture/lesson.sh: no lesson '$bad'; lessons $(peer_lessons) have two sides to capture"
  done
  for alone in 1 2 3; do
    run -2 scripts/capture/lesson.sh "$alone"
    assert_output "capture/lesson.sh: lesson $alone has no peer, so nothing crosses a wire; lessons $(peer_lessons) do"
  done
}

# A command for capture/command.sh: send TEXT over TCP on this host's loopback to PORT.
tcp_send() {
  python3 -c '
import socket, sys
port, text = int(sys.argv[1]), sys.argv[2].encode()
with socket.create_server(("127.0.0.1", port)) as listener:
    with socket.create_connection(("127.0.0.1", port)) as c, listener.accept()[0] as s:
        c.sendall(text)
        s.recv(len(text))' "$@"
}
export -f tcp_send

@test "capture/command.sh refuses a -p that is not a port, exit 2, before tshark starts" {
  for bad in '1 or tcp' 0 65536 -1 0x50 ''; do
    run -2 scripts/capture/command.sh -i lo -o "$BATS_TEST_TMPDIR/x.pcap" -p "$bad" -- true
    assert_output "capture/command.sh: -p '$bad' is not a TCP port (1-65535) (see scripts/capture/command.sh -h)"
  done
  assert_file_not_exists "$BATS_TEST_TMPDIR/x.pcap"
}

@test "capture/command.sh refuses a missing value, an unknown option and a missing command, exit 2" {
  run -2 scripts/capture/command.sh -i lo -p
  assert_output "capture/command.sh: -p needs a value (see scripts/capture/command.sh -h)"
  run -2 scripts/capture/command.sh -x -- true
  assert_output "capture/command.sh: unknown argument '-x' (see scripts/capture/command.sh -h)"
  run -2 scripts/capture/command.sh -i lo --
  assert_output "capture/command.sh: no command to run after -- (see scripts/capture/command.sh -h)"
}

@test "capture/command.sh -h prints every option with its default" {
  run -0 scripts/capture/command.sh -h
  assert_line --partial "-d RDMA_DEV  the RDMA device whose netdev to capture on (default: the first one)"
  assert_line --partial "-o FILE      where the pcap goes (default: captures/capture.pcap)"
  assert_line --partial "-p TCP_PORT  the lessons' out-of-band TCP port to include (default: 18515)"
}

@test "capture/command.sh -p PORT captures that TCP port into -o FILE, not another one, and shows it in the ladder" {
  run -0 scripts/capture/command.sh -i lo -p 20431 -o "$BATS_TEST_TMPDIR/lo.pcap" -- \
    bash -c 'tcp_send 20431 DONE && tcp_send 20432 GONE'
  assert_line "capture/command.sh: capturing on lo (udp port 4791 or tcp port 20431) into $BATS_TEST_TMPDIR/lo.pcap"
  assert_output --regexp '127\.0\.0\.1 -> 127\.0\.0\.1 +TCP [0-9]+ -> 20431, 4 bytes \(out-of-band exchange\) "DONE"'
  refute_output --partial "GONE"
  run tshark -r "$BATS_TEST_TMPDIR/lo.pcap" -T fields -e tcp.dstport -Y 'tcp.len > 0'
  assert_line "20431"
  refute_line "20432"
}

@test "capture/command.sh exits with the command's status" {
  run -3 scripts/capture/command.sh -i lo -o "$BATS_TEST_TMPDIR/s.pcap" -- bash -c 'exit 3'
  assert_line --regexp '^frame +time +source -> destination +packet$' # the ladder ran
}

@test "under sudo, capture/command.sh captures as root, and runs the command and writes the pcap as the user who called sudo (SUDO_USER)" {
  [[ $(id -u) == 0 ]] || skip "needs root, as under sudo"
  id nobody >/dev/null 2>&1 || skip "no user nobody here"
  # The user's own folder, as under sudo: one that nobody owns, in /tmp
  # (BATS_TEST_TMPDIR's parents are root's alone).
  local own
  own=$(mktemp -d /tmp/capture-sudo.XXXXXX)
  chown nobody "$own"
  SUDO_USER=nobody run scripts/capture/command.sh -i lo -o "$own/u.pcap" -- id -un
  assert_success # (assert_success shows what it printed; run -0 would not)
  local pcap_owner
  pcap_owner=$(stat -c %U "$own/u.pcap")
  rm -rf "$own"
  assert_line "capture/command.sh: running id as nobody (SUDO_USER); tshark captures as root"
  assert_line "nobody"
  refute_line "root"
  assert_equal "$pcap_owner" nobody
}

@test "capture/command.sh keeps tshark's message when the capture fails, exit 1" {
  run -1 scripts/capture/command.sh -i no-such-netdev -o "$BATS_TEST_TMPDIR/f.pcap" -- true
  assert_output --regexp "capture/command.sh: tshark stopped (before it started|while true ran: the capture is incomplete); it said:"
  assert_output --partial 'There is no device named "no-such-netdev"'
}

# One RoCE v2 packet per line, as text2pcap reads hex: an Acknowledge (BTH
# opcode 17 to QP 0x11, PSN 42, 43, 44) whose AETH syndrome is, in turn, ACK
# (0x1f: opcode 0, 31 credits), RNR NAK (0x2e: opcode 1, timer 14) and NAK
# (0x62: opcode 3, code 2 remote access error); MSN 1; then the ICRC.
acks_pcap() {
  cat >"$BATS_TEST_TMPDIR/acks.hex" <<'HEX'
000000 11 00 ff ff 00 00 00 11 00 00 00 2a 1f 00 00 01 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 2b 2e 00 00 01 de ad be ef
000000 11 00 ff ff 00 00 00 11 00 00 00 2c 62 00 00 01 de ad be ef
HEX
  text2pcap -q -4 192.0.2.1,192.0.2.2 -u 4791,4791 "$BATS_TEST_TMPDIR/acks.hex" "$BATS_TEST_TMPDIR/acks.pcap"
}

@test "ladder.sh labels an AETH as ACK, RNR NAK or NAK with its error, and names each address's side" {
  acks_pcap
  run -0 scripts/capture/ladder.sh "$BATS_TEST_TMPDIR/acks.pcap" 192.0.2.1 192.0.2.2
  assert_line --index 0 --regexp '^frame +time +source -> destination +packet$'
  assert_line --index 1 --regexp '^ +1 +0\.000  server 192\.0\.2\.1 -> client 192\.0\.2\.2 +RC Acknowledge \(op 17\)  dest qp 0x000011 psn 42  AETH ACK msn=1$'
  assert_line --index 2 --regexp ' psn 43  AETH RNR NAK timer 1\.28 ms \(14\) msn=1$'
  assert_line --index 3 --regexp ' psn 44  AETH NAK remote access error \(2\) msn=1$'
}

@test "ladder.sh without the server's and client's IP shows the bare addresses" {
  acks_pcap
  run -0 scripts/capture/ladder.sh "$BATS_TEST_TMPDIR/acks.pcap"
  assert_line --index 1 --regexp '^ +1 +0\.000  192\.0\.2\.1 -> 192\.0\.2\.2 +RC Acknowledge \(op 17\)  dest qp 0x000011 psn 42  AETH ACK msn=1$'
}
