#!/usr/bin/env bats
# bats file_tags=rxe
# Lesson 17: a stream of RDMA WRITEs, the lesson whose wire loses packets.
# Here it runs over rxe's loopback, which has no cable and so loses nothing:
# the options, the misuse, a clean stream and its counters. The lossy cable
# is tests/capture_lesson17.bats' (two guests, netem). The streams use a 1 s
# ACK timeout (-u 18): under TCG, on one vCPU, an ACK can take longer than
# the default 67 ms, and a needless resend is not what these tests check.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  load helpers/fake_peer
  lesson_setup
}
teardown() { lesson_teardown; }

# stream SERVER_OPTS -- CLIENT_OPTS: a server and its client over loopback;
# the client's output in $output and $status, the server waited for (its
# output in $SERVER_OUT).
stream() {
  local server=()
  while [[ $1 != -- ]]; do
    server+=("$1")
    shift
  done
  shift
  start_server ./lesson17 -p "$PORT" --timeout 30 "${server[@]}"
  wait_for_server_line "waiting for a client"
  run rx ./lesson17 -p "$PORT" --timeout 30 "$@" 127.0.0.1
  local client_output=$output client_status=$status
  wait_server 60
  output=$client_output
  status=$client_status
}

@test "-h names every option with its default and exits 0" {
  run -0 --separate-stderr ./lesson17 -h
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" ""
  assert_line --partial "-n, --count=N         client: WRITEs to send, 1..100000 (default: 64)"
  assert_line --partial "(default: 65536)"
  assert_line --partial "-m, --mtu=BYTES       largest path MTU to use: 256, 512, 1024, 2048, 4096 (default: 1024;"
  assert_line --partial "-u, --ack-timeout=EXP client: ACK timeout 4.096 us * 2^EXP, 1..31 (default: 14 = 67 ms)"
  assert_line --partial "    --retry=N         client: retry_cnt, resends one WRITE may need, 0..7 (default: 6;"
  assert_line --partial "(default: 18515)"
  assert_line --partial "scripts/lab.sh pair --netem-b 'loss 1%'"
}

@test "misuse is one line on stderr and exit 2: a client option on the server, a bad MTU, retry_cnt 8, the old -a and -r, two hosts" {
  local args
  for args in "-n 5" "-u 14" "--retry 3" "-m 1000 127.0.0.1" "-m 0" "--retry 8 127.0.0.1" "-u 0 127.0.0.1" \
    "-n 0 127.0.0.1" "-s 0" "-a 14 127.0.0.1" "-r 3 127.0.0.1" "127.0.0.1 127.0.0.2"; do
    # shellcheck disable=SC2086 # each case is several words on purpose
    run -2 --separate-stderr ./lesson17 $args
    assert_equal "$output" ""
    # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
    assert_equal "${#stderr_lines[@]}" 1
    assert_regex "$stderr" "^lesson17: .*\(see lesson17 -h\)$"
  done
  run -2 --separate-stderr ./lesson17 -m 1000 127.0.0.1
  assert_equal "$stderr" "lesson17: -m takes a path MTU of 256, 512, 1024, 2048 or 4096 bytes, not 1000 (see lesson17 -h)"
  run -2 --separate-stderr ./lesson17 -n 5
  assert_equal "$stderr" "lesson17: -n is a client option (see lesson17 -h)"
  run -2 --separate-stderr ./lesson17 --retry 3
  assert_equal "$stderr" "lesson17: --retry is a client option (see lesson17 -h)"
  # -a and -r are gone: -u is perftest's ACK timeout, and --retry has no letter.
  run -2 --separate-stderr ./lesson17 -r 3 127.0.0.1
  assert_equal "$stderr" "lesson17: unknown option '-r' (see lesson17 -h)"
}

