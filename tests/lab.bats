#!/usr/bin/env bats
# tests/lab.bats: the Soft-RoCE lab (scripts/lab.sh), run on the host.
#
# Each guest boot costs seconds, so setup_file boots ONE guest, from a copy
# of this checkout under /tmp (as a CI clone would be), with one probe
# command that reports everything the tests below look at. The timeout,
# shell and pair tests boot their own.
#
#   bats tests/lab.bats

bats_require_minimum_version 1.5.0

setup_file() {
  local top
  top=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
  # A checkout under /tmp, as a fresh CI clone would be.
  export CLONE="$BATS_FILE_TMPDIR/checkout"
  cp -a "$top" "$CLONE"
  # A learner's script in the host's /tmp, outside the checkout.
  export HOST_TMP_SCRIPT
  HOST_TMP_SCRIPT=$(mktemp /tmp/lab-bats.XXXXXX)
  echo 'echo "host /tmp script ran"' >"$HOST_TMP_SCRIPT"

  # The probe: one boot, many facts. Run from a subfolder of the checkout.
  # shellcheck disable=SC2016 # expanded in the guest
  (
    cd "$CLONE/scripts" &&
      LAB_ENV="LAB_TEST_VAR HOST_TMP_SCRIPT" LAB_TEST_VAR="passed through" \
        "$CLONE/scripts/lab.sh" run --timeout 300 -- bash -c '
                    ibv_devinfo -d rxe0
                    echo "pwd: $(pwd)"
                    echo "LAB: $LAB"
                    echo "vCPUs: $(nproc)"
                    echo "HOME: $HOME on $(stat -f -c %T "$HOME")"
                    echo "LAB_TEST_VAR: $LAB_TEST_VAR"
                    [ -x "$0/scripts/lab.sh" ] && echo "checkout visible at $0"
                    printf "arg: [%s]\n" "$@"
                    echo "this goes to stderr" >&2
                    bash "$HOST_TMP_SCRIPT"
                    echo "echo changed by the guest" >"$HOST_TMP_SCRIPT" &&
                        echo "wrote $HOST_TMP_SCRIPT in the guest"
                    exit 7' "$CLONE" "two words" "it's \"quoted\"" '$HOME *'
  ) >"$BATS_FILE_TMPDIR/stdout" 2>"$BATS_FILE_TMPDIR/stderr" &&
    echo 0 >"$BATS_FILE_TMPDIR/status" ||
    echo $? >"$BATS_FILE_TMPDIR/status"
}

teardown_file() {
  rm -f "$HOST_TMP_SCRIPT"
}

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  bats_load_library bats-file
}

# The probe's stdout as $output.
probe_stdout() {
  run cat "$BATS_FILE_TMPDIR/stdout"
}

@test "a command in the lab sees rxe0 with its port ACTIVE" {
  probe_stdout
  assert_output --partial "hca_id:	rxe0"
  assert_output --partial "PORT_ACTIVE"
}

@test "the command's exit status becomes lab.sh's exit status" {
  run cat "$BATS_FILE_TMPDIR/status"
  assert_output 7
}

@test "arguments with spaces, quotes and shell characters arrive unchanged" {
  probe_stdout
  assert_line "arg: [two words]"
  assert_line "arg: [it's \"quoted\"]"
  # shellcheck disable=SC2016 # a literal $HOME: the guest must not expand it
  assert_line 'arg: [$HOME *]'
}

@test "the command's stdout and stderr reach the host's stdout and stderr" {
  probe_stdout
  assert_line "LAB: 1"
  refute_output --partial "this goes to stderr"
  run cat "$BATS_FILE_TMPDIR/stderr"
  assert_line "this goes to stderr"
}

@test "a checkout under /tmp is visible in the guest at the same path" {
  probe_stdout
  assert_line "checkout visible at $CLONE"
}

@test "a script in the host's /tmp runs in the guest, and what the guest writes there stays in the guest" {
  probe_stdout
  assert_line "host /tmp script ran"
  assert_line "wrote $HOST_TMP_SCRIPT in the guest"
  run cat "$HOST_TMP_SCRIPT"
  assert_output 'echo "host /tmp script ran"'
}

@test "the command runs in the host's current folder inside the checkout" {
  probe_stdout
  assert_line "pwd: $CLONE/scripts"
}

@test "a guest has one vCPU unless LAB_CPUS says more" {
  probe_stdout
  assert_line "vCPUs: 1"
}

