#!/usr/bin/env bats
# bats file_tags=rxe
#
# Lesson 8: lesson 4's sum service, event-driven: a completion channel,
# ibv_req_notify_cq, poll() on the channel's fd, ibv_get_cq_event and
# ibv_ack_cq_events. Server and client run for real on the RDMA device
# (Soft-RoCE in the lab); the fake peers speak the TCP exchange only.

bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  load helpers/fake_peer
  lesson_setup
}
teardown() { lesson_teardown; }

# The fake lesson-8 peers (tests/helpers/fake_peer.bash, as MODE 8 IPV4)
# trade a well-formed PeerInfo naming QP 0x123, which does not exist, at
# this host's RoCE v2 address; as a server (rtr, rtr-close) the fake adds
# the "RTR!" token.

# The IPv4 address in this port's RoCE v2 GID (::ffff:a.b.c.d).
roce_ipv4() {
  rx ibv_devinfo -v -d "$RDMA_DEV" -i 1 | sed -n 's/^\t*GID\[ *[0-9]*\]:\t*::ffff:\([0-9.]*\), RoCE v2$/\1/p' | head -n 1
}

# The numbers of the "events: E, completions: C, empty events: X" line in $1.
counts_of() {
  sed -n 's/^events: \([0-9]*\), completions: \([0-9]*\), empty events: \([0-9]*\)$/\1 \2 \3/p' "$1"
}

@test "one request: the client prints the sum and the server says it served one request" {
  start_server ./lesson8 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr rx ./lesson8 -p "$PORT" --timeout 10 127.0.0.1 2 3
  assert_success
  assert_line "result: 2 + 3 = 5"
  assert_line --regexp '^events: [1-2], completions: 2, empty events: [0-9]+$'
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "server: request 1: 2 + 3 = 5"
  assert_line --regexp '^events: [1-2], completions: 2, empty events: [0-9]+$'
  assert_line "result: served 1 request"
}

@test "COUNT requests make 2 x COUNT completions on each side, in no more events than completions" {
  start_server ./lesson8 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr rx ./lesson8 -p "$PORT" --timeout 10 -n 8 127.0.0.1 20 22
  assert_success
  assert_line "result: 20 + 22 = 42"
  assert_line "client: sent 8 requests: 20 + 22"
  echo "$output" >"$BATS_TEST_TMPDIR/client.out"
  read -r events completions _ < <(counts_of "$BATS_TEST_TMPDIR/client.out")
  assert_equal "$completions" 16
  ((events >= 1 && events <= 16))
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "result: served 8 requests"
  assert_line "server: request 8: 20 + 22 = 42"
  read -r events completions _ < <(counts_of "$SERVER_OUT")
  assert_equal "$completions" 16
  ((events >= 1 && events <= 16))
}

@test "every event the client counts is narrated with the completions it drained" {
  start_server ./lesson8 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr rx ./lesson8 -p "$PORT" --timeout 10 -n 3 127.0.0.1 1 1
  assert_success
  echo "$output" >"$BATS_TEST_TMPDIR/client.out"
  read -r events completions _ < <(counts_of "$BATS_TEST_TMPDIR/client.out")
  # One "client: event N: ..." line per event, and their completions add up.
  run grep -c '^client: event [0-9]*: ' "$BATS_TEST_TMPDIR/client.out"
  assert_output "$events"
  run awk '/^client: event [0-9]+: / { n += $4 } END { print n }' "$BATS_TEST_TMPDIR/client.out"
  assert_output "$completions"
  assert_equal "$completions" 6
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "result: served 3 requests"
}

@test "negative numbers after -- are added" {
  start_server ./lesson8 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr rx ./lesson8 -p "$PORT" --timeout 10 -n 2 127.0.0.1 -- -7 3
  assert_success
  assert_line "result: -7 + 3 = -4"
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
}

@test "a sum that overflows int64 is an error on both sides" {
  start_server ./lesson8 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr rx ./lesson8 -p "$PORT" --timeout 10 127.0.0.1 9223372036854775807 1
  assert_failure 1
  assert_line "result: error: 9223372036854775807 + 1 overflows a signed 64-bit integer"
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line "server: request 1: 9223372036854775807 + 1 overflows a signed 64-bit integer"
  assert_line "result: error: 1 of 1 requests failed (overflow or bad length); the client was told"
}

@test "a client with no server gives up within its --timeout, saying what to check" {
  SECONDS=0
  run --separate-stderr rx ./lesson8 -p "$PORT" --timeout 2 127.0.0.1 2 3
  assert_failure 1
  ((SECONDS < 10))
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$(grep -c 'could not connect to 127.0.0.1' <<<"$stderr")" 1
  refute_line --partial "result: "
}