@test "a clean stream over loopback: every WRITE lands, the server sees the client's pattern, no resend is counted" {
  stream -- -n 8 -u 18
  assert_success
  assert_line --regexp "^client: server QP 0x[0-9a-f]+; path MTU 1024: 64 packets per 65536-byte WRITE; ACK timeout 1073.7 ms, retry_cnt 6$"
  assert_line --regexp "^result: 8 WRITEs of 65536 bytes in [0-9.]+ s: [0-9.]+ MiB/s \([0-9.]+ Mbit/s\)$"
  local pattern
  pattern=$(sed -n 's/.*(pattern \(0x[0-9a-f]*\)).*/\1/p' <<<"$output")
  [[ -n $pattern ]] || fail "the client printed no pattern"
  assert_line "client: streaming 8 WRITEs of 65536 bytes (pattern $pattern), up to 8 in flight"
  # Each side prints its port counters that moved, on one line. Loopback
  # loses nothing: no NAK, no retry exhaustion, on either side.
  assert_line --regexp "^client: port counters that moved: .*sent_pkts \+[0-9]+"
  refute_line --partial "rcvd_seq_err"
  refute_line --partial "retry_exceeded_err"
  [ "$SERVER_STATUS" -eq 0 ]
  run cat "$SERVER_OUT"
  assert_line "result: the buffer holds 65536 bytes of $pattern, the client's pattern"
  assert_line --regexp "^server: port counters that moved: .*sent_pkts \+[0-9]+"
  refute_line --partial "rcvd_seq_err"
  refute_line --partial "retry_exceeded_err"
}

@test "-m 256 cuts each WRITE into 4 times as many packets, and -s sets the WRITE's size on both sides" {
  stream -s 4096 -- -m 256 -s 4096 -n 4 -u 18
  assert_success
  assert_line --regexp "path MTU 256: 16 packets per 4096-byte WRITE"
  assert_line --regexp "^result: 4 WRITEs of 4096 bytes in "
  [ "$SERVER_STATUS" -eq 0 ]
  run cat "$SERVER_OUT"
  assert_line --partial "path MTU 256; waiting for its stream"
  assert_line --regexp "^result: the buffer holds 4096 bytes of 0x[0-9a-f]{2}, the client's pattern$"
}

@test "-u and --retry reach the QP: the client prints the ACK timeout and retry_cnt it set" {
  stream -- -u 18 --retry 2 -n 2
  assert_success
  assert_line --partial "ACK timeout 1073.7 ms, retry_cnt 2"
}

@test "a WRITE larger than the server's buffer is refused by the client, and the server says the client gave up" {
  stream -s 4096 -- -n 2 -u 18
  assert_failure 1
  assert_line "result: error: the server offers 4096 bytes, a WRITE here is 65536: give both sides the same -s"
  refute_line --partial "streaming"
  # The server learns it from the closed connection (at its RTR! or while
  # it waits for DONE), not from a timeout.
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_OUT" "$SERVER_ERR"
  refute_line --partial "result: the buffer holds"
  assert_output --regexp "closed|reset|Broken pipe"
}

@test "a client refuses what no lesson-17 server offers, and names -s only when the sizes differ" {
  # An empty buffer, and one larger than -s's 16 MiB. Before the bound the
  # first was told "give both sides the same -s", and the second was taken.
  local offer
  for offer in "0x7f0000000000 0" "0x7f0000000000 0x1000001"; do
    # shellcheck disable=SC2086 # ADDR LENGTH: two words on purpose
    start_fake_server offer 17 $offer
    run --separate-stderr rx ./lesson17 -p "$PORT" --timeout 10 127.0.0.1
    assert_failure 1
    assert_regex "${stderr_lines[0]}" "^lesson17: the server offers (0|16777217) bytes: no lesson-17 server does \(1\.\.16777216\)$"
    assert_equal "${stderr_lines[1]}" "lesson17: check: is the server a lesson-17 server of this workbook?"
    refute_output --partial "give both sides"
    wait_server 10
  done
  # A lesson-17 server's buffer, of another size than ours: the -s differ.
  # (Larger is refused too: the server checks every byte of its buffer.)
  start_fake_server offer 17 0x7f0000000000 131072
  run --separate-stderr rx ./lesson17 -p "$PORT" --timeout 10 127.0.0.1
  assert_failure 1
  assert_line "result: error: the server offers 131072 bytes, a WRITE here is 65536: give both sides the same -s"
}

@test "a lesson-5 client is turned away by a lesson-17 server" {
  start_server ./lesson17 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client"
  run -1 --separate-stderr rx ./lesson5 -p "$PORT" --timeout 10 127.0.0.1 hi
  [[ $stderr == *"runs lesson 17, this is lesson 5"* ]] || fail "no lesson mismatch reported: $stderr"
  wait_server 10
  [ "$SERVER_STATUS" -eq 1 ]
}
