#!/usr/bin/env bats
# bats file_tags=lane:lab
# make capture LESSON=16: lesson 16 runs across two lab guests joined by a
# virtual cable, both booted with trixie-backports' kernel (run.conf's
# lab_kernel=, for rxe's on-demand paging). ODP does not change the wire:
# one RDMA WRITE Only per page and its ACK, twice a page, then one READ
# Request and its Response per page, twice. Runs on the host: the test
# boots a pair of guests itself.

bats_require_minimum_version 1.5.0

load helpers/capture
setup_file() { capture_setup_file; }
setup() { capture_setup; }

@test "lesson 16 across two backports guests: every page the client wrote lands, and the wire carries plain WRITEs and READs" {
  capture 16
  assert_output --partial "[a] odp: general_caps 0x1: ODP_SUPPORT yes"
  assert_output --partial "[a] result: all 16 pages the client wrote hold its 1024 bytes"
  assert_output --regexp '\[b\] result: first touch against again, median per page: WRITE [0-9.]+x, READ [0-9.]+x'
  # Each request once (a resend repeats a PSN): 16 pages x 2 WRITE Only (10),
  # 16 x 2 READ Request (12), each 1024 bytes at the start of a page.
  run tshark -r captures/lesson16.pcap -Y 'infiniband && ip.src == 192.0.2.2' -T fields \
    -e infiniband.bth.opcode -e infiniband.bth.psn -e infiniband.reth.va -e infiniband.reth.dmalen
  assert_success
  local unique
  unique=$(awk '!seen[$2]++' <<<"$output")
  [[ $(grep -c '^10	' <<<"$unique") == 32 ]] || fail "not 32 WRITE Only requests:"$'\n'"$unique"
  [[ $(grep -c '^12	' <<<"$unique") == 32 ]] || fail "not 32 READ Requests:"$'\n'"$unique"
  # Every request names a page's start and 1024 bytes; each page twice.
  ! awk '$1 == 10 || $1 == 12 { if ($4 != 1024 || $3 !~ /000$/) print }' <<<"$unique" | grep -q . ||
    fail "a request not of 1024 bytes at a page's start:"$'\n'"$unique"
  [[ $(awk '$1 == 10 || $1 == 12 { print $3 }' <<<"$unique" | sort | uniq -c | awk '$1 != 2' | wc -l) == 0 ]] ||
    fail "a page not touched exactly twice:"$'\n'"$unique"
}