@test "a server whose client goes silent after the exchange stops waiting after --timeout" {
  # The fake client starts first (Python is slow to start on a slow guest)
  # and connects as soon as the server listens.
  start_fake client 8 "$(roce_ipv4)"
  start_server ./lesson8 -p "$PORT" --timeout 3
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line --regexp '^server: peer 127\.0\.0\.1:[0-9]+ is QP 0x123$'
  run cat "$SERVER_ERR"
  assert_output --partial "no completion event within 3 s while waiting for requests"
}

@test "a client whose server goes silent after the exchange stops waiting after --timeout" {
  # A real server QP that acknowledges the SEND but never answers
  # (tests/unit/silent_server.cpp): only the answer is missing.
  [ -x build/tests/silent_server ] || fail "build/tests/silent_server is missing: run make units"
  start_server build/tests/silent_server -l 8 -p "$PORT" --timeout 8
  wait_for_server_line "silent_server: waiting for a client" 10
  SECONDS=0
  run --separate-stderr rx ./lesson8 -p "$PORT" --timeout 3 127.0.0.1 2 3
  assert_failure 1
  ((SECONDS < 10))
  assert_line --regexp "^client: peer 127\.0\.0\.1:$PORT is QP 0x[0-9a-f]+$"
  assert_line "client: sent 1 request: 2 + 3"
  assert_line 'client: event 1: 1 completion (1 x IBV_WC_SEND)' # the NIC acknowledged it
  refute_line --partial "result: "
  assert_equal "$(grep -c "no completion event within 3 s while waiting for the server's answers" <<<"$stderr")" 1
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "silent_server: 1 request(s) arrived, none answered"
}

@test "a client whose server closes the connection after the exchange says so, and waits only for its QP's last word" {
  # The fake server names a QP that does not exist, says RTR! and closes: the
  # client notices the close, gives its QP the retries' time (at most 10 s,
  # wb::kRetriesGiveUp), and reports the SEND's own status, 12, instead of
  # waiting out --timeout (60 s here, so that the two cannot be confused).
  start_fake_server rtr-close 8 "$(roce_ipv4)"
  SECONDS=0
  run --separate-stderr rx ./lesson8 -p "$PORT" --timeout 60 127.0.0.1 2 3
  assert_failure 1
  ((SECONDS < 45)) # the close, then at most 10 s for status 12: never the 60 s timeout
  assert_line "client: sent 1 request: 2 + 3"
  assert_line "client: the server 127.0.0.1:$PORT closed the connection; waiting 10000 ms for our QP's last word"
  refute_line --partial "result: "
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "${stderr_lines[0]}" "lesson8: the SEND of a request completed with status transport retry counter exceeded (12, IBV_WC_RETRY_EXC_ERR, vendor_err 0)"
}

@test "a request of the wrong length is answered with an error, and the server fails after serving it" {
  [ -x build/tests/sum_client ] || fail "build/tests/sum_client is missing: run make units"
  start_server ./lesson8 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  # Lesson 8 has no -B: the probe is lesson 4's client, claiming lesson 8.
  run --separate-stderr rx build/tests/sum_client -l 8 -B 24 -p "$PORT" --timeout 10 127.0.0.1 1 2
  assert_failure 1
  assert_line "sum_client: completion IBV_WC_RECV, 16 bytes"
  assert_line "result: error: the server refused the request (status 2): it was 24 bytes, not 16"
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line "server: request 1: the request was 24 bytes, a sum request is exactly 16"
  assert_line "result: error: 1 of 1 requests failed (overflow or bad length); the client was told"
  refute_line --partial "result: served"
}

@test "-h prints the usage with the -n default and exits 0" {
  run --separate-stderr rx ./lesson8 -h
  assert_success
  assert_line --regexp '^  -n, --count=COUNT +client: send COUNT requests at once, 1\.\.64 \(default: 1\)$'
  assert_line --regexp '^  -p, --port=PORT +TCP port of the out-of-band exchange \(default: 18515\)$'
  assert_equal "$stderr" ""
}

@test "misuse prints one line on stderr and exits 2" {
  run --separate-stderr rx ./lesson8 -n 3
  assert_failure 2
  assert_equal "$stderr" "lesson8: -n is a client option (see lesson8 -h)"
  run --separate-stderr rx ./lesson8 -n 65 127.0.0.1 2 3
  assert_failure 2
  assert_equal "$stderr" "lesson8: -n: '65' is out of range 1..64 (see lesson8 -h)"
  run --separate-stderr rx ./lesson8 127.0.0.1 2
  assert_failure 2
  assert_equal "$stderr" "lesson8: a client needs HOST A B, got 2 arguments (see lesson8 -h)"
  run --separate-stderr rx ./lesson8 127.0.0.1 2 three
  assert_failure 2
  assert_equal "$stderr" "lesson8: B: 'three' is not a whole number (see lesson8 -h)"
}
