#!/usr/bin/env bats
# bats file_tags=pair
# Runs on the host; its pairs are the pair of guests tests/run.sh keeps up
# for the suites tagged pair (LAB_PAIR_DIR), or two fresh guests per
# capture when none is up (bats tests/FILE.bats alone).
# Lesson 12 across two lab guests joined by a virtual cable: what UD
# (./lesson12, as make capture LESSON=12 runs it) and multicast
# (./lesson12_mcast, its second program) look like on the wire. Each test uses a pair
# of guests (the setup and helpers are tests/capture.bats's).

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

@test "lesson 12 across two guests: the sum travels as UD SEND Only with a DETH naming Q_Key and source QP" {
  capture 12
  assert_output --partial "[b] result: 2 + 3 = 5"
  assert_output --partial "[a] result: 2 + 3 = 5"
  # One datagram each way and nothing else: no Acknowledge (17), no RC opcode.
  run tshark_quiet -r captures/lesson12.pcap -Y infiniband -T fields -e infiniband.bth.opcode
  assert_equal "$output" $'100\n100'
  # The request, b -> a: UD SEND Only (100) with the Q_Key both sides use and
  # the client's QP as the source; the answer, a -> b, goes back to that QP.
  # (tshark pads srcqp to 8 hex digits and destqp to 6: compare numbers.)
  local qkey src dest rqkey rsrc rdest
  read -r qkey src dest < <(tshark_quiet -r captures/lesson12.pcap -Y 'infiniband.bth.opcode == 100 && ip.src == 192.0.2.2' \
    -T fields -e infiniband.deth.q_key -e infiniband.deth.srcqp -e infiniband.bth.destqp)
  read -r rqkey rsrc rdest < <(tshark_quiet -r captures/lesson12.pcap -Y 'infiniband.bth.opcode == 100 && ip.src == 192.0.2.1' \
    -T fields -e infiniband.deth.q_key -e infiniband.deth.srcqp -e infiniband.bth.destqp)
  assert_equal "$((qkey))" "$((0x01234567))"
  assert_equal "$((rqkey))" "$((0x01234567))"
  ((src > 1 && dest > 1)) || fail "request: srcqp $src, destqp $dest"
  assert_equal "$((rsrc))" "$((dest))" # the server answers from the QP the client sent to...
  assert_equal "$((rdest))" "$((src))" # ...to the QP the DETH named as the source
}

@test "lesson 12's multicast program across two guests: one datagram per SEND on the wire to 239.1.2.3, QP 0xFFFFFF, three receivers get each" {
  local pcap="$BATS_TEST_TMPDIR/mcast.pcap"
  run timeout 300 scripts/lab.sh pair --timeout 240 --pcap "$pcap" \
    --a "./lesson12_mcast --timeout 60" \
    --b "./lesson12_mcast --timeout 60 192.0.2.1"
  assert_success
  assert_output --partial "[b] result: sent 3 datagrams once to group 239.1.2.3"
  assert_output --partial "[a] result: each of 3 receivers got all 3 datagrams"
  assert_output --regexp '\[a\] receiver 3 \(QP 0x[0-9a-f]+\) got 3 of 3: "datagram 1 of 3", "datagram 2 of 3", "datagram 3 of 3"'
  # Each datagram crosses the cable once, to the group's IP and Ethernet
  # multicast addresses and the multicast QPN; the receiving NIC makes the copies.
  run tshark_quiet -r "$pcap" -Y infiniband -T fields -e ip.src -e ip.dst -e eth.dst \
    -e infiniband.bth.opcode -e infiniband.bth.destqp -e infiniband.deth.q_key
  [ "${#lines[@]}" -eq 3 ]
  local line
  for line in "${lines[@]}"; do
    [[ $line =~ ^192\.0\.2\.2[[:space:]]+239\.1\.2\.3[[:space:]]+01:00:5e:01:02:03[[:space:]]+100[[:space:]]+0xffffff[[:space:]]+0x0*1234567$ ]] ||
      fail "not a UD SEND Only to the group: $line"
  done
  # rdma_join_multicast made guest a join the IP group (IGMP), and leave it at the end.
  run tshark_quiet -r "$pcap" -Y 'igmp && ip.src == 192.0.2.1'
  assert_output --partial "Join group 239.1.2.3"
  assert_output --partial "Leave group 239.1.2.3"
}
