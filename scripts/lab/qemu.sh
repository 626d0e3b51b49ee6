# shellcheck shell=bash
# lab/qemu.sh: qemu's command line, a guest's start, and what its console
# says at the end (part of scripts/lab.sh; sourced, never run).

# Boot-time self-tests the lab skips; see qemu_base_args. no_timer_check:
# on a loaded host a TCG guest's timer interrupt can come too late for the
# kernel's IO-APIC timer check, which then panics ("IO-APIC + timer doesn't
# work!", seen at load 13 on 2 cores); virtual machines skip it.
readonly KERNEL_SKIPS="cryptomgr.notests initcall_blacklist=crypto_kdf108_init,init_kprobe_trace no_timer_check"

# guest_clock_args: kernel arguments that give the guest a nanosecond clock.
# With acpi=off a qemu guest finds no timer to calibrate its TSC against and
# falls back to jiffies, 4 ms ticks: lesson 11's round trips and lesson 10's
# timings would read 0 or 4 ms. Under qemu the guest's TSC runs at the
# host's rate, so tell the guest that rate (from the host kernel's own
# calibration, in dmesg) and to trust it. Nothing when dmesg does not say
# (it may be closed to us): the guest keeps jiffies, and lesson 11 warns.
guest_clock_args() {
  local mhz
  mhz=$(dmesg 2>/dev/null | sed -n -e 's/.*tsc: Refined TSC clocksource calibration: \([0-9.]*\) MHz.*/\1/p' \
    -e 's/.*tsc: Detected \([0-9.]*\) MHz processor.*/\1/p' | tail -n 1)
  [[ $mhz =~ ^[1-9][0-9]*(\.[0-9]+)?$ ]] || return 0
  printf 'tsc_early_khz=%d tsc=reliable clocksource=tsc' "$(awk -v m="$mhz" 'BEGIN { printf "%d", m * 1000 }')"
}

# guest_cpus: the guest's vCPU count: LAB_CPUS if set (misuse unless a
# whole number from 1 to this host's cores), else LAB_DEFAULT_CPUS (set by
# the command: 2 for a lab that stays up, else 1), capped at the cores.
# Under TCG each vCPU is a host thread (thread=multi): more vCPUs than cores
# only time-slice them. One vCPU boots fastest; two let a busy-polling
# process and rxe's kernel work (or the other side of a ping-pong) run at
# once (docs/lab.md, "How many vCPUs").
guest_cpus() {
  local cores want=${LAB_DEFAULT_CPUS:-1}
  cores=$(nproc 2>/dev/null || echo 1)
  if [[ -n ${LAB_CPUS:-} ]]; then
    if [[ ! $LAB_CPUS =~ ^[1-9][0-9]*$ ]] || ((LAB_CPUS > cores)); then
      misuse "LAB_CPUS must be a whole number of vCPUs from 1 to this host's $cores cores, not '$LAB_CPUS'"
    fi
    echo "$LAB_CPUS"
    return
  fi
  ((want <= cores)) || want=$cores
  echo "$want"
}

# qemu_base_args LAB ROLE RUNDIR: the qemu arguments every guest shares,
# NUL-separated (read them with mapfile -d ''). LAB is prepare_lab's three
# lines; ROLE is a or b; RUNDIR/share is the per-run share.
qemu_base_args() {
  local kernel initramfs accel role=$2 rundir=$3
  { read -r kernel && read -r initramfs && read -r accel; } <<<"$1"
  local accel_words args cpus
  mapfile -d '' -t accel_words < <(accel_args "$accel")
  cpus=$(guest_cpus)
  args=(
    -nodefaults -no-user-config -display none -no-reboot
    "${accel_words[@]}" -smp "$cpus" -m 1024M -kernel "$kernel" -initrd "$initramfs"
    # quiet: the console is a slow serial port. acpi=off: skips ACPI
    # table parsing and IRQ link setup (-0.4 s), nothing here needs it.
    # panic=-1 reboot=t: a panic or a reboot ends qemu at once.
    # cryptomgr.notests and the initcall_blacklist skip the slowest
    # boot-time self-tests (crypto algorithms: 175 ms, the SP800-108
    # KDF: 115 ms) and kprobe tracing setup (55 ms), per initcall_debug.
    # guest_clock_args: a nanosecond clock (see there).
    -append "console=ttyS0 quiet acpi=off panic=-1 reboot=t $KERNEL_SKIPS $(guest_clock_args) lab.role=$role ${LAB_KERNEL_ARGS:-}"
    # The host's root, read-only; multidevs=remap keeps inode numbers
    # unique across the host's mounts.
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
    -virtfs "local,path=$CHECKOUT,mount_tag=checkout,security_model=none,readonly=on,multidevs=remap"
    # The per-run share: guest.sh, the command, the conf. Read-only: the
    # host writes there, so the guest must not plant symlinks in it.
    -virtfs "local,path=$rundir/share,mount_tag=labrun,security_model=none,readonly=on"
  )
  if [[ -e /usr/share/qemu/qboot.rom ]]; then
    args+=(-bios /usr/share/qemu/qboot.rom)
  fi
  printf '%s\0' "${args[@]}"
}

