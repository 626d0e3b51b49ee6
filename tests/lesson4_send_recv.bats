# bats file_tags=rxe
# Lesson 4: SEND/RECV, the sum demo. Server and client run for real on an RDMA
# device (Soft-RoCE in the lab); fake peers play the misbehaving side.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  load helpers/fake_peer
  lesson_setup
}
teardown() { lesson_teardown; }

# A fake client: connect to the server's TCP port and send the bytes of $1
# (printf format), then hang up.
fake_client_sends() {
  # shellcheck disable=SC2016 # expanded where the lessons run
  rx bash -c 'exec 5<>"/dev/tcp/127.0.0.1/$1" && printf "$2" >&5' fake_client "$PORT" "$1"
}

@test "the client prints the sum the server sent back, and so does the server" {
  start_server ./lesson4 -p "$PORT" --timeout 20
  run rx ./lesson4 -p "$PORT" --timeout 20 127.0.0.1 2 3
  assert_success
  assert_line "result: 2 + 3 = 5"
  assert_line --partial "client: completion IBV_WC_RECV, 16 bytes"
  wait_server 20
  # shellcheck disable=SC2153 # SERVER_STATUS: set by wait_server (tests/helpers/lesson.bash)
  [ "$SERVER_STATUS" -eq 0 ]
  run cat "$SERVER_OUT"
  assert_line "server: completion IBV_WC_RECV, 16 bytes"
  assert_line "result: 2 + 3 = 5"
}

# The port's RNR NAK counters (rxe's hw_counters): "S R" where S counts the
# RNR NAKs this port sent as a receiver that had no receive posted, and R
# those it received as a sender. Both sides of a one-host test use this port.
rnr_counts() {
  local dir="/sys/class/infiniband/$RDMA_DEV/ports/1/hw_counters"
  local counts
  counts=$(rx cat "$dir/send_rnr_err" "$dir/rcvd_rnr_err" | paste -sd ' ')
  [[ $counts =~ ^[0-9]+\ [0-9]+$ ]] ||
    fail "$RDMA_DEV has no send_rnr_err/rcvd_rnr_err counters in $dir (rxe has them)"
  echo "$counts"
}

@test "both sides post their receive before the exchange" {
  local before
  before=$(rnr_counts)
  start_server ./lesson4 -p "$PORT" --timeout 20
  run rx ./lesson4 -p "$PORT" --timeout 20 127.0.0.1 40 2
  assert_success
  assert_line "result: 40 + 2 = 42"
  # The narration order is the lesson: receive first, exchange second.
  [[ "$output" == *"client: posted a 16-byte receive before the exchange"*"client: peer "* ]]
  wait_server 20
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  [[ "$output" == *"server: posted a 64-byte receive before the exchange"*"server: waiting for a client"* ]]
  # No SEND found its receive missing. rnr_retry 7 would hide a late receive
  # as silent resends (a server that posted 0.3 s late made 36 RNR NAKs and
  # still printed the sum), but the port counts every RNR NAK.
  assert_equal "$(rnr_counts)" "$before"
}

@test "negative numbers after -- are added, down to the smallest int64" {
  start_server ./lesson4 -p "$PORT" --timeout 20
  run rx ./lesson4 -p "$PORT" --timeout 20 127.0.0.1 -- -9223372036854775807 -1
  assert_success
  assert_line "result: -9223372036854775807 + -1 = -9223372036854775808"
  wait_server 20
  [ "$SERVER_STATUS" -eq 0 ]
}

@test "a sum that overflows int64 is an error on both sides, never a wrapped number" {
  start_server ./lesson4 -p "$PORT" --timeout 20
  run -1 rx ./lesson4 -p "$PORT" --timeout 20 127.0.0.1 9223372036854775807 1
  assert_line "result: error: 9223372036854775807 + 1 overflows a signed 64-bit integer"
  refute_output --partial "-9223372036854775808"
  wait_server 20
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_OUT"
  assert_line "result: error: 9223372036854775807 + 1 overflows a signed 64-bit integer"
  refute_output --partial "-9223372036854775808"
}

@test "a request of the wrong length is refused by the server, which tells the client why" {
  start_server ./lesson4 -p "$PORT" --timeout 20
  run -1 rx ./lesson4 -p "$PORT" --timeout 20 -B 24 127.0.0.1 1 2
  assert_line "result: error: the server refused the request: it was 24 bytes, not 16"
  wait_server 20
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_OUT"
  assert_line "server: completion IBV_WC_RECV, 24 bytes"
  assert_line "result: error: the request was 24 bytes, a sum request is exactly 16"
  refute_output --partial "server: request " # the numbers in it were never read
}

