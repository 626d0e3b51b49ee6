#!/usr/bin/env bats
# bats file_tags=rxe
# Lesson 1 lists devices, limits, ports and GIDs by hand with the verbs; its
# numbers must be the ones `ibv_devinfo -v` prints for the same device.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  lesson_setup
  DEVINFO="$BATS_TEST_TMPDIR/devinfo"
  LESSON="$BATS_TEST_TMPDIR/lesson1"
}
teardown() { lesson_teardown; }

# "key value" pairs from ibv_devinfo -v: the device's attributes (one tab
# deep) or port 1's (three tabs deep).
devinfo_pairs() {
  local depth=$1
  rx ibv_devinfo -v -d "$RDMA_DEV" -i 1 |
    awk -v d="$depth" -F'\t+' '
      { n = match($0, /[^\t]/) - 1 }
      n == d && $2 ~ /^[a-z_]+:$/ { k = $2; sub(":", "", k); print k, $3 }'
}
# The same from lesson 1's "  name: value   # meaning" lines, in one section.
lesson_pairs() {
  local section=$1
  awk -v s="$section" '
    /^[^ ]/ { in_s = index($0, s) == 1; next }
    in_s && /^  [a-z_]+: / { sub(/   #.*/, ""); k = $1; sub(":", "", k); $1 = ""; sub(/^ /, ""); print k, $0 }' "$LESSON"
}
value_of() { awk -v k="$1" '$1 == k { $1 = ""; sub(/^ /, ""); print; exit }' "$2"; }

@test "every device attribute lesson 1 prints agrees with ibv_devinfo -v" {
  rx ./lesson1 -d "$RDMA_DEV" >"$LESSON"
  devinfo_pairs 1 >"$DEVINFO"
  local key checked=0
  for key in fw_ver node_guid sys_image_guid vendor_id vendor_part_id hw_ver phys_port_cnt \
    max_mr_size page_size_cap max_qp max_qp_wr device_cap_flags max_sge max_sge_rd max_cq \
    max_cqe max_mr max_pd max_qp_rd_atom max_res_rd_atom max_qp_init_rd_atom atomic_cap \
    max_mw max_ah max_srq max_srq_wr max_srq_sge max_pkeys local_ca_ack_delay; do
    lesson_pairs "ibv_query_device:" >"$LESSON.dev"
    local want got
    want=$(value_of "$key" "$DEVINFO")
    got=$(value_of "$key" "$LESSON.dev")
    [ -n "$want" ] || fail "ibv_devinfo -v printed no $key"
    [ "$got" = "$want" ] || fail "$key: lesson 1 says '$got', ibv_devinfo -v says '$want'"
    checked=$((checked + 1))
  done
  assert_equal "$checked" 29
}

@test "every port attribute lesson 1 prints agrees with ibv_devinfo -v" {
  rx ./lesson1 -d "$RDMA_DEV" >"$LESSON"
  devinfo_pairs 3 | sed -e 's/^port_lid /lid /' -e 's/^port_lmc /lmc /' >"$DEVINFO"
  lesson_pairs "port 1 (ibv_query_port):" >"$LESSON.port"
  local key want got
  for key in max_mtu active_mtu lid sm_lid lmc link_layer max_msg_sz port_cap_flags pkey_tbl_len gid_tbl_len; do
    want=$(value_of "$key" "$DEVINFO")
    got=$(value_of "$key" "$LESSON.port")
    [ -n "$want" ] || fail "ibv_devinfo -v printed no $key"
    [ "$got" = "$want" ] || fail "$key: lesson 1 says '$got', ibv_devinfo -v says '$want'"
  done
  # The state: rdma-core's ibv_port_state_str says "active", ibv_devinfo "PORT_ACTIVE"; the enum agrees.
  want=$(value_of state "$DEVINFO")
  got=$(value_of state "$LESSON.port")
  assert_equal "${got##* }" "${want##* }"
  assert_equal "$got" "active (4)"
}

@test "the GID table lists the entries ibv_devinfo -v lists, with their types and netdev" {
  rx ./lesson1 -d "$RDMA_DEV" >"$LESSON"
  rx ibv_devinfo -v -d "$RDMA_DEV" -i 1 | sed -n 's/^\t*GID\[ *\([0-9]*\)\]:\t*\(.*\)$/\1 \2/p' >"$DEVINFO"
  sed -n 's/^  port 1 GID\[ *\([0-9]*\)\]: \(.*\), netdev .*$/\1 \2/p' "$LESSON" >"$LESSON.gids"
  [ -s "$DEVINFO" ] || fail "ibv_devinfo -v listed no GIDs"
  assert_equal "$(cat "$LESSON.gids")" "$(cat "$DEVINFO")"
  local netdev
  netdev=$(rx rdma link show "$RDMA_DEV/1" | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
  run grep -c "RoCE v2, netdev $netdev\$" "$LESSON"
  assert_output "$(wc -l <"$DEVINFO")"
}

@test "lesson 1 recommends the RoCE v2 IPv4-mapped GID and its result line says so" {
  run --separate-stderr rx ./lesson1
  assert_success
  local index
  index=$(rx ibv_devinfo -v -d "$RDMA_DEV" -i 1 | sed -n 's/^\t*GID\[ *\([0-9]*\)\]:\t*::ffff:.*, RoCE v2$/\1/p' | head -n 1)
  [ -n "$index" ] || fail "ibv_devinfo -v shows no IPv4-mapped RoCE v2 GID"
  assert_line --regexp "^  use GID index $index \(::ffff:[0-9.]+, RoCE v2\): RoCE v2 travels in UDP/IP packets"
  assert_line --index $((${#lines[@]} - 1)) --regexp "^result: 1 device\(s\) listed; $RDMA_DEV port 1 GID index $index ::ffff:[0-9.]+ \(RoCE v2\)$"
}

@test "a port with no usable RoCE GID is named in the result, with what to check" {
  # rxe always has a link-local GID, so an LD_PRELOAD shim (tests/unit/no_gids_preload.c)
  # makes the GID table empty, as on a netdev with no address.
  cc -shared -fPIC -o "$BATS_TEST_TMPDIR/no_gids.so" tests/unit/no_gids_preload.c
  run --separate-stderr rx env LD_PRELOAD="$BATS_TEST_TMPDIR/no_gids.so" ./lesson1 -d "$RDMA_DEV"
  assert_success
  assert_line "GID table (ibv_query_gid_table): 0 valid entries"
  assert_line "  no usable RoCE GID: does the netdev have an IP address? (ip addr)"
  refute_line --partial "  use GID index"
  assert_equal "${lines[${#lines[@]} - 1]}" "result: 1 device(s) listed; $RDMA_DEV port 1 has no usable RoCE GID"
}

@test "-g explains the GID at that index, read with ibv_query_gid_ex" {
  run --separate-stderr rx ./lesson1 -g 0
  assert_success
  assert_line --regexp "^  -g 0 \(ibv_query_gid_ex\): fe80::[0-9a-f:]+, RoCE v2: RoCE v2 \(routable UDP/IP\), but an IPv6$"
  assert_line --partial "result: 1 device(s) listed"
}

@test "-g of an empty GID slot fails with ENODATA and says where to look" {
  run --separate-stderr rx ./lesson1 -g 200
  assert_failure 1
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "${stderr_lines[0]}" "lesson1: ibv_query_gid_ex(ctx.get(), explain_port, gid_given, &e, 0) failed: ENODATA (No data available)"
  assert_equal "${stderr_lines[1]}" "lesson1: check: is -g a populated index? the GID table above lists them (ENODATA: an empty slot)"
  refute_output --partial "result:"
}

@test "a device that does not exist is named in the error, with the devices that do" {
  run --separate-stderr rx ./lesson1 -d nosuch0
  assert_failure 1
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" "lesson1: no RDMA device named 'nosuch0'
lesson1: check: the devices here are: $RDMA_DEV"
  refute_output --partial "result:"
}

@test "a port the device does not have is an error naming it" {
  run --separate-stderr rx ./lesson1 -i 9
  assert_failure 1
  assert_equal "${stderr_lines[0]}" "lesson1: $RDMA_DEV has no port 9"
}

@test "-h prints the usage with its defaults and exits 0" {
  run --separate-stderr rx ./lesson1 -h
  assert_success
  assert_line --partial "-d, --ib-dev=DEV      RDMA device (default: the first device found)"
  assert_line --partial "(default: 1)"
  refute_line --partial "--timeout" # no peer, so no timeout
}

@test "misuse is one line on stderr and exit 2" {
  run --separate-stderr rx ./lesson1 192.0.2.1
  assert_failure 2
  assert_equal "$stderr" "lesson1: unexpected argument '192.0.2.1': lesson 1 takes no host (see lesson1 -h)"
  run --separate-stderr rx ./lesson1 -i 0
  assert_failure 2
  assert_equal "$stderr" "lesson1: -i: '0' is out of range 1..255 (see lesson1 -h)"
  run --separate-stderr rx ./lesson1 -p 1
  assert_failure 2
  assert_equal "$stderr" "lesson1: unknown option '-p' (see lesson1 -h)"
}
