# bats file_tags=rxe
# Lesson 5: RDMA WRITE with immediate. Server and client run for real on an
# RDMA device (Soft-RoCE in the lab); -L and fake peers play the misbehaving side.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  load helpers/fake_peer
  lesson_setup
}
teardown() { lesson_teardown; }

@test "the server prints the message the client wrote into its buffer, its length from the immediate" {
  start_server ./lesson5 -p "$PORT" --timeout 20
  run rx ./lesson5 -p "$PORT" --timeout 20 127.0.0.1 'hello, remote memory'
  assert_success
  assert_line "result: wrote 20 bytes with immediate 20"
  wait_server 20
  [ "$SERVER_STATUS" -eq 0 ]
  run cat "$SERVER_OUT"
  assert_line --partial "(REMOTE_WRITE + LOCAL_WRITE)"
  assert_line "server: completion IBV_WC_RECV_RDMA_WITH_IMM, immediate 20 (byte_len 20)"
  assert_line 'result: received 20 bytes: "hello, remote memory"'
}

@test "without a MESSAGE the client writes the default one" {
  start_server ./lesson5 -p "$PORT" --timeout 20
  run rx ./lesson5 -p "$PORT" --timeout 20 127.0.0.1
  assert_success
  assert_line "result: wrote 51 bytes with immediate 51"
  wait_server 20
  [ "$SERVER_STATUS" -eq 0 ]
  run cat "$SERVER_OUT"
  assert_line 'result: received 51 bytes: "Hello from the client, by RDMA WRITE with immediate"'
}

@test "quotes and control bytes in the message are escaped in the server's result line" {
  start_server ./lesson5 -p "$PORT" --timeout 20
  run rx ./lesson5 -p "$PORT" --timeout 20 127.0.0.1 $'say "hi"\tnow'
  assert_success
  wait_server 20
  [ "$SERVER_STATUS" -eq 0 ]
  run cat "$SERVER_OUT"
  assert_line 'result: received 12 bytes: "say \"hi\"\x09now"'
}

@test "a message exactly as long as the server's buffer fits" {
  start_server ./lesson5 -p "$PORT" --timeout 20 -s 5
  run rx ./lesson5 -p "$PORT" --timeout 20 127.0.0.1 hello
  assert_success
  assert_line "result: wrote 5 bytes with immediate 5"
  wait_server 20
  [ "$SERVER_STATUS" -eq 0 ]
  run cat "$SERVER_OUT"
  assert_line 'result: received 5 bytes: "hello"'
}

@test "a message larger than the advertised buffer is refused by the client before anything is posted" {
  start_server ./lesson5 -p "$PORT" --timeout 60 -s 16
  run -1 rx ./lesson5 -p "$PORT" --timeout 60 127.0.0.1 'this message is longer than sixteen bytes'
  assert_line --partial "offers 16 bytes at 0x"
  assert_line "result: error: the message is 41 bytes, the server's buffer only 16: not sending it"
  refute_output --partial "posting RDMA WRITE"
  # The server notices that the client gave up and does not wait out its 60 s
  # timeout: after the close it gives its QP at most 10 s (wb::kRetriesGiveUp)
  # for a last completion, then says why it stopped.
  wait_server 40
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_ERR"
  assert_line --partial "closed the connection while we waited for the client's WRITE with immediate"
}

@test "an immediate that claims more than the server's buffer is refused by the server, which reads nothing" {
  start_server ./lesson5 -p "$PORT" --timeout 20
  run rx ./lesson5 -p "$PORT" --timeout 20 -L 99999 127.0.0.1 hi
  assert_success # the client cannot know: its WRITE itself was fine
  assert_line "result: wrote 2 bytes with immediate 99999"
  wait_server 20
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_OUT"
  assert_line "result: error: the client says it wrote 99999 bytes, but the buffer holds 4096: not reading beyond it"
  refute_output --partial "result: received"
}

@test "a server whose client sends random bytes instead of its QP information exits with a clear error" {
  start_server ./lesson5 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  tcp_client garbage "head -c 200 /dev/urandom >&5"
  wait_server 10
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_ERR"
  assert_line --partial "sent a malformed exchange message: not a workbook peer (bad magic)"
}