@test "a SEND larger than the server's whole receive buffer fails in the NICs of both sides" {
  # The statuses docs/lesson4-send-recv.md documents: rxe's, or those of
  # other NICs (local length error at the receiver, remote invalid request
  # error at the sender).
  local server_status client_status
  if rx ibv_devinfo -d "$RDMA_DEV" | grep -qE 'vendor_id:[[:space:]]+0xffffff$'; then # Soft-RoCE
    server_status="local QP operation error (2, IBV_WC_LOC_QP_OP_ERR," client_status="remote operation error (11, IBV_WC_REM_OP_ERR,"
  else
    server_status="local length error (1, IBV_WC_LOC_LEN_ERR," client_status="remote invalid request error (9, IBV_WC_REM_INV_REQ_ERR,"
  fi
  start_server ./lesson4 -p "$PORT" --timeout 20
  run -1 --separate-stderr rx ./lesson4 -p "$PORT" --timeout 20 -B 100 127.0.0.1 1 2
  refute_line --partial "result: "
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "${stderr_lines[0]%% vendor_err*}" "lesson4: the SEND of the request completed with status $client_status"
  wait_server 20
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_ERR"
  assert_equal "${lines[0]%% vendor_err*}" "lesson4: the client's request (RECV) completed with status $server_status"
  run cat "$SERVER_OUT"
  refute_output --partial "result: "
}

@test "a client whose server is not there gives up within its timeout, naming host and port" {
  local start=$SECONDS
  run -1 --separate-stderr rx ./lesson4 -p "$PORT" --timeout 2 127.0.0.1 1 2
  # Bounded: 2 s of retries, plus the start of a program in a loaded lab.
  [ $((SECONDS - start)) -le 12 ]
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  [[ "$stderr" == *"could not connect to 127.0.0.1:$PORT within 2 s"* ]]
}

@test "a server given --timeout and no client gives up" {
  start_server ./lesson4 -p "$PORT" --timeout 2
  wait_server 10
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_ERR"
  assert_line --partial "no client connected to TCP port $PORT within 2 s"
}

@test "a server whose client sends garbage instead of its QP information exits with a clear error" {
  start_server ./lesson4 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  fake_client_sends 'GET / HTTP/1.0\r\n\r\n'
  wait_server 10
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_ERR"
  assert_line --partial "closed the connection before sending its QP information"
}

@test "a server whose client sends 54 bytes of garbage rejects them as not a workbook peer" {
  start_server ./lesson4 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  fake_client_sends "$(printf 'X%.0s' {1..54})"
  wait_server 10
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_ERR"
  assert_line --partial "sent a malformed exchange message: not a workbook peer (bad magic)"
}

@test "a server whose client connects and says nothing gives up after --timeout" {
  # 5 s: the silent client must connect within the server's wait for one,
  # and starting it in a loaded lab can take seconds.
  start_server ./lesson4 -p "$PORT" --timeout 5
  wait_for_server_line "waiting for a client" 10
  tcp_client silent ':'
  wait_server 15
  [ "$SERVER_STATUS" -eq 1 ]
  run cat "$SERVER_ERR"
  assert_line --partial "sent nothing for 5 s"
}

@test "a client whose server answers with garbage exits with a clear error" {
  start_fake_server garbage
  run -1 --separate-stderr rx ./lesson4 -p "$PORT" --timeout 10 127.0.0.1 1 2
  [[ "$stderr" == *"127.0.0.1:$PORT sent a malformed exchange message: not a workbook peer (bad magic)"* ]]
}

@test "a client whose server accepts and then says nothing gives up after --timeout" {
  start_fake_server silent
  local start=$SECONDS
  run -1 --separate-stderr rx ./lesson4 -p "$PORT" --timeout 2 127.0.0.1 1 2
  [ $((SECONDS - start)) -le 8 ]
  [[ "$stderr" == *"127.0.0.1:$PORT sent nothing for 2 s"* ]]
}

@test "a number that is not a number is a one-line usage error" {
  run -2 --separate-stderr rx ./lesson4 127.0.0.1 two 3
  [ "${#stderr_lines[@]}" -eq 1 ]
  assert_equal "$stderr" "lesson4: A: 'two' is not a whole number (see lesson4 -h)"
  [ -z "$output" ]
}

@test "a client without both numbers is a one-line usage error" {
  run -2 --separate-stderr rx ./lesson4 127.0.0.1 5
  [ "${#stderr_lines[@]}" -eq 1 ]
  assert_equal "$stderr" "lesson4: a client needs HOST A B, got 2 arguments (see lesson4 -h)"
}

@test "a negative number before -- is a one-line usage error that says to use --" {
  run -2 --separate-stderr rx ./lesson4 127.0.0.1 -3 5
  [ "${#stderr_lines[@]}" -eq 1 ]
  [[ "$stderr" == *"put negative numbers after --"* ]]
}

@test "-B on a server, or a -B outside 0..128, is a one-line usage error" {
  run -2 --separate-stderr rx ./lesson4 -B 16
  assert_equal "$stderr" "lesson4: -B is a client option (see lesson4 -h)"
  run -2 --separate-stderr rx ./lesson4 -B 129 127.0.0.1 1 2
  assert_equal "$stderr" "lesson4: -B: '129' is out of range 0..128 (see lesson4 -h)"
  run -2 --separate-stderr rx ./lesson4 -B many 127.0.0.1 1 2
  assert_equal "$stderr" "lesson4: -B: 'many' is not a whole number (see lesson4 -h)"
  assert_equal "$output" ""
}

@test "-h prints the usage with its defaults and exits 0" {
  run -0 rx ./lesson4 -h
  assert_line --partial "lesson4 [options] HOST A B"
  assert_output --partial "(default: 18515)"
  assert_output --partial "(default: 30;"
  assert_output --partial "--send-bytes=N"
}
