#!/usr/bin/env bats
# tests/tour.bats - make tour (scripts/tour.sh): the lessons in order, each
# with its server and client as its run.conf says. Runs on the host: with no
# RDMA device here, the tour boots one lab guest itself.

bats_require_minimum_version 1.5.0

setup_file() {
  cd "$BATS_TEST_DIRNAME/.." || return 1
  make -s all
}

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

# section N: lesson N's part of the tour's output (saved in $tour), from its
# banner to the next.
section() {
  awk -v n="$1" '/^===== lesson / { on = ($3 == n ":") } on' <<<"$tour"
}

# --- arguments are checked before anything boots ---------------------------

@test "tour.sh refuses a lesson that does not exist, names the lessons, and boots nothing" {
  for bad in x 0 10 08 -1 '4 5'; do
    run -2 scripts/tour.sh 4 "$bad"
    assert_output "tour.sh: no lesson '$bad': the lessons are 1 2 3 4 5 6 7 8 9 11"
    refute_output --partial "Soft-RoCE lab"
  done
}

@test "tour.sh -h prints its usage and boots nothing" {
  run -0 scripts/tour.sh -h
  assert_line --partial "scripts/tour.sh 4 5        only these"
  assert_line --partial "Exit status: 0 if every lesson succeeded, 1 if one failed, 2 misuse."
  refute_output --partial "Soft-RoCE lab"
}

# --- a real tour, in the lab -----------------------------------------------

@test "the tour runs lessons 1 to 11 in order and each prints its result, on both sides" {
  run timeout 600 scripts/tour.sh
  assert_success
  assert_line "tour: done"
  tour=$output
  # The banners, in order.
  [[ $(grep -o '^===== lesson [0-9]*' <<<"$output" | paste -sd' ') == \
    "===== lesson 1 ===== lesson 2 ===== lesson 3 ===== lesson 4 ===== lesson 5 ===== lesson 6 ===== lesson 7 ===== lesson 8 ===== lesson 9 ===== lesson 11" ]]

  run section 1
  assert_line --regexp '^result: 1 device\(s\) listed; rxe0 port 1 GID index 1 ::ffff:192\.0\.2\.1 \(RoCE v2\)$'
  run section 2
  assert_line --regexp '^result: 5 MRs registered with least privilege; refused as the rules say: '
  run section 3
  assert_line --regexp '^result: QP 0x[0-9a-f]+ -> QP 0x[0-9a-f]+ connected by hand \(RESET, INIT, RTR, RTS\); SEND of 16 bytes received intact'
  run section 4
  [[ $(grep -cx 'result: 2 + 3 = 5' <<<"$output") -eq 2 ]] # client and server
  run section 5
  assert_line "result: wrote 19 bytes with immediate 19"
  assert_line 'result: received 19 bytes: "hello over the wire"'
  run section 6
  assert_line 'result: read 25 bytes: "text in the server memory"'
  assert_line "result: the client read 25 bytes; the server saw 0 completions"
  run section 7
  assert_line "result: counter = 3"
  run section 8
  assert_line "result: 2 + 3 = 5"
  refute_line --partial "failed"
  run section 9
  [[ $(grep -cx 'result: 2 + 3 = 5' <<<"$output") -eq 2 ]]
  run section 11 # a short run: 100 round trips
  assert_line --regexp '^result: send lat 2 B: typical [0-9.]+ us, p99 [0-9.]+ us, p99\.9 [0-9.]+ us \(n=100\)$'
  assert_line "result: served send lat, 1 size(s), n=100"
}

@test "tour.sh N M runs only those lessons" {
  run timeout 300 scripts/tour.sh 2 4
  assert_success
  [[ $(grep -o '^===== lesson [0-9]*' <<<"$output" | paste -sd' ') == "===== lesson 2 ===== lesson 4" ]]
  assert_line "tour: done"
}
