#!/usr/bin/env bats
# bats file_tags=rxe
# Lesson 10: when RDMA fails. Every scenario runs for real on an RDMA device
# (Soft-RoCE in the lab), server and client on one host; each test checks the
# status the client's CQ reports, what the server's side saw, and the counter
# that moved. The lesson has two programs: ./lesson10 turns the QP's knobs
# wrong (rnr, rnr-wait, retry, mtu, gid) and recovers (recover);
# ./lesson10_nak has the responder refuse (rem-access, qp-access, len, flush).
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  lesson_setup
}
teardown() { lesson_teardown; }

# play PROGRAM SCENARIO: run PROGRAM's server (lesson10 or lesson10_nak),
# then its client with SCENARIO; the client's output is in $output, the
# server's in $SERVER_OUT, its status in $SERVER_STATUS. Every scenario must
# finish within a few seconds.
play() {
  start_server "./$1" -p "$PORT" --timeout 20
  wait_for_server_line "waiting for a client" 10
  local start=$SECONDS
  run --separate-stderr rx "./$1" -p "$PORT" --timeout 20 127.0.0.1 "$2"
  CLIENT_SECONDS=$((SECONDS - start))
  CLIENT_STATUS=$status
  wait_server 20
}

# server_said LINE: the server exited 0 and its last line is LINE.
server_said() {
  assert_equal "$SERVER_STATUS" 0
  assert_equal "$(tail -n 1 "$SERVER_OUT")" "$1"
}

# The client exited 0 within a few seconds (10 on a busy lab) and its last line starts with $1.
client_ended_with() {
  assert_equal "$CLIENT_STATUS" 0
  [[ ${lines[-1]} == "$1"* ]] || fail "the client's last line is '${lines[-1]}', not '$1...'"
  ((CLIENT_SECONDS <= 10)) || fail "the scenario took $CLIENT_SECONDS s"
}

# server_async_event: the server's async event line after a remote access
# error. rxe raises none on 6.1 and 6.12, and IBV_EVENT_QP_ACCESS_ERR (3) on
# 7.3 (docs/rxe.md); a kernel in between, which the lab does not boot, may
# give either of the two.
server_async_event() {
  local none="server: no async event within 100 ms"
  local access="server: async event local access violation work queue error (3)"
  run cat "$SERVER_OUT"
  if kernel_at_least 7.3; then
    assert_line "$access"
  elif ! kernel_at_least 6.13; then
    assert_line "$none"
  elif ! grep -qxF -e "$none" -e "$access" "$SERVER_OUT"; then
    fail "the server printed neither '$none' nor '$access'"
  fi
}

# between LOW X HIGH: LOW < X < HIGH, decimals allowed.
between() {
  awk -v lo="$1" -v x="$2" -v hi="$3" 'BEGIN { exit !(lo < x && x < hi) }' || fail "$2 is not between $1 and $3"
}

@test "rnr: no receive at the server and rnr_retry 0 end in IBV_WC_RNR_RETRY_EXC_ERR (13) after one RNR NAK" {
  play lesson10 rnr
  client_ended_with "result: rnr: IBV_WC_RNR_RETRY_EXC_ERR (13), as expected: "
  assert_line --regexp '^client: completion wr_id 2 IBV_WC_RNR_RETRY_EXC_ERR \(13\): RNR retry counter exceeded'
  assert_line "client: no async event within 100 ms"
  assert_line --regexp '^client: port counters that moved:.* rcvd_rnr_err \+1 .*retry_rnr_exceeded_err \+1 .*send_rnr_err \+1'
  assert_line --regexp '^client: 0\.[0-9]+ s after the post; our QP is IBV_QPS_ERR$'
  server_said "result: server: rnr: no completion; our QP is IBV_QPS_RTS"
}

