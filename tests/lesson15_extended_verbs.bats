#!/usr/bin/env bats
# bats file_tags=rxe
# Lesson 15: the extended verbs. Lesson 4's sum, posted with ibv_wr_* and
# polled with ibv_start_poll, runs for real on an RDMA device (Soft-RoCE in
# the lab); the lesson's second program, ./lesson15_probe, prints a capability
# matrix that is checked against `ibv_devinfo -v` on every row that both show.
# shellcheck disable=SC2030,SC2031 # each @test runs in its own process: what one sets stays in it, as meant
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  lesson_setup
}
teardown() { lesson_teardown; }

# --- the sum --------------------------------------------------------------------

@test "the client prints the sum the server sent back, and so does the server" {
  start_server ./lesson15 -p "$PORT" --timeout 20
  run rx ./lesson15 -p "$PORT" --timeout 20 127.0.0.1 2 3
  assert_success
  assert_line "result: 2 + 3 = 5"
  assert_line "client: completion IBV_WC_RECV, 16 bytes"
  wait_server 20
  # shellcheck disable=SC2153 # SERVER_STATUS: set by wait_server (tests/helpers/lesson.bash)
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "server: completion IBV_WC_RECV, 16 bytes"
  assert_line "result: 2 + 3 = 5"
}

@test "the narration is lesson 4's, line for line, apart from the QP numbers and ports" {
  # The lesson changes the API, not the story: the same steps, in the same order.
  normalize() { sed -E 's/0x[0-9a-f]+/0xQP/g; s/127\.0\.0\.1:[0-9]+/127.0.0.1:PORT/g; s/port [0-9]{4,5}/port PORT/g'; }
  # Each client starts once its server listens, so that neither retries.
  start_server ./lesson4 -p "$PORT" --timeout 20
  wait_for_server_line "waiting for a client"
  run rx ./lesson4 -p "$PORT" --timeout 20 127.0.0.1 40 2
  assert_success
  local four_client four_server
  four_client=$(normalize <<<"$output")
  wait_server 20
  four_server=$(normalize <"$SERVER_OUT")
  start_server ./lesson15 -p "$((PORT + 1))" --timeout 20
  wait_for_server_line "waiting for a client"
  run rx ./lesson15 -p "$((PORT + 1))" --timeout 20 127.0.0.1 40 2
  assert_success
  assert_equal "$(normalize <<<"$output")" "$four_client"
  wait_server 20
  assert_equal "$(normalize <"$SERVER_OUT")" "$four_server"
}

@test "negative numbers after -- are added, down to the smallest int64" {
  start_server ./lesson15 -p "$PORT" --timeout 20
  run rx ./lesson15 -p "$PORT" --timeout 20 127.0.0.1 -- -9223372036854775807 -1
  assert_success
  assert_line "result: -9223372036854775807 + -1 = -9223372036854775808"
  wait_server 20
  assert_equal "$SERVER_STATUS" 0
}

@test "a sum that overflows int64 is an error on both sides, never a wrapped number" {
  start_server ./lesson15 -p "$PORT" --timeout 20
  run -1 rx ./lesson15 -p "$PORT" --timeout 20 127.0.0.1 9223372036854775807 1
  assert_line "result: error: 9223372036854775807 + 1 overflows a signed 64-bit integer"
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
}

@test "a request of the wrong length arrives with its byte_len, read by ibv_wc_read_byte_len" {
  start_server ./lesson15 -p "$PORT" --timeout 20
  run -1 rx ./lesson15 -p "$PORT" --timeout 20 -B 24 127.0.0.1 1 2
  assert_line "result: error: the server refused the request: it was 24 bytes, not 16"
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_OUT"
  assert_line "server: completion IBV_WC_RECV, 24 bytes"
}

@test "a SEND larger than the server's receive buffer fails, and the status comes through cq->status" {
  # The same statuses as lesson 4 (tests/lesson4_send_recv.bats): rxe's, or other NICs'.
  local server_status client_status
  if rx ibv_devinfo -d "$RDMA_DEV" | grep -qE 'vendor_id:[[:space:]]+0xffffff$'; then # Soft-RoCE
    server_status="local QP operation error (2, IBV_WC_LOC_QP_OP_ERR," client_status="remote operation error (11, IBV_WC_REM_OP_ERR,"
  else
    server_status="local length error (1, IBV_WC_LOC_LEN_ERR," client_status="remote invalid request error (9, IBV_WC_REM_INV_REQ_ERR,"
  fi
  start_server ./lesson15 -p "$PORT" --timeout 20
  run -1 --separate-stderr rx ./lesson15 -p "$PORT" --timeout 20 -B 100 127.0.0.1 1 2
  refute_line --partial "result: "
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "${stderr_lines[0]%% vendor_err*}" "lesson15: the SEND of the request completed with status $client_status"
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_equal "${lines[0]%% vendor_err*}" "lesson15: the client's request (RECV) completed with status $server_status"
}

