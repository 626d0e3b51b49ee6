#!/usr/bin/env bats
# runs-on: rxe
#
# Lesson 9: lesson 4's sum service, connected with rdma_cm. Server and client
# run for real on the RDMA device (Soft-RoCE in the lab). rdma_cm addresses
# the server by an IP address on the device's netdev, so the client uses
# $RDMA_IP (192.0.2.1 in the lab), not 127.0.0.1.

bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  lesson_setup
  local netdev
  netdev=$(rdma link show "$RDMA_DEV/1" | sed -n 's/.*netdev \([^ ]*\).*/\1/p')
  RDMA_IP=$(ip -4 -o addr show dev "$netdev" | awk '{ sub("/.*", "", $4); print $4; exit }')
  [ -n "$RDMA_IP" ] || fail "no IPv4 address on $netdev, the netdev under $RDMA_DEV"
}
teardown() { lesson_teardown; }

@test "a client gets the sum, and both sides see the connection established and disconnected" {
  start_server ./lesson9 -p "$PORT" --timeout 10
  wait_for_server_line "listening on" 10
  run --separate-stderr ./lesson9 -p "$PORT" --timeout 10 "$RDMA_IP" 2 3
  assert_success
  assert_line "result: 2 + 3 = 5"
  assert_line "cm event: RDMA_CM_EVENT_ADDR_RESOLVED"
  assert_line "cm event: RDMA_CM_EVENT_ROUTE_RESOLVED"
  assert_line "cm event: RDMA_CM_EVENT_ESTABLISHED"
  assert_line "cm event: RDMA_CM_EVENT_DISCONNECTED"
  assert_line --regexp "^client: $RDMA_IP reaches $RDMA_IP through $RDMA_DEV port 1$"
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "server: listening on 0.0.0.0, RDMA CM port $PORT"
  assert_line "cm event: RDMA_CM_EVENT_CONNECT_REQUEST"
  assert_line "cm event: RDMA_CM_EVENT_ESTABLISHED"
  assert_line "cm event: RDMA_CM_EVENT_DISCONNECTED"
  assert_line "server: request 2 + 3"
  assert_line "result: 2 + 3 = 5"
}

@test "the QP numbers each side prints are the ones the other side created" {
  start_server ./lesson9 -p "$PORT" --timeout 10 -b "$RDMA_IP"
  wait_for_server_line "listening on $RDMA_IP" 10
  run --separate-stderr ./lesson9 -p "$PORT" --timeout 10 "$RDMA_IP" -- -7 3
  assert_success
  assert_line "result: -7 + 3 = -4"
  local mine theirs
  mine=$(sed -n 's/^client: QP \(0x[0-9a-f]*\) is RTS, connected to the server.s QP \(0x[0-9a-f]*\)$/\1/p' <<<"$output")
  theirs=$(sed -n 's/^client: QP \(0x[0-9a-f]*\) is RTS, connected to the server.s QP \(0x[0-9a-f]*\)$/\2/p' <<<"$output")
  [ -n "$mine" ] && [ -n "$theirs" ]
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line --partial "(QP $mine)"
  assert_line "server: QP $theirs is RTS; waiting for the client's SEND"
}

@test "a sum that overflows int64 is an error on both sides" {
  start_server ./lesson9 -p "$PORT" --timeout 10
  wait_for_server_line "listening on" 10
  run --separate-stderr ./lesson9 -p "$PORT" --timeout 10 "$RDMA_IP" -- -9223372036854775808 -1
  assert_failure 1
  assert_line "result: error: -9223372036854775808 + -1 overflows a signed 64-bit integer"
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line "result: error: -9223372036854775808 + -1 overflows a signed 64-bit integer"
}

