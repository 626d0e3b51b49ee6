#!/usr/bin/env bats
# tests/doctor.bats - what each of scripts/doctor.sh's checks reports, on a
# fake system.
#
# Runs on any host: rdma, ibv_devinfo, ip, dpkg-query, nft, ... are stubs
# (tests/helpers/doctor_stubs/, on top of setup_rxe's tests/helpers/stubs/),
# sysfs, /proc and /dev are fake trees built per test. Each check is one
# function; most tests call it alone (doctor_check), a few run the whole
# script. The same doctor against real breakages in a lab guest:
# tests/doctor_lab.bats.

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  load helpers/doctor
  doctor_setup
}

# --- the script: help, misuse, the summary -----------------------------------

@test "-h lists every check the doctor has, and exits 0" {
  local parts name
  run -0 doctor -h
  parts=$(cat "$DOCTOR_SCRIPTS"/doctor/*.sh)
  # Every check_NAME function in the parts is listed by NAME in the help.
  while read -r name; do
    assert_line --regexp "^  $name +"
  done < <(grep -oE '^check_[a-z_]+' <<<"$parts" | sed 's/^check_//')
  assert_output --partial "--device DEV"
  assert_output --partial "--peer HOST"
}

@test "an unknown argument is misuse: one line on stderr, exit 2, nothing checked" {
  run -2 --separate-stderr doctor --fix
  # shellcheck disable=SC2154 # set by Bats' run --separate-stderr
  assert_equal "$stderr" "doctor.sh: unknown argument '--fix'; see scripts/doctor.sh -h"
  assert_output ""
  assert_equal "$(cat "$STUB_LOG")" ""
}

@test "--peer takes an IP address, not a host name: exit 2" {
  run -2 --separate-stderr doctor --peer server.example
  assert_equal "$stderr" "doctor.sh: --peer needs an IP address (rdma_cm takes no names), not 'server.example'; see scripts/doctor.sh -h"
}

@test "on a host whose kernel has no RDMA it says so, points to the lab and make tour, checks the rest and exits 0" {
  rm -r "$SYSFS_ROOT/class/infiniband"
  run -0 doctor
  assert_line --regexp "^WARN  kernel .*this kernel \(6\.1\.0-test-amd64\) has no RDMA.*fix: make tour .*scripts/lab.sh shell"
  assert_line --regexp "^OK    packages "
  assert_line --regexp "^OK    memlock "
  assert_line --regexp "^OK    lab "
  assert_line --regexp "^SKIP  devices   this kernel has no RDMA$"
  assert_line "doctor: 17 checks: 4 OK, 1 WARN, 0 FAIL, 12 skipped: nothing failed"
}

@test "a healthy rxe host gets every check OK and exits 0" {
  given_lab_rxe
  run -0 doctor
  refute_line --regexp "^(WARN|FAIL|SKIP)"
  assert_line "doctor: 17 checks: 17 OK, 0 WARN, 0 FAIL, 0 skipped: nothing failed"
}

@test "one failed check makes the exit status 1 and the summary counts it" {
  given_lab_rxe
  fake_memlock 65536
  run -1 doctor
  assert_line --regexp "^FAIL  memlock "
  assert_line "doctor: 17 checks: 16 OK, 0 WARN, 1 FAIL, 0 skipped: fix each FAIL above, then run make doctor again"
}

@test "--device names a device that is not there: FAIL devices, naming the ones that are" {
  given_lab_rxe
  run -1 doctor --device mlx5_0
  assert_line "FAIL  devices   rdma link show: no device named mlx5_0; the devices here: rxe0; cause: --device names a device this host does not have; fix: scripts/doctor.sh --device rxe0"
}

# --- packages ------------------------------------------------------------------

@test "packages: all installed is OK, from one dpkg-query" {
  run -0 doctor_check check_packages
  assert_output --regexp "^OK    packages  dpkg-query: every package the lessons need is installed"
  assert_equal "$(ran_count dpkg-query)" 1
}

@test "packages: ibverbs-providers missing is a FAIL that names it, says why, and fixes with make deps" {
  FAKE_MISSING_PKGS="ibverbs-providers" run -0 doctor_check check_packages
  assert_output --regexp "^FAIL  packages  dpkg-query: not installed: ibverbs-providers; cause: .*ibv_devices lists nothing; fix: make deps"
}

@test "packages: only a test tool missing is a WARN" {
  FAKE_MISSING_PKGS="perftest bats" run -0 doctor_check check_packages
  assert_output --regexp "^WARN  packages  dpkg-query: not installed: perftest bats; .*fix: make deps"
}

@test "packages: without dpkg-query it says it cannot check, and lists what to install" {
  rm "$STUB_BIN/dpkg-query"
  run -0 doctor_check check_packages
  assert_output --regexp "^WARN  packages  dpkg-query: not found.*fix: install the equivalents of: g\+\+ make"
}

# --- memlock -------------------------------------------------------------------

@test "memlock: Docker's 64 KiB without CAP_IPC_LOCK is a FAIL with ENOMEM as the cause and the ulimit fix" {
  fake_memlock 65536
  run -0 doctor_check check_memlock "$PROC_ROOT/self/limits" "$PROC_ROOT/self/status"
  assert_output --regexp "^FAIL  memlock   .*/proc/self/limits: locked memory 64 KiB \(ulimit -l\), under the 4096 KiB lesson 11 pins; cause: .*ENOMEM.*; fix: ulimit -l unlimited .*docker run --ulimit memlock=-1$"
}

@test "memlock: the limits.conf fix is for the account that runs the doctor, never '*' (every account)" {
  fake_memlock 65536
  SUDO_USER=learner run -0 doctor_check check_memlock "$PROC_ROOT/self/limits" "$PROC_ROOT/self/status"
  assert_output --partial "'learner - memlock unlimited' in /etc/security/limits.d/rdma-workbook.conf, for this account alone"
  refute_output --partial "'*"
}

@test "memlock: a low limit is OK for a process with CAP_IPC_LOCK (root), which bypasses it" {
  fake_memlock 65536
  fake_capeff 000001ffffffffff
  run -0 doctor_check check_memlock "$PROC_ROOT/self/limits" "$PROC_ROOT/self/status"
  assert_output --regexp "^OK    memlock   .*locked memory 64 KiB, but this process has CAP_IPC_LOCK"
}

@test "memlock: Debian's default 8 MiB and unlimited are OK" {
  fake_memlock $((8192 * 1024))
  run -0 doctor_check check_memlock "$PROC_ROOT/self/limits" "$PROC_ROOT/self/status"
  assert_output --regexp "^OK    memlock   .*locked memory 8192 KiB"
  fake_memlock unlimited
  run -0 doctor_check check_memlock "$PROC_ROOT/self/limits" "$PROC_ROOT/self/status"
  assert_output --regexp "^OK    memlock   .*locked memory unlimited"
}

# --- lab, accel, kernel ----------------------------------------------------------

@test "lab: qemu missing is a FAIL with make deps as the fix" {
  rm "$STUB_BIN/qemu-system-x86_64"
  run -0 doctor_check check_lab
  assert_output --regexp "^FAIL  lab       PATH: not found: qemu-system-x86_64; .*fix: make deps"
}

@test "lab: python3 missing is a FAIL too: the lab's supervisor and exec client are Python" {
  rm "$STUB_BIN/python3"
  run -0 doctor_check check_lab
  assert_output --regexp "^FAIL  lab       PATH: not found: python3; .*python3 qemu-guest-agent"
}

@test "lab: the tools present is OK" {
  run -0 doctor_check check_lab
  assert_output --regexp "^OK    lab       PATH: qemu-system-x86_64, busybox \(static\), cpio, modprobe, depmod, python3, qemu-ga: "
}

@test "accel: the lab's cached verdict tcg is reported as TCG" {
  echo tcg >"$LAB_CACHE/accel"
  run -0 doctor_check check_accel
  assert_output --regexp "^OK    accel     .*/accel: tcg "
}

@test "kernel: rdma_rxe on disk but no RDMA class is a FAIL fixed by setup_rxe.sh up" {
  rm -r "$SYSFS_ROOT/class/infiniband"
  FAKE_MODULES=rdma_rxe run -1 doctor_check check_kernel
  assert_output --regexp "^FAIL  kernel    modinfo rdma_rxe: .*rdma_rxe.ko.*fix: sudo scripts/setup_rxe.sh up"
}

@test "kernel: the RDMA class present is OK and names the loaded modules" {
  fake_module_loaded ""
  run -0 doctor_check check_kernel
  assert_output --regexp "^OK    kernel    .*/class/infiniband exists; loaded: rdma_rxe$"
}

# --- devices, uverbs, rdma_cm ----------------------------------------------------

@test "devices: rdma_rxe loaded but no device (deleted) is a FAIL fixed by setup_rxe.sh up" {
  fake_module_loaded ""
  run -0 doctor_check check_devices "" ""
  assert_output --regexp "^FAIL  devices   rdma link show: no RDMA device, although rdma_rxe is loaded; cause: .*fix: sudo scripts/setup_rxe.sh up"
}

@test "devices: no device and no rdma_rxe module on disk is a FAIL that points to the lab" {
  run -0 doctor_check check_devices "" ""
  assert_output --regexp "^FAIL  devices   rdma link show: no RDMA device; modinfo rdma_rxe: not found; .*fix: make tour "
  FAKE_MODULES=rdma_rxe run -0 doctor_check check_devices "" ""
  assert_output --regexp "^FAIL  devices   .*rdma_rxe absent; .*fix: sudo scripts/setup_rxe.sh up "
}

@test "devices: rxe0 on dummy0 is OK, read from rdma link show" {
  given_lab_rxe
  local links
  links=$(doctor_check rdma_links "")
  assert_equal "$links" "rxe0/1 dummy0 ACTIVE LINK_UP"
  run -0 doctor_check check_devices "" "$links"
  assert_output "OK    devices   rdma link show: rxe0/1 on dummy0 (ACTIVE)"
  assert_ran "rdma link show"
}

@test "uverbs: a device but no /dev/infiniband/uverbs* (a container without them) is a FAIL" {
  run -0 doctor_check check_uverbs "rxe0/1 dummy0 ACTIVE LINK_UP"
  assert_output --regexp "^FAIL  uverbs    .*/dev/infiniband/uverbs\*: none; cause: .*fix: sudo modprobe ib_uverbs; in a container: docker run --device /dev/infiniband"
}

@test "rdma_cm: no /dev/infiniband/rdma_cm is a FAIL fixed by modprobe rdma_ucm" {
  run -0 doctor_check check_rdma_cm ""
  assert_output --regexp "^FAIL  rdma_cm   .*/dev/infiniband/rdma_cm: absent; .*fix: sudo modprobe rdma_ucm"
}

@test "rdma_cm: OK names the addresses rdma_cm can use, never 127.0.0.1" {
  given_lab_rxe
  run -0 doctor_check check_rdma_cm "rxe0/1 dummy0 ACTIVE LINK_UP"
  assert_output --regexp "^OK    rdma_cm   .*rdma_cm's addresses here: 192\.0\.2\.10 on dummy0 \(never 127\.0\.0\.1"
}

# --- netns, fork, firewall -------------------------------------------------------

@test "netns: another network namespace on a kernel before 7.1 is a WARN about rxe's socket" {
  ln -sf 'net:[4026532999]' "$PROC_ROOT/self/ns/net"
  run -0 doctor_check check_netns
  assert_output --regexp "^WARN  netns     .*not the initial namespace.*cause: before Linux 7\.1 rxe's UDP 4791 socket lives only in the initial namespace.*fix: .*--network host"
}

@test "netns: the same namespace on 7.3 is OK, and so is another one" {
  run -0 doctor_check check_netns
  assert_output --regexp "^OK    netns     rdma system show: netns shared; .* is the initial network namespace"
  ln -sf 'net:[4026532999]' "$PROC_ROOT/self/ns/net"
  FAKE_KERNEL=7.3.0-test run -0 doctor_check check_netns
  assert_output --regexp "^OK    netns     .*Linux 7\.3\.0-test \(7\.1 or later\)"
}

@test "fork: copy-on-fork off is a WARN with ibv_fork_init as the fix" {
  FAKE_RDMA_SYSTEM="netns shared copy-on-fork off" run -0 doctor_check check_fork
  assert_output --regexp "^WARN  fork      rdma system show: copy-on-fork off; .*fix: call ibv_fork_init\(\)"
}

@test "firewall: an nft rule dropping UDP 4791 is a FAIL whose fix deletes that rule by handle" {
  cat >"$FAKE_STATE/nft.ruleset" <<'EOF'
table inet filter { # handle 1
	chain input { # handle 1
		type filter hook input priority filter; policy accept;
		tcp dport 22 accept # handle 4
		udp dport 4791 drop # handle 7
	}
}
EOF
  run -0 doctor_check check_firewall
  assert_output "FAIL  firewall  nft -a list ruleset: table inet filter chain input: 'udp dport 4791 drop'; cause: this rule drops RoCE v2 (UDP 4791) or the lessons' exchange (TCP 18515): across hosts QPs end in IBV_WC_RETRY_EXC_ERR, rdma_cm in RDMA_CM_EVENT_UNREACHABLE; fix: sudo nft delete rule inet filter input handle 7"
}

@test "firewall: an iptables rule rejecting TCP 18515 is a FAIL whose fix deletes it" {
  rm "$STUB_BIN/nft"
  printf '%s\n' '*filter' ':INPUT ACCEPT [0:0]' '-A INPUT -p tcp -m tcp --dport 18515 -j REJECT --reject-with icmp-port-unreachable' 'COMMIT' >"$FAKE_STATE/iptables.rules"
  run -0 doctor_check check_firewall
  assert_output --regexp "^FAIL  firewall  iptables-save: table filter: '-A INPUT -p tcp -m tcp --dport 18515 -j REJECT.*fix: sudo iptables -t filter -D INPUT -p tcp -m tcp --dport 18515 -j REJECT --reject-with icmp-port-unreachable$"
}

@test "firewall: with neither nf_tables nor ip_tables loaded, nothing drops, and nft is not run (as root it would load nf_tables)" {
  rmdir "$SYSFS_ROOT/module/nf_tables"
  run -0 doctor_check check_firewall
  assert_output --regexp "^OK    firewall  .*neither nf_tables nor ip_tables is loaded, so no rule drops anything"
  refute_ran "nft"
  refute_ran "iptables-save"
}

@test "firewall: rules for other ports are OK; nft without root is a SKIP that says why" {
  printf '%s\n' 'table inet filter { # handle 1' '	chain input { # handle 1' '		udp dport 47910 drop # handle 3' '	}' '}' >"$FAKE_STATE/nft.ruleset"
  run -0 doctor_check check_firewall
  assert_output --regexp "^OK    firewall  nft -a list ruleset: no rule drops UDP 4791"
  FAKE_NFT_ERROR="Error: Could not process rule: Operation not permitted" run -0 doctor_check check_firewall
  assert_output --regexp "^SKIP  firewall  .*needs root \(sudo scripts/doctor.sh\)"
}

# --- verbs, port, netdev ---------------------------------------------------------

@test "verbs: a device libibverbs does not list (provider missing) is a FAIL with the reinstall fix" {
  given_lab_rxe
  FAKE_NO_PROVIDER=1 run -1 doctor_check check_verbs rxe0
  assert_output --regexp "^FAIL  verbs     ibv_devinfo -l: libibverbs does not list rxe0, which the kernel has .*0 provider libraries; cause: no user-space provider .*fix: sudo apt install --reinstall ibverbs-providers"
}

@test "verbs: a device libibverbs lists is OK" {
  given_lab_rxe
  run -0 doctor_check check_verbs rxe0
  assert_output "OK    verbs     ibv_devinfo -l: libibverbs lists rxe0 (its user-space provider loads)"
}

@test "port: DOWN under a netdev that is down is a FAIL fixed by ip link set up" {
  given_dummy0 --down
  run -0 doctor_check check_port rxe0 1 dummy0 DOWN DISABLED
  assert_output "FAIL  port      rdma link show: rxe0/1 state DOWN, physical_state DISABLED on dummy0; cause: the netdev under it, dummy0, is down: the port is DOWN with it and every lesson fails with 'port 1 is down, not ACTIVE'; fix: sudo ip link set dummy0 up"
}

@test "netdev: no IP address is a FAIL fixed by ip addr add" {
  fake_netdev dummy0
  run -0 doctor_check check_netdev dummy0
  assert_output --regexp "^FAIL  netdev    ip addr show dev dummy0: up, MTU 1500, but no IP address; cause: .*no IPv4-mapped GID.*fix: sudo ip addr add 192\.0\.2\.1/24 dev dummy0"
}

@test "netdev: down is a FAIL; up with an address is OK" {
  given_dummy0 --down
  run -0 doctor_check check_netdev dummy0
  assert_output --regexp "^FAIL  netdev    .*dummy0 is down; .*fix: sudo ip link set dummy0 up$"
  given_dummy0
  run -0 doctor_check check_netdev dummy0
  assert_output "OK    netdev    ip addr show dev dummy0: up, MTU 1500, 192.0.2.10/24"
}

# --- gid, mtu, caps (from ibv_devinfo -v) ----------------------------------------

@test "gid: the IPv4-mapped RoCE v2 entry is OK and says which -g the lessons pick" {
  given_lab_rxe
  run -0 doctor_check check_gid rxe0 1 dummy0 "$(devinfo_of rxe0)"
  assert_output "OK    gid       ibv_devinfo -v: rxe0/1 GID index 1 = ::ffff:192.0.2.10 (RoCE v2, IPv4-mapped): the one the lessons pick (-g 1)"
}

@test "gid: only the link-local entry (no IPv4 address) is a WARN fixed by ip addr add" {
  fake_netdev dummy0
  fake_rxe rxe0 dummy0
  run -0 doctor_check check_gid rxe0 1 dummy0 "$(devinfo_of rxe0)"
  assert_output --regexp "^WARN  gid       ibv_devinfo -v: rxe0/1 has no IPv4-mapped RoCE v2 GID \(1 in the table\); index 0 = fe80::.*fix: sudo ip addr add 192\.0\.2\.1/24 dev dummy0"
}

@test "gid: only RoCE v1 entries is a WARN; an empty table is a FAIL" {
  given_dummy0
  FAKE_GID_LAYOUT=v1only fake_rxe rxe0 dummy0
  run -0 doctor_check check_gid rxe0 1 dummy0 "$(devinfo_of rxe0)"
  assert_output --regexp "^WARN  gid       ibv_devinfo -v: rxe0/1 has only RoCE v1 GIDs"
  run -0 doctor_check check_gid rxe0 1 dummy0 "link_layer: Ethernet"
  assert_output --regexp "^FAIL  gid       ibv_devinfo -v: rxe0/1 has an empty GID table; .*fix: sudo ip link set dummy0 up; sudo ip addr add"
}

@test "mtu: active_mtu 4096 over a netdev MTU of 1500 is a FAIL fixed by raising the netdev's MTU" {
  given_lab_rxe
  FAKE_ACTIVE_MTU=4096 run -0 doctor_check check_mtu rxe0 1 dummy0 "$(FAKE_ACTIVE_MTU=4096 devinfo_of rxe0)"
  assert_output --regexp "^FAIL  mtu       dummy0 MTU 1500, but ibv_devinfo: rxe0/1 active_mtu 4096; .*fix: sudo ip link set dummy0 mtu 4176$"
}

@test "mtu: 1024 over 1500 is OK, as rxe's rule gives" {
  given_lab_rxe
  run -0 doctor_check check_mtu rxe0 1 dummy0 "$(devinfo_of rxe0)"
  assert_output "OK    mtu       dummy0 MTU 1500, ibv_devinfo: rxe0/1 active_mtu 1024, the largest IB MTU that fits (1500 - 80 bytes of headers)"
}

@test "caps: a device with fewer WRs than lesson 11 asks for is a WARN with a smaller --depth" {
  given_lab_rxe
  run -0 doctor_check check_caps rxe0 "$(FAKE_MAX_QP_WR=64 devinfo_of rxe0)"
  assert_output --regexp "^WARN  caps      ibv_devinfo -v: rxe0 max_qp_wr 64, max_sge 32.*fix: \./lesson11 --depth 64"
}

# --- route and connect (--peer) --------------------------------------------------

@test "route: --peer 127.0.0.1 is a FAIL: loopback is no RDMA netdev; the fix names the address to use" {
  given_lab_rxe
  run -1 doctor_check check_route 127.0.0.1 "rxe0/1 dummy0 ACTIVE LINK_UP"
  assert_output --regexp "^FAIL  route     --peer 127\.0\.0\.1: a loopback address; cause: .*ENODEV.*fix: \./lesson9 192\.0\.2\.10 2 3"
}

@test "route: a peer reached through a netdev without RDMA is a FAIL fixed by setup_rxe.sh up on it" {
  given_lab_rxe
  fake_netdev eth1 --ipv4 198.51.100.5
  FAKE_ROUTE_DEV=eth1 run -1 doctor_check check_route 198.51.100.7 "rxe0/1 dummy0 ACTIVE LINK_UP"
  assert_output --regexp "^FAIL  route     ip route get 198\.51\.100\.7: .*through eth1, which has no RDMA device .*fix: sudo scripts/setup_rxe.sh up eth1"
}

@test "route: this host's own address on the RDMA netdev is OK" {
  given_lab_rxe
  run -0 doctor_check check_route 192.0.2.10 "rxe0/1 dummy0 ACTIVE LINK_UP"
  assert_output "OK    route     ip route get 192.0.2.10: local 192.0.2.10 dev lo src 192.0.2.10 uid 0 (dummy0 carries an RDMA device)"
}

@test "connect: lesson 9's sum coming back is OK; nothing listening is a WARN; an rdma_cm error is a FAIL with lesson 9's hint" {
  # shellcheck disable=SC2016 # expanded by the stub lesson9 when it runs
  printf '#!/usr/bin/env bash\n%s\n' "${FAKE_LESSON9:-}" 'case $FAKE_L9 in ok) echo "result: 1 + 2 = 3" ;; rej) echo "lesson9: expected RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_REJECTED (reject reason 8: invalid service ID, nothing listens on that port)" >&2; exit 1 ;; *) echo "lesson9: expected RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_UNREACHABLE (status -110)" >&2; echo "lesson9: check: is UDP 4791 open?" >&2; exit 1 ;; esac' >"$CHECKOUT/lesson9"
  chmod +x "$CHECKOUT/lesson9"
  FAKE_L9=ok run -0 doctor_check check_connect 192.0.2.2
  assert_output --regexp "^OK    connect   \./lesson9 192\.0\.2\.2 1 2: connected through rdma_cm"
  FAKE_L9=rej run -0 doctor_check check_connect 192.0.2.2
  assert_output --regexp "^WARN  connect   .*REJECTED.*fix: on 192\.0\.2\.2: \./lesson9 --timeout 60"
  FAKE_L9=unreach run -0 doctor_check check_connect 192.0.2.2
  assert_output --regexp "^FAIL  connect   \./lesson9 192\.0\.2\.2 1 2: expected RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_UNREACHABLE \(status -110\); cause: is UDP 4791 open\?; fix: "
}

@test "transfer: rping's 8 KiB arriving is OK; no server is a WARN; connected then stalled is a FAIL naming the MTUs" {
  given_lab_rxe
  local links="rxe0/1 dummy0 ACTIVE LINK_UP"
  run -0 doctor_check check_transfer 192.0.2.2 "$links"
  assert_output "OK    transfer  rping -c -a 192.0.2.2 -S 8192 -C 1: the 8192-byte RDMA transfer completed (here: dummy0 MTU 1500)"
  assert_ran "rping -c -a 192.0.2.2 -S 8192 -C 1 -v -d"
  FAKE_RPING=rejected run -0 doctor_check check_transfer 192.0.2.2 "$links"
  assert_output --regexp "^WARN  transfer  .*rejected: no rping server there; .*fix: on 192\.0\.2\.2: rping -s -S 8192 -C 1, then"
  FAKE_RPING=stall run -0 doctor_check check_transfer 192.0.2.2 "$links"
  assert_output --regexp "^FAIL  transfer  rping -c -a 192\.0\.2\.2 -S 8192 -C 1: connected, but the 8192-byte transfer did not complete in 15 s \(here: dummy0 MTU 1500\); cause: the two hosts' MTUs differ.*fix: the same MTU on both hosts: sudo ip link set dummy0 mtu M"
}
