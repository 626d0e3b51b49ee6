// lesson18.cpp - RDMA in containers: lesson 9's sum, each side in its own network namespace.
//
// Lesson 9 line for line (diff the two files), plus what a program in a
// container needs to know about where it stands. A container is a set of
// namespaces; the one that matters to RDMA is the NETWORK namespace: rdma_cm
// resolves addresses and routes in the caller's namespace, and a RoCE device
// sends and receives through a netdev, which lives in exactly one namespace.
// So before any RDMA resource the program
//   - enters a named namespace itself with setns(2), as `ip netns exec` does
//     (--netns NAME: /run/netns/NAME, made by `ip netns add NAME`);
//   - reports what it sees from there: its namespace, the RDMA subsystem's
//     netns mode (shared: every namespace lists every device; exclusive: only
//     the devices moved into it), the memlock limit, every device
//     ibv_get_device_list gives and each port's GIDs with the netdev each
//     belongs to, and whether that netdev is in this namespace.
// Then lesson 9's sum. Before Linux 7.1, rxe receives RoCE (UDP 4791) only in
// the initial namespace: the connect fails, and the program says why.
//
// Run it in the lab (Linux 7.3: LAB_KERNEL=trixie-backports scripts/lab.sh up),
// two namespaces joined by a veth pair, an rxe device on each end
// (lessons/18_netns/netns_pair.sh up makes them: ns_a 198.51.100.1, ns_b 198.51.100.2):
//     ./lesson18 --netns ns_a                        server, in ns_a
//     ./lesson18 --netns ns_b 198.51.100.1 2 3       client, in ns_b: "result: 2 + 3 = 5"
// Without --netns it runs in the namespace it was started in (a container's
// own, or `ip netns exec ns_b ./lesson18 ...`); on two hosts it is lesson 9.
// Both sides take -d DEV -p CM_PORT --timeout SECS, the server -b ADDR and
// -s BYTES (./lesson18 -h).
//
// Verbs it introduces:
//     ibv_get_device_list, ibv_query_gid_table (each GID with its netdev's
//     ifindex); setns(2) is not a verb, but it must come before the first one.
//     The rest is lesson 9's (librdmacm).
//
// Read more: man ibv_query_gid_table, man setns, man ip-netns, man rdma-system;
// docs/lesson18-netns.md (the two kernels, the container's other walls, exercises).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <endian.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "check.hpp"
#include "cm.hpp"
#include "completion.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "sum_protocol.hpp"

