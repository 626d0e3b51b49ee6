#!/usr/bin/env bats
# runs-on: rxe
#
# Lesson 8: lesson 4's sum service, event-driven: a completion channel,
# ibv_req_notify_cq, poll() on the channel's fd, ibv_get_cq_event and
# ibv_ack_cq_events. Server and client run for real on the RDMA device
# (Soft-RoCE in the lab); the fake peers speak the TCP exchange only.

bats_require_minimum_version 1.5.0

setup() { load helpers/lesson; lesson_setup; }
teardown() { lesson_teardown; }

# A fake lesson-8 peer on the TCP side channel. It trades a well-formed
# PeerInfo (common/exchange.hpp's wire form) naming QP 0x123 at this host's
# RoCE v2 address, a QP that does not exist (as a server it adds the "RTR!"
# token), and then says nothing for 30 s.
#   fake_peer listen PORT     as a server
#   fake_peer connect PORT    as a client, retrying until a server listens
fake_peer() {
  python3 - "$@" <<'EOF'
import socket, struct, sys, time
mode, port = sys.argv[1], int(sys.argv[2])
gid = bytes(10) + b"\xff\xff" + bytes([192, 0, 2, 1])
# magic, version 1, lesson 8, QPN, PSN, LID, GID, MTU enum 3 (1024), addr, length, rkey
info = struct.pack(">4sHHIIH16sIQII", b"RDWB", 1, 8, 0x123, 0x456, 0, gid, 3, 0, 0, 0)
if mode == "listen":
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port)); srv.listen(1)
    print("fake peer listening", flush=True)
    srv.settimeout(30); conn, _ = srv.accept()
else:
    print("fake peer started", flush=True)
    for _ in range(200):  # retry for up to 20 s: the server may start after us
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=30)
            break
        except OSError:
            time.sleep(0.1)
conn.sendall(info)
if mode == "listen":
    conn.sendall(b"RTR!")  # as a lesson-8 server does once its QP is in RTR
conn.settimeout(30)
try:
    while conn.recv(4096):
        pass
except OSError:
    pass
EOF
}

# The numbers of the "events: E, completions: C, empty events: X" line in $1.
counts_of() {
  sed -n 's/^events: \([0-9]*\), completions: \([0-9]*\), empty events: \([0-9]*\)$/\1 \2 \3/p' "$1"
}

@test "one request: the client prints the sum and the server says it served one request" {
  start_server ./lesson8 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr ./lesson8 -p "$PORT" --timeout 10 127.0.0.1 2 3
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
  run --separate-stderr ./lesson8 -p "$PORT" --timeout 10 -n 8 127.0.0.1 20 22
  assert_success
  assert_line "result: 20 + 22 = 42"
  assert_line "client: sent 8 requests: 20 + 22"
  echo "$output" >"$BATS_TEST_TMPDIR/client.out"
  read -r events completions empty < <(counts_of "$BATS_TEST_TMPDIR/client.out")
  assert_equal "$completions" 16
  (( events >= 1 && events <= 16 ))
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "result: served 8 requests"
  assert_line "server: request 8: 20 + 22 = 42"
  read -r events completions empty < <(counts_of "$SERVER_OUT")
  assert_equal "$completions" 16
  (( events >= 1 && events <= 16 ))
}

@test "every event the client counts is narrated with the completions it drained" {
  start_server ./lesson8 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr ./lesson8 -p "$PORT" --timeout 10 -n 3 127.0.0.1 1 1
  assert_success
  echo "$output" >"$BATS_TEST_TMPDIR/client.out"
  read -r events completions empty < <(counts_of "$BATS_TEST_TMPDIR/client.out")
  # One "client: event N: ..." line per event, and their completions add up.
  run grep -c '^client: event [0-9]*: ' "$BATS_TEST_TMPDIR/client.out"
  assert_output "$events"
  run awk '/^client: event [0-9]+: / { n += $4 } END { print n }' "$BATS_TEST_TMPDIR/client.out"
  assert_output "$completions"
  wait_server 15
}

@test "negative numbers after -- are added" {
  start_server ./lesson8 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr ./lesson8 -p "$PORT" --timeout 10 -n 2 127.0.0.1 -- -7 3
  assert_success
  assert_line "result: -7 + 3 = -4"
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
}

@test "a sum that overflows int64 is an error on both sides" {
  start_server ./lesson8 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr ./lesson8 -p "$PORT" --timeout 10 127.0.0.1 9223372036854775807 1
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
  run --separate-stderr ./lesson8 -p "$PORT" --timeout 2 127.0.0.1 2 3
  assert_failure 1
  (( SECONDS < 10 ))
  assert_equal "$(grep -c 'could not connect to 127.0.0.1' <<<"$stderr")" 1
  refute_line --partial "result: "
}

@test "a server whose client goes silent after the exchange stops waiting after --timeout" {
  # The fake client starts first (Python is slow to start on a slow guest)
  # and connects as soon as the server listens.
  fake_peer connect "$PORT" >"$BATS_TEST_TMPDIR/fake.out" 2>&1 3>&- &
  local fake=$!
  for _ in $(seq 100); do grep -q "fake peer started" "$BATS_TEST_TMPDIR/fake.out" && break; sleep 0.1; done
  start_server ./lesson8 -p "$PORT" --timeout 3
  wait_server 20
  kill "$fake" 2>/dev/null || true
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line --regexp '^server: peer 127\.0\.0\.1:[0-9]+ is QP 0x123$'
  run cat "$SERVER_ERR"
  assert_output --partial "no completion event within 3 s while waiting for requests"
}

@test "a client whose server goes silent after the exchange stops waiting after --timeout" {
  # The fake server names a QP that does not exist: no answer ever comes,
  # and no completion either, so the client's poll() times out.
  fake_peer listen "$PORT" >"$SERVER_OUT" 2>"$SERVER_ERR" 3>&- &
  SERVER_PID=$!
  wait_for_server_line "fake peer listening" 20
  SECONDS=0
  run --separate-stderr ./lesson8 -p "$PORT" --timeout 3 127.0.0.1 2 3
  assert_failure 1
  (( SECONDS < 10 ))
  assert_line "client: peer 127.0.0.1:$PORT is QP 0x123"
  assert_line "client: sent 1 request: 2 + 3"
  refute_line --partial "result: "
  assert_equal "$(grep -c "no completion event within 3 s while waiting for the server's answers" <<<"$stderr")" 1
}

@test "-h prints the usage with the -n default and exits 0" {
  run ./lesson8 -h
  assert_success
  assert_line --partial "-n, --count=COUNT"
  assert_output --partial "(default: 1)"
  assert_output --partial "(default: 18515)"
}

@test "misuse prints one line on stderr and exits 2" {
  run --separate-stderr ./lesson8 -n 3
  assert_failure 2
  assert_equal "$stderr" "lesson8: -n is a client option (see lesson8 -h)"
  run --separate-stderr ./lesson8 -n 65 127.0.0.1 2 3
  assert_failure 2
  assert_equal "$stderr" "lesson8: -n: '65' is out of range 1..64 (see lesson8 -h)"
  run --separate-stderr ./lesson8 127.0.0.1 2
  assert_failure 2
  assert_equal "$stderr" "lesson8: a client needs HOST A B, got 2 arguments (see lesson8 -h)"
  run --separate-stderr ./lesson8 127.0.0.1 2 three
  assert_failure 2
  assert_equal "$stderr" "lesson8: B: 'three' is not a whole number (see lesson8 -h)"
}