@test "a lesson-4 client is refused by a lesson-15 server: the wire is the same, the exchange names the lesson" {
  start_server ./lesson15 -p "$PORT" --timeout 10
  wait_for_server_line "waiting for a client" 10
  run -1 --separate-stderr rx ./lesson4 -p "$PORT" --timeout 10 127.0.0.1 1 2
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  [[ "$stderr" == *"the peer 127.0.0.1:$PORT runs lesson 15, this is lesson 4"* ]]
  wait_server 10
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_output --partial "runs lesson 4, this is lesson 15"
}

@test "a client whose server is not there gives up within its timeout, naming host and port" {
  local start=$SECONDS
  run -1 --separate-stderr rx ./lesson15 -p "$PORT" --timeout 2 127.0.0.1 1 2
  [ $((SECONDS - start)) -le 6 ]
  [[ "$stderr" == *"could not connect to 127.0.0.1:$PORT within 2 s"* ]]
}

# --- the probe ------------------------------------------------------------------

# probe_row FEATURE: "yes" or "no", the probe's answer for FEATURE (in $probe):
# the feature is the first 24 columns of its row, the answer the next word.
probe_row() {
  awk -v f="$1" '{ name = substr($0, 1, 24); sub(/ +$/, "", name) }
    name == f { split(substr($0, 26), w, " "); print w[1]; exit }' <<<"$probe"
}

# devinfo_flag NAME: "yes" when `ibv_devinfo -v` lists NAME alone on a line (a flag).
devinfo_flag() {
  if grep -qxE "[[:space:]]*$1" <<<"$devinfo"; then echo yes; else echo no; fi
}

# devinfo_value NAME: the value `ibv_devinfo -v` prints after "NAME:".
devinfo_value() {
  awk -v n="$1:" '$1 == n { print $2; exit }' <<<"$devinfo"
}

probe_and_devinfo() {
  run -0 rx ./lesson15_probe
  probe=$output
  devinfo=$(rx ibv_devinfo -v -d "$RDMA_DEV")
}

@test "lesson15_probe prints every row of the matrix and a result line" {
  probe_and_devinfo
  local f
  for f in "RC queue pairs" "UC queue pairs" "UD queue pairs" "XRC" "shared receive queues" \
    "memory windows type 1" "memory windows type 2" "inline data" "atomics" "on-demand paging (ODP)" \
    "completion timestamps" "device memory" "atomic write" "flush"; do
    [[ $(probe_row "$f") =~ ^(yes|no)$ ]] || fail "no yes/no row for '$f' in: $probe"
  done
  assert_line --regexp "^result: $RDMA_DEV has [0-9]+ of the 14 features$"
}

@test "lesson15_probe agrees with ibv_devinfo -v on XRC, memory windows, SRQ, atomics, ODP and timestamps" {
  probe_and_devinfo
  assert_equal "$(probe_row XRC)" "$(devinfo_flag XRC)"
  local mw1=no mw2=no srq=no atomics=yes odp timestamps=yes
  [[ $(devinfo_flag MEM_WINDOW) == yes && $(devinfo_value max_mw) -gt 0 ]] && mw1=yes
  [[ $(devinfo_flag MEM_WINDOW_TYPE_2A) == yes || $(devinfo_flag MEM_WINDOW_TYPE_2B) == yes ]] && mw2=yes
  (($(devinfo_value max_srq) > 0)) && srq=yes
  [[ $(devinfo_value atomic_cap) == ATOMIC_NONE ]] && atomics=no
  odp=$(devinfo_flag ODP_SUPPORT)
  grep -q "completion_timestamp_mask not supported" <<<"$devinfo" && timestamps=no
  assert_equal "$(probe_row "memory windows type 1")" "$mw1"
  assert_equal "$(probe_row "memory windows type 2")" "$mw2"
  assert_equal "$(probe_row "shared receive queues")" "$srq"
  assert_equal "$(probe_row atomics)" "$atomics"
  assert_line --partial "atomic_cap $(devinfo_value atomic_cap)"
  assert_equal "$(probe_row "on-demand paging (ODP)")" "$odp"
  assert_equal "$(probe_row "completion timestamps")" "$timestamps"
}

@test "lesson15_probe reads atomic write and flush from the same device_cap_flags_ex that ibv_devinfo -v prints" {
  probe_and_devinfo
  local ex atomic_write=no flush=no
  ex=$(devinfo_value device_cap_flags_ex)
  [[ $ex =~ ^0x[0-9A-Fa-f]+$ ]] || fail "ibv_devinfo -v printed no device_cap_flags_ex: $ex"
  (((ex >> 40) & 1)) && atomic_write=yes
  (((ex >> 38) & 3)) && flush=yes
  assert_equal "$(probe_row "atomic write")" "$atomic_write"
  assert_equal "$(probe_row flush)" "$flush"
}

@test "lesson15_probe prints the limits with the values ibv_devinfo -v prints" {
  probe_and_devinfo
  local name want got
  for name in max_qp max_qp_wr max_sge max_sge_rd max_cq max_cqe max_mr max_pd max_mw max_srq max_srq_wr \
    max_qp_rd_atom max_ah max_mr_size max_msg_sz; do
    want=$(devinfo_value "$name")
    got=$(awk -v n="$name" '$1 == n { print $2; exit }' <<<"$probe")
    [[ -n $want ]] || fail "ibv_devinfo -v has no $name"
    assert_equal "$name $got" "$name $want"
  done
}

