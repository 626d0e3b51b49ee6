#!/bin/sh
# lab_guest.sh: the Soft-RoCE lab guest's PID 1 (after the initramfs /init).
#
# Runs under the initramfs's busybox sh, inside the throw-away qemu guest that
# scripts/lab.sh boots; lab.sh copies it into the per-run share, which the
# guest sees read-only at /lab. It never runs on the host.
#
#   1. mount the host's root read-only at /newroot, the host's /tmp and
#      /var/tmp under a tmpfs that takes the guest's writes, tmpfs on /run,
#      the kernel filesystems, and the checkout at its host path;
#   2. make /lib/modules of the guest's kernel visible in /newroot, so that
#      the host's modprobe works there;
#   3. bring up the netdev (dummy0, or eth0 in pair mode) and rxe0 through
#      scripts/setup_rxe.sh, then wait for PORT_ACTIVE;
#   4. run /lab/<role>.cmd (written by lab.sh) chrooted into /newroot, with
#      its stdout on ttyS1 and stderr on ttyS2 (lab.sh streams both to the
#      host), or an interactive shell on the console;
#   5. print "LAB_EXIT_STATUS=<n>" on the console (lab.sh parses it), power off.
#
# /lab/<role>.conf (shell variable assignments, written by lab.sh) says what
# to do; <role> is "a" or "b" and comes from the kernel command line.

export PATH=/bin:/sbin

say() { echo "lab-guest: $*"; }

# A timestamped line on the console, for docs/lab.md's boot-time table.
mark() {
  [ "$MODE" = shell ] && return # keep the learner's screen calm
  read -r up _ </proc/uptime
  echo "lab-guest: ${up} s: $*"
}

# Report a setup failure to lab.sh and power off.
die() {
  echo "LAB_SETUP_FAILED: $*"
  finish
}

# Power off; qemu runs with -no-reboot, so a reboot ends it.
# watch_ready: copy stdin to stdout line by line; at the first line that
# contains $READY, create /pair/a.ready (guest b waits for it).
watch_ready() {
  seen=
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line"
    if [ -z "$seen" ]; then
      case $line in *"$READY"*)
        touch /pair/a.ready
        seen=1
        ;;
      esac
    fi
  done
}

finish() {
  sync
  reboot -f
  sleep 10
}