@test "rnr-wait: a receive posted 1 s late stalls the SEND without an error, in 655 ms waits with min_rnr_timer 0" {
  play lesson10 rnr-wait
  client_ended_with "result: rnr-wait: IBV_WC_SUCCESS (0), as expected: "
  assert_line --regexp '^result: rnr-wait: IBV_WC_SUCCESS \(0\), as expected: both SENDs landed late, no error: '
  # min_rnr_timer 12 (0.64 ms): about 1 s and many RNR NAKs; 0 (655 ms):
  # two waits, 1.31 s, when idle. Load only delays the receive and the
  # retries, which adds NAKs and time; and on a loaded host the client's
  # clock and the kernel's RNR timer disagreed by 6%: two waits took 1.235 s
  # by the client's clock (issue 37). So: the counts, and a wait per NAK of
  # at least 0.85 of what the timer asks.
  local times naks
  mapfile -t times < <(sed -n 's/^client: the SEND completed \([0-9.]*\) s after the post.*/\1/p' <<<"$output")
  mapfile -t naks < <(sed -n 's/^client: the SEND completed .* after \([0-9]*\) RNR NAKs.*/\1/p' <<<"$output")
  assert_equal "${#times[@]} ${#naks[@]}" "2 2"
  # The receive came 1 s (the server's sleep) after the post at the least.
  between 0.85 "${times[0]}" 10
  ((naks[0] >= 10)) || fail "only ${naks[0]} RNR NAKs with min_rnr_timer 12"
  # min_rnr_timer 0: the receive is late for the first 655 ms wait, so two
  # NAKs at least, far fewer than with 0.64 ms waits, each costing 655 ms.
  ((naks[1] >= 2 && naks[1] < naks[0])) ||
    fail "${naks[1]} RNR NAKs with min_rnr_timer 0 (${naks[0]} with 12)"
  between "$(awk -v n="${naks[1]}" 'BEGIN { print n * 0.655 * 0.85 }')" "${times[1]}" 10
  server_said "result: server: rnr-wait: completions IBV_WC_SUCCESS (0), IBV_WC_SUCCESS (0); our QP is IBV_QPS_RTS"
}

@test "retry: a server QP left in INIT ends the SEND in IBV_WC_RETRY_EXC_ERR (12) after about 7 x 67 ms" {
  play lesson10 retry
  client_ended_with "result: retry: IBV_WC_RETRY_EXC_ERR (12), as expected: "
  assert_line --partial "7 tries x 67 ms (timeout 14, retry_cnt 6) predict 0.47 s"
  local took
  took=$(sed -n 's/^client: \([0-9.]*\) s after the post.*/\1/p' <<<"$output")
  between 0.4 "$took" 1.5
  assert_line --regexp '^client: port counters that moved:.* retry_exceeded_err \+1 .*sent_pkts \+7$'
  server_said "result: server: retry: no completion; our QP is IBV_QPS_INIT"
}

# The mtu scenario's answer depends on the kernel (docs/rxe.md#lesson-10-mtu):
# rxe's responder checks an "only" packet's payload against its own path MTU
# from 6.2 on (IBA C9-92; kernel commit 689c5421bfe0); in 6.1 that check
# compared the opcode, not the packet's mask bits, and never fired.
@test "mtu: on one host a 4000-byte packet on a 4096 path MTU lands on 6.1, and is refused as an invalid request from 6.2 on" {
  play lesson10 mtu
  assert_line "client: path MTU 4096, port's active MTU 1024: sending 4000 bytes as one packet"
  if kernel_at_least 6.2; then
    # The server's rxe (path MTU 1024) NAKs it: invalid request; both QPs in ERR.
    assert_equal "$CLIENT_STATUS" 1
    assert_line --regexp '^client: completion wr_id 2 IBV_WC_REM_INV_REQ_ERR \(9\)'
    assert_line --regexp '^client: [0-9.]+ s after the post; our QP is IBV_QPS_ERR$'
    assert_equal "${lines[-1]}" "result: error: mtu: expected IBV_WC_SUCCESS (0), got IBV_WC_REM_INV_REQ_ERR (9)"
    server_said "result: server: mtu: completions IBV_WC_REM_INV_REQ_ERR (9); our QP is IBV_QPS_ERR"
  else
    client_ended_with "result: mtu: IBV_WC_SUCCESS (0), as expected: one host: "
    server_said "result: server: mtu: completions IBV_WC_SUCCESS (0); our QP is IBV_QPS_RTS"
  fi
}

@test "gid: an IPv6 GID against an IPv4-mapped one fails INIT -> RTR with EINVAL on both sides, and nothing is sent" {
  play lesson10 gid
  client_ended_with "result: gid: EINVAL from ibv_modify_qp(INIT -> RTR), as expected: "
  assert_line --regexp '^client: using GID index [0-9]+ fe80:'
  assert_line --regexp '^client: ibv_modify_qp\(INIT -> RTR\) from fe80:[0-9a-f:]+ to ::ffff:[0-9.]+: EINVAL \(Invalid argument\)$'
  assert_line "client: port counters that moved: none"
  server_said "result: server: gid: INIT -> RTR failed with EINVAL (Invalid argument); our QP is IBV_QPS_INIT"
}

