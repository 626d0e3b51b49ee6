#!/usr/bin/env bats
# bats file_tags=pair
# Runs on the host; its pairs are the pair of guests tests/run.sh keeps up
# for the suites tagged pair (LAB_PAIR_DIR), or two fresh guests per
# capture when none is up (bats tests/FILE.bats alone).
# make capture LESSON=14: lesson 14 across two lab guests joined by a virtual
# cable. The capture shows the window at work: READs and a WRITE with the
# window's rkey answered, the READ after the revoke answered by a NAK "remote
# access error", the re-bound rkey answered again, and the client's SEND with
# Invalidate.

bats_require_minimum_version 1.5.0

load helpers/capture

setup_file() {
  capture_setup_file
  # One capture for every test below (each boots two guests otherwise).
  timeout 300 make -s capture LESSON=14 >"$BATS_FILE_TMPDIR/capture.out" 2>&1 || true
}

setup() {
  capture_setup
  PCAP=captures/lesson14.pcap
}

# tshark on the capture, one line per RoCE packet with the fields asked for,
# without its "running as root" warning on stderr.
fields() {
  tshark -r "$PCAP" -Y "$1" -T fields -E occurrence=f "${@:2}" 2>/dev/null
}

@test "lesson 14 across two guests: both sides succeed and the client lists every step's outcome" {
  run cat "$BATS_FILE_TMPDIR/capture.out"
  assert_line "lab.sh: a exited 0, b exited 0"
  assert_line "[b] result: READ inside ok, WRITE inside ok, READ across the end ok, READ after revoke IBV_WC_REM_ACCESS_ERR, READ after re-bind ok, READ after SEND_WITH_INV IBV_WC_REM_ACCESS_ERR"
  assert_line "[a] result: granted slot 5 through a type 2 window, revoked and re-bound it"
  assert_file_exists "$PCAP"
}

@test "the READ with the revoked rkey is answered by a NAK with the code remote access error" {
  # The revoked rkey: the one the server invalidated with IBV_WR_LOCAL_INV.
  revoked=$(sed -n 's/^\[a\] server: revoked the window: IBV_WR_LOCAL_INV of rkey 0x\([0-9a-f]*\)$/\1/p' \
    "$BATS_FILE_TMPDIR/capture.out")
  [[ -n $revoked ]] || fail "the server never said which rkey it revoked"
  # READ Requests (opcode 12) with that rkey, and their PSNs: one answered, one refused.
  run fields "infiniband.bth.opcode == 12 && infiniband.reth.r_key == 0x$revoked" -e infiniband.bth.psn
  assert_success
  [[ ${#lines[@]} -ge 2 ]] || fail "expected READs with rkey 0x$revoked before and after the revoke: $output"
  refused_psn=${lines[-1]}
  # Its answer: an Acknowledge (opcode 17) whose AETH syndrome is 0x62 = 98:
  # bits 6-5 = 3 (NAK), bits 4-0 = 2 (remote access error).
  run fields "infiniband.bth.opcode == 17 && infiniband.bth.psn == $refused_psn" \
    -e infiniband.aeth.syndrome -e infiniband.aeth.syndrome.opcode -e infiniband.aeth.syndrome.error_code
  assert_output --regexp '^98[[:space:]]+3[[:space:]]+2$'
}

@test "every READ of the window before the revoke and after the re-bind is answered with data, not a NAK" {
  # A READ Response Only (16) carries an ACK syndrome (opcode 0): three of
  # them (inside, across the end, which rxe lets through, and after the
  # re-bind); and exactly two NAKs: after the revoke and after the SEND_WITH_INV.
  # Counted by PSN: a loaded lab may resend a READ, and the responder then
  # answers the same PSN again.
  run fields "infiniband.bth.opcode == 16" -e infiniband.bth.psn -e infiniband.aeth.syndrome.opcode
  assert_equal "$(cut -f1 <<<"$output" | sort -u | wc -l)" 3
  refute_line --regexp $'^[0-9]+\t[^0]'
  run fields "infiniband.aeth.syndrome.opcode == 3" -e infiniband.aeth.syndrome.error_code
  assert_equal "${#lines[@]}" 2
  refute_line --regexp '^[^2]'
}

@test "the client gives the window back with a SEND Only with Invalidate whose IETH carries the re-bound rkey" {
  rebound=$(sed -n 's/^\[b\] client: gave the window back with SEND_WITH_INV of rkey 0x\([0-9a-f]*\)$/\1/p' \
    "$BATS_FILE_TMPDIR/capture.out")
  [[ -n $rebound ]] || fail "the client never gave the window back"
  # Every SEND Only with Invalidate (one; rxe has been seen to send it twice,
  # same PSN, 2 ms apart) carries in its IETH the rkey as 4 big-endian
  # bytes, which tshark prints as 8 hex digits.
  run fields "infiniband.bth.opcode == 23" -e infiniband.ieth
  assert_success
  [[ -n $output ]] || fail "no SEND Only with Invalidate (opcode 23) in the capture"
  run sort -u <<<"$output"
  assert_output "$(printf '%08x' "$((16#$rebound))")"
}

@test "the capture of lesson 14 has the shipped docs/captures/lesson14.pcapng's packets" {
  run scripts/capture/shipped.sh --compare "$PCAP" 14
  assert_success
  assert_line --regexp '^14: current \([0-9]+ distinct RoCE packets as shipped in docs/captures/lesson14\.pcapng\)$'
}
