#!/usr/bin/env bats
# common/'s plumbing that needs no RDMA device, tested on this host: the shared
# command line, GID formatting, the exchange's wire form and its TCP side over
# loopback. The programs under tests/unit/ (built by `make units` into
# build/tests/) do the work; these tests check what they print.
bats_require_minimum_version 1.5.0

setup_file() {
  cd "$BATS_TEST_DIRNAME/.." || return 1
  make --no-print-directory -s units >&2
}

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
  PROBE=build/tests/options_probe
}

# Misuse: exit 2 and exactly one line on stderr, which says $1.
assert_usage_error() {
  assert_equal "$status" 2
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "${#stderr_lines[@]}" 1
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" "options_probe: $1 (see options_probe -h)"
}

# ---- the shared command line (common/options.hpp)

@test "with no options every field has its documented default" {
  run --separate-stderr "$PROBE"
  assert_success
  assert_output "device=
ib_port=1
gid_index=-1
tcp_port=18515
timeout_s=30
timeout_given=0
accept_timeout_s=-1
verbose=
args="
}

@test "each short option sets its field" {
  run --separate-stderr "$PROBE" -d rxe7 -i 2 -g 3 -p 20001 -n 5 -v
  assert_success
  assert_line "device=rxe7"
  assert_line "ib_port=2"
  assert_line "gid_index=3"
  assert_line "tcp_port=20001"
  assert_line "count=5"
  assert_line "verbose=1"
  assert_line "given=nv"
}

@test "an option given with an empty value counts as given, and is refused as no number" {
  run --separate-stderr "$PROBE" -n ''
  assert_usage_error "-n: '' is not a whole number"
  run --separate-stderr "$PROBE" -v
  assert_success
  assert_line "given=v"
  refute_line --partial "count="
}

@test "each long option sets its field, with = or a separate argument" {
  run --separate-stderr "$PROBE" --ib-dev=mlx5_1 --ib-port 2 --gid-idx=255 --port=1 --timeout 7 --count=-100 --verbose
  assert_success
  assert_line "device=mlx5_1"
  assert_line "ib_port=2"
  assert_line "gid_index=255"
  assert_line "tcp_port=1"
  assert_line "timeout_s=7"
  assert_line "count=-100"
  assert_line "verbose=1"
}

@test "a long-only option has no letter: it is given by its name, listed without one, and named in errors" {
  run --separate-stderr "$PROBE" --label=a -v --label ''
  assert_success
  assert_line "label="
  assert_line "given=v" # the letters only
  run --separate-stderr "$PROBE" -v
  refute_line --partial "label="
  run --separate-stderr "$PROBE" -h
  assert_line --regexp "^      --label=TEXT +a long-only option: no letter \(default: none\)$"
  run --separate-stderr "$PROBE" --label
  assert_usage_error "option --label needs an argument"
}

@test "--timeout bounds the server's wait for its first client only when given" {
  run --separate-stderr "$PROBE"
  assert_line "accept_timeout_s=-1"
  run --separate-stderr "$PROBE" --timeout 12
  assert_line "timeout_s=12"
  assert_line "timeout_given=1"
  assert_line "accept_timeout_s=12"
}

@test "a host and numbers are positional arguments, and -- lets numbers be negative" {
  run --separate-stderr "$PROBE" -p 20001 192.0.2.1 -- -3 5 -9223372036854775808
  assert_success
  assert_line "tcp_port=20001"
  assert_line "args=[192.0.2.1][-3][5][-9223372036854775808]"
  assert_line "number=-3"
  assert_line "number=5"
  assert_line "number=-9223372036854775808"
}

@test "a negative number without -- is refused with a hint to use --" {
  run --separate-stderr "$PROBE" 192.0.2.1 -3 5
  assert_usage_error "unknown option '-3'; put negative numbers after --"
}

@test "-h prints the usage with every default and exits 0" {
  run --separate-stderr "$PROBE" -h
  assert_success
  assert_equal "$stderr" ""
  assert_line --partial "Usage:"
  assert_line --partial "-d, --ib-dev=DEV      RDMA device (default: the first device found)"
  assert_line --partial "-i, --ib-port=PORT    port of the device (default: 1)"
  assert_line --partial "-g, --gid-idx=INDEX   GID index (default: chosen by type, RoCE v2 IPv4-mapped first;"
  assert_line --partial "-p, --port=PORT       TCP port of the out-of-band exchange (default: 18515)"
  assert_line --partial "(default: 30; a server waits for its first client"
  assert_line --partial "-n, --count=N         a count, -100..100 (default: 1)"
  assert_line --partial "-v, --verbose"
  assert_line --partial "-h, --help"
  assert_line --partial "HOST -- -3 5" # numbers follow the host: say how to pass negative ones
  refute_line --partial "device="      # it exits before doing anything else
}