@test "lesson15_probe on rxe: RC, UC, UD, SRQ, both memory windows, inline and atomics yes; the rest no, each saying who has it" {
  rx ibv_devinfo -d "$RDMA_DEV" | grep -qE 'vendor_id:[[:space:]]+0xffffff$' || skip "not Soft-RoCE"
  probe_and_devinfo
  local f
  for f in "RC queue pairs" "UC queue pairs" "UD queue pairs" "shared receive queues" \
    "memory windows type 1" "memory windows type 2" "inline data" "atomics"; do
    assert_equal "$f: $(probe_row "$f")" "$f: yes"
  done
  # The rest depends on the kernel where the probe runs (docs/rxe.md): rxe
  # has atomic write and flush from 6.2, ODP from 6.15, and never XRC,
  # completion timestamps or device memory; each "no" says who has it.
  for f in XRC "completion timestamps" "device memory"; do
    assert_equal "$f: $(probe_row "$f")" "$f: no"
  done
  local since_6_2=no since_6_15=no count=8
  if kernel_at_least 6.2; then since_6_2=yes count=10; fi
  if kernel_at_least 6.15; then since_6_15=yes count=11; fi
  assert_equal "atomic write: $(probe_row "atomic write")" "atomic write: $since_6_2"
  assert_equal "flush: $(probe_row flush)" "flush: $since_6_2"
  assert_equal "ODP: $(probe_row "on-demand paging (ODP)")" "ODP: $since_6_15"
  assert_line "result: $RDMA_DEV has $count of the 14 features"
  if [[ $since_6_2 == no ]]; then assert_line --partial "elsewhere: rxe from Linux 6.2"; fi
  if [[ $since_6_15 == no ]]; then assert_line --partial "elsewhere: rxe from Linux 6.15"; fi
  # rxe's inline limit, on 6.1, 6.12 and 7.3 alike: 32 SGEs of 16 bytes.
  assert_line --regexp "^inline data +yes +max_inline_data 512 taken by ibv_create_qp"
}

# --- misuse ---------------------------------------------------------------------

@test "lesson15_probe with a host or numbers, -g, -p or --timeout is a one-line usage error" {
  run -2 --separate-stderr rx ./lesson15_probe 127.0.0.1
  assert_equal "$stderr" "lesson15_probe: the probe asks this host's device only: it takes no HOST or numbers (see lesson15_probe -h)"
  assert_equal "$output" ""
  local extra
  for extra in "-g 1" "-p 4000" "--timeout 5" "-B 16"; do
    # shellcheck disable=SC2086 # the option and its value, two words
    run -2 --separate-stderr rx ./lesson15_probe $extra
    assert_equal "$stderr" "lesson15_probe: unknown option '${extra%% *}' (see lesson15_probe -h)"
  done
  run -2 --separate-stderr rx ./lesson15_probe -i 0
  assert_equal "$stderr" "lesson15_probe: -i: '0' is out of range 1..255 (see lesson15_probe -h)"
}

@test "lesson15 has no probe of its own any more: --probe is an unknown option, and -h says where the probe went" {
  run -2 --separate-stderr rx ./lesson15 --probe
  assert_equal "$stderr" "lesson15: unknown option '--probe' (see lesson15 -h)"
  run -0 rx ./lesson15 -h
  assert_line "What the device can do, as a matrix, is ./lesson15_probe (formerly lesson15 --probe)."
}

@test "a number that is not a number, or a missing one, is a one-line usage error" {
  run -2 --separate-stderr rx ./lesson15 127.0.0.1 two 3
  assert_equal "$stderr" "lesson15: A: 'two' is not a whole number (see lesson15 -h)"
  run -2 --separate-stderr rx ./lesson15 127.0.0.1 5
  assert_equal "$stderr" "lesson15: a client needs HOST A B, got 2 arguments (see lesson15 -h)"
  run -2 --separate-stderr rx ./lesson15 -B 16
  assert_equal "$stderr" "lesson15: -B is a client option (see lesson15 -h)"
}

@test "-h prints the usage with its defaults and exits 0" {
  run -0 rx ./lesson15 -h
  assert_line --partial "lesson15 [options] HOST A B"
  assert_output --partial "(default: 18515)"
  assert_output --partial "(default: 30;"
  refute_line --regexp "^ +-P, --probe"
}

@test "lesson15_probe -h prints its usage, -d and -i with their defaults only, and exits 0" {
  run -0 rx ./lesson15_probe -h
  assert_line --partial "lesson15_probe [-d DEV] [-i PORT]"
  assert_line --regexp '^  -d, --ib-dev=DEV +RDMA device \(default: the first device found\)$'
  assert_line --regexp '^  -i, --ib-port=PORT +port of the device \(default: 1\)$'
  refute_line --partial "--gid-idx"
  refute_line --partial "--port"
  refute_line --partial "--timeout"
  assert_line --partial "./lesson15."
}