@test "LAB_CPUS=2 gives the guest two vCPUs, where the host has two cores" {
  (($(nproc) >= 2)) || skip "this host has one core"
  run -0 env LAB_CPUS=2 "$CLONE/scripts/lab.sh" run --timeout 300 -- nproc
  assert_output 2
}

@test "LAB_CPUS outside 1 to the host's cores is misuse, before any boot" {
  local value cores
  cores=$(nproc)
  for value in 0 -1 1.5 two "$((cores + 1))"; do
    run -2 --separate-stderr env LAB_CPUS="$value" "$CLONE/scripts/lab.sh" run -- true
    assert_output ""
    # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
    assert_equal "$stderr" "lab.sh: LAB_CPUS must be a whole number of vCPUs from 1 to this host's $cores cores, not '$value'; see scripts/lab.sh -h"
    run -2 --separate-stderr env LAB_CPUS="$value" "$CLONE/scripts/lab.sh" pair --a true --b true
    assert_equal "$stderr" "lab.sh: LAB_CPUS must be a whole number of vCPUs from 1 to this host's $cores cores, not '$value'; see scripts/lab.sh -h"
  done
}

@test "the guest says it is the lab: LAB=1 and HOME on a tmpfs" {
  probe_stdout
  assert_line "LAB: 1"
  assert_line "HOME: /tmp/home on tmpfs"
}

@test "variables named in LAB_ENV are passed into the guest" {
  probe_stdout
  assert_line "LAB_TEST_VAR: passed through"
}

@test "an unknown command prints one line of usage error and exits 2" {
  run -2 "$CLONE/scripts/lab.sh" frobnicate
  assert_equal "${#lines[@]}" 1
  assert_output --partial "unknown command 'frobnicate'"
}

@test "run without a command after -- is misuse and exits 2" {
  run -2 "$CLONE/scripts/lab.sh" run --
  assert_equal "${#lines[@]}" 1
  assert_output --partial "no command"
}

@test "without qemu, lab.sh says to run scripts/install_deps.sh and exits 125" {
  # A PATH with what lab.sh needs before its checks, and no qemu.
  local tool
  mkdir "$BATS_TEST_TMPDIR/bin"
  for tool in bash dirname uname git; do
    ln -s "$(command -v "$tool")" "$BATS_TEST_TMPDIR/bin/$tool"
  done
  PATH="$BATS_TEST_TMPDIR/bin" run -125 "$CLONE/scripts/lab.sh" run -- true
  assert_equal "${#lines[@]}" 1
  assert_output --partial "qemu-system-x86_64 not found: run scripts/install_deps.sh"
}

@test "a PATH without sbin (a Debian user's, not root's) still finds depmod and modprobe" {
  # lab.sh looks in /usr/sbin and /sbin too; it said "depmod not found: run
  # scripts/install_deps.sh" with kmod installed.
  PATH=/usr/local/bin:/usr/bin:/bin run -0 "$CLONE/scripts/lab.sh" fetch
  refute_output --partial "not found"
  assert_line --regexp "^lab.sh: kernel /.*/linux-image-"
}

# stub NAME BODY: a command NAME, first on PATH for the tests that use
# $BATS_TEST_TMPDIR/bin, running the sh script BODY.
stub() {
  mkdir -p "$BATS_TEST_TMPDIR/bin"
  printf '#!/bin/sh\n%s\n' "$2" >"$BATS_TEST_TMPDIR/bin/$1"
  chmod +x "$BATS_TEST_TMPDIR/bin/$1"
}