@test "--help is -h" {
  run --separate-stderr "$PROBE" --help
  assert_success
  assert_line --partial "Usage:"
}

@test "a lesson without a peer has no -p or --timeout, in its usage or its parser" {
  PROBE_NO_NETWORK=1 run --separate-stderr "$PROBE" -h
  assert_success
  refute_line --partial "--port"
  refute_line --partial "--timeout"
  refute_line --partial "HOST -- -3 5" # and no word about numbers after a host it does not take
  PROBE_NO_NETWORK=1 run --separate-stderr "$PROBE" -p 20001
  assert_usage_error "unknown option '-p'"
  PROBE_NO_NETWORK=1 run --separate-stderr "$PROBE" --timeout=5
  assert_usage_error "unknown option '--timeout'"
}

@test "a lesson that reads no port or GID neither lists nor takes -i and -g" {
  PROBE_NO_PORT_GID=1 run --separate-stderr "$PROBE" -h
  assert_success
  assert_line --partial "--ib-dev=DEV"
  refute_line --partial "--ib-port"
  refute_line --partial "--gid-idx"
  refute_line --regexp '^  -i, -g'
  PROBE_NO_PORT_GID=1 run --separate-stderr "$PROBE" -g 1
  assert_usage_error "unknown option '-g'"
  PROBE_NO_PORT_GID=1 run --separate-stderr "$PROBE" --ib-port=2
  assert_usage_error "unknown option '--ib-port'"
}

@test "a lesson that reads a port but no GID lists and takes -i, not -g" {
  PROBE_NO_GID=1 run -0 --separate-stderr "$PROBE" -h
  assert_line --partial "-i, --ib-port=PORT    port of the device (default: 1)"
  refute_line --partial "--gid-idx"
  PROBE_NO_GID=1 run -0 --separate-stderr "$PROBE" -i 2
  assert_line "ib_port=2"
  PROBE_NO_GID=1 run --separate-stderr "$PROBE" -g 1
  assert_usage_error "unknown option '-g'"
  PROBE_NO_GID=1 run --separate-stderr "$PROBE" --gid-idx=1
  assert_usage_error "unknown option '--gid-idx'"
}

@test "a lesson that says why it takes no port or GID shows the reason in -h and in the refusal" {
  PROBE_NO_PORT_GID="rdma_cm picks them" run --separate-stderr "$PROBE" -h
  assert_success
  assert_line "  -i, -g                not taken: rdma_cm picks them"
  refute_line --partial "--gid-idx"
  PROBE_NO_PORT_GID="rdma_cm picks them" run --separate-stderr "$PROBE" -i 2
  assert_usage_error "-i does not apply: rdma_cm picks them"
}

@test "a value that is not a number is named in one line, exit 2" {
  run --separate-stderr "$PROBE" -i one
  assert_usage_error "-i: 'one' is not a whole number"
  run --separate-stderr "$PROBE" -p 18515x
  assert_usage_error "-p: '18515x' is not a whole number"
  run --separate-stderr "$PROBE" --timeout ''
  assert_usage_error "--timeout: '' is not a whole number"
  run --separate-stderr "$PROBE" -n 99999999999999999999
  assert_usage_error "-n: '99999999999999999999' does not fit in 64 bits"
}

@test "a value out of its range is named with the range, exit 2" {
  run --separate-stderr "$PROBE" -i 0
  assert_usage_error "-i: '0' is out of range 1..255"
  run --separate-stderr "$PROBE" -g 256
  assert_usage_error "-g: '256' is out of range 0..255"
  run --separate-stderr "$PROBE" -g -1
  assert_usage_error "-g: '-1' is out of range 0..255"
  run --separate-stderr "$PROBE" -p 65536
  assert_usage_error "-p: '65536' is out of range 1..65535"
  run --separate-stderr "$PROBE" --timeout 0
  assert_usage_error "--timeout: '0' is out of range 1..86400"
  run --separate-stderr "$PROBE" -n 101
  assert_usage_error "-n: '101' is out of range -100..100"
}

