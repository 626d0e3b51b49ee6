#!/usr/bin/env bats
# bats file_tags=rxe
# Lesson 3 connects two RC QPs of one process by hand, RESET -> INIT -> RTR ->
# RTS, shows the usual mistakes failing, sends one message, and tears down in order.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  lesson_setup
}
teardown() { lesson_teardown; }

@test "QP A goes RESET, INIT, RTR, RTS, and a refused transition leaves it where it was" {
  run --separate-stderr rx ./lesson3
  assert_success
  local states
  states=$(sed -n 's/^  ibv_query_qp: QP A (qp_num 0x[0-9a-f]*) is \([A-Z]*\).*/\1/p' <<<"$output" | tr '\n' ' ')
  assert_equal "$states" "RESET RESET INIT INIT RTR RTS "
  assert_line --regexp "^  ibv_query_qp: QP B \(qp_num 0x[0-9a-f]+\) is RTS, port_num 1, pkey_index 0, qp_access_flags 0x0,$"
}

@test "a wrong mask is refused with EINVAL, at INIT and at RTR" {
  run --separate-stderr rx ./lesson3
  assert_success
  assert_output --partial "  wrong mask: RESET -> INIT without IBV_QP_PORT
    -> ibv_modify_qp refused it: EINVAL (Invalid argument)
  ibv_query_qp: QP A"
  assert_output --partial "  wrong mask: RTR without IBV_QP_DEST_QPN
    -> ibv_modify_qp refused it: EINVAL (Invalid argument)"
}

@test "an RTR without a valid GID is refused: no GRH on RoCE, or an empty source GID slot" {
  run --separate-stderr rx ./lesson3
  assert_success
  assert_output --partial "  RTR on RoCE without a GID (is_global = 0, no GRH)
    -> ibv_modify_qp refused it: EINVAL (Invalid argument)"
  assert_output --partial "  RTR with sgid_index 255, an empty GID slot
    -> ibv_modify_qp refused it: ENODATA (No data available)"
}

@test "each QP's RTR names the other, and each expects the PSN the other sends first" {
  run --separate-stderr rx ./lesson3
  assert_success
  local qpn_a qpn_b
  qpn_a=$(sed -n 's/^  ibv_query_qp: QP A (qp_num \(0x[0-9a-f]*\)).*/\1/p' <<<"$output" | head -n 1)
  qpn_b=$(sed -n 's/^  ibv_query_qp: QP B (qp_num \(0x[0-9a-f]*\)).*/\1/p' <<<"$output" | head -n 1)
  # The two RTS blocks: "dest_qp_num X, rq_psn P, ..." then "sq_psn S, ...".
  local a_dest a_rq a_sq b_dest b_rq b_sq
  read -r a_dest a_rq a_sq < <(awk '/QP A .* is RTS/ { getline d; getline s; print d, s }' <<<"$output" |
    sed 's/.*dest_qp_num \(0x[0-9a-f]*\), rq_psn \(0x[0-9a-f]*\),.*sq_psn \(0x[0-9a-f]*\),.*/\1 \2 \3/')
  read -r b_dest b_rq b_sq < <(awk '/QP B .* is RTS/ { getline d; getline s; print d, s }' <<<"$output" |
    sed 's/.*dest_qp_num \(0x[0-9a-f]*\), rq_psn \(0x[0-9a-f]*\),.*sq_psn \(0x[0-9a-f]*\),.*/\1 \2 \3/')
  assert_equal "$a_dest" "$qpn_b"
  assert_equal "$b_dest" "$qpn_a"
  assert_equal "$a_rq" "$b_sq"
  assert_equal "$b_rq" "$a_sq"
}

# QP A's RTS block as ibv_query_qp showed it (lesson 3's show_qp, or the
# probe's copy of it), from "is RTS" on, with the numbers that change from run
# to run (QP numbers and PSNs) blanked.
rts_block() {
  sed -E 's/(qp_num|rq_psn|sq_psn) 0x[0-9a-f]+/\1 _/g' |
    awk '/QP A \(qp_num _\) is RTS/ { sub(/^.* is RTS/, "RTS"); print; getline; print; getline; print }'
}