@test "a failed kernel download after which apt names no kernel is refused, and the cache is kept" {
  local cache="$BATS_TEST_TMPDIR/cache/rdma-workbook/lab"
  mkdir -p "$cache"
  echo "an older kernel's files" >"$cache/keep-me"
  # apt names a kernel until apt-get update has run, then none; the
  # download always fails (a mirror that dropped it).
  stub apt-cache "[ -e '$BATS_TEST_TMPDIR/updated' ] || printf 'linux-image-amd64\n  Depends: linux-image-9.9.9-9-amd64\n'"
  stub apt-get "case \$1 in update) touch '$BATS_TEST_TMPDIR/updated' ;; *) echo 'E: gone' >&2; exit 100 ;; esac"
  stub sudo 'exec "$@"'
  stub dpkg 'echo "dpkg must not run" >&2; exit 99'
  XDG_CACHE_HOME="$BATS_TEST_TMPDIR/cache" PATH="$BATS_TEST_TMPDIR/bin:$PATH" \
    run -125 --separate-stderr "$CLONE/scripts/lab.sh" fetch
  assert_equal "$stderr" "$(printf '%s\n' \
    "lab.sh: fetching linux-image-9.9.9-9-amd64 ($(host_suite)) into $cache/linux-image-9.9.9-9-amd64 (once)" \
    "lab.sh: refreshing apt's package lists (apt-get update, /var/lib/apt/lists)" \
    "lab.sh: apt names no kernel package ('' from apt-cache depends linux-image-amd64): run apt-get update, or fetch on a Debian host")"
  assert_file_exists "$BATS_TEST_TMPDIR/updated"
  assert_file_exists "$cache/keep-me"
  assert_file_exists "$cache/lock"
}

@test "a guest that outlives --timeout is killed and lab.sh exits 124" {
  run -124 "$CLONE/scripts/lab.sh" run --timeout 2 -- sleep 600
  assert_output --partial "timed out after 2 s"
}

@test "a lab.sh run killed by SIGKILL takes its guest with it, long before its --timeout" {
  "$CLONE/scripts/lab.sh" run --timeout 300 -- sleep 300 >/dev/null 2>&1 3>&- &
  local lab=$! watcher="" qemu="" i
  # Its children: timeout, and under it qemu, once it is qemu: by its
  # name (comm, 15 characters), not its arguments, which timeout's child has
  # before it has set its death signal and become qemu.
  # Up to 120 s to start: the lab's cache is shared, and a loaded host slow.
  for ((i = 0; i < 1200; i++)); do
    sleep 0.1
    watcher=$(pgrep -P "$lab" -x timeout) || continue
    qemu=$(pgrep -P "$watcher" -x qemu-system-x86) && break
  done
  [[ -n $qemu ]] || fail "no qemu under lab.sh run (pid $lab) after 120 s"
  kill -KILL "$lab"
  # The kernel ends both at once (PR_SET_PDEATHSIG); 10 s is room for a
  # loaded host, against the 300 s they ran on before. A zombie (Z, not
  # reaped yet) has ended.
  for ((i = 0; i < 100; i++)); do
    ps -o stat= -p "$qemu,$watcher" | grep -qv '^Z' || break
    sleep 0.1
  done
  run ps -o pid=,stat=,args= -p "$qemu,$watcher"
  refute_output --regexp '^ *[0-9]+ +[^Z]'
}

@test "pair joins two guests by a cable: rping crosses it and the pcap holds RoCE" {
  local pcap="$BATS_TEST_TMPDIR/wire.pcap"
  # b retries until a's server listens (b starts once a has started).
  # shellcheck disable=SC2016 # $LAB_PEER_ADDR expands in guest b
  run "$CLONE/scripts/lab.sh" pair --pcap "$pcap" --timeout 300 \
    --a 'rping -s -a 192.0.2.1 -C 3 -v' \
    --b 'for try in $(seq 20); do rping -c -a $LAB_PEER_ADDR -C 3 -v && exit 0; sleep 0.5; done; exit 1'
  assert_success
  assert_line --partial "[a] server ping data: rdma-ping-2"
  assert_line --partial "[b] ping data: rdma-ping-2"
  assert_output --partial "lab.sh: a exited 0, b exited 0"
  assert_file_not_empty "$pcap"
  # RoCE v2 is UDP port 4791; tshark decodes it as InfiniBand.
  run tshark -r "$pcap" -Y 'udp.dstport == 4791 && infiniband' -T fields -e infiniband.bth.opcode
  assert_success
  assert_line 4  # RC SEND Only: the ping data
  assert_line 17 # RC Acknowledge
}

@test "pair: the host follows no symlink that a guest plants where it can write" {
  local victim="$BATS_TEST_TMPDIR/victim"
  # Guest a (root) plants symlinks to $victim under the names of the files
  # lab.sh writes, in the per-run share and in the folder the guests share.
  run "$CLONE/scripts/lab.sh" pair --timeout 300 \
    --a "plant() {
                 for name in a.exited b.exited console-b.log qemu-b.log stdout-b.fifo stderr-b.fifo; do
                     ln -s '$victim' \"\$1/\$name\" 2>/dev/null && echo \"planted \$name in \$1\"
                 done
                 return 0
             }
             plant /run/lab
             plant /proc/1/root/pair # out of the chroot, as root can" \
    --b 'true'
  assert_success
  assert_line "[a] planted a.exited in /proc/1/root/pair"
  refute_output --partial "in /run/lab"
  assert_output --partial "lab.sh: a exited 0, b exited 0"
  assert_file_not_exists "$victim"
}