@test "a client with no server retries while it is rejected and gives up within --timeout" {
  SECONDS=0
  run --separate-stderr ./lesson9 -p "$PORT" --timeout 3 "$RDMA_IP" 2 3
  assert_failure 1
  (( SECONDS < 10 ))
  assert_line "client: nothing listens there yet; retrying for up to 3 s"
  assert_equal "$(grep -c "no lesson-9 server answered at $RDMA_IP, RDMA CM port $PORT, within 3 s" <<<"$stderr")" 1
  assert_equal "$(grep -c 'last: RDMA_CM_EVENT_REJECTED, reject reason 8' <<<"$stderr")" 1
}

@test "a client started before its server connects once the server listens" {
  run --separate-stderr bash -c "(sleep 2; exec ./lesson9 -p $PORT --timeout 10 >'$SERVER_OUT' 2>'$SERVER_ERR') 3>&- &
                                 exec ./lesson9 -p $PORT --timeout 10 $RDMA_IP 4 5"
  assert_success
  assert_line "client: nothing listens there yet; retrying for up to 10 s"
  assert_line "result: 4 + 5 = 9"
  for _ in $(seq 50); do grep -q '^result:' "$SERVER_OUT" 2>/dev/null && break; sleep 0.2; done
  run cat "$SERVER_OUT"
  assert_line "result: 4 + 5 = 9"
}

@test "the server rejects a client whose private data carries another protocol version" {
  start_server ./lesson9 -p "$PORT" --timeout 10
  wait_for_server_line "listening on" 10
  run --separate-stderr ./lesson9 -p "$PORT" --timeout 10 -P 7 "$RDMA_IP" 2 3
  assert_failure 1
  assert_line "cm event: RDMA_CM_EVENT_REJECTED (reject reason 28: consumer defined, the server rejected us)"
  assert_line "result: error: the server rejected the connection: we sent protocol version 7, it speaks 1"
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line "result: error: rejected the client $RDMA_IP: it sent protocol version 7 (this side speaks 1)"
}

@test "a loopback HOST fails at once, naming the route step and what to use instead" {
  run --separate-stderr ./lesson9 -p "$PORT" --timeout 5 127.0.0.1 2 3
  assert_failure 1
  assert_equal "$(grep -c '^lesson9: check: HOST must be an address on the peer.s RDMA netdev' <<<"$stderr")" 1
  refute_line --partial "result: "
}

@test "-h says -p is an RDMA CM port, that -i and -g are not taken, and lists -b and -P with their defaults" {
  run ./lesson9 -h
  assert_success
  assert_line "  -i, -g                not taken: rdma_cm picks the port and GID from the IP address"
  refute_line --partial "--gid-idx"
  assert_line --regexp '^  -p, --port=PORT +RDMA CM port the server listens on, the client connects to \(default: 18515\)$'
  assert_output --partial "-p is the RDMA CM port"
  assert_line --partial "-b, --bind=ADDR"
  assert_line --partial "-P, --pdata-version=N"
  assert_output --partial "(default: 18515)"
}

@test "misuse prints one line on stderr and exits 2" {
  run --separate-stderr ./lesson9 -g 1
  assert_failure 2
  assert_equal "$stderr" "lesson9: -g does not apply: rdma_cm chooses the GID from the IP address (see lesson9 -h)"
  run --separate-stderr ./lesson9 -i 2
  assert_failure 2
  assert_equal "$stderr" "lesson9: -i does not apply: rdma_cm chooses the port from the IP address (see lesson9 -h)"
  run --separate-stderr ./lesson9 -b 192.0.2.1 192.0.2.1 2 3
  assert_failure 2
  assert_equal "$stderr" "lesson9: -b is a server option (see lesson9 -h)"
  run --separate-stderr ./lesson9 -P 2
  assert_failure 2
  assert_equal "$stderr" "lesson9: -P is a client option (see lesson9 -h)"
  run --separate-stderr ./lesson9 localhost 2 3
  assert_failure 2
  assert_equal "$stderr" "lesson9: HOST: 'localhost' is not an IPv4 or IPv6 address (see lesson9 -h)"
  run --separate-stderr ./lesson9 192.0.2.1 2
  assert_failure 2
  assert_equal "$stderr" "lesson9: a client needs HOST A B, got 2 arguments (see lesson9 -h)"
}
