#!/usr/bin/env bash
# install_deps.sh - install what the workbook needs, only what is missing.
#
# On Debian and Ubuntu it installs the packages below with apt-get (through
# sudo when not root). Elsewhere it prints the list for your package manager.
# `make check`, `make tour` and `make capture` call it, so a fresh machine
# needs nothing else.
#
#   scripts/install_deps.sh        the workbook's packages
#   scripts/install_deps.sh site   what `make site` and tests/site.bats need (make site, make check)
set -euo pipefail

packages=(
  g++ make pkg-config git                 # build tools
  libibverbs-dev librdmacm-dev            # verbs and rdma_cm headers, libraries, man pages
  ibverbs-providers                       # librxe and the other user-space drivers
  ibverbs-utils rdmacm-utils perftest     # ibv_devinfo, rping, ib_send_lat: what the lessons are measured against
  iproute2 kmod                           # the `rdma` tool, modprobe/depmod
  bats bats-support bats-assert bats-file # the test suites
  shellcheck shfmt                        # the shell style test (tests/shell_style.bats)
  nftables                                # make doctor reads the firewall (nft list ruleset); tests/doctor_lab.bats breaks it
  liblsan0                                # lesson 12's leak test preloads gcc's LeakSanitizer runtime
  strace                                  # exercise 2.1's grader watches the kernel refuse; make bench counts doorbells
  gnuplot-nox                             # make bench's plots (PNG, no X)
  qemu-system-x86 busybox-static cpio     # the Soft-RoCE lab (scripts/lab.sh)
  xz-utils zstd                           # the lab unpacks Debian 12 (xz) and 13 (zstd) kernels
  python3-pyverbs                         # make lab-selftest: rdma-core's own tests (pyverbs)
  qemu-guest-agent python3                # the lab that stays up: lab.sh up/exec (scripts/lab/agent.py)
  tshark                                  # decoding captures (make capture)
  iperf3                                  # lesson 17: TCP beside RDMA over a lossy cable (scripts/maintainers/lossy_sweep.sh)
  man-db                                  # `man ibv_post_send`
)

# make site (scripts/site/build.sh) and its browser test (tests/site.bats).
site_packages=(
  mkdocs mkdocs-material python3-pymdownx   # the site generator, its theme and Markdown extensions
  chromium chromium-driver python3-selenium # tests/site.bats opens the site in headless Chromium
)
case ${1:-} in
  "") ;;
  site)
    packages=("${site_packages[@]}")
    # npm fetches Mermaid once (scripts/site/build.sh); Node.js from elsewhere may bring its own.
    command -v npm >/dev/null 2>&1 || packages+=(npm)
    ;;
  *)
    echo "install_deps.sh: unknown group '$1' (none, or: site)" >&2
    exit 2
    ;;
esac

missing=()
for p in "${packages[@]}"; do
  # dpkg-query prints "install ok installed" for an installed package.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done 2>/dev/null || true

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_deps.sh: not a Debian/Ubuntu system; install the equivalents of:" >&2
  echo "  ${packages[*]}" >&2
  exit 0
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install_deps.sh: missing packages and no sudo; as root run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  sudo=(sudo)
fi

echo "install_deps.sh: installing ${missing[*]}"
# qemu-guest-agent is for the lab's guests, which run it from this host's
# root; Debian's package would also start it on this host when this host is
# itself a VM with an agent channel, handing the hypervisor a way in that
# nobody asked for. There, it is masked before it is installed, and we say so.
if [[ " ${missing[*]} " == *" qemu-guest-agent "* && -e /dev/virtio-ports/org.qemu.guest_agent.0 ]] &&
  command -v systemctl >/dev/null 2>&1; then
  echo "install_deps.sh: qemu-guest-agent is for the lab's guests; this host is a VM with an agent channel, so its own agent is masked (not started here): undo with sudo systemctl unmask qemu-guest-agent"
  "${sudo[@]}" systemctl mask qemu-guest-agent.service >/dev/null
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
# --no-install-recommends keeps qemu from pulling in a desktop.
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
