#!/usr/bin/env bats
# bats file_tags=lane:lab
# tests/lab_netem.bats: scripts/lab.sh pair --netem-a / --netem-b (and
# LAB_NETEM_A / LAB_NETEM_B), the lossy cable of lesson 17, run on the
# host. The misuse tests boot nothing; each of the others boots a pair.
bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

# A TCP connect from b to a's port 22 (nothing listens there: a working
# cable answers "Connection refused"), bounded: "refused", "no answer" or
# "connected", on one line of b's.
# shellcheck disable=SC2016 # expanded in guest b
connect_b='timeout 5 bash -c "exec 3<>/dev/tcp/$LAB_PEER_ADDR/22" 2>/tmp/err && echo connected ||
  { grep -q refused /tmp/err && echo "refused" || echo "no answer"; }'

@test "-h documents --netem-a and --netem-b with LAB_NETEM_A and LAB_NETEM_B" {
  run -0 scripts/lab.sh -h
  assert_line "                      (and [--netem-a SPEC] [--netem-b SPEC]: a lossy cable)"
  assert_line --partial "--netem-a SPEC (or LAB_NETEM_A; --netem-b, LAB_NETEM_B for b)"
  assert_line --partial "eth0 root netem SPEC in the guest"
}

@test "a netem spec that is empty or holds shell words is misuse: one line, exit 2, before any boot" {
  local spec
  # shellcheck disable=SC2016 # expanded in the guest
  for spec in "" "loss 1%; reboot" 'loss $(x)' "loss 1% | true"; do
    run -2 --separate-stderr scripts/lab.sh pair --netem-a "$spec" --a true --b true
    assert_equal "$output" ""
    # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
    assert_regex "$stderr" "^lab\.sh: --netem-a"
    # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
    assert_equal "${#stderr_lines[@]}" 1
  done
  run -2 --separate-stderr env LAB_NETEM_B="loss 1%;" scripts/lab.sh pair --a true --b true
  assert_equal "$stderr" "lab.sh: --netem-b: '1%;' is not a netem word (tc-netem(8): e.g. 'loss 1%', 'delay 10ms reorder 25%'); see scripts/lab.sh -h"
}

@test "--netem-a 'loss 100%' cuts a's egress: a's qdisc shows it, b's connect gets no answer, b's own egress is untouched" {
  # shellcheck disable=SC2016 # expanded in the guests
  # --ready: b starts once a's qdisc is in place (b waits for a's command
  # to start, and the netem spec is the first thing that command does).
  run scripts/lab.sh pair --timeout 300 --netem-a 'loss 100%' --ready 'qdisc netem' \
    --a 'tc qdisc show dev eth0; sleep 8' \
    --b "$connect_b; tc qdisc show dev eth0"
  assert_success
  assert_line "[a] lab.sh: a's egress on the cable: netem loss 100%"
  assert_line --regexp '^\[a\] qdisc netem [0-9a-f]+: root .*loss 100%'
  assert_line "[b] no answer"
  refute_line --regexp '^\[b\] qdisc netem'
}

@test "the same cable without netem answers: b's connect is refused by a's kernel" {
  run scripts/lab.sh pair --timeout 300 --a 'sleep 6' --b "$connect_b"
  assert_success
  assert_line "[b] refused"
}

@test "LAB_NETEM_B and a pair that stays up: b's delay is on b's egress for the run, and gone after it" {
  export LAB_PAIR_DIR="$BATS_TEST_TMPDIR/pair"
  scripts/lab.sh up --pair 3>&-
  # shellcheck disable=SC2016 # expanded in guest b
  run env LAB_NETEM_B='delay 300ms' scripts/lab.sh pair --timeout 300 --a 'sleep 8' \
    --b 'tc qdisc show dev eth0; s=$(date +%s%N); '"$connect_b"'; echo "took $((($(date +%s%N) - s) / 1000000)) ms"'
  local pair_status=$status pair_output=$output
  run scripts/lab.sh exec --guest b -- tc qdisc show dev eth0
  local after=$output
  scripts/lab.sh down --pair 3>&-
  output=$pair_output
  mapfile -t lines <<<"$output"
  [ "$pair_status" -eq 0 ] || fail "pair exited $pair_status: $output"
  assert_line --regexp '^\[b\] qdisc netem [0-9a-f]+: root .*delay 300(\.0)?ms'
  assert_line "[b] refused"
  local ms
  ms=$(sed -n 's/^\[b\] took \([0-9]*\) ms$/\1/p' <<<"$output")
  ((ms >= 300)) || fail "b's connect took $ms ms, less than its egress delay of 300 ms"
  [[ $after != *netem* ]] || fail "the netem qdisc outlived the run: $after"
}