@test "recover: after IBV_WC_RNR_RETRY_EXC_ERR the QP goes ERR, RESET, INIT, RTR, RTS and adds 2 + 3 on both sides" {
  play lesson10 recover
  client_ended_with "result: recover: IBV_WC_RNR_RETRY_EXC_ERR (13), as expected, then ERR -> RESET -> INIT -> RTR -> RTS and 2 + 3 = 5"
  [[ $(grep -o 'QP is IBV_QPS_[A-Z]*' <<<"$output" | paste -sd' ') == "QP is IBV_QPS_ERR QP is IBV_QPS_RESET QP is IBV_QPS_INIT QP is IBV_QPS_RTR QP is IBV_QPS_RTS" ]] ||
    fail "the states, in order: $(grep 'QP is' <<<"$output")"
  # Two exchanges, two different first PSNs from the server.
  [[ $(grep -c '^client: peer .* first PSN ' <<<"$output") -eq 2 ]]
  assert_line "client: no async event within 100 ms"
  server_said "result: server: recover: after RESET -> INIT -> RTR -> RTS, 2 + 3 = 5"
}

@test "rem-access: an RDMA WRITE into a REMOTE_READ-only MR ends in IBV_WC_REM_ACCESS_ERR (10), the server's QP in ERR" {
  play lesson10_nak rem-access
  client_ended_with "result: rem-access: IBV_WC_REM_ACCESS_ERR (10), as expected: "
  assert_line --regexp '^client: completion wr_id 2 IBV_WC_REM_ACCESS_ERR \(10\): remote access error'
  server_said "result: server: rem-access: no completion; our QP is IBV_QPS_ERR"
  server_async_event
}

@test "qp-access: an RDMA READ at a QP without REMOTE_READ ends in IBV_WC_REM_INV_REQ_ERR (9)" {
  play lesson10_nak qp-access
  client_ended_with "result: qp-access: IBV_WC_REM_INV_REQ_ERR (9), as expected: "
  server_said "result: server: qp-access: no completion; our QP is IBV_QPS_ERR"
}

@test "len: a SEND longer than the receive fails on both sides, IBV_WC_REM_OP_ERR (11) and IBV_WC_LOC_QP_OP_ERR (2)" {
  play lesson10_nak len
  client_ended_with "result: len: IBV_WC_REM_OP_ERR (11), as expected: "
  server_said "result: server: len: completions IBV_WC_LOC_QP_OP_ERR (2); our QP is IBV_QPS_ERR"
  run cat "$SERVER_OUT"
  assert_line --regexp '^server: completion wr_id 1 IBV_WC_LOC_QP_OP_ERR \(2\): local QP operation error'
}

@test "flush: after a failed WRITE the next two SENDs, and the server's two receives, are IBV_WC_WR_FLUSH_ERR (5)" {
  play lesson10_nak flush
  client_ended_with "result: flush: IBV_WC_WR_FLUSH_ERR (5), as expected: "
  # The cause first, then its echo, in the order posted.
  [[ $output == *"wr_id 1 IBV_WC_REM_ACCESS_ERR (10)"*"wr_id 2 IBV_WC_WR_FLUSH_ERR (5)"*"wr_id 3 IBV_WC_WR_FLUSH_ERR (5)"* ]] ||
    fail "not REM_ACCESS_ERR then two flushes: $output"
  server_said "result: server: flush: completions IBV_WC_WR_FLUSH_ERR (5), IBV_WC_WR_FLUSH_ERR (5); our QP is IBV_QPS_ERR"
  server_async_event
}

