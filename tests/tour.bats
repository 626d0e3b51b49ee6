#!/usr/bin/env bats
# bats file_tags=lab
# tests/tour.bats - make tour (scripts/lessons/tour.sh): the lessons in order, each
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

# The lesson numbers, in order, as one line: "1 2 3 ... 14" (one folder each
# under lessons/, numbered by its lessonN.cpp; lesson12_mcast.cpp is lesson 12's).
all_lessons() {
  local src
  for src in lessons/*/lesson[0-9]*.cpp; do
    src=${src##*/lesson}
    src=${src%.cpp}
    [[ $src =~ ^[0-9]+$ ]] && echo "$src"
  done | sort -n | paste -sd' '
}

# section N: lesson N's part of the tour's output (saved in $tour), from its
# banner to the next.
section() {
  awk -v n="$1" '/^===== lesson / { on = ($3 == n ":") } on' <<<"$tour"
}

# --- arguments are checked before anything boots ---------------------------

@test "tour.sh refuses a lesson that does not exist, names the lessons, and boots nothing" {
  for bad in x 0 99 08 -1 '4 5'; do
    run -2 scripts/lessons/tour.sh 4 "$bad"
    assert_output "tour.sh: no lesson '$bad': the lessons are $(all_lessons)"
    refute_output --partial "Soft-RoCE lab"
  done
}

@test "tour.sh -h prints its usage and boots nothing" {
  run -0 scripts/lessons/tour.sh -h
  assert_line --partial "scripts/lessons/tour.sh 4 5        only these"
  assert_line --partial "Exit status: 0 if every lesson succeeded, 1 if one failed, 2 misuse."
  refute_output --partial "Soft-RoCE lab"
}

# --- a real tour, in the lab -----------------------------------------------

@test "the tour runs every lesson in order and each prints its result, on both sides" {
  run timeout 600 scripts/lessons/tour.sh
  assert_success
  tour=$output
  # Lesson 16 needs a device with ODP (not rxe before 6.15): where it has
  # none, one line says so and names the kernel, and the tour still passes.
  local expected
  expected=$(all_lessons)
  if grep -q '^tour: lesson 16 skipped: ' <<<"$output"; then
    assert_line --regexp '^tour: lesson 16 skipped: needs on-demand paging, which rxe0 lacks on Linux [^ ]+ \(rxe has it from 6\.15\): run it with LAB_KERNEL=trixie-backports$'
    assert_line "tour: done (skipped: lesson 16)"
    expected=${expected/ 16/}
  else
    assert_line "tour: done"
  fi
  [[ $(grep -c '^tour: lesson [0-9]* skipped: ' <<<"$output") -le 1 ]]
  # The banners, in order.
  [[ $(grep -o '^===== lesson [0-9]*' <<<"$output" | sed 's/^===== lesson //' | paste -sd' ') == "$expected" ]]

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
  run section 10 # the recover scenario: an RNR failure, then the QP back to RTS and the sum
  assert_line "result: recover: IBV_WC_RNR_RETRY_EXC_ERR (13), as expected, then ERR -> RESET -> INIT -> RTR -> RTS and 2 + 3 = 5"
  assert_line "result: server: recover: after RESET -> INIT -> RTR -> RTS, 2 + 3 = 5"
  run section 11 # a short run: 100 round trips
  assert_line --regexp '^result: send lat 2 B: typical [0-9.]+ us, p99 [0-9.]+ us, p99\.9 [0-9.]+ us \(n=100\)$'
  assert_line "result: served send lat, 1 size(s), n=100"
  run section 12
  [[ $(grep -cx 'result: 2 + 3 = 5' <<<"$output") -eq 2 ]] # over UD: client and server
  assert_line "client: send completion IBV_WC_SUCCESS: the datagram left; nobody tells us whether it arrived"
  assert_line --regexp '^server: completion IBV_WC_RECV, 56 bytes = 40 GRH \+ 16 message, from QP 0x[0-9a-f]+ at '
  run section 13
  assert_line --regexp '^result: served 6 requests from 1 client with one SRQ of 4 receives; limit reached [1-9][0-9]* times?$'
  assert_line --regexp '^result: 6 requests answered on QP 0x[0-9a-f]+, every sum right$'
  assert_line --regexp '^server: async event "SRQ limit reached" #1: '
  run section 14
  assert_line "result: READ inside ok, WRITE inside ok, READ across the end ok, READ after revoke IBV_WC_REM_ACCESS_ERR, READ after re-bind ok, READ after SEND_WITH_INV IBV_WC_REM_ACCESS_ERR"
  assert_line "result: granted slot 5 through a type 2 window, revoked and re-bound it"
  run section 15
  [[ $(grep -cx 'result: 2 + 3 = 5' <<<"$output") -eq 2 ]] # the sum again, by ibv_wr_send and ibv_start_poll
  assert_line "server: completion IBV_WC_RECV, 16 bytes"
  if [[ $expected == *" 16"* ]]; then
    run section 16
    assert_line --regexp '^result: first touch against again, median per page: WRITE [0-9.]+x, READ [0-9.]+x; the never-written pages READ as zeros \(1024 of 1024 bytes\)$'
    assert_line "result: all 16 pages the client wrote hold its 1024 bytes"
  fi
  run section 17
  assert_line --regexp '^result: 4 WRITEs of 65536 bytes in [0-9.]+ s: [0-9.]+ MiB/s' # over loopback: no loss
  assert_line --regexp "^result: the buffer holds 65536 bytes of 0x[0-9a-f]{2}, the client's pattern$"
}

@test "tour.sh N M runs only those lessons" {
  run timeout 300 scripts/lessons/tour.sh 2 4
  assert_success
  [[ $(grep -o '^===== lesson [0-9]*' <<<"$output" | paste -sd' ') == "===== lesson 2 ===== lesson 4" ]]
  assert_line "tour: done"
}