role=a
read -r cmdline </proc/cmdline
for word in $cmdline; do
  case "$word" in
    lab.role=*) role=${word#lab.role=} ;;
  esac
done
# shellcheck source=/dev/null
. "/lab/$role.conf" || die "cannot read /lab/$role.conf"
# From $role.conf: MODE (run|shell|pair), CHECKOUT, NETDEV, ADDR, in
# shell mode ROWS and COLS (the host terminal's size, if known), and in
# pair mode READY (lab.sh pair --ready TEXT, if given).

mark "initramfs done, per-run share mounted"

# writable DIR [MODE]: the host's /newroot/DIR, read-only, under a tmpfs
# that takes the guest's writes (overlayfs). The guest sees the host's files
# and nothing it writes reaches the host. MODE: of DIR's top, default 755.
writable() {
  mkdir -p "/overlay/$1/upper" "/overlay/$1/work"
  chmod "${2:-755}" "/overlay/$1/upper"
  mount -t overlay -o "lowerdir=/newroot/$1,upperdir=/overlay/$1/upper,workdir=/overlay/$1/work" \
    overlay "/newroot/$1"
}

# 1. The host's root, read-only, cached (it does not change under us).
ninep="trans=virtio,version=9p2000.L,msize=262144"
mkdir -p /newroot
mount -t 9p -o "$ninep,ro,cache=loose" hostroot /newroot ||
  die "cannot mount the host's root (9p tag hostroot)"
modprobe overlay || die "cannot load overlay"
mkdir -p /overlay
mount -t tmpfs tmpfs /overlay
# /tmp and /var/tmp: the host's files are there too, so that
# `lab.sh run -- bash /tmp/x.sh` finds x.sh.
for dir in tmp var/tmp; do
  writable "$dir" 1777 || die "cannot put an overlay on /$dir"
done
mount -t tmpfs -o mode=1777 tmpfs /newroot/run || die "cannot mount tmpfs on /run"
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
# devtmpfs lacks these; bash's <(...) and many scripts need /dev/fd.
ln -s /proc/self/fd /newroot/dev/fd
ln -s /proc/self/fd/0 /newroot/dev/stdin
ln -s /proc/self/fd/1 /newroot/dev/stdout
ln -s /proc/self/fd/2 /newroot/dev/stderr
mount -t devpts -o ptmxmode=0666 devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm
mkdir -p /newroot/tmp/home
mount -t tmpfs tmpfs /newroot/tmp/home
mkdir -p /newroot/run/lab
mount -o bind /lab /newroot/run/lab

# The checkout has its own share, so it is there even under /tmp. A lab
# that stays up (MODE=up) must see the host's rebuilt lessons at once: no
# cache there; a throw-away guest caches (nothing changes during its run).
checkout_cache=,cache=loose
[ "$MODE" = up ] && checkout_cache=
mkdir -p "/newroot$CHECKOUT" 2>/dev/null
mount -t 9p -o "$ninep,ro$checkout_cache" checkout "/newroot$CHECKOUT" ||
  die "cannot mount the checkout at $CHECKOUT"
# MODE=up: the one host folder the guest may write, at its host path.
if [ -n "${XFER:-}" ]; then
  mkdir -p "/newroot$XFER" 2>/dev/null
  mount -t 9p -o "$ninep" labxfer "/newroot$XFER" || die "cannot mount the lab's xfer folder at $XFER"
fi

# libibverbs opens every provider's .driver file it finds (17 on Debian) at
# each program's start; the guest has rxe alone, and a start costs 25% less
# when it reads only that one.
if [ -r /newroot/etc/libibverbs.d/rxe.driver ]; then
  cp /newroot/etc/libibverbs.d/rxe.driver /overlay/rxe.driver
  mount -t tmpfs -o mode=755 tmpfs /newroot/etc/libibverbs.d &&
    cp /overlay/rxe.driver /newroot/etc/libibverbs.d/rxe.driver
fi

mark "host root and checkout mounted"

# 2. /lib/modules: the host has none (or another kernel's). Put a tmpfs
# overlay on /usr/lib and bind the initramfs's module tree (the modules the
# lab needs, with their modules.dep) into it, so that `modprobe rdma_rxe` in
# the chroot loads for real. /lib is a symlink to usr/lib on merged-/usr hosts.
kver=$(uname -r)
modules_dir=usr/lib
[ -L /newroot/lib ] || modules_dir=lib
if ! writable "$modules_dir" ||
  ! mkdir -p "/newroot/$modules_dir/modules/$kver" ||
  ! mount -o bind "/lib/modules/$kver" "/newroot/$modules_dir/modules/$kver"; then
  say "no /lib/modules in the chroot: modprobe will not work there"
fi

mark "/lib/modules in place"

# 3. Network and RDMA. crc32_generic first: rdma_rxe asks for crc32 through
# the kernel, which cannot always find modprobe (7.x has no such module:
# crc32 is a library there, linked in). The rdma_cm stack is loaded for the
# lessons that use librdmacm; rdma_rxe itself is left to setup_rxe.sh's
# modprobe.
[ -z "$(find "/lib/modules/$(uname -r)" -name 'crc32_generic.ko*')" ] ||
  modprobe crc32_generic || die "cannot load crc32_generic"
modprobe -a ib_core ib_uverbs rdma_ucm || die "cannot load the RDMA modules"
mark "RDMA modules loaded"
ip link set lo up
if [ "$NETDEV" = dummy0 ]; then
  # numdummies=0: no automatic dummy0, we create ours explicitly.
  modprobe dummy numdummies=0 || die "cannot load dummy"
  ip link add dummy0 type dummy || die "cannot create dummy0"
else
  modprobe virtio_net || die "cannot load virtio_net"
fi
ip addr add "$ADDR" dev "$NETDEV" || die "cannot give $NETDEV the address $ADDR"
ip link set "$NETDEV" up || die "cannot bring $NETDEV up"
# The peer's neighbour entry, permanent: no ARP on the cable, so that the
# first RoCE packet of a run never waits for one (in a pair that stays up,
# an entry gone stale between runs delayed it past the QP's timeout).
if [ -n "${PEER:-}" ]; then
  # busybox: arp -s makes a permanent entry (its ip has no "neigh replace").
  arp -i "$NETDEV" -s "$PEER" "$PEER_MAC" ||
    die "cannot add the neighbour entry of $PEER"
fi

# No limit on locked memory (ibv_reg_mr pins pages): the guest is ours.
# shellcheck disable=SC3045 # busybox sh has ulimit -l
ulimit -l unlimited

chroot_env="env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp/home LAB=1"
# shellcheck disable=SC2016 # $1 and $2 expand in the chroot's sh
$chroot_env chroot /newroot /bin/sh -c '
    cd "$1" || exit 1
    if [ -x scripts/setup_rxe.sh ]; then
        exec scripts/setup_rxe.sh up "$2"
    fi
    # setup_rxe.sh not written yet: do its job by hand.
    modprobe rdma_rxe && rdma link add rxe0 type rxe netdev "$2"
' sh "$CHECKOUT" "$NETDEV" || die "rxe setup on $NETDEV failed"

mark "setup_rxe.sh done"
state=/sys/class/infiniband/rxe0/ports/1/state
tries=0
until grep -q ACTIVE "$state" 2>/dev/null; do
  tries=$((tries + 1))
  [ "$tries" -le 100 ] || die "rxe0 did not become PORT_ACTIVE in 10 s"
  sleep 0.1
done

mark "rxe0 ACTIVE"

# 4. In pair mode, b starts its command only once a has started its own.
# /lab is read-only; the guests share one writable folder, /pair.
if [ "$MODE" = pair ]; then
  mkdir -p /pair
  mount -t 9p -o "$ninep" labpair /pair || die "cannot mount the pair share (9p tag labpair)"
  if [ "$role" = a ]; then
    touch /pair/a.started || die "cannot write /pair/a.started"
  else
    # With READY (lab.sh pair --ready TEXT), a's command must also have
    # printed a line containing TEXT: its server listens.
    wanted=/pair/a.started
    [ -z "${READY:-}" ] || wanted=/pair/a.ready
    tries=0
    until [ -e "$wanted" ]; do
      # a writes a.done when its command has ended (before it powers off);
      # lab.sh creates a.exited when guest a's qemu has ended.
      [ ! -e /pair/a.done ] || die "a's command ended without printing a line with '$READY'"
      [ ! -e /lab/a.exited ] || die "guest a stopped before starting its command"
      tries=$((tries + 1))
      [ "$tries" -le 1200 ] || die "guest a did not start its command (or print '${READY:-}') in 120 s"
      sleep 0.1
    done
  fi
fi

if [ "$MODE" = up ]; then
  # A lab that stays up: qemu's guest agent on its virtio-serial port runs
  # the host's commands (scripts/lab/agent.py) until the host stops qemu.
  modprobe virtio_console || die "cannot load virtio_console"
  port=
  tries=0
  while [ -z "$port" ]; do
    for p in /sys/class/virtio-ports/*; do
      [ "$(cat "$p/name" 2>/dev/null)" = org.qemu.guest_agent.0 ] && port=${p##*/}
    done
    tries=$((tries + 1))
    [ -n "$port" ] || [ "$tries" -le 50 ] || die "no virtio-serial port org.qemu.guest_agent.0"
    [ -n "$port" ] || sleep 0.1
  done
  mkdir -p /newroot/run/lab-exec /newroot/run/qga
  mark "guest agent starting on /dev/$port"
  $chroot_env chroot /newroot /usr/sbin/qemu-ga -m virtio-serial -p "/dev/$port" \
    -t /run/qga -f /run/qga/qemu-ga.pid </dev/null >/dev/console 2>&1
  status=$?