namespace {

// The wire format of the two messages, SumRequest and SumResponse, lives in
// common/sum_protocol.hpp (lessons 4 and 8 use it too): two fixed 16-byte
// structs, integers big-endian, and a status in the response so that the
// server can tell the client why it did not answer with a sum.

// The server's receive buffer is larger than a request, so that a message of
// the wrong length still lands and byte_len can tell us how long it was (a
// message larger than the whole buffer fails in the NIC instead, with
// IBV_WC_LOC_LEN_ERR on most NICs; rxe reports IBV_WC_LOC_QP_OP_ERR here and
// IBV_WC_REM_OP_ERR at the sender, see docs/lesson4-send-recv.md).
constexpr uint32_t kRecvBufferBytes = 64;
// -s makes the server's receive buffer larger, to meet a container's memlock
// limit: ibv_reg_mr pins every page of it (lesson 2).
constexpr int64_t kMaxRecvBytes = int64_t{1} << 30;
// The client can send up to this many bytes with -B, to play a misbehaving client.
constexpr uint32_t kMaxSendBytes = 128;

// wr_id: our own label for a work request, handed back in its completion.
constexpr uint64_t kRecvId = 1;
constexpr uint64_t kSendId = 2;

// Post one receive for a whole buffer: the NIC will put the next incoming
// SEND there. Written out so the reader sees every field.
void post_receive(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr),
        .length = length,  // the most the NIC may write; a longer SEND fails (IBV_WC_LOC_LEN_ERR on most NICs)
        .lkey = mr->lkey,  // proves to our NIC that this memory is registered
    };
    ibv_recv_wr wr = {.wr_id = kRecvId, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

// Post one signaled SEND of `length` bytes from the start of `mr`.
void post_send(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr),
        .length = length,
        .lkey = mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = kSendId,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,  // we want a completion: it says the peer's NIC acknowledged it
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

// How long one address or one route resolution may take, in milliseconds
// (the unit of rdma_resolve_addr and rdma_resolve_route): ARP on Ethernet, a
// path record query to the subnet manager on InfiniBand.
constexpr int kResolveTimeoutMs = 2000;

// 0a. Enter the network namespace /run/netns/NAME (what `ip netns exec NAME`
//     does): open its file, then setns(2), which moves this thread, and so
//     every socket and RDMA resource it makes from now on, into it. It needs
//     CAP_SYS_ADMIN. Nothing of RDMA may exist before: a device opened in
//     one namespace stays where it was opened.
void enter_netns(const std::string& name) {
    const std::string path = "/run/netns/" + name;
    const int fd = CHECK_ERRNO(open(path.c_str(), O_RDONLY | O_CLOEXEC),
                               "is there a namespace of that name? (ip netns list; ip netns add NAME)");
    CHECK_ERRNO(setns(fd, CLONE_NEWNET), "setns needs CAP_SYS_ADMIN: run as root, or start in it (ip netns exec)");
    CHECK_ERRNO(close(fd));
    std::printf("netns: entered %s (%s) with setns(2)\n", name.c_str(), path.c_str());
}

// "net:[4026531840]": a namespace of ours (/proc/self/ns/net) or PID 1's,
// which is the initial one on a host (a container's PID 1 is in the
// container's). Empty when it cannot be read (PID 1's needs root).
std::string namespace_of(const char* path) {
    char link[64] = {};
    return readlink(path, link, sizeof link - 1) > 0 ? link : "";
}

// The kernel's version as MAJOR * 100 + MINOR (uname -r: 6.1.0-57-amd64 is 601).
int kernel_version(std::string& release) {
    utsname u{};
    CHECK_ERRNO(uname(&u));
    release = u.release;
    int major = 0, minor = 0;
    std::sscanf(u.release, "%d.%d", &major, &minor);
    return major * 100 + minor;
}

// rxe's vendor_id (drivers/infiniband/sw/rxe: RXE_VENDOR_ID): Soft-RoCE.
constexpr uint32_t kRxeVendorId = 0xffffff;
// rxe opens a UDP 4791 socket in every network namespace from Linux 7.1;
// before, only in the initial one.
constexpr int kRxeNetnsKernel = 701;

// The name of the netdev behind GID `index` of DEV's `port` as sysfs has it
// (gid_attrs/ndevs: the name, wherever the netdev lives), or "".
std::string gid_netdev_name(const char* dev, uint32_t port, uint32_t index) {
    std::ifstream f("/sys/class/infiniband/" + std::string(dev) + "/ports/" + std::to_string(port) +
                    "/gid_attrs/ndevs/" + std::to_string(index));
    std::string name;
    std::getline(f, name);
    return name;
}

// 0b. What this process sees from its namespace. Returns the cause to name
//     when a connection fails: non-empty when an rxe device is listed, we are
//     not in the initial namespace, and the kernel is older than 7.1.
std::string report_where() {
    const std::string self = namespace_of("/proc/self/ns/net"), init = namespace_of("/proc/1/ns/net");
    const bool initial = !init.empty() && self == init;
    std::printf("netns: this process is in %s, %s\n", self.c_str(),
                init.empty()       ? "PID 1's namespace cannot be read here"
                : initial          ? "the initial namespace (PID 1's)"
                                   : ("not the initial namespace (PID 1's is " + init + ")").c_str());
    // The RDMA subsystem's netns mode (`rdma system show`), which ib_core's
    // netns_mode parameter reads back: Y shared, N exclusive.
    std::ifstream mode_file("/sys/module/ib_core/parameters/netns_mode");
    std::string mode;
    std::getline(mode_file, mode);
    std::printf("netns: rdma system netns mode %s\n",
                mode == "Y"   ? "shared: every namespace lists every RDMA device"
                : mode == "N" ? "exclusive: this namespace lists only the devices moved into it (rdma dev set DEV netns NS)"
                              : "unknown (no /sys/module/ib_core: no RDMA in this kernel?)");
    // The container's other wall: ibv_reg_mr pins pages, and pinning counts
    // against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK in the
    // INITIAL user namespace (the kernel asks capable(), not a user namespace's).
    rlimit lim{};
    CHECK_ERRNO(getrlimit(RLIMIT_MEMLOCK, &lim));
    __user_cap_header_struct hdr{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    __user_cap_data_struct caps[2]{};
    CHECK_ERRNO(syscall(SYS_capget, &hdr, caps));
    const bool ipc_lock = caps[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32));
    const std::string user_self = namespace_of("/proc/self/ns/user"), user_init = namespace_of("/proc/1/ns/user");
    const bool counts = ipc_lock && !user_init.empty() && user_self == user_init;
    const std::string limit = lim.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(lim.rlim_cur >> 10) + " KiB";
    std::printf("memlock: RLIMIT_MEMLOCK %s; CAP_IPC_LOCK %s\n", limit.c_str(),
                counts     ? "yes: the limit does not bind ibv_reg_mr"
                : ipc_lock ? "only in this user namespace, which the kernel does not ask: the limit binds ibv_reg_mr"
                           : "no: ibv_reg_mr pins no more than the limit");

    // The devices, as lesson 1 lists them, and each port's GID table with
    // the netdev of each GID. A RoCE GID is an IP address of a netdev; a
    // netdev is in exactly one namespace, and only there can rdma_cm use it.
    int num = 0;
    errno = 0;  // libibverbs sets it only for some of the reasons it finds none
    ibv_device** list = ibv_get_device_list(&num);
    if (list == nullptr || num == 0)
        wb::fail(std::string("No RDMA devices: ibv_get_device_list found none from here") +
                     (errno != 0 ? " (" + wb::errno_str(errno) + ")" : ""),
                 "in a container: is /dev/infiniband there (docker run --device=/dev/infiniband, a Kubernetes RDMA "
                 "device plugin)? in exclusive netns mode: was a device moved here (rdma dev set DEV netns NS)?");
    bool rxe = false;
    for (int i = 0; i < num; i++) {
        const char* dev = ibv_get_device_name(list[i]);
        wb::Context ctx{CHECK_PTR(ibv_open_device(list[i]))};
        ibv_device_attr attr{};
        CHECK_RC(ibv_query_device(ctx.get(), &attr));
        rxe = rxe || attr.vendor_id == kRxeVendorId;
        std::vector<ibv_gid_entry> gids(attr.phys_port_cnt * size_t{1024});
        const ssize_t n = ibv_query_gid_table(ctx.get(), gids.data(), gids.size(), 0);  // n entries, or -errno
        if (n < 0) wb::fail(std::string("ibv_query_gid_table(") + dev + ") failed: " + wb::errno_str(int(-n)));
        std::printf("device %s: %zd GID(s)%s\n", dev, n, attr.vendor_id == kRxeVendorId ? " (rxe)" : "");
        for (ssize_t g = 0; g < n; g++) {
            const ibv_gid_entry& e = gids[g];
            // ndev_ifindex is the netdev's index in ITS namespace; the
            // name in ours must match sysfs's name for it to be the same one.
            char here[IF_NAMESIZE] = {};
            const std::string name = gid_netdev_name(dev, e.port_num, e.gid_index);
            const bool in_ns = e.ndev_ifindex != 0 && if_indextoname(e.ndev_ifindex, here) != nullptr &&
                               (name.empty() || name == here);
            std::printf("  port %u GID[%u] %s on %s (ifindex %u): %s\n", e.port_num, e.gid_index,
                        wb::gid_to_string(e.gid).c_str(), name.empty() ? "?" : name.c_str(), e.ndev_ifindex,
                        in_ns ? "in this namespace" : "NOT in this namespace");
        }
    }
    ibv_free_device_list(list);
    std::string release;
    if (!rxe || initial || init.empty() || kernel_version(release) >= kRxeNetnsKernel) return "";
    return "rxe on Linux " + release + " sends and receives RoCE (UDP 4791) only in the initial network "
           "namespace, and this process is in another; Linux 7.1 gives rxe a socket per namespace "
           "(in the lab: LAB_KERNEL=trixie-backports; docs/lesson18-netns.md)";
}

// Lesson 9's wait for one CM event (wb::take_cm_event, common/cm.cpp: poll()
// on the channel's fd for at most timeout_s seconds, -1 no limit, then
// rdma_get_cm_event, then wb::check_cm_event), written out for one change:
// when none comes, or another comes, and `cause` is known (report_where),
// the failure names it. The caller MUST acknowledge the event it gets with
// rdma_ack_cm_event (lesson 9).
rdma_cm_event* next_cm_event(rdma_event_channel* ec, rdma_cm_event_type expected, int timeout_s,
                             const std::string& cause) {
    pollfd p{.fd = ec->fd, .events = POLLIN, .revents = 0};
    if (CHECK_ERRNO(poll(&p, 1, timeout_s < 0 ? -1 : timeout_s * 1000)) == 0)
        wb::fail("no rdma_cm event within " + std::to_string(timeout_s) + " s while waiting for " +
                     rdma_event_str(expected),
                 cause.empty() ? "is the peer still running and reachable? raise --timeout if the machine is slow"
                               : cause);
    rdma_cm_event* ev = nullptr;
    CHECK_ERRNO(rdma_get_cm_event(ec, &ev));
    std::printf("cm event: %s\n", rdma_event_str(ev->event));
    if (ev->event != expected && !cause.empty())
        wb::fail(std::string("expected ") + rdma_event_str(expected) + ", got " + rdma_event_str(ev->event) +
                     " (status " + std::to_string(ev->status) +
                     (ev->status < 0 ? ", " + wb::errno_str(-ev->status) : "") + ")",
                 cause);
    wb::check_cm_event(ev, expected);
    return ev;
}

}  // namespace