@test "the RTR and RTS values are the ones lesson 3 explains and common/qp.cpp uses" {
  run --separate-stderr rx ./lesson3
  assert_success
  local mtu
  mtu=$(rx ibv_devinfo -d "$RDMA_DEV" -i 1 | sed -n 's/^\t*active_mtu:\t*\([0-9]*\) .*/\1/p')
  assert_line --regexp "^    dest_qp_num 0x[0-9a-f]+, rq_psn 0x[0-9a-f]{6}, path_mtu $mtu, max_dest_rd_atomic 1, min_rnr_timer 12,$"
  assert_line --regexp "^    sq_psn 0x[0-9a-f]{6}, timeout 14, retry_cnt 6, rnr_retry 7, max_rd_atomic 1$"
  local by_hand
  by_hand=$(rts_block <<<"$output")
  [ -n "$by_hand" ] || fail "lesson 3 showed no RTS block for QP A"
  # The helpers lessons 4 to 8 call, asked at run time with ibv_query_qp.
  [ -x build/tests/connect_probe ] || fail "build/tests/connect_probe is missing: run make units"
  run --separate-stderr rx build/tests/connect_probe -d "$RDMA_DEV"
  assert_success
  assert_equal "$(rts_block <<<"$output")" "$by_hand"
  assert_line --regexp "^    hop_limit 64, sgid_index [0-9]+ \(is_global 1\)$"
}

@test "one SEND from A arrives intact in B's posted receive, both completions successful" {
  run --separate-stderr rx ./lesson3
  assert_success
  assert_line --regexp "^  completion: IBV_WC_SEND on qp_num 0x[0-9a-f]+, wr_id 1, status success$"
  assert_line --regexp "^  completion: IBV_WC_RECV on qp_num 0x[0-9a-f]+, wr_id 2, status success, byte_len 16$"
  assert_line "  B's buffer now holds \"Hello from QP A\""
}

@test "teardown goes QPs, CQ, MR, memory, PD, device, after a CQ still in use is refused" {
  run --separate-stderr rx ./lesson3
  assert_success
  local order
  order=$(sed -n '/^step 11: teardown/,/^result:/p' <<<"$output" | sed -n 's/^  \([a-z_(]*\).*/\1/p' | tr '\n' ' ')
  assert_equal "$order" "ibv_destroy_cq ibv_destroy_qp ibv_destroy_cq ibv_dereg_mr free(buf ibv_dealloc_pd ibv_close_device "
  assert_line "  ibv_destroy_cq while the QPs use it -> refused: EBUSY (Device or resource busy)"
  assert_line --index $((${#lines[@]} - 1)) --regexp "^result: QP 0x[0-9a-f]+ -> QP 0x[0-9a-f]+ connected by hand \(RESET, INIT, RTR, RTS\); SEND of 16 bytes received intact; torn down in order$"
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" ""
}

@test "-g with the IPv4-mapped GID's index works like the default choice" {
  local index
  index=$(rx ibv_devinfo -v -d "$RDMA_DEV" -i 1 | sed -n 's/^\t*GID\[ *\([0-9]*\)\]:\t*::ffff:.*, RoCE v2$/\1/p' | head -n 1)
  run --separate-stderr rx ./lesson3 -g "$index"
  assert_success
  assert_line --regexp "^gid: index $index ::ffff:[0-9.]+ \(RoCE v2\) - given with -g$"
  assert_line --partial "SEND of 16 bytes received intact"
}

@test "-g of an empty GID slot fails before any QP exists, naming ENODATA and -g" {
  run --separate-stderr rx ./lesson3 -g 200
  assert_failure 1
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "${stderr_lines[0]}" "lesson3: ibv_query_gid_ex(ctx, a.port, gid_index, &e, 0) failed: ENODATA (No data available)"
  assert_equal "${stderr_lines[1]}" "lesson3: check: is -g a valid index? list the table with ./lesson1 or ibv_devinfo -v"
  refute_output --partial "ibv_create_qp"
}

@test "lesson 3 takes no host: misuse is one line and exit 2" {
  run --separate-stderr rx ./lesson3 192.0.2.1
  assert_failure 2
  assert_equal "$stderr" "lesson3: unexpected argument '192.0.2.1': lesson 3 takes no host (see lesson3 -h)"
  run --separate-stderr rx ./lesson3 -g 256
  assert_failure 2
  assert_equal "$stderr" "lesson3: -g: '256' is out of range 0..255 (see lesson3 -h)"
}
