#!/usr/bin/env bats
# bats file_tags=lane:lab
# make capture LESSON=18: lesson 18 in ONE lab guest (trixie-backports'
# Linux 7.3, run.conf's lab_kernel=), its server in network namespace ns_a
# and its client in ns_b, joined by a veth pair (run.conf's capture=netns:
# scripts/capture/netns.sh records veth_a). The wire is lesson 9's: the CM's
# MADs on QP1, two SENDs and their ACKs, the disconnect; the new thing is
# where it runs: RoCE v2 between two namespaces of one kernel. Runs on the
# host: the capture boots a guest of its own.

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

@test "lesson 18 between two namespaces of one guest: the sum crosses the veth as RoCE v2, CM MADs first" {
  capture 18
  assert_output --partial "capture: lesson 18, server in namespace ns_a (198.51.100.1), client in ns_b (198.51.100.2), one guest"
  assert_output --partial "[a] netns: entered ns_a (/run/netns/ns_a) with setns(2)"
  assert_output --partial "[b] netns: entered ns_b (/run/netns/ns_b) with setns(2)"
  assert_output --partial "[a] result: 2 + 3 = 5"
  assert_output --partial "[b] result: 2 + 3 = 5"
  # Every RoCE packet is UDP 4791 between the two namespaces' addresses.
  run tshark_quiet -r captures/lesson18.pcap -Y infiniband -T fields -e ip.src -e ip.dst -e udp.dstport
  assert_success
  [[ -n $output ]] || fail "no RoCE packet on veth_a"
  local line
  while IFS= read -r line; do
    [[ $line == $'198.51.100.2\t198.51.100.1\t4791' || $line == $'198.51.100.1\t198.51.100.2\t4791' ]] ||
      fail "a RoCE packet not between the namespaces on UDP 4791: $line"
  done <<<"$output"
  # The CM's MADs go to QP1 (UD SEND Only, opcode 100); the sum is two RC SEND Only (4), each ACKed (17).
  run tshark_quiet -r captures/lesson18.pcap -Y infiniband -T fields -e infiniband.bth.opcode -e infiniband.bth.destqp
  assert_success
  assert_line --index 0 $'100\t0x000001'
  assert_equal "$(cut -f1 <<<"$output" | awk '!seen[$0]++' | tr '\n' ' ')" "100 4 17 "
}
