#!/usr/bin/env bats
# tests/lab_safety.bats: the lab shares a machine safely. It signals no
# process that is not its own, and refuses a lab folder that another user
# could have made, planted or can change. No guest boots here: every case
# is refused, or finds nothing up, before a boot (lab_up.bats runs the real
# lab, and its down twice).
# shellcheck disable=SC2030,SC2031 # each @test runs in its own process: what one exports stays in it, as meant
bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  cd "$BATS_TEST_DIRNAME/.." || return 1
  # No boot may start: an `uname` that names another machine ends lab.sh
  # at its first host check, should a case get that far.
  mkdir "$BATS_TEST_TMPDIR/bin"
  printf '#!/bin/sh\necho aarch64\n' >"$BATS_TEST_TMPDIR/bin/uname"
  chmod +x "$BATS_TEST_TMPDIR/bin/uname"
  export PATH="$BATS_TEST_TMPDIR/bin:$PATH"
}

teardown() {
  [[ -z ${DECOY:-} ]] || kill "$DECOY" 2>/dev/null || true
}

# start_decoy: a process of ours that is not the lab's (a sleep, its parent
# gone, so that a signal that ends it shows at once); its PID in DECOY.
start_decoy() {
  DECOY=$(
    sleep 600 >/dev/null 2>&1 3>&- &
    echo $!
  )
}

# alive PID: PID is a process still running (not a zombie).
alive() {
  local state
  state=$(ps -o stat= -p "$1") || return 1
  [[ $state != Z* ]]
}

@test "down on a lab never up signals nothing, not even a process whose PID a stale agent.pid names" {
  export LAB_UP_DIR="$BATS_TEST_TMPDIR/up"
  mkdir -m 700 "$LAB_UP_DIR"
  start_decoy
  echo "$DECOY" >"$LAB_UP_DIR/agent.pid"
  echo "$DECOY" >"$LAB_UP_DIR/qemu.pid"
  run -0 scripts/lab.sh down
  assert_output "lab.sh: no lab was up"
  alive "$DECOY" || fail "down signalled the decoy (pid $DECOY)"
  # agent.pid as the supervisor writes it, PID and start time: the decoy's
  # PID, but not its start time.
  echo "$DECOY 1" >"$LAB_UP_DIR/agent.pid"
  run -0 scripts/lab.sh down
  alive "$DECOY" || fail "a second down signalled the decoy (pid $DECOY)"
  [[ ! -e $LAB_UP_DIR/agent.pid ]] || fail "down left the stale agent.pid"
}

@test "down on a lab folder that does not exist creates nothing and signals nothing" {
  export LAB_UP_DIR="$BATS_TEST_TMPDIR/never"
  run -0 scripts/lab.sh down
  assert_output "lab.sh: no lab was up"
  [[ ! -e $LAB_UP_DIR ]] || fail "down made $LAB_UP_DIR"
}

# victims: a file and a folder of ours that a planted symlink may name.
make_victims() {
  VICTIM="$BATS_TEST_TMPDIR/victim"
  mkdir -m 755 "$VICTIM" "$VICTIM/dir"
  echo precious >"$VICTIM/file"
  echo kept >"$VICTIM/dir/file"
}

# assert_victims_untouched: the file keeps its bytes, the folder its mode
# and its one file.
assert_victims_untouched() {
  assert_equal "$(cat "$VICTIM/file")" precious
  assert_equal "$(stat -c %a "$VICTIM/dir")" 755
  assert_equal "$(ls -A "$VICTIM/dir")" file
}

@test "up --pair refuses a LAB_PAIR_DIR with symlinks planted in it, and follows none of them" {
  make_victims
  export LAB_PAIR_DIR="$BATS_TEST_TMPDIR/pair"
  mkdir -m 700 "$LAB_PAIR_DIR"
  ln -s "$VICTIM/file" "$LAB_PAIR_DIR/a.lock"
  ln -s "$VICTIM/dir" "$LAB_PAIR_DIR/a"
  ln -s "$VICTIM/file" "$LAB_PAIR_DIR/b.lock"
  ln -s "$VICTIM/dir" "$LAB_PAIR_DIR/b"
  run -125 scripts/lab.sh up --pair
  assert_output --partial "lab.sh: $LAB_PAIR_DIR/a is a symlink: the lab's folder must be a real folder of yours"
  assert_victims_untouched
  run -125 scripts/lab.sh down --pair
  assert_victims_untouched
}

@test "up refuses a LAB_UP_DIR that is a planted symlink, and the lock beside it is never opened" {
  make_victims
  export LAB_UP_DIR="$BATS_TEST_TMPDIR/up"
  ln -s "$VICTIM/dir" "$LAB_UP_DIR"
  ln -s "$VICTIM/file" "$LAB_UP_DIR.lock"
  run -125 scripts/lab.sh up
  assert_output --partial "lab.sh: $LAB_UP_DIR is a symlink: the lab's folder must be a real folder of yours"
  assert_victims_untouched
  run -125 scripts/lab.sh exec -- true
  run -125 scripts/lab.sh down
  assert_victims_untouched
}

@test "up refuses a lab folder others may write, or one under a folder others may write, and creates nothing in it" {
  export LAB_PAIR_DIR="$BATS_TEST_TMPDIR/pair"
  mkdir -m 777 "$LAB_PAIR_DIR"
  chmod 777 "$LAB_PAIR_DIR" # whatever the umask
  run -125 scripts/lab.sh up --pair
  assert_output --partial "lab.sh: $LAB_PAIR_DIR may be written by others (mode 777): the lab's folder must be yours alone"
  assert_equal "$(ls -A "$LAB_PAIR_DIR")" ""
  # Under a folder anyone may write (and not sticky, as /tmp is), another
  # user could swap the lab's folder for theirs after any check.
  mkdir -m 700 "$LAB_PAIR_DIR/inner"
  LAB_UP_DIR="$LAB_PAIR_DIR/inner/up" run -125 scripts/lab.sh up
  assert_output --partial "lab.sh: $LAB_PAIR_DIR may be written by others (mode 777)"
  assert_equal "$(ls -A "$LAB_PAIR_DIR/inner")" ""
}

@test "up refuses a lab folder another user owns, and creates nothing in it" {
  local foreign=/usr
  if ((EUID == 0)); then
    # root owns every folder it makes: hand one to nobody.
    foreign="$BATS_TEST_TMPDIR/foreign"
    mkdir -m 755 "$foreign"
    chown 65534:65534 "$foreign"
  fi
  LAB_PAIR_DIR=$foreign run -125 scripts/lab.sh up --pair
  assert_output --partial "lab.sh: $foreign belongs to uid $(stat -c %u "$foreign"), not to you: the lab's folder must be yours alone"
  [[ $foreign == /usr ]] || assert_equal "$(ls -A "$foreign")" ""
}
