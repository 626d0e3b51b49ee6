#!/usr/bin/env bats
# bats file_tags=rxe,vcpus:2
# Lesson 11: latency and bandwidth, measured as perftest does. These tests
# check what is measured and the shape of the output, never how fast: the
# numbers of an emulated NIC on a shared machine mean nothing to a test.
bats_require_minimum_version 1.5.0

setup() {
  load helpers/lesson
  lesson_setup
}
teardown() { lesson_teardown; }

# Run server and client with the same options ("$@"), the client with
# $CLIENT_ONLY too (-C FILE); the client's output in $output, its status in
# $status for the caller to check; the server waited for.
CLIENT_ONLY=()
measure() {
  start_server ./lesson11 -p "$PORT" --timeout 20 "$@"
  wait_for_server_line "waiting for a client"
  run rx ./lesson11 -p "$PORT" --timeout 20 "$@" "${CLIENT_ONLY[@]}" 127.0.0.1
  client_output=$output
  client_status=$status
  wait_server 60
  output=$client_output
  status=$client_status
}

# The numbers of the client's "client: N B: min ..., max ..." line for size $1,
# one a line: min typical p99 p99.9 max.
lat_numbers() {
  sed -n "s/^client: $1 B: min \([0-9.]*\) us, typical \([0-9.]*\) us, p99 \([0-9.]*\) us, p99.9 \([0-9.]*\) us, max \([0-9.]*\) us.*/\1 \2 \3 \4 \5/p" <<<"$output"
}

# True when the numbers on stdin never go down: min <= typical <= p99 <= p99.9 <= max.
ordered() {
  awk '{ for (i = 2; i <= NF; i++) if ($i + 0 < $(i - 1) + 0) exit 1 } END { if (NR == 0) exit 1 }'
}

@test "send latency: the client prints typical, p99 and p99.9, in order, and the server serves every round trip" {
  measure -n 50
  assert_success
  assert_line --regexp '^result: send lat 2 B: typical [0-9]+\.[0-9]{2} us, p99 [0-9]+\.[0-9]{2} us, p99\.9 [0-9]+\.[0-9]{2} us \(n=50\)$'
  assert_line --regexp '^client: 2 B: min .* \(half round trips\)$'
  lat_numbers 2 | ordered
  # Two CPUs online (this suite's lab has two): no word about one.
  refute_output --partial "one CPU online"
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "result: served send lat, 1 size(s), n=50"
  run cat "$SERVER_ERR"
  refute_output --partial "one CPU online"
}

# shellcheck disable=SC2016 # the guest's script, expanded there
@test "busy polling with one CPU online says so once on each side that spins, pointing at the one-vCPU trap; --events and a READ server do not" {
  compgen -G '/sys/class/infiniband/*' >/dev/null && skip "this host has an RDMA device: the one-vCPU machine is a lab guest"
  # A guest of its own with one vCPU (this suite's lab has two): a short
  # ping-pong busy polling, one on events, and READs (whose server's CPU
  # only waits for DONE), each side's lines marked.
  local script='echo "cpus: $(nproc)"
    ./lesson11 -p "$1" --timeout 30 -n 5 2>&1 | sed "s/^/[s] /" &
    ./lesson11 -p "$1" --timeout 30 -n 5 127.0.0.1 2>&1 | sed "s/^/[c] /"
    wait
    ./lesson11 -p "$1" --timeout 30 -n 5 --events 2>&1 | sed "s/^/[se] /" &
    ./lesson11 -p "$1" --timeout 30 -n 5 --events 127.0.0.1 2>&1 | sed "s/^/[ce] /"
    wait
    ./lesson11 -p "$1" --timeout 30 -n 5 --op read 2>&1 | sed "s/^/[sr] /" &
    ./lesson11 -p "$1" --timeout 30 -n 5 --op read 127.0.0.1 2>&1 | sed "s/^/[cr] /"
    wait'
  run -0 env LAB_CPUS=1 scripts/lab.sh run --timeout 240 -- bash -c "$script" bash "$PORT"
  assert_line "cpus: 1"
  local warning="lesson11: warning: busy polling with one CPU online measures the scheduler's tick, not the network: give the machine two CPUs, or use --events (docs/lesson11-performance.md#the-one-vcpu-trap)"
  assert_equal "$(grep -cxF "[s] $warning" <<<"$output")" 1
  assert_equal "$(grep -cxF "[c] $warning" <<<"$output")" 1
  assert_line --regexp '^\[c\] result: send lat 2 B: typical .* \(n=5\)$'
  assert_line --regexp '^\[ce\] result: send lat 2 B: typical .* \(n=5\)$'
  assert_equal "$(grep -cxF "[cr] $warning" <<<"$output")" 1
  assert_line --regexp '^\[cr\] result: read lat 2 B: typical .* \(n=5\)$'
  refute_line --regexp '^\[(se|ce|sr)\] .*one CPU online'
}

