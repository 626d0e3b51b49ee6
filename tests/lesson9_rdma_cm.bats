#!/usr/bin/env bats
# bats file_tags=rxe
#
# Lesson 9: lesson 4's sum service, connected with rdma_cm. Server and client
# run for real on the RDMA device (Soft-RoCE in the lab). rdma_cm addresses
# the server by an IP address on the device's netdev, so the client uses
# $RDMA_IP (192.0.2.1 in the lab), not 127.0.0.1. Every client starts after
# its server's "listening" line: a client that finds nobody listening is
# refused and ends (no retries).

bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  lesson_setup
  RDMA_NETDEV=$(rx rdma link show "$RDMA_DEV/1" | sed -n 's/.*netdev \([^ ]*\).*/\1/p')
  RDMA_IP=$(rx ip -4 -o addr show dev "$RDMA_NETDEV" | awk '{ sub("/.*", "", $4); print $4; exit }')
  [[ -n "$RDMA_IP" ]] || fail "no IPv4 address on $RDMA_NETDEV, the netdev under $RDMA_DEV"
}
teardown() { lesson_teardown; }

# The value of "QP 0x..." in the line of $output that starts with $1.
qp_after() {
  sed -n "s/^$1.* is QP \(0x[0-9a-f]*\)\$/\1/p" <<<"$output"
}

@test "a client gets the sum, and both sides see the connection established and disconnected" {
  start_server ./lesson9 -p "$PORT" --timeout 10
  wait_for_server_line "listening on" 10
  run --separate-stderr rx ./lesson9 -p "$PORT" --timeout 10 "$RDMA_IP" 2 3
  assert_success
  assert_line "result: 2 + 3 = 5"
  assert_equal "$(grep '^cm event:' <<<"$output" | tr '\n' ' ')" \
    "cm event: RDMA_CM_EVENT_ADDR_RESOLVED cm event: RDMA_CM_EVENT_ROUTE_RESOLVED cm event: RDMA_CM_EVENT_ESTABLISHED cm event: RDMA_CM_EVENT_DISCONNECTED "
  assert_line "client: rdma_cm chose $RDMA_DEV port 1, GID ::ffff:$RDMA_IP, to reach $RDMA_IP"
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "server: listening on ::, RDMA CM port $PORT"
  assert_equal "$(grep '^cm event:' <<<"$output" | tr '\n' ' ')" \
    "cm event: RDMA_CM_EVENT_CONNECT_REQUEST cm event: RDMA_CM_EVENT_ESTABLISHED cm event: RDMA_CM_EVENT_DISCONNECTED "
  assert_line "server: request 2 + 3"
  assert_line "result: 2 + 3 = 5"
}

@test "the QP numbers each side prints are the ones the other side created" {
  start_server ./lesson9 -p "$PORT" --timeout 10 -b "$RDMA_IP"
  wait_for_server_line "listening on $RDMA_IP" 10
  run --separate-stderr rx ./lesson9 -p "$PORT" --timeout 10 "$RDMA_IP" -- -7 3
  assert_success
  assert_line "result: -7 + 3 = -4"
  local client_sees server_sees
  client_sees=$(qp_after "client: peer $RDMA_IP")
  [[ -n "$client_sees" ]] || fail "the client printed no 'peer ... is QP' line"
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "server: QP $client_sees is RTS; waiting for the client's SEND"
  server_sees=$(qp_after "server: peer $RDMA_IP")
  [[ -n "$server_sees" ]] || fail "the server printed no 'peer ... is QP' line"
  [[ "$server_sees" != "$client_sees" ]] || fail "both sides name the same QP, $server_sees"
}

@test "a sum that overflows int64 is an error on both sides" {
  start_server ./lesson9 -p "$PORT" --timeout 10
  wait_for_server_line "listening on" 10
  run --separate-stderr rx ./lesson9 -p "$PORT" --timeout 10 "$RDMA_IP" -- -9223372036854775808 -1
  assert_failure 1
  assert_line "result: error: -9223372036854775808 + -1 overflows a signed 64-bit integer"
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line "result: error: -9223372036854775808 + -1 overflows a signed 64-bit integer"
}

@test "a request of the wrong length (-B 8) is refused by the server, and both sides still disconnect" {
  start_server ./lesson9 -p "$PORT" --timeout 10
  wait_for_server_line "listening on" 10
  run --separate-stderr rx ./lesson9 -p "$PORT" --timeout 10 -B 8 "$RDMA_IP" 2 3
  assert_failure 1
  assert_line "cm event: RDMA_CM_EVENT_DISCONNECTED"
  assert_line "result: error: the server refused the request: it was 8 bytes, not 16"
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line "cm event: RDMA_CM_EVENT_DISCONNECTED"
  assert_line "result: error: the request was 8 bytes, a sum request is exactly 16"
}