# host_suite: the host's Debian suite (the lab's default kernel).
host_suite() {
  sed -n 's/^VERSION_CODENAME=//p' /etc/os-release
}

@test "LAB_KERNEL names a kernel the lab knows: anything else is misuse, before any fetch" {
  local value
  for value in sid 6.1 bookworm-backports; do
    LAB_KERNEL=$value run -2 --separate-stderr "$CLONE/scripts/lab.sh" fetch
    assert_equal "$stderr" "lab.sh: LAB_KERNEL must be one of bookworm, trixie, trixie-backports, not '$value'; see scripts/lab.sh -h"
  done
}

@test "a kernel of another suite is looked up in apt lists of its own in the cache, never the host's" {
  local cache="$BATS_TEST_TMPDIR/cache/rdma-workbook/lab" suite=trixie-backports
  [ "$(host_suite)" != "$suite" ] || suite=bookworm
  local apt="$cache/kernels/$suite/apt"
  # apt-cache and apt-get write down their arguments; the download fails.
  stub apt-cache "echo \"apt-cache \$*\" >>'$BATS_TEST_TMPDIR/apt.log'; printf 'linux-image-amd64\n  Depends: linux-image-9.9.9-9-amd64\n'"
  stub apt-get "echo \"apt-get \$*\" >>'$BATS_TEST_TMPDIR/apt.log'; case \"\$*\" in *download*) exit 100 ;; esac"
  stub sudo 'echo "sudo must not run" >&2; exit 99'
  LAB_KERNEL=$suite XDG_CACHE_HOME="$BATS_TEST_TMPDIR/cache" PATH="$BATS_TEST_TMPDIR/bin:$PATH" \
    run -125 --separate-stderr "$CLONE/scripts/lab.sh" fetch
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "${stderr_lines[0]}" "lab.sh: fetching linux-image-9.9.9-9-amd64 ($suite) into $cache/kernels/$suite/linux-image-9.9.9-9-amd64 (once)"
  [[ $stderr != *"sudo must not run"* ]]
  # Every apt call reads the suite's own sources.list and lists.
  run -0 cat "$BATS_TEST_TMPDIR/apt.log"
  assert_line --regexp '^apt-get .* download linux-image-9\.9\.9-9-amd64$'
  assert_line --regexp '^apt-get .* update'
  local line
  for line in "${lines[@]}"; do
    assert_regex "$line" "-o Dir::Etc::sourcelist=$apt/sources.list .*-o Dir::State::Lists=$apt/lists -o Dir::Cache=$apt/cache "
  done
  run -0 cat "$apt/sources.list"
  assert_line --regexp "^deb \[signed-by=[^]]+\] https?://[^ ]+ ${suite} main$"
}

@test "-h prints the usage of every subcommand with its defaults and exits 0" {
  local flag
  for flag in -h --help help; do
    run -0 --separate-stderr "$CLONE/scripts/lab.sh" "$flag"
    assert_equal "$stderr" ""
    assert_line "  scripts/lab.sh run [--timeout SECS] -- CMD [ARGS...]"
    assert_line "  scripts/lab.sh shell"
    assert_line "  scripts/lab.sh pair [--pcap FILE] [--timeout SECS] [--ready TEXT] --a 'CMD' --b 'CMD'"
    assert_line "  scripts/lab.sh fetch"
    assert_line --partial "Default timeout 600 s."
    assert_line "         Exit status: a's if non-zero, else b's. Default timeout 600 s."
    assert_line "Exit status: CMD's own; 2 misuse; 124 timeout; 125 the lab itself failed."
    assert_line "LAB_KERNEL=bookworm|trixie|trixie-backports: the guest's Debian kernel,"
  done
}