@test "a key is read in 0x hex or in decimal, a leading 0 as decimal, up to the width it is given" {
  run -0 --separate-stderr "$PROBE" -k 0x01234567
  assert_line "key=0x1234567"
  run -0 --separate-stderr "$PROBE" -k 0XFFFFFFFF
  assert_line "key=0xffffffff"
  run -0 --separate-stderr "$PROBE" -k 19088743
  assert_line "key=0x1234567"
  run -0 --separate-stderr "$PROBE" -k 010
  assert_line "key=0xa"
  run -0 --separate-stderr "$PROBE" -b 64 -k 0xffffffffffffffff
  assert_line "key=0xffffffffffffffff"
  run -0 --separate-stderr "$PROBE" -b 24 -k 0xffffff
  assert_line "key=0xffffff"
}

@test "a key that is not a number, is signed or is wider than its width is named in one line, exit 2" {
  run --separate-stderr "$PROBE" -k 0x1ffffffff
  assert_usage_error "-k: '0x1ffffffff' is not a 32-bit number (decimal or 0x hex)"
  run --separate-stderr "$PROBE" -k 4294967296
  assert_usage_error "-k: '4294967296' is not a 32-bit number (decimal or 0x hex)"
  run --separate-stderr "$PROBE" -b 24 -k 0x1000000
  assert_usage_error "-k: '0x1000000' is not a 24-bit number (decimal or 0x hex)"
  run --separate-stderr "$PROBE" -b 64 -k 0x10000000000000000
  assert_usage_error "-k: '0x10000000000000000' is not a 64-bit number (decimal or 0x hex)"
  local bad
  for bad in key '' 0x 0xg1 -7 +7 ' 7' '7 ' 12ab; do
    run --separate-stderr "$PROBE" -k "$bad"
    assert_usage_error "-k: '$bad' is not a 32-bit number (decimal or 0x hex)"
  done
}

@test "an option without its argument is named, short or long, exit 2" {
  run --separate-stderr "$PROBE" -d
  assert_usage_error "option -d needs an argument"
  run --separate-stderr "$PROBE" --timeout
  assert_usage_error "option --timeout needs an argument"
  run --separate-stderr "$PROBE" -v -n
  assert_usage_error "option -n needs an argument"
}

@test "an unknown option is named as it was written, exit 2" {
  run --separate-stderr "$PROBE" -x
  assert_usage_error "unknown option '-x'"
  run --separate-stderr "$PROBE" --bogus=1
  assert_usage_error "unknown option '--bogus'"
  run --separate-stderr "$PROBE" --help=yes
  assert_usage_error "unknown option '--help'"
}

# ---- GID formatting (common/device.hpp)

@test "GIDs are written as IPv6 addresses and IPv4-mapped ones are recognised" {
  run build/tests/gid_format
  assert_success
  assert_line "ok - gid_to_string writes ::ffff:192.0.2.1 (got ::ffff:192.0.2.1)"
  assert_line "ok - gid_to_string writes fe80::5054:ff:fe12:3456 (got fe80::5054:ff:fe12:3456)"
  assert_line "ok - ::ffff:192.0.2.1 is IPv4-mapped"
  assert_line "ok - a link-local GID is not IPv4-mapped"
  assert_line "ok - 1::ffff:... is not IPv4-mapped (the first 80 bits must be zero)"
  assert_line "ok - the zero GID is not IPv4-mapped"
  assert_line "ok - gid_type_str(IBV_GID_TYPE_ROCE_V2) is RoCE v2"
  refute_line --partial "not ok"
  assert_line "gid_format: 24 checks, 0 failed"
}

# ---- UD datagrams (common/ud.hpp)

@test "a UD receive's message is what follows its 40-byte GRH, and the GRH area gives the IPv4 source" {
  run build/tests/ud_datagram
  assert_success
  assert_line "ok - a 56-byte receive with its GRH holds a 16-byte message"
  assert_line "ok - a receive of the GRH alone holds an empty message"
  assert_line "ok - grh_source_ipv4 reads the IPv4 header's source (got 192.0.2.7)"
  refute_line --partial "not ok"
  assert_line "ud_datagram: 3 checks, 0 failed"
}

@test "a UD receive shorter than its GRH is refused, saying how long it was" {
  run -1 --separate-stderr build/tests/ud_datagram short
  assert_output ""
  assert_equal "$stderr" "ud_datagram: a UD receive without its 40-byte GRH (39 bytes)"
}

# ---- enum names (common/completion.hpp, common/qp.hpp)