@test "a server whose client connects and says nothing gives up after --timeout" {
  # 5 s, not less: under load the silent client's connect (through the lab)
  # took more than 2 s once, and the server gave up before it came.
  start_server ./lesson5 -p "$PORT" --timeout 5
  wait_for_server_line "waiting for a client" 10
  tcp_client silent ':'
  wait_server 15
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_ERR"
  assert_line --partial "sent nothing for 5 s"
}

@test "a client whose server answers with garbage exits with a clear error" {
  start_fake_server garbage
  run -1 --separate-stderr rx ./lesson5 -p "$PORT" --timeout 10 127.0.0.1 hi
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  [[ "$stderr" == *"127.0.0.1:$PORT sent a malformed exchange message: not a workbook peer (bad magic)"* ]]
  refute_line --partial "posting RDMA WRITE"
}

@test "a lesson-4 client is turned away by a lesson-5 server" {
  start_server ./lesson5 -p "$PORT" --timeout 10
  run -1 --separate-stderr rx ./lesson4 -p "$PORT" --timeout 10 127.0.0.1 1 2
  [[ "$stderr" == *"runs lesson 5, this is lesson 4"* ]]
  wait_server 10
  [ "$SERVER_STATUS" -eq 1 ]
}

@test "a client whose server is not there gives up within its timeout, naming host and port" {
  local start=$SECONDS
  run -1 --separate-stderr rx ./lesson5 -p "$PORT" --timeout 2 127.0.0.1 hi
  [ $((SECONDS - start)) -le 6 ]
  [[ "$stderr" == *"could not connect to 127.0.0.1:$PORT within 2 s"* ]]
}

@test "an empty message is a one-line usage error" {
  run -2 --separate-stderr rx ./lesson5 127.0.0.1 ''
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  [ "${#stderr_lines[@]}" -eq 1 ]
  assert_equal "$stderr" "lesson5: MESSAGE must not be empty (see lesson5 -h)"
}

@test "a buffer size that is not a number or too large is a one-line usage error" {
  run -2 --separate-stderr rx ./lesson5 -s big
  [ "${#stderr_lines[@]}" -eq 1 ]
  assert_equal "$stderr" "lesson5: -s: 'big' is not a whole number (see lesson5 -h)"
  run -2 --separate-stderr rx ./lesson5 -s 2000000
  [ "${#stderr_lines[@]}" -eq 1 ]
  [[ "$stderr" == *"-s: '2000000' is out of range 1..1048576"* ]]
}

@test "-s on a client, -L on a server, and a bad -s or -L value are one-line usage errors" {
  run -2 --separate-stderr rx ./lesson5 -s 64 127.0.0.1 hi
  assert_equal "$stderr" "lesson5: -s is a server option; the server decides its buffer size (see lesson5 -h)"
  run -2 --separate-stderr rx ./lesson5 -L 5
  assert_equal "$stderr" "lesson5: -L is a client option (see lesson5 -h)"
  run -2 --separate-stderr rx ./lesson5 -s 0
  assert_equal "$stderr" "lesson5: -s: '0' is out of range 1..1048576 (see lesson5 -h)"
  run -2 --separate-stderr rx ./lesson5 -L many 127.0.0.1 hi
  assert_equal "$stderr" "lesson5: -L: 'many' is not a whole number (see lesson5 -h)"
  run -2 --separate-stderr rx ./lesson5 -L 4294967296 127.0.0.1 hi # the immediate is 32 bits
  assert_equal "$stderr" "lesson5: -L: '4294967296' is out of range 0..4294967295 (see lesson5 -h)"
  assert_equal "$output" ""
}

@test "more than HOST and MESSAGE is a one-line usage error" {
  run -2 --separate-stderr rx ./lesson5 127.0.0.1 hello world
  [ "${#stderr_lines[@]}" -eq 1 ]
  [[ "$stderr" == *"expected at most HOST MESSAGE, got 3 arguments"* ]]
}

@test "-h prints the usage with its defaults and exits 0" {
  run -0 rx ./lesson5 -h
  assert_output --partial "HOST [MESSAGE]"
  assert_output --partial "1..1048576 (default: 4096)"
  assert_output --partial "(default: 18515)"
}