@test "--list, long only, prints each program's scenarios with what it breaks, one a line" {
  run -0 rx ./lesson10 --list
  [[ $(cut -d' ' -f1 <<<"$output" | paste -sd' ') == "rnr rnr-wait retry mtu gid recover" ]]
  assert_line --regexp '^rnr +the server posts no receive; the client.s rnr_retry is 0$'
  run -0 rx ./lesson10_nak --list
  [[ $(cut -d' ' -f1 <<<"$output" | paste -sd' ') == "rem-access qp-access len flush" ]]
  assert_line --regexp '^rem-access +an RDMA WRITE into an MR registered for REMOTE_READ only$'
  run -2 --separate-stderr rx ./lesson10 --list 127.0.0.1 rnr
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" "lesson10: --list takes no HOST or SCENARIO (see lesson10 -h)"
  run -2 --separate-stderr rx ./lesson10_nak --list 127.0.0.1 len
  assert_equal "$stderr" "lesson10_nak: --list takes no HOST or SCENARIO (see lesson10_nak -h)"
  # No short form: -l is lesson 11's --batch, one meaning per option letter.
  run -2 --separate-stderr rx ./lesson10 -l
  assert_equal "$stderr" "lesson10: unknown option '-l' (see lesson10 -h)"
  run -2 --separate-stderr rx ./lesson10_nak -l
  assert_equal "$stderr" "lesson10_nak: unknown option '-l' (see lesson10_nak -h)"
}

@test "-h prints each program's usage with its defaults and scenarios, naming the other's, and exits 0" {
  run -0 rx ./lesson10 -h
  assert_line --partial "lesson10 [options] HOST SCENARIO"
  assert_output --partial "(default: 18515)"
  assert_line "      --list            list the scenarios, one line each, and exit"
  assert_output --partial "SCENARIO: rnr rnr-wait retry mtu gid recover (lesson10_nak plays rem-access qp-access len flush)."
  run -0 rx ./lesson10_nak -h
  assert_line --partial "lesson10_nak [options] HOST SCENARIO"
  assert_output --partial "(default: 18515)"
  assert_output --partial "(default: 30;"
  assert_output --partial "SCENARIO: rem-access qp-access len flush (lesson10 plays rnr rnr-wait retry mtu gid recover)."
}

@test "an unknown scenario, the other program's, or a client without one, is a one-line usage error, exit 2" {
  run -2 --separate-stderr rx ./lesson10 127.0.0.1 nope
  assert_equal "$stderr" "lesson10: unknown scenario 'nope' (lesson10 --list shows them, lesson10_nak --list the others) (see lesson10 -h)"
  assert_equal "$output" ""
  run -2 --separate-stderr rx ./lesson10 127.0.0.1 rem-access
  assert_equal "$stderr" "lesson10: unknown scenario 'rem-access' (lesson10 --list shows them, lesson10_nak --list the others) (see lesson10 -h)"
  run -2 --separate-stderr rx ./lesson10_nak 127.0.0.1 rnr
  assert_equal "$stderr" "lesson10_nak: unknown scenario 'rnr' (lesson10_nak --list shows them, lesson10 --list the others) (see lesson10_nak -h)"
  run -2 --separate-stderr rx ./lesson10 127.0.0.1
  assert_equal "$stderr" "lesson10: a client needs HOST SCENARIO, got 1 argument(s) (see lesson10 -h)"
  run -2 --separate-stderr rx ./lesson10_nak 127.0.0.1
  assert_equal "$stderr" "lesson10_nak: a client needs HOST SCENARIO, got 1 argument(s) (see lesson10_nak -h)"
}

@test "a server whose client names a scenario it does not know exits 1 naming it" {
  start_server ./lesson10 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  tcp_client bogus "printf 'bogus\0\0\0\0\0\0\0\0\0\0\0' >&5"
  wait_server 10
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --regexp 'asked for scenario "bogus", which this server does not know$'
}

@test "a lesson10 server asked for a lesson10_nak scenario exits 1 saying which server that needs" {
  start_server ./lesson10 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  tcp_client nak "printf 'len\0\0\0\0\0\0\0\0\0\0\0\0\0' >&5"
  wait_server 10
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_line --regexp 'asked for scenario "len", which this server does not know$'
  assert_line "lesson10: check: is the client lesson10 too, of the same version? (lesson10_nak's scenarios need a lesson10_nak server)"
}

@test "a server given --timeout and no client gives up, in either program" {
  local program
  for program in lesson10 lesson10_nak; do
    start_server "./$program" -p "$PORT" --timeout 2
    wait_server 10
    assert_equal "$SERVER_STATUS" 1
    run cat "$SERVER_ERR"
    assert_line --partial "no client connected to TCP port $PORT within 2 s"
  done
}