@test "READ latency is a whole round trip, and WRITE latency half of one" {
  measure --op read -n 20 -s 64
  assert_success
  assert_line --regexp '^client: 64 B: min .* \(round trips\)$'
  assert_line --regexp '^result: read lat 64 B: typical '
  lat_numbers 64 | ordered
  measure --op write -n 20 -s 64
  assert_success
  assert_line --regexp '^client: 64 B: min .* \(half round trips\)$'
  assert_line --regexp '^result: write lat 64 B: typical '
}

@test "-a measures every power of two from 2 B to 1 MiB, one result line and one CSV row each" {
  CLIENT_ONLY=(-C "$BATS_TEST_TMPDIR/lat.csv")
  measure --op read -a -n 3
  assert_success
  local sizes expected
  sizes=$(sed -n 's/^result: read lat \([0-9]*\) B: typical .* (n=3)$/\1/p' <<<"$output" | paste -sd' ')
  expected=$(awk 'BEGIN { for (s = 2; s <= 1048576; s *= 2) printf "%s%d", (s > 2 ? " " : ""), s }')
  assert_equal "$sizes" "$expected"
  for s in $expected; do lat_numbers "$s" | ordered; done
  run cat "$BATS_TEST_TMPDIR/lat.csv"
  assert_line --index 0 --partial "tool,test,op,bytes,iters,"
  assert_equal "${#lines[@]}" 21
  assert_line --index 20 --regexp '^lesson11,lat,read,1048576,3,'
}

@test "a SEND latency sweep of all 20 sizes completes: each side posts again every receive it used" {
  # Each size uses a receive per answer on both sides; one not posted again
  # per size left the client none by the 17th size (128 KiB), and the
  # server's answer then waited for ever (RNR, retried without end).
  measure -a -n 3
  assert_success
  assert_line --regexp '^result: send lat 1048576 B: typical .* \(n=3\)$'
  assert_equal "$(grep -c '^result: send lat ' <<<"$output")" 20
  run cat "$SERVER_OUT"
  assert_line "result: served send lat, 20 size(s), n=3"
}

@test "WRITE bandwidth counts size x iterations bytes, and a SEND stream's server receives them all" {
  measure --test bw --op write -s 65536 -n 100
  assert_success
  assert_line --regexp '^client: 65536 B: 6553600 bytes in [0-9.]+ s, '
  assert_line --regexp '^result: write bw 65536 B: [0-9]+\.[0-9]{2} MiB/s \(n=100\)$'
  measure --test bw --op send -s 4096 -n 300 --depth 16
  assert_success
  assert_line --regexp '^result: send bw 4096 B: [0-9]+\.[0-9]{2} MiB/s \(n=300\)$'
  run cat "$SERVER_OUT"
  assert_line "server: 4096 B: received 300 messages, 1228800 bytes"
}

@test "a stream longer than --timeout ends cleanly on both sides: the client says MORE while it measures" {
  # --timeout 4: longer than a loaded lab takes to start the client (the
  # server waits that long for it), far shorter than the stream.
  start_server ./lesson11 -p "$PORT" --timeout 4 --test bw --op write -n 4000
  wait_for_server_line "waiting for a client"
  run rx ./lesson11 -p "$PORT" --timeout 4 --test bw --op write -n 4000 127.0.0.1
  assert_success
  assert_line --regexp '^result: write bw 65536 B: [0-9.]+ MiB/s \(n=4000\)$'
  wait_server 60
  assert_equal "$SERVER_STATUS" 0
  run cat "$SERVER_OUT"
  assert_line "result: served write bw, 1 size(s), n=4000"
}

@test "a client that says DONE without sending one request is an error on the server, not an empty success" {
  # tests/helpers/hostile_peer.cpp: the server's options echoed, MORE three
  # times, DONE, and not one WRITE.
  # The client first: it retries its connect, and --timeout also bounds the server's accept.
  start_helper hostile build/tests/helpers/hostile_peer lesson11-more 127.0.0.1 "$PORT" 3
  start_server ./lesson11 -p "$PORT" --timeout 5 --test bw --op write -n 10
  wait_server 30
  assert_equal "$SERVER_STATUS" 1
  # Its first line but for the coarse-clock warning (the lab's TCG guest ticks every 4 ms).
  run grep -v "CLOCK_MONOTONIC_RAW ticks every" "$SERVER_ERR"
  assert_line --index 0 "lesson11: the client said DONE for 65536 B, but none of its requests reached our QP (its rq_psn did not move): nothing was measured"
  run cat "$SERVER_OUT"
  refute_output --partial "result:"
}