@test "completion statuses and QP states are named as in verbs.h, each at its number" {
  run build/tests/enum_names
  assert_success
  assert_line "ok - wc_status_name(12) is IBV_WC_RETRY_EXC_ERR (got IBV_WC_RETRY_EXC_ERR)"
  assert_line "ok - wc_status_name(13) is IBV_WC_RNR_RETRY_EXC_ERR (got IBV_WC_RNR_RETRY_EXC_ERR)"
  assert_line "ok - qp_state_name(IBV_QPS_ERR)"
  assert_line "ok - wc_status_text(13) is the name and the number"
  refute_line --partial "not ok"
  assert_line "enum_names: 17 checks, 0 failed"
}

@test "CHECK_POLL passes ibv_poll_cq's count through, and a negative one fails naming the call and what it returned" {
  run -0 build/tests/check_poll_probe 3
  assert_output "n=3"
  run -0 build/tests/check_poll_probe 0
  assert_output "n=0"
  run -1 --separate-stderr build/tests/check_poll_probe -2
  assert_output ""
  assert_equal "${stderr_lines[0]}" "check_poll_probe: fake_poll_cq(std::atoi(argv[1])) failed (returned -2)"
  assert_equal "${stderr_lines[1]}" "check_poll_probe: check: the CQ overran (more completions than entries?) or the device failed: dmesg"
}

# ---- the exchange's wire form (common/exchange.hpp)

@test "a PeerInfo survives encode and decode, big-endian with all 64 address bits" {
  run build/tests/exchange_codec
  assert_success
  assert_line "ok - round trip keeps MTU, the 64-bit address, length and rkey"
  assert_line "ok - the address is all 64 bits, big-endian, at offset 38"
  assert_line "ok - the wire form is 54 bytes"
  refute_line --partial "not ok"
  assert_line "exchange_codec: 33 checks, 0 failed"
}

@test "a peer's bytes are shown escaped: everything outside printable ASCII, UTF-8 CSI, a raw 9b and bidi overrides included" {
  run build/tests/exchange_codec
  assert_success
  assert_line "ok - printable escapes the UTF-8 CSI c2 9b"
  assert_line "ok - printable escapes a raw 9b"
  assert_line "ok - printable escapes the right-to-left override e2 80 ae"
  assert_line "ok - printable escapes DEL, ff and NUL"
  assert_line "ok - printable escapes quotes and backslashes"
  refute_line --partial "not ok"
}

@test "decode refuses malformed and truncated messages and says why" {
  run build/tests/exchange_codec
  assert_success
  assert_line 'ok - rejects a wrong magic: "not a workbook peer (bad magic)"'
  assert_line 'ok - rejects another protocol version: "protocol version 2, expected 1"'
  assert_line 'ok - rejects a message one byte short: "expected 54 bytes, got 53"'
  assert_line 'ok - rejects QPN 0: "QP number 0 is not a 24-bit QP number"'
  assert_line 'ok - rejects a QPN of 25 bits: "QP number 16777216 is not a 24-bit QP number"'
  assert_line 'ok - rejects a PSN of 25 bits: "PSN 16777216 does not fit in 24 bits"'
  assert_line 'ok - rejects MTU enum 0: "path MTU enum 0 is not 1..5"'
  assert_line 'ok - rejects MTU enum 6: "path MTU enum 6 is not 1..5"'
  assert_line 'ok - rejects an address + length past 2^64: "buffer address + length wraps around"'
  assert_line 'ok - rejects a length without an address: "a buffer length or rkey without an address"'
}

# ---- the exchange over TCP on loopback

@test "two sides trade their PeerInfo and a DONE token over TCP" {
  run --separate-stderr build/tests/exchange_tcp ok
  assert_success
  assert_line "server got: qpn 0x11 rkey 0xabcd"
  assert_line "peer: lesson 4 qpn 0x22 psn 0x123456 mtu 3 addr 0x7f0000001000 length 4096 rkey 0xabcd"
  assert_line "result: exchange ok"
}

@test "a client started before its server retries until the server listens, and says so once" {
  run --separate-stderr build/tests/exchange_tcp late-server
  assert_success
  assert_line "connected after retrying for more than 0.5 s"
  assert_line "result: exchange ok"
  assert_equal "$(grep -cE '^client: 127\.0\.0\.1:[0-9]+ did not answer \(ECONNREFUSED \(Connection refused\)\); retrying for up to 5 s$' <<<"$output")" 1
}

