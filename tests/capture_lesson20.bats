#!/usr/bin/env bats
# uses: pair
# Runs on the host; its pairs are the pair of guests tests/run.sh keeps up
# for the "# uses: pair" suites (LAB_PAIR_DIR), or two fresh guests per
# capture when none is up (bats tests/FILE.bats alone).
# make capture LESSON=20: lesson 20's key-value service across two lab
# guests, one client of 12 requests with a window of 4 (run.conf). The
# requests are SEND Only (4) into the server's SRQ, the responses RDMA WRITE
# Only with Immediate (11) into the client's ring, the immediate naming the
# slot and the response carrying the credits; every packet is ACKed (17).

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

# One line per packet of opcode $1, each packet once (a resend under load
# repeats source and PSN: opcodes() in helpers/capture.bash), then fields $2...
fields() {
  local op=$1 args=() f
  shift
  for f in "$@"; do args+=(-e "$f"); done
  tshark_quiet -r captures/lesson20.pcap -Y "infiniband.bth.opcode == $op" -T fields \
    -e ip.src -e infiniband.bth.psn "${args[@]}" | awk -F '\t' '!seen[$1 FS $2]++' | cut -f 3-
}

@test "lesson 20 across two guests: 12 request SENDs, 12 WRITEs with immediate into the ring, the first request alone on 1 credit" {
  capture 20
  assert_output --partial "[b] result: 12 requests answered (4 PUTs, 8 GETs), every response checked;"
  assert_output --partial "[a] result: served 12 requests from 1 client, each said goodbye"
  assert_output --partial "[b] client: response 1 in slot 0: GET not found, credits 4"
  run opcodes 20
  assert_equal "$(grep -c '^4$' <<<"$output")" 12
  assert_equal "$(grep -c '^11$' <<<"$output")" 12
  assert_equal "$(grep -c '^17$' <<<"$output")" 24
  # Before the first response the client has 1 credit: one SEND, its
  # response, and only then the next SEND.
  run bash -c "grep -v '^17$' <<<'$output' | head -n 3 | paste -sd ' '"
  assert_output "4 11 4"
}

@test "each WRITE lands in the ring slot its immediate names, 40 bytes, and carries the credits: 4 (min of the ring and -t)" {
  [[ -f captures/lesson20.pcap ]] || capture 20
  local base
  base=$(fields 11 infiniband.reth.va | head -n 1)
  run fields 11 infiniband.immdt infiniband.reth.va infiniband.reth.dmalen data.data
  assert_equal "${#lines[@]}" 12
  local line imm va len data seqs=()
  for line in "${lines[@]}"; do
    IFS=$'\t' read -r imm va len data <<<"$line"
    imm=${imm%%,*} # tshark 4.0 shows ImmDt twice
    ((16#$imm < 4)) || fail "immediate $imm: not a slot of a 4-slot ring"
    assert_equal "$((va))" "$((base + 16#$imm * 64))"
    assert_equal "$len" 40
    # The response: seq (4 bytes), status, value length, credits (2 bytes), big-endian.
    assert_equal "${data:12:4}" 0004
    seqs+=("$((16#${data:0:8}))")
  done
  # Every request answered once.
  assert_equal "$(printf '%s\n' "${seqs[@]}" | sort -n | paste -sd ' ')" "1 2 3 4 5 6 7 8 9 10 11 12"
}

@test "each request SEND is 60 bytes: a GET or a PUT, the ring slot it wants, its sequence number" {
  [[ -f captures/lesson20.pcap ]] || capture 20
  run fields 4 data.data
  assert_equal "${#lines[@]}" 12
  local data n=0 slot
  for data in "${lines[@]}"; do
    n=$((n + 1))
    assert_equal "${#data}" 120
    [[ ${data:0:2} == 47 || ${data:0:2} == 50 ]] || fail "request $n: op byte ${data:0:2}, not G (47) or P (50)"
    slot=$((16#${data:8:4}))
    ((slot < 4)) || fail "request $n names slot $slot of 4"
    assert_equal "$((16#${data:16:8}))" "$n"
  done
}

@test "the goodbye is the last word: BYE! after the last WRITE's ACK" {
  [[ -f captures/lesson20.pcap ]] || capture 20
  local last_ack bye
  last_ack=$(tshark_quiet -r captures/lesson20.pcap -Y 'infiniband.bth.opcode == 17 && ip.src == 192.0.2.2' \
    -T fields -e frame.number | tail -n 1)
  bye=$(tshark_quiet -r captures/lesson20.pcap -Y 'tcp.payload == 42:59:45:21' -T fields -e frame.number)
  [[ -n $last_ack && -n $bye ]] || fail "no ACK ($last_ack) or no BYE! ($bye)"
  ((bye > last_ack)) || fail "BYE! (frame $bye) before the client's last ACK (frame $last_ack)"
}