# start_guest SECS QEMU_ARGS...: start qemu under `timeout SECS`, in the
# background; its PID is then in $!. In the background because `wait` can
# be interrupted by Ctrl-C, a foreground child could not (timeout runs in
# its own process group, so the terminal's Ctrl-C never reaches it).
# The caller redirects the fds. qemu has no option to end with its parent,
# so setpriv --pdeathsig (util-linux) asks the kernel for it: timeout dies
# with lab.sh and qemu with timeout, even when lab.sh is killed by SIGKILL
# and can run no trap (else qemu ran on until SECS). NO_ORPHAN closes the
# window prctl(2) warns of: a parent that died before the death signal was
# set.
start_guest() {
  local parent=$BASHPID # this shell's, read before the fork
  # shellcheck disable=SC2016 # expanded by that sh, whose $$ timeout becomes
  setpriv --pdeathsig KILL sh -c '[ "$PPID" = "$0" ] || exit 125
    secs=$1 no_orphan=$2
    shift 2
    exec timeout -k 5 "$secs" setpriv --pdeathsig KILL sh -c "$no_orphan" $$ qemu-system-x86_64 "$@"' \
    "$parent" "$1" "$NO_ORPHAN" "${@:2}" &
}

# NO_ORPHAN: run under setpriv --pdeathsig as `sh -c "$NO_ORPHAN" PPID CMD
# ARGS...`, it runs CMD only if its parent is still PPID now that its death
# signal is set; had PPID died first, CMD would be an orphan nothing ends.
# shellcheck disable=SC2016 # expanded by that sh
readonly NO_ORPHAN='[ "$PPID" = "$0" ] || exit 125; exec "$@"'

# guest_result LOG QEMU_STATUS SECS [ROLE QEMU_LOG]: print the guest's exit
# status, read from its console LOG. A guest that gave none ends 124 if it
# timed out after SECS, else 125; then say why on stderr (naming ROLE and
# showing QEMU_LOG, if given) with the console's last lines.
guest_result() {
  local log=$1 qemu_status=$2 secs=$3 role=${4:-} qemu_log=${5:-} status reason
  status=$(tr -d '\r' <"$log" | sed -n 's/^LAB_EXIT_STATUS=\([0-9]*\)$/\1/p' | tail -n 1)
  if [[ -n $status ]]; then
    echo "$status"
    return
  fi
  [[ -z $role ]] || echo "lab.sh: guest $role:" >&2
  # || true: head may end the pipe before sed and tr are done (SIGPIPE).
  reason=$(tr -d '\r' <"$log" | sed -n 's/^LAB_SETUP_FAILED: //p' | head -n 1) || true
  if [[ $qemu_status == "$STATUS_TIMEOUT" ]]; then
    echo "lab.sh: timed out after ${secs} s; guest killed (raise --timeout?)" >&2
  elif [[ -n $reason ]]; then
    echo "lab.sh: guest setup failed: $reason" >&2
  else
    echo "lab.sh: the guest failed to boot or stopped early (qemu status $qemu_status)" >&2
  fi
  echo "---- last lines of the guest console ($log) ----" >&2
  tail -n 25 "$log" | tr -d '\r' >&2
  echo "----" >&2
  [[ -z $qemu_log ]] || sed 's/^/qemu: /' "$qemu_log" >&2
  if [[ $qemu_status == "$STATUS_TIMEOUT" ]]; then
    echo "$STATUS_TIMEOUT"
  else
    echo "$STATUS_LAB_FAILED"
  fi
}
