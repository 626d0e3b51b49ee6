#!/usr/bin/env bats
# tests/bench.bats - scripts/bench/run.sh (make bench): its command line. The
# measurements themselves take minutes in the lab; tests/lesson11_performance.bats
# checks lesson 11's output, and docs/lesson11-performance.md shows a real run.

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
}

@test "bench/run.sh -h prints its usage, with the output folder and its default, and measures nothing" {
  run -0 scripts/bench/run.sh -h
  assert_line --partial "Usage: scripts/bench/run.sh [-o DIR]      (also: make bench)"
  assert_line --partial "-o DIR   where the CSVs and the plots go (default: bench/)"
  refute_output --partial "measuring"
}

@test "bench/run.sh refuses an unknown argument, an -o without a folder, a bad BENCH_SCALE or BENCH_ROUNDS, before it measures" {
  run -2 scripts/bench/run.sh --fast
  assert_output "bench/run.sh: unknown argument '--fast' (see scripts/bench/run.sh -h)"
  run -2 scripts/bench/run.sh -o
  assert_output "bench/run.sh: -o needs a folder (see scripts/bench/run.sh -h)"
  BENCH_SCALE=0 run -2 scripts/bench/run.sh
  assert_output "bench/run.sh: BENCH_SCALE must be 1 to 99, not '0' (see scripts/bench/run.sh -h)"
  BENCH_ROUNDS=x run -2 scripts/bench/run.sh
  assert_output "bench/run.sh: BENCH_ROUNDS must be 1 to 99, not 'x' (see scripts/bench/run.sh -h)"
}

@test "the plots are drawn from lesson 11's CSV columns, and a plot with no data is left out" {
  command -v gnuplot >/dev/null || fail "gnuplot is not installed (scripts/install_deps.sh installs gnuplot-nox)"
  local dir=$BATS_TEST_TMPDIR/bench
  mkdir -p "$dir"
  {
    echo "tool,test,op,bytes,iters,inline,signal,batch,depth,events,mtu,min_us,typical_us,p99_us,p999_us,max_us,mib_s,post_calls"
    for s in 2 4 8 16; do echo "lesson11,lat,read,$s,3,0,1,1,1,0,1024,1,$((30 + s)),3,4,5,,"; done
  } >"$dir/lat_size.csv"
  run -0 scripts/bench/plot.sh "$dir"
  [[ $(head -c 4 "$dir/latency.png" | od -An -tx1 | tr -d ' ') == 89504e47 ]] # a PNG
  assert_line "plot.sh: no data for bandwidth.png, not drawn"
  assert_line "plot.sh: no data for depth-signal.png, not drawn"
  [[ ! -e $dir/bandwidth.png && ! -e $dir/depth-signal.png ]]
}

@test "a folder whose name holds a quote is only a name to the plots: gnuplot runs nothing from it" {
  command -v gnuplot >/dev/null || fail "gnuplot is not installed (scripts/install_deps.sh installs gnuplot-nox)"
  local plot=$PWD/scripts/bench/plot.sh dir="x'; system 'touch pwned'; print '"
  cd "$BATS_TEST_TMPDIR" || return 1
  mkdir -p "$dir"
  {
    echo "tool,test,op,bytes,iters,inline,signal,batch,depth,events,mtu,min_us,typical_us,p99_us,p999_us,max_us,mib_s,post_calls"
    echo "lesson11,lat,read,2,3,0,1,1,1,0,1024,1,32,3,4,5,,"
  } >"$dir/lat_size.csv"
  run -0 "$plot" "$dir"
  [[ ! -e pwned ]] || fail "gnuplot ran a command from the folder's name"
  [[ $(head -c 4 "$dir/latency.png" | od -An -tx1 | tr -d ' ') == 89504e47 ]] # a PNG, where it belongs
}

# shellcheck disable=SC2016 # the stubs' text, expanded when they run
@test "in the lab, BENCH_SCALE reaches the measurements (through LAB_ENV), which write to a folder of their own" {
  compgen -G '/sys/class/infiniband/*' >/dev/null && skip "this host has an RDMA device: bench/run.sh measures here, not in a guest"
  command -v gnuplot >/dev/null || fail "gnuplot is not installed (bench/run.sh needs it; scripts/install_deps.sh installs gnuplot-nox)"
  # bench/run.sh in a checkout of its own, with stubs: lab.sh resets the
  # environment as the real one does (only LAB_ENV's names pass), and
  # measure.sh says what it got and writes one CSV.
  local box=$BATS_TEST_TMPDIR/box
  mkdir -p "$box/scripts/bench"
  cp scripts/bench/run.sh "$box/scripts/bench/"
  printf '%s\n' '#!/usr/bin/env bash' 'while [[ $1 != -- ]]; do shift; done' 'shift' \
    'vars=(LAB=1 "PATH=$PATH")' 'for n in ${LAB_ENV:-}; do [[ -n ${!n+set} ]] && vars+=("$n=${!n}"); done' \
    'exec env -i "${vars[@]}" "$@"' >"$box/scripts/lab.sh"
  printf '%s\n' '#!/usr/bin/env bash' 'echo "measure.sh: BENCH_SCALE=${BENCH_SCALE:-unset}, into $1"' \
    'mkdir -p "$1" && echo "tool,test" >"$1/lat_size.csv"' >"$box/scripts/bench/measure.sh"
  printf '%s\n' '#!/bin/sh' 'echo "plot.sh: $1"' >"$box/scripts/bench/plot.sh"
  printf '%s\n' '#!/bin/sh' >"$box/lesson11"
  chmod +x "$box/scripts/lab.sh" "$box/scripts/bench/measure.sh" "$box/scripts/bench/plot.sh" "$box/lesson11"
  BENCH_SCALE=3 run -0 "$box/scripts/bench/run.sh" -o "$BATS_TEST_TMPDIR/out"
  assert_line --regexp '^measure\.sh: BENCH_SCALE=3, into /tmp/tmp\.[A-Za-z0-9]+$'
  rm -rf "$(sed -n 's/^measure\.sh: .*, into //p' <<<"$output")"
  assert_equal "$(cat "$BATS_TEST_TMPDIR/out/lat_size.csv")" "tool,test"
}