@test "a client with no server is refused at once (reject reason 8) and ends" {
  SECONDS=0
  run --separate-stderr rx ./lesson9 -p "$PORT" --timeout 10 "$RDMA_IP" 2 3
  assert_failure 1
  ((SECONDS < 5)) || fail "the refused client took ${SECONDS} s"
  assert_line "cm event: RDMA_CM_EVENT_REJECTED"
  refute_line --partial "result:"
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" "lesson9: expected RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_REJECTED (reject reason 8: invalid service ID, nothing listens on that port)
lesson9: check: is the server running there, listening (its \"listening\" line) on the same -p?"
}

@test "a loopback HOST fails at the route step, before the client claims any route" {
  run --separate-stderr rx ./lesson9 -p "$PORT" --timeout 5 127.0.0.1 2 3
  assert_failure 1
  assert_line "cm event: RDMA_CM_EVENT_ADDR_RESOLVED"
  refute_line --partial "ROUTE_RESOLVED"
  refute_line --partial "rdma_cm chose"
  assert_equal "$(grep -c '^lesson9: rdma_resolve_route(.*) failed: ENODEV' <<<"$stderr")" 1
  assert_equal "$(grep -c '^lesson9: check: HOST must be an address on the peer.s RDMA netdev' <<<"$stderr")" 1
}

@test "an IPv6 link-local HOST (with %netdev) connects, and the server names the client by it" {
  local ll
  ll=$(rx ip -6 -o addr show dev "$RDMA_NETDEV" scope link | awk '{ sub("/.*", "", $4); print $4; exit }')
  [[ -n "$ll" ]] || fail "no IPv6 link-local address on $RDMA_NETDEV"
  start_server ./lesson9 -p "$PORT" --timeout 10
  wait_for_server_line "listening on ::" 10
  run --separate-stderr rx ./lesson9 -p "$PORT" --timeout 10 "$ll%$RDMA_NETDEV" 4 5
  assert_success
  assert_line "client: rdma_cm chose $RDMA_DEV port 1, GID $ll, to reach $ll%$RDMA_NETDEV"
  assert_line "result: 4 + 5 = 9"
  wait_server 15
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line --regexp "^server: peer $ll(%$RDMA_NETDEV)? is QP 0x[0-9a-f]+$"
  assert_line "result: 4 + 5 = 9"
}

@test "a client's -d naming another device than rdma_cm chose fails before connecting" {
  run --separate-stderr rx ./lesson9 -d nosuchdev -p "$PORT" --timeout 5 "$RDMA_IP" 2 3
  assert_failure 1
  refute_line --partial "posted a"
  assert_equal "$stderr" "lesson9: rdma_cm chose $RDMA_DEV, not nosuchdev (-d)
lesson9: check: drop -d, or give a HOST that nosuchdev reaches"
}

@test "a server's -d naming another device fails on the connect request, and the client is rejected" {
  start_server ./lesson9 -d nosuchdev -p "$PORT" --timeout 10
  wait_for_server_line "listening on" 10
  run --separate-stderr rx ./lesson9 -p "$PORT" --timeout 10 "$RDMA_IP" 2 3
  assert_failure 1
  assert_line "cm event: RDMA_CM_EVENT_REJECTED"
  refute_line --partial "result:"
  wait_server 15
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line "lesson9: rdma_cm chose $RDMA_DEV, not nosuchdev (-d)"
}

@test "-h says -p is an RDMA CM port, that -i and -g are not taken, and lists -b and -B with their defaults" {
  run rx ./lesson9 -h
  assert_success
  assert_line "  -i, -g                not taken: rdma_cm picks the port and GID from the IP address"
  refute_line --partial "--gid-idx"
  assert_line --regexp '^  -p, --port=PORT +RDMA CM port the server listens on, the client connects to \(default: 18515\)$'
  assert_line --regexp '^      --timeout=SECS +every wait on the peer and on rdma_cm.s events$'
  assert_output --partial "-p is the RDMA CM port"
  assert_line "  -b, --bind=ADDR       server: the IP address to listen on (default: all, ::)"
  assert_line --partial "-B, --send-bytes=N    client: send N bytes, 0..128 (default: 16, one request);"
  refute_line --partial "--pdata-version"
}

@test "misuse prints one line on stderr and exits 2" {
  run --separate-stderr rx ./lesson9 -g 1
  assert_failure 2
  assert_equal "$stderr" "lesson9: -g does not apply: rdma_cm picks the port and GID from the IP address (see lesson9 -h)"
  run --separate-stderr rx ./lesson9 -i 2
  assert_failure 2
  assert_equal "$stderr" "lesson9: -i does not apply: rdma_cm picks the port and GID from the IP address (see lesson9 -h)"
  run --separate-stderr rx ./lesson9 -b 192.0.2.1 192.0.2.1 2 3
  assert_failure 2
  assert_equal "$stderr" "lesson9: -b is a server option (see lesson9 -h)"
  run --separate-stderr rx ./lesson9 -B 8
  assert_failure 2
  assert_equal "$stderr" "lesson9: -B is a client option (see lesson9 -h)"
  run --separate-stderr rx ./lesson9 -b not-an-address
  assert_failure 2
  assert_equal "$stderr" "lesson9: -b: 'not-an-address' is not an IPv4 or IPv6 address (see lesson9 -h)"
  run --separate-stderr rx ./lesson9 localhost 2 3
  assert_failure 2
  assert_equal "$stderr" "lesson9: HOST: 'localhost' is not an IPv4 or IPv6 address (see lesson9 -h)"
  run --separate-stderr rx ./lesson9 192.0.2.1 2
  assert_failure 2
  assert_equal "$stderr" "lesson9: a client needs HOST A B, got 2 arguments (see lesson9 -h)"
}