@test "a client with nobody to connect to gives up after --timeout and says what to check" {
  run --separate-stderr build/tests/exchange_tcp refused
  assert_failure 1
  refute_output --partial "result:"
  [[ "${stderr_lines[0]}" =~ ^"exchange_tcp: could not connect to 127.0.0.1:"[0-9]+" within 1 s ("[0-9]+" attempt"s?", last: ECONNREFUSED (Connection refused))"$ ]]
  [[ "$stderr" == *"check: is the server running there with the same -p?"* ]]
  # A wrong host fails the same way: the hint names the address as a suspect too.
  [[ "$stderr" == *"is 127.0.0.1 the server's address (a wrong one fails the same way)?"* ]]
  assert_equal "$(grep -c '^client: .* did not answer .*; retrying for up to 1 s$' <<<"$output")" 1
}

@test "a server nobody connects to gives up after its timeout" {
  run --separate-stderr build/tests/exchange_tcp no-client
  assert_failure 1
  [[ "$stderr" =~ "no client connected to TCP port "[0-9]+" within 1 s" ]]
}

@test "a peer that closes without a word is reported, not waited for" {
  # The peer's close can arrive as a FIN or, with our message unread, as a
  # reset: both must read as "closed", so try it a few times.
  for _ in 1 2 3 4 5; do
    run --separate-stderr build/tests/exchange_tcp early-close
    [[ "$stderr" == *"closed the connection before sending its QP information"* ]]
  done
  assert_failure 1
  [[ "$stderr" =~ "exchange_tcp: the peer 127.0.0.1:"[0-9]+" closed the connection before sending its QP information" ]]
}

@test "a peer that sends half a message and closes is reported" {
  run --separate-stderr build/tests/exchange_tcp truncated
  assert_failure 1
  [[ "$stderr" == *"closed the connection before sending its QP information"* ]]
}

@test "a silent peer is given up on after the timeout" {
  SECONDS=0
  run --separate-stderr build/tests/exchange_tcp silent
  assert_failure 1
  [[ "$stderr" =~ "the peer 127.0.0.1:"[0-9]+" sent nothing for 1 s" ]]
  [ "$SECONDS" -lt 5 ] # the peer would hold on for 10 s
}

@test "a peer that sends garbage is refused as malformed" {
  run --separate-stderr build/tests/exchange_tcp garbage
  assert_failure 1
  [[ "$stderr" == *"sent a malformed exchange message: not a workbook peer (bad magic)"* ]]
}

@test "a peer running another lesson is refused, naming both lessons" {
  run --separate-stderr build/tests/exchange_tcp mismatch
  assert_failure 1
  [[ "$stderr" == *"runs lesson 5, this is lesson 4"* ]]
  [[ "$stderr" == *"check: run the same lesson on both sides"* ]]
}

@test "a wrong control token is shown as it arrived" {
  run --separate-stderr build/tests/exchange_tcp wrong-token
  assert_failure 1
  assert_line "peer: lesson 4 qpn 0x22 psn 0x123456 mtu 3 addr 0x7f0000001000 length 4096 rkey 0xabcd"
  [[ "$stderr" == *"sent 'NOPE' where DONE was expected"* ]]
}

@test "every two-process lesson's -h says its server listens on every address, and what ends it" {
  local n text
  for n in 4 5 6 8 10 11 12 14 15; do
    run -0 --separate-stderr "./lesson$n" -h
    text=$(paste -sd' ' <<<"$output")
    [[ $text == *"The server listens on every address of this host (IPv4 and IPv6, port -p) and serves one client: the first connection that goes wrong ends it (exit 1). Run it where you trust whoever can reach that port."* ]] ||
      fail "lesson$n -h does not say what its server listens on: $output"
  done
  run -0 ./lesson9 -h
  assert_output --partial "The server listens on every address of this host (or only -b's), RDMA CM port -p,"
  # Lesson 12's multicast receivers are its second program's server, of one sender.
  run -0 ./lesson12_mcast -h
  assert_output --partial "The receivers listen on every address of this host (IPv4 and IPv6, port -p) and serve"
  run -0 ./lesson7 -h
  assert_output --partial "CLIENTS clients together: the first connection that goes wrong ends it for all"
  # Lesson 13 serves many clients: a bad one is dropped, not the end of the server.
  run -0 ./lesson13 -h
  assert_output --partial "A client that breaks the protocol is dropped (its QP to ERR, its"
  refute_output --partial "serves"$'\n'"one client"
  # A lesson without a peer says nothing of a server.
  run -0 ./lesson1 -h
  refute_output --partial "The server listens"
}