elif [ "$MODE" = shell ]; then
  # The host terminal's size, so that editors and less fill the window.
  [ -n "${ROWS:-}" ] && stty -F /dev/ttyS0 rows "$ROWS" cols "$COLS"
  # cttyhack gives the shell the console as its controlling terminal,
  # so that Ctrl-C and job control work.
  setsid cttyhack chroot /newroot /bin/bash "/run/lab/$role.cmd"
  status=$?
else
  # raw: no \n -> \r\n translation, the host gets the bytes as written.
  stty -F /dev/ttyS1 raw -echo
  stty -F /dev/ttyS2 raw -echo
  if [ "$MODE" = pair ] && [ "$role" = a ] && [ -n "${READY:-}" ]; then
    # a's stdout passes through watch_ready, which tells b when READY shows.
    mkfifo /a-stdout.fifo || die "cannot make /a-stdout.fifo"
    watch_ready </a-stdout.fifo >/dev/ttyS1 &
    watcher=$!
    env -i chroot /newroot /bin/bash "/run/lab/$role.cmd" \
      </dev/null >/a-stdout.fifo 2>/dev/ttyS2
    status=$?
    wait "$watcher"
    touch /pair/a.done
  else
    env -i chroot /newroot /bin/bash "/run/lab/$role.cmd" \
      </dev/null >/dev/ttyS1 2>/dev/ttyS2
    status=$?
  fi
  # stty waits for the ports to drain: nothing is lost at power-off.
  stty -F /dev/ttyS1 raw
  stty -F /dev/ttyS2 raw
fi

mark "command done"

# 5. lab.sh reads this line from the console log.
echo
echo "LAB_EXIT_STATUS=$status"
finish