@test "--timeout takes only a whole number of seconds above 0: anything else is misuse, before any boot" {
  local value
  for value in 0 -5 1.5 10s abc ""; do
    run -2 --separate-stderr "$CLONE/scripts/lab.sh" run --timeout "$value" -- true
    assert_output ""
    assert_equal "$stderr" "lab.sh: --timeout needs a number of seconds, not '$value'; see scripts/lab.sh -h"
    run -2 --separate-stderr "$CLONE/scripts/lab.sh" pair --timeout "$value" --a true --b true
    assert_equal "$stderr" "lab.sh: --timeout needs a number of seconds, not '$value'; see scripts/lab.sh -h"
  done
}

@test "fetch prints the kernel, initramfs and accelerator it prepared, which exist" {
  run -0 --separate-stderr "$CLONE/scripts/lab.sh" fetch
  assert_equal "${#lines[@]}" 3
  assert_regex "${lines[0]}" '^lab\.sh: kernel /.*/rdma-workbook/lab/linux-image-[^/]+/(vmlinux|root/boot/vmlinuz-.*)$'
  assert_file_exists "${lines[0]#lab.sh: kernel }"
  assert_regex "${lines[1]}" '^lab\.sh: initramfs /.*/rdma-workbook/lab/linux-image-[^/]+/initramfs-[0-9a-f]{12}\.cpio$'
  assert_file_exists "${lines[1]#lab.sh: initramfs }"
  assert_regex "${lines[2]}" '^lab\.sh: accelerator (-accel kvm -cpu host|-accel tcg,thread=multi -cpu max)$'
  run -2 --separate-stderr "$CLONE/scripts/lab.sh" fetch now
  assert_equal "$stderr" "lab.sh: fetch takes no arguments; see scripts/lab.sh -h"
}

@test "shell gives an interactive bash in the guest, with rxe0 ACTIVE, and exit powers it off" {
  local out="$BATS_TEST_TMPDIR/shell.out" in="$BATS_TEST_TMPDIR/shell.in" lab tries=0 status=0
  mkfifo "$in"
  "$CLONE/scripts/lab.sh" shell <"$in" >"$out" 2>&1 3>&- &
  lab=$!
  exec 4>"$in" # the learner's keyboard, open until the end
  # Type only once the prompt is there: input during the boot is lost.
  until grep -q 'lab:/.*# ' "$out"; do
    tries=$((tries + 1))
    [[ $tries -le 600 ]] || fail "no prompt in 300 s: $(cat "$out")"
    sleep 0.5
  done
  # shellcheck disable=SC2016 # expanded by the guest's bash
  echo 'echo "state: $(cat /sys/class/infiniband/rxe0/ports/1/state) LAB=$LAB"; exit' >&4
  wait "$lab" || status=$?
  exec 4>&-
  assert_equal "$status" 0
  run cat "$out"
  assert_line --index 0 "lab.sh: booting the lab guest; 'exit' powers it off (Ctrl-A X kills it)"
  assert_output --partial "state: 4: ACTIVE LAB=1"
  run -2 --separate-stderr "$CLONE/scripts/lab.sh" shell now
  assert_equal "$stderr" "lab.sh: shell takes no arguments; see scripts/lab.sh -h"
}

@test "pair exits with a's status when a fails, even if b fails too" {
  run -3 "$CLONE/scripts/lab.sh" pair --timeout 300 --a 'exit 3' --b 'exit 5'
  assert_line "lab.sh: a exited 3, b exited 5"
}

@test "pair exits with b's status when a succeeds" {
  run -5 "$CLONE/scripts/lab.sh" pair --timeout 300 --a 'true' --b 'exit 5'
  assert_line "lab.sh: a exited 0, b exited 5"
}

@test "pair --ready: b starts only once a has printed the ready line, and a's output and status are kept" {
  # a prints its ready line after 3 s; without --ready, b would print first.
  run -4 "$CLONE/scripts/lab.sh" pair --timeout 300 --ready 'now listening' \
    --a 'echo early; sleep 3; echo "server: now listening"; sleep 1; echo late; exit 4' \
    --b 'echo "b started"'
  assert_line "lab.sh: a exited 4, b exited 0"
  [[ $(grep -E '^\[(a|b)\] ' <<<"$output" | paste -sd'|') == "[a] early|[a] server: now listening|[b] b started|[a] late" ]]
}

@test "pair --ready: b gives up when a's command ends without the ready line" {
  run "$CLONE/scripts/lab.sh" pair --timeout 300 --ready 'never printed' --a 'echo done' --b 'echo "b started"'
  refute_line "[b] b started"
  assert_line --partial "ended without printing a line with 'never printed'"
}
