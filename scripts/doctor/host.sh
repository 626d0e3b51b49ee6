# shellcheck shell=bash
# host.sh: the checks that need no RDMA device: packages, memlock, lab,
# accel, kernel.

# The packages a lesson needs to build and run, and what each gives.
readonly NEEDED_PACKAGES="g++ make pkg-config libibverbs-dev librdmacm-dev ibverbs-providers ibverbs-utils iproute2"
# Wanted for tests, tools and the lab, not for a lesson to run.
readonly WANTED_PACKAGES="rdmacm-utils perftest bats bats-assert kmod"

# missing_packages "PKG...": the ones dpkg does not have installed, one a
# line (one dpkg-query for all: each program costs time in the lab's guest).
missing_packages() {
  local p status names
  declare -A ok=()
  read -r -a names <<<"$1"
  while read -r p status; do
    [[ $status == *"ok installed" ]] && ok[$p]=1
  done < <(dpkg-query -W -f='${Package} ${Status}\n' "${names[@]}" 2>/dev/null)
  for p in "${names[@]}"; do
    [[ -n ${ok[$p]:-} ]] || echo "$p"
  done
}

check_packages() {
  local missing wanted
  if ! command -v dpkg-query >/dev/null; then
    report WARN packages "dpkg-query: not found, so the packages cannot be checked" \
      "not a Debian or Ubuntu system" \
      "install the equivalents of: $NEEDED_PACKAGES (scripts/install_deps.sh lists them)"
    return
  fi
  local p
  missing='' wanted=''
  for p in $(missing_packages "$NEEDED_PACKAGES $WANTED_PACKAGES"); do
    if [[ " $NEEDED_PACKAGES " == *" $p "* ]]; then missing+="$p "; else wanted+="$p "; fi
  done
  if [[ -n $missing ]]; then
    local why="the lessons cannot build or run without them"
    [[ $missing == *ibverbs-providers* ]] && why+="; without ibverbs-providers (librxe and the other providers) ibv_devices lists nothing"
    report FAIL packages "dpkg-query: not installed: ${missing% }" "$why" "make deps (scripts/install_deps.sh; needs root: it uses sudo)"
  elif [[ -n $wanted ]]; then
    report WARN packages "dpkg-query: not installed: ${wanted% }" "the tests, rping and perftest need them" "make deps (scripts/install_deps.sh; needs root: it uses sudo)"
  else
    report OK packages "dpkg-query: every package the lessons need is installed ($NEEDED_PACKAGES)"
  fi
}

readonly CAP_IPC_LOCK=14 # bit 14 of CapEff: the limit does not apply
# Measured in the lab as a user without CAP_IPC_LOCK: lesson 11's bw test
# fails with ENOMEM at 64 KiB, its 1 MiB sweep (-a) at 1024 KiB, and both
# pass at 4096 KiB; lessons 4 to 9 register a few pages and fit in 64 KiB.
readonly MEMLOCK_NEED_KB=4096
readonly DOCKER_MEMLOCK_KB=64 # Docker's default soft limit

# memlock_kb LIMITS_FILE: the soft "Max locked memory" in KiB, or "unlimited".
memlock_kb() {
  local line soft=''
  while IFS= read -r line; do
    [[ $line == "Max locked memory"* ]] && read -r _ _ _ soft _ <<<"$line"
  done 2>/dev/null <"$1"
  [[ -n $soft ]] || return 1
  [[ $soft == unlimited ]] && echo unlimited || echo $((soft / 1024))
}

