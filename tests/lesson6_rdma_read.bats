#!/usr/bin/env bats
# bats file_tags=rxe
#
# Lesson 6: the client RDMA-READs the server's text; the server's CPU takes no part.
# The server and client run for real on the RDMA device (Soft-RoCE in the lab).

bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  load helpers/fake_peer
  lesson_setup
}
teardown() { lesson_teardown; }

# Assert that line $1 of the last `run --separate-stderr`'s stderr contains $2.
assert_stderr_line() {
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  [[ "${stderr_lines[$1]:-}" == *"$2"* ]] ||
    fail "stderr line $1 does not contain: $2"$'\n'"stderr was:"$'\n'"$stderr"
}

@test "a client reads the server's default text, and the server sees no completion" {
  start_server ./lesson6 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr rx ./lesson6 -p "$PORT" --timeout 10 127.0.0.1
  assert_success
  assert_line 'result: read 30 bytes: "Hello from the server'"'"'s memory"'
  assert_line "client: completion IBV_WC_RDMA_READ, status success"
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "result: the client read 30 bytes; the server saw 0 completions"
  assert_line --partial "(IBV_ACCESS_REMOTE_READ only)"
}

@test "a client reads the text given to the server with --message, quotes escaped" {
  start_server ./lesson6 -p "$PORT" --timeout 10 --message 'say "READ", twice'
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr rx ./lesson6 -p "$PORT" --timeout 10 127.0.0.1
  assert_success
  assert_line 'result: read 17 bytes: "say \"READ\", twice"'
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
}

@test "a client refuses to read a server text larger than its 4096-byte buffer" {
  start_server ./lesson6 -p "$PORT" --timeout 10 --message "$(printf 'x%.0s' {1..5000})"
  wait_for_server_line "waiting for a client" 10
  run --separate-stderr rx ./lesson6 -p "$PORT" --timeout 10 127.0.0.1
  assert_failure 1
  refute_output --partial "result:"
  assert_equal "${stderr_lines[0]}" "lesson6: the server advertises 5000 bytes, more than this client's 4096-byte buffer: refusing to READ"
  # Nothing was posted, and the server learns it from the closed connection.
  refute_output --partial "posting RDMA READ"
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --partial "closed the connection instead of sending DONE"
}

@test "a client refuses a fake server that advertises a huge buffer" {
  start_fake_server offer 6 0x7f0000001000 1000000
  run --separate-stderr rx ./lesson6 -p "$PORT" --timeout 10 127.0.0.1
  assert_failure 1
  assert_equal "${stderr_lines[0]}" "lesson6: the server advertises 1000000 bytes, more than this client's 4096-byte buffer: refusing to READ"
  refute_output --partial "result:"
}

@test "a client refuses a server of another lesson" {
  start_fake_server offer 7 0x7f0000001000 16
  run --separate-stderr rx ./lesson6 -p "$PORT" --timeout 10 127.0.0.1
  assert_failure 1
  assert_stderr_line 0 "runs lesson 7, this is lesson 6"
}

@test "a client gives up within its timeout when no server is there" {
  SECONDS=0
  run --separate-stderr rx ./lesson6 -p "$PORT" --timeout 2 127.0.0.1
  assert_failure 1
  [ "$SECONDS" -lt 10 ]
  assert_equal "${stderr_lines[0]%% within*}" "lesson6: could not connect to 127.0.0.1:$PORT"
  assert_stderr_line 1 "check: is the server running there with the same -p?"
}

@test "a client gives up within its timeout on a server that goes silent" {
  start_fake_server silent
  SECONDS=0
  run --separate-stderr rx ./lesson6 -p "$PORT" --timeout 2 127.0.0.1
  assert_failure 1
  [ "$SECONDS" -lt 10 ]
  assert_stderr_line 0 "sent nothing for 2 s"
}

@test "a client rejects a server that sends garbage" {
  start_fake_server garbage
  run --separate-stderr rx ./lesson6 -p "$PORT" --timeout 5 127.0.0.1
  assert_failure 1
  assert_stderr_line 0 "sent a malformed exchange message: not a workbook peer (bad magic)"
}

@test "a server rejects a client that sends garbage instead of its QP information" {
  start_server ./lesson6 -p "$PORT" --timeout 5
  wait_for_server_line "waiting for a client" 10
  tcp_client garbage "printf 'GET / HTTP/1.0\r\n%50s' \"\" >&5"
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --index 0 --partial "sent a malformed exchange message: not a workbook peer (bad magic)"
  run cat "$SERVER_OUT"
  refute_output --partial "result:"
}

@test "a server gives up within its timeout on a client that connects and goes silent" {
  # 5 s, not less: under load the silent client's connect (through the lab)
  # took more than 2 s, and the server gave up before it came.
  start_server ./lesson6 -p "$PORT" --timeout 5
  wait_for_server_line "waiting for a client" 10
  tcp_client silent ':'
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --index 0 --partial "sent nothing for 5 s"
}

@test "a server given --timeout gives up when no client comes" {
  start_server ./lesson6 -p "$PORT" --timeout 2
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --index 0 "lesson6: no client connected to TCP port $PORT within 2 s"
}

@test "--message on a client is a usage error on one line" {
  run --separate-stderr rx ./lesson6 --message hello 127.0.0.1
  assert_failure 2
  assert_equal "${#stderr_lines[@]}" 1
  assert_equal "$stderr" "lesson6: --message is a server option; the client reads whatever the server exposes (see lesson6 -h)"
}

@test "an empty --message text, a second host and an unknown option are usage errors" {
  run --separate-stderr rx ./lesson6 --message ''
  assert_failure 2
  assert_equal "$stderr" "lesson6: --message: the text must not be empty (see lesson6 -h)"
  run --separate-stderr rx ./lesson6 hostA hostB
  assert_failure 2
  assert_equal "$stderr" "lesson6: expected at most one argument (HOST), got 2 (see lesson6 -h)"
  run --separate-stderr rx ./lesson6 -x
  assert_failure 2
  assert_equal "$stderr" "lesson6: unknown option '-x' (see lesson6 -h)"
}

@test "--message longer than 64 KiB is a usage error; exactly 64 KiB is served" {
  run --separate-stderr rx ./lesson6 --message "$(printf 'x%.0s' {1..65537})"
  assert_failure 2
  assert_equal "$stderr" "lesson6: --message: the text is 65537 bytes, at most 65536 allowed (see lesson6 -h)"
  assert_equal "$output" ""
  # The limit itself is allowed: the server gets as far as waiting for a client.
  start_server ./lesson6 -p "$PORT" --timeout 2 --message "$(printf 'x%.0s' {1..65536})"
  wait_for_server_line "waiting for a client" 10
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --index 0 "lesson6: no client connected to TCP port $PORT within 2 s"
}

@test "-h prints the usage with every default and exits 0" {
  run --separate-stderr rx ./lesson6 -h
  assert_success
  assert_line --partial "default: 18515"
  assert_line --partial "default: 30"
  assert_line --partial "default: \"Hello from the server's memory\""
  assert_equal "$stderr" ""
}