int main(int argc, char** argv) {
    std::string send_bytes_text, bind_text, size_text, netns;
    const wb::ExtraOption extra[] = {
        {'B', "send-bytes", "N",
         "client: send N bytes, 0..128 (default: 16, one request);\n"
         "                        any other length plays a misbehaving client",
         &send_bytes_text},
        {'b', "bind", "ADDR", "server: the IP address to listen on (default: all, ::)", &bind_text},
        {'s', "size", "BYTES", "server: bytes of its receive buffer, 64..1073741824 (default: 64)", &size_text},
        {0, "netns", "NAME", "enter the network namespace /run/netns/NAME first (default: stay)", &netns},
    };
    const wb::Usage usage = {
        .synopsis = "[options]              server: add the two numbers a client sends\n"
                    "  lesson9 [options] HOST A B     client: send A and B, print the sum",
        .summary = "lesson 9's sum, and what this process sees from its network namespace",
        .notes = "Here -p is the RDMA CM port (rdma_cm's own port space, not a TCP socket), and\n"
                 "HOST is an IP address on the server's RDMA netdev (fe80::1%eth0 for a link-local\n"
                 "IPv6 one): rdma_cm picks the device, port and GID from it; -d, if given, must\n"
                 "name the device it picks.\n"
                 "A and B are signed 64-bit integers; a sum that overflows is an error on both sides (exit 1).\n"
                 "--netns needs CAP_SYS_ADMIN (root); rxe across namespaces needs Linux 7.1 or later.",
        .port_help = "RDMA CM port the server listens on, the client connects to",
        .timeout_help = "every wait on the peer and on rdma_cm's events",
        .numbers_after_host = true,
        .port_and_gid = false,
        .no_address_options = "rdma_cm picks the port and GID from the IP address",
        .server_scope = "The server listens on every address of this host (or only -b's), RDMA CM port -p,\n"
                        "and serves one client: the first connection that goes wrong ends it (exit 1).\n"
                        "Run it where you trust whoever can reach that port.",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    // No host: server. HOST A B: client (common/sum_protocol.cpp checks them).
    const wb::SumArgs sum_args = wb::parse_sum_args(opt);
    const bool is_server = sum_args.is_server;
    if (is_server && opt.given('B')) wb::usage_error("-B is a client option");
    if (!is_server && opt.given('b')) wb::usage_error("-b is a server option");
    if (!is_server && opt.given('s')) wb::usage_error("-s is a server option");
    if (opt.given("netns") && (netns.empty() || netns.find('/') != std::string::npos || netns[0] == '.'))
        wb::usage_error("--netns: '" + netns + "' is not a namespace name (ip netns list)");
    const int64_t a = sum_args.a, b = sum_args.b;
    const uint32_t send_bytes = opt.given('B')
                                    ? static_cast<uint32_t>(wb::parse_range(send_bytes_text, "-B", 0, kMaxSendBytes))
                                    : sizeof(wb::SumRequest);
    const uint32_t recv_bytes = opt.given('s')
                                    ? static_cast<uint32_t>(wb::parse_range(size_text, "-s", kRecvBufferBytes, kMaxRecvBytes))
                                    : kRecvBufferBytes;

    // 0. Where this process stands, before any RDMA resource: the namespace
    //    it enters (--netns), then what it sees from there.
    if (opt.given("netns")) enter_netns(netns);
    const std::string cause = report_where();

    // 1. Device, port and address: rdma_cm finds all three from an IP address
    //    and hands them to us in an id, its socket. Every CM event arrives on
    //    the event channel, whose fd we make non-blocking: next_cm_event waits
    //    in poll(), bounded, never in the library. rdma_cm works in the
    //    namespace of the thread that makes the id: ours, entered in step 0.
    wb::EventChannel ec{CHECK_PTR(rdma_create_event_channel())};
    const int fd_flags = CHECK_ERRNO(fcntl(ec->fd, F_GETFL));
    CHECK_ERRNO(fcntl(ec->fd, F_SETFL, fd_flags | O_NONBLOCK));
    sockaddr_storage ip = is_server ? wb::ip_address(opt.given('b') ? bind_text : "::", opt.tcp_port, "-b")
                                    : wb::ip_address(opt.args[0], opt.tcp_port, "HOST");
    sockaddr* const ip_addr = reinterpret_cast<sockaddr*>(&ip);
    rdma_cm_id* raw = nullptr;
    CHECK_ERRNO(rdma_create_id(ec.get(), &raw, nullptr, RDMA_PS_TCP));  // RDMA_PS_TCP: RC QPs, TCP-like ports
    wb::CmId listen_id, id;  // the server listens on one id; each client it accepts comes with a new one
    if (is_server) {
        listen_id.reset(raw);
        CHECK_ERRNO(rdma_bind_addr(listen_id.get(), ip_addr),
                    "is another server on that port (-p)? is -b an address of this host?");
        CHECK_ERRNO(rdma_listen(listen_id.get(), 1));  // backlog: 1 connect request may wait for us
        std::printf("server: listening on %s, RDMA CM port %u\n", wb::address_str(ip_addr).c_str(), opt.tcp_port);
        // A client's ConnectRequest arrives with a NEW id, for this connection
        // only, on the device, port and GID that the request came in by.
        rdma_cm_event* ev = next_cm_event(ec.get(), RDMA_CM_EVENT_CONNECT_REQUEST, opt.accept_timeout_s(), cause);
        id.reset(ev->id);
        CHECK_ERRNO(rdma_ack_cm_event(ev));
    } else {
        id.reset(raw);
        // Address resolution (which device, port and GID reach HOST), then the
        // route (on RoCE the peer's GID and next hop, on InfiniBand a path
        // record from the subnet manager).
        CHECK_ERRNO(rdma_resolve_addr(id.get(), nullptr, ip_addr, kResolveTimeoutMs),
                    "is HOST reachable through an RDMA netdev? (ip route get HOST; rdma link show) (scripts/doctor.sh --peer HOST checks this)");
        CHECK_ERRNO(rdma_ack_cm_event(next_cm_event(ec.get(), RDMA_CM_EVENT_ADDR_RESOLVED, opt.timeout_s, cause)));
        CHECK_ERRNO(rdma_resolve_route(id.get(), kResolveTimeoutMs),
                    "HOST must be an address on the peer's RDMA netdev; loopback (127.0.0.1) is not one (scripts/doctor.sh --peer HOST checks this)");
        CHECK_ERRNO(rdma_ack_cm_event(next_cm_event(ec.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, opt.timeout_s, cause)));
    }
    const char* dev = ibv_get_device_name(id->verbs->device);
    std::printf("%s: rdma_cm chose %s port %u, GID %s, to reach %s\n", is_server ? "server" : "client", dev,
                id->port_num, wb::gid_to_string(id->route.addr.addr.ibaddr.sgid).c_str(),
                wb::address_str(rdma_get_peer_addr(id.get())).c_str());
    if (!opt.device.empty() && opt.device != dev)
        wb::fail(std::string("rdma_cm chose ") + dev + ", not " + opt.device + " (-d)",
                 is_server ? "drop -d, or listen with -b on an address of " + opt.device
                           : "drop -d, or give a HOST that " + opt.device + " reaches");

    // 2. The objects of an RC connection, in creation order (reverse destruction: lesson 2).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(id->verbs))};
    // Two CQs, one for our SENDs and one for our RECVs, so that each wait
    // below is for exactly one thing. One entry each: one message each way.
    wb::CompletionQueue send_cq{CHECK_PTR(ibv_create_cq(id->verbs, 1, nullptr, nullptr, 0))};
    wb::CompletionQueue recv_cq{CHECK_PTR(ibv_create_cq(id->verbs, 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = send_cq.get(),
        .recv_cq = recv_cq.get(),
        .cap = {
            .max_send_wr = 1,   // one SEND outstanding at a time
            .max_recv_wr = 1,   // one receive posted at a time
            .max_send_sge = 1,  // each message is one contiguous buffer
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,  // reliable connected: acknowledged, in order, one peer
    };
    // The QP is created ON THE ID, so that rdma_cm can drive its transitions.
    CHECK_ERRNO(rdma_create_qp(id.get(), pd.get(), &qp_attr));
    wb::CmQueuePair qp{id->qp, {id.get()}};  // released by rdma_destroy_qp(id)

    // 3. Memory. The receive buffer: LOCAL_WRITE, because our own NIC writes
    //    the incoming SEND into it; no REMOTE_* flag, since a SEND never names
    //    our memory (the receive we post decides where it lands). The send
    //    buffer: no flag at all: the NIC only reads it, and local read access
    //    is always granted.
    const uint32_t recv_len = is_server ? recv_bytes : sizeof(wb::SumResponse);
    wb::Buffer recv_buf = wb::alloc_buffer(recv_len);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE),
                                       "memlock: the limit above; a container's: docker/podman run --ulimit memlock=-1 (docs/lesson18-netns.md)")};
    wb::Buffer send_buf = wb::alloc_buffer(kMaxSendBytes);
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), kMaxSendBytes, 0),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. RESET -> INIT (lesson 3's first transition): rdma_create_qp did it,
    //    on the port rdma_cm chose. A QP accepts receives from INIT on.

    // 5. Post the receive NOW, before the peer learns our QP number: the
    //    peer cannot send before the exchange, so the receive is certainly
    //    there when its SEND arrives. A SEND that finds no receive is answered
    //    with an RNR NAK (receiver not ready) and retried after min_rnr_timer;
    //    with rnr_retry = 0 it would fail at once (docs/lesson4-send-recv.md).
    post_receive(qp.get(), recv_mr.get(), recv_len);
    std::printf("%s: posted a %u-byte receive before the exchange\n", is_server ? "server" : "client", recv_len);

    // 6. The exchange, by rdma_cm: the client's rdma_connect sends a
    //    ConnectRequest (QP number, PSN, MTU and these values), the server's
    //    rdma_accept answers with a ConnectReply, and each side's ESTABLISHED
    //    event says the connection is up. A refused connect (REJECTED: nothing
    //    listens on that port) ends the client.
    rdma_conn_param param = {
        .responder_resources = 0,  // RDMA READ/atomic requests the peer may have in flight at us: none
        .initiator_depth = 0,      // READ/atomic requests we may have in flight at the peer: none
        .retry_count = 6,          // the QP's retry_cnt: 7 tries, then status 12 (7 = for ever on rxe: lesson 3); only the client's counts
        .rnr_retry_count = 7,      // the peer's rnr_retry: 7 = retry for ever on RNR NAK
    };
    if (is_server) {
        CHECK_ERRNO(rdma_accept(id.get(), &param));
    } else {
        CHECK_ERRNO(rdma_connect(id.get(), &param));
    }
    CHECK_ERRNO(rdma_ack_cm_event(next_cm_event(ec.get(), RDMA_CM_EVENT_ESTABLISHED, opt.timeout_s, cause)));
    ibv_qp_attr peer{};  // what rdma_cm set in our QP from the peer's CM message
    ibv_qp_init_attr unused{};
    CHECK_RC(ibv_query_qp(qp.get(), &peer, IBV_QP_DEST_QPN, &unused));
    std::printf("%s: peer %s is QP 0x%x\n", is_server ? "server" : "client",
                wb::address_str(rdma_get_peer_addr(id.get())).c_str(), peer.dest_qp_num);

    // 7. INIT -> RTR -> RTS: lesson 3's other two transitions, made by rdma_cm
    //    during rdma_accept and rdma_connect with the values of step 6.

    // 8. No RTR! token (lesson 4): the server's QP is in RTR before its
    //    ConnectReply leaves, and the client's ESTABLISHED comes from that reply.

    if (is_server) {
        // 9. Wait for the request: a RECV completion. byte_len is how many
        //    bytes the client's SEND carried; only exactly one request is valid.
        std::printf("server: QP 0x%x is RTS; waiting for the client's SEND\n", qp->qp_num);
        const ibv_wc wc = wb::poll_success(recv_cq.get(), opt.timeout_s, "the client's request (RECV)");
        std::printf("server: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);

        // The application's part (common/sum_protocol.cpp): decode exactly
        // one request, never reading beyond byte_len; add with overflow check.
        const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get(), wc.byte_len);
        if (wc.byte_len == sizeof(wb::SumRequest))
            std::printf("server: request %" PRId64 " + %" PRId64 "\n", answer.a, answer.b);

        // 10. SEND the response, errors included, so that the client can say
        //    why. Its receive was posted before the exchange, so it is there.
        std::memcpy(send_buf.get(), &answer.response, sizeof answer.response);
        post_send(qp.get(), send_mr.get(), sizeof answer.response);
        wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the response");
        std::printf("server: response sent (status %u)\n", be32toh(answer.response.status));

        // 11. The client disconnects once it has the response (a
        //     DisconnectRequest); our rdma_disconnect answers (DisconnectReply).
        CHECK_ERRNO(rdma_ack_cm_event(next_cm_event(ec.get(), RDMA_CM_EVENT_DISCONNECTED, opt.timeout_s, cause)));
        CHECK_ERRNO(rdma_disconnect(id.get()));
        if (!answer.error.empty()) wb::result_error(answer.error);
        std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answer.a, answer.b, answer.sum);
        return 0;
    }

    // Client.
    // 9. SEND the request: A and B in network byte order. With -B the client
    //    sends a different length on purpose (the rest is zero bytes).
    const wb::SumRequest request = wb::make_sum_request(a, b);
    std::memcpy(send_buf.get(), &request, sizeof request);
    std::printf("client: sending %" PRId64 " and %" PRId64 " (%u bytes)\n", a, b, send_bytes);
    post_send(qp.get(), send_mr.get(), send_bytes);
    // The SEND's completion: the server's NIC acknowledged the message (it is
    // in the server's receive buffer), not that the server has read it.
    wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the request");

    // 10. The response arrives in the receive we posted in step 5.
    const ibv_wc wc = wb::poll_success(recv_cq.get(), opt.timeout_s, "the server's response (RECV)");
    std::printf("client: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);

    // 11. Disconnect: a DisconnectRequest, which the server's rdma_disconnect answers.
    CHECK_ERRNO(rdma_disconnect(id.get()));
    CHECK_ERRNO(rdma_ack_cm_event(next_cm_event(ec.get(), RDMA_CM_EVENT_DISCONNECTED, opt.timeout_s, cause)));

    const wb::SumResult r = wb::read_sum_response(recv_buf.get(), wc.byte_len, a, b);
    if (r.status == wb::kSumBadRequest)  // we know what we sent: say it
        wb::result_error("the server refused the request: it was " + std::to_string(send_bytes) + " bytes, not " +
                         std::to_string(sizeof(wb::SumRequest)));
    if (!r.error.empty()) wb::result_error(r.error);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", a, b, r.sum);
    return 0;
}