# has_ipc_lock STATUS_FILE: CAP_IPC_LOCK is in this process's effective set.
has_ipc_lock() {
  local line
  while IFS= read -r line; do
    [[ $line == CapEff:* ]] || continue
    (((0x${line##*[[:space:]]} >> CAP_IPC_LOCK) & 1)) && return 0
  done 2>/dev/null <"$1"
  return 1
}

# check_memlock LIMITS_FILE STATUS_FILE
check_memlock() {
  local kb
  if ! kb=$(memlock_kb "$1"); then
    report WARN memlock "$1: no 'Max locked memory' line" "this /proc does not say; ibv_reg_mr may fail with ENOMEM" "ulimit -l (to see it)"
    return
  fi
  if [[ $kb == unlimited ]]; then
    report OK memlock "$1: locked memory unlimited (ulimit -l): ibv_reg_mr of any size"
  elif has_ipc_lock "$2"; then
    report OK memlock "$1: locked memory ${kb} KiB, but this process has CAP_IPC_LOCK (root), which bypasses it"
  elif ((kb < MEMLOCK_NEED_KB)); then
    # The fix names this account (bash's prompt escape \u: the user's
    # name), not '*', which is every account on the host.
    local me='\u'
    me=${SUDO_USER:-${me@P}}
    local where="ulimit -l unlimited (if ulimit -H -l allows it; else as root: '$me - memlock unlimited' in /etc/security/limits.d/rdma-workbook.conf, for this account alone, then log in again)"
    ((kb <= DOCKER_MEMLOCK_KB)) && where+="; in Docker: docker run --ulimit memlock=-1"
    report FAIL memlock "$1: locked memory ${kb} KiB (ulimit -l), under the ${MEMLOCK_NEED_KB} KiB lesson 11 pins" \
      "registered memory is pinned and counts against this limit: ibv_reg_mr fails with ENOMEM beyond it (lesson 11, make bench; on some providers ibv_create_cq and ibv_create_qp too)" \
      "$where"
  else
    report OK memlock "$1: locked memory ${kb} KiB (ulimit -l): enough for every lesson's registrations"
  fi
}

check_lab() {
  local missing=() t bb
  [[ $(uname -m) == x86_64 ]] || {
    report WARN lab "uname -m: $(uname -m); the lab boots Debian's amd64 kernel" "scripts/lab.sh needs an x86_64 host" "use a host whose kernel has RDMA (docs/soft-roce.md)"
    return
  }
  # What scripts/lab.sh itself looks for (check_host; up: qemu-ga), on
  # PATH and in /usr/sbin and /sbin, as lab.sh does.
  local PATH=$PATH:/usr/sbin:/sbin
  for t in qemu-system-x86_64 busybox cpio modprobe depmod python3 qemu-ga; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  if ((${#missing[@]})); then
    report FAIL lab "PATH: not found: ${missing[*]}" "scripts/lab.sh (make tour, make check where there is no RDMA) needs them" "make deps (packages qemu-system-x86 busybox-static cpio kmod python3 qemu-guest-agent; needs root: it uses sudo)"
    return
  fi
  bb=$(command -v busybox)
  if ldd "$bb" >/dev/null 2>&1; then
    report FAIL lab "ldd $bb: dynamically linked" "the lab's initramfs needs a static busybox" "sudo apt install busybox-static"
    return
  fi
  report OK lab "PATH: qemu-system-x86_64, busybox (static), cpio, modprobe, depmod, python3, qemu-ga: scripts/lab.sh can boot a guest and run commands in it"
}

check_accel() {
  local verdict=''
  [[ -r $LAB_CACHE/accel ]] && verdict=$(rd "$LAB_CACHE/accel")
  if [[ $verdict == kvm ]]; then
    report OK accel "$LAB_CACHE/accel: kvm (probed): lab guests run at native speed"
  elif [[ $verdict == tcg ]]; then
    report OK accel "$LAB_CACHE/accel: tcg (KVM was probed and hangs or is absent): lab guests are emulated, about ten times slower; delete that file to probe again"
  elif [[ -r $DEV_ROOT/kvm && -w $DEV_ROOT/kvm ]]; then
    report OK accel "$DEV_ROOT/kvm: readable and writable; scripts/lab.sh probes it once, then uses KVM or TCG"
  else
    report OK accel "$DEV_ROOT/kvm: absent or not ours: lab guests will run under TCG (emulated, about ten times slower than KVM)"
  fi
}

# check_kernel: does this kernel have RDMA? True if the device checks apply.
check_kernel() {
  local mods=() m file
  for m in ib_core ib_uverbs rdma_ucm rdma_rxe; do
    [[ -d $SYSFS_ROOT/module/$m ]] && mods+=("$m")
  done
  if [[ -d $SYSFS_ROOT/class/infiniband ]]; then
    report OK kernel "$SYSFS_ROOT/class/infiniband exists; loaded: ${mods[*]:-none}"
    return 0
  fi
  if file=$(modinfo -F filename rdma_rxe 2>/dev/null) && [[ -n $file ]]; then
    report FAIL kernel "modinfo rdma_rxe: $file, but $SYSFS_ROOT/class/infiniband is absent" \
      "rdma_rxe (Soft-RoCE) is there but not loaded, and no RDMA device is set up" \
      "sudo scripts/setup_rxe.sh up (loads it and adds rxe0; needs root)"
    return 1
  fi
  report WARN kernel "$SYSFS_ROOT/class/infiniband absent, modinfo rdma_rxe: not found: this kernel ($(uname -r)) has no RDMA" \
    "containers, WSL2, CI runners and cloud kernels often lack it (Ubuntu: linux-modules-extra-\$(uname -r); Debian: the generic, not -cloud, kernel); the lessons run in the lab instead" \
    "make tour (every lesson in a lab guest), or scripts/lab.sh shell (docs/lab.md)"
  return 1
}