@test "a client that says MORE for ever is cut off after 20 x --timeout on one size" {
  # The client first: it retries its connect, and --timeout also bounds the server's accept.
  # --timeout 2, not 1: the peer's MORE comes every 0.2 s, but a guest on a
  # loaded host has gone a whole second without running it.
  start_helper hostile build/tests/helpers/hostile_peer lesson11-more 127.0.0.1 "$PORT" 0
  start_server ./lesson11 -p "$PORT" --timeout 2 --test bw --op write -n 10
  SECONDS=0
  wait_server 90
  assert_equal "$SERVER_STATUS" 1
  ((SECONDS < 70)) || fail "the server took $SECONDS s"
  # Its first line but for the coarse-clock warning (the lab's TCG guest ticks every 4 ms).
  run grep -v "CLOCK_MONOTONIC_RAW ticks every" "$SERVER_ERR"
  assert_line --index 0 "lesson11: the client still says MORE after 40 s (20 x --timeout) on one size"
  run cat "$SERVER_OUT"
  refute_output --partial "result:"
}

@test "--batch posts several WRs per ibv_post_send call, and --signal asks for fewer completions" {
  measure --test bw --op write -s 1024 -n 256 --batch 8 --signal 16 --depth 64
  assert_success
  assert_line --partial "client: 1024 B: 262144 bytes in "
  assert_line --partial "; 32 ibv_post_send calls for 256 WRs"
}

@test "--events waits on a completion channel and measures the same things" {
  measure -n 30 --events
  assert_success
  assert_line --regexp '^result: send lat 2 B: typical .* \(n=30\)$'
  measure --test bw --op read -s 8192 -n 50 --events
  assert_success
  assert_line --regexp '^result: read bw 8192 B: [0-9.]+ MiB/s \(n=50\)$'
}

@test "--inline posts small messages inline, and -a --inline stops at the QP's max_inline_data" {
  measure --inline -s 32 -n 20
  assert_success
  assert_line --regexp '^client: the QP takes up to [0-9]+ bytes inline \(max_inline_data\)$'
  assert_line --regexp '^result: send lat 32 B: typical '
  measure --inline -a -n 3
  assert_success
  local max last
  max=$(sed -n 's/^client: the QP takes up to \([0-9]*\) bytes inline.*/\1/p' <<<"$output")
  last=$(sed -n 's/^result: send lat \([0-9]*\) B: .*/\1/p' <<<"$output" | tail -n 1)
  assert_equal "$last" "$max"
}

@test "a message too big to post inline is refused, naming max_inline_data" {
  run -2 rx ./lesson11 -p "$PORT" --timeout 5 --inline -s 1048576 127.0.0.1
  assert_line --regexp "^lesson11: --inline -s 1048576: $RDMA_DEV refused a QP with max_inline_data 1048576 \(EINVAL\)"
}

@test "READ with --inline, lat with --depth, and --signal beyond --depth are refused as misuse" {
  run -2 rx ./lesson11 --op read --inline 127.0.0.1
  assert_output --partial "--inline with --op read: a READ carries no data from us"
  run -2 rx ./lesson11 --depth 8 127.0.0.1
  assert_output --partial "--depth is a bandwidth option"
  run -2 rx ./lesson11 --test bw --signal 64 --depth 8 127.0.0.1
  assert_output --partial "--signal 64 is more than --depth 8"
  run -2 rx ./lesson11 --test fast 127.0.0.1
  assert_output --partial "--test must be lat or bw, not 'fast'"
}

@test "a depth beyond the device's max_qp_wr is refused, naming the limit" {
  local max
  max=$(rx ibv_devinfo -v -d "$RDMA_DEV" | awk '$1 == "max_qp_wr:" { print $2 }')
  [[ $max =~ ^[0-9]+$ ]]
  run -2 rx ./lesson11 -p "$PORT" --test bw --depth $((max + 1)) 127.0.0.1
  assert_output --partial "--depth $((max + 1)) is more than $RDMA_DEV's max_qp_wr $max (ibv_query_device)"
}

@test "a client whose options differ from the server's is an error on both sides" {
  start_server ./lesson11 -p "$PORT" --timeout 20 --op write -n 50
  wait_for_server_line "waiting for a client"
  run -1 rx ./lesson11 -p "$PORT" --timeout 20 --op send -n 50 127.0.0.1
  assert_output --partial "lesson11: options differ: this client runs --test lat --op send -s 2 -n 50; the server runs --test lat --op write -s 2 -n 50"
  refute_line --partial "result:"
  wait_server 20
  assert_equal "$SERVER_STATUS" 1
  run cat "$SERVER_ERR"
  assert_output --partial "lesson11: options differ: this server runs --test lat --op write -s 2 -n 50; the client runs --test lat --op send -s 2 -n 50"
}

@test "-h states every default" {
  run -0 rx ./lesson11 -h
  assert_output --partial "(default: lat)"
  assert_output --partial "(default: send)"
  assert_output --partial "(default: 2 for lat, 65536 for bw)"
  assert_output --partial "(default: 1000 for lat, 5000 for bw)"
  assert_output --partial "(default: 128)"
}
