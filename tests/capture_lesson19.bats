#!/usr/bin/env bats
# bats file_tags=pair
# Runs on the host; its pairs are the pair of guests tests/run.sh keeps up
# for the suites tagged pair (LAB_PAIR_DIR), or two fresh guests per
# capture when none is up (bats tests/FILE.bats alone).
# make capture LESSON=19: lesson 19 runs across two lab guests joined by a
# virtual cable. fork() does not reach the wire: the client's one RDMA
# WRITE Only with Immediate (11), into the buffer of the server's parent
# process while its child is alive, and the server's Acknowledge (17), as in
# lesson 5.

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

# The WRITE's length and immediate, each packet once: on a loaded host rxe
# may resend the same PSN before its ACK timeout (the same source, opcode and
# PSN twice, as opcodes() in helpers/capture.bash says).
write_fields() {
  tshark_quiet -r captures/lesson19.pcap -Y 'infiniband.bth.opcode == 11' -T fields \
    -e ip.src -e infiniband.bth.psn -e infiniband.reth.dmalen -e infiniband.immdt |
    awk -F '\t' '!seen[$1 FS $2]++ { print $3 "\t" $4 }'
}

@test "lesson 19 across two guests: the WRITE lands in the parent's buffer, and the wire carries one WRITE Only with Immediate and its ACK" {
  capture 19
  assert_output --partial "[a] step 2: parent: its buffer holds \"written by the peer into the parent's buffer\" (44 bytes, the immediate)"
  assert_output --regexp '\[a\] step 2: child [0-9]+: its copy of the buffer holds "the child.s own copy"'
  assert_output --partial "[b] result: wrote 44 bytes with immediate 44"
  run opcodes 19
  assert_output $'11\n17'
  run write_fields
  # 44 bytes, and the immediate 44 (0x2c); tshark 4.0 shows ImmDt twice.
  assert_output --regexp $'^44\t0000002c(,0000002c)?$'
}
