// lesson16.cpp - on-demand paging (ODP): memory the NIC pages in when a peer first touches it.
//
// Lesson 2 registered memory the classic way: ibv_reg_mr pins every page
// (the kernel may not move or swap it), and pinned memory counts against
// RLIMIT_MEMLOCK. With IBV_ACCESS_ON_DEMAND nothing is pinned: the MR is an
// access right over a range of virtual addresses, and when a request reaches
// a page that is not present, the NIC asks the kernel for it (a "network
// page fault"), as the CPU would. So the server here exposes a region it has
// never touched, under a 64 KiB memlock limit and without CAP_IPC_LOCK, and
// the client RDMA WRITEs every page of one half and READs every page of the
// other, each page twice: the first access pays for the fault, the second
// finds the page present. /proc/self/status shows what got resident.
//
// The server first asks the device what it can do (odp_caps), and refuses
// clearly where there is no ODP: rxe has it from Linux 6.15 (in the lab,
// LAB_KERNEL=trixie-backports); Debian 12's 6.1 answers EINVAL.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson16                   server: exposes 4 MiB it never touched
//     ./lesson16 -s 67108864       server: 64 MiB instead (-s is in bytes)
//     ./lesson16 127.0.0.1         client: WRITEs and READs it, twice, timed
// On two hosts: ./lesson16 on host A, ./lesson16 A on host B. Both sides take
// -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson16 -h).
//
// Verbs it introduces:
//     ibv_query_device_ex: odp_caps (general_caps, per_transport_caps.rc_odp_caps ...)
//     ibv_reg_mr with IBV_ACCESS_ON_DEMAND; the implicit MR (NULL, SIZE_MAX)
//     ibv_advise_mr (IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE)
//
// Read more: man ibv_query_device_ex, man ibv_reg_mr (IBV_ACCESS_ON_DEMAND),
// man ibv_advise_mr; docs/lesson16-odp.md (diagram, numbers, exercises).
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr uint16_t kLesson = 16;        // sent in the exchange: a lesson-16 client only talks to a lesson-16 server
constexpr uint32_t kPage = 4096;        // x86-64's page: what the kernel faults in, one at a time
// The region the server exposes (-s), in bytes: two halves of whole pages.
constexpr int64_t kDefaultBytes = 4 << 20;  // 4 MiB
constexpr int64_t kMinBytes = 128 << 10;    // twice the memlock limit; two halves of 16 pages
constexpr int64_t kMaxBytes = 1 << 30;      // 1 GiB: fits PeerInfo's 32-bit length
constexpr rlim_t kMemlockLimit = 64 << 10;  // 64 KiB: the soft RLIMIT_MEMLOCK the server sets for itself
// 1.5 GiB: an ODP MR larger than the lab guest's memory (0.94 GiB). Not
// 2 GiB: rxe (7.3) refuses ODP MRs of 2 GiB and more with EINVAL.
constexpr size_t kHugeBytes = 1536ull << 20;
// One WRITE or READ per page, of one packet at the lab's path MTU (1024),
// at the page's start. Not more: on rxe 7.3.4 every packet of a longer
// WRITE into an ODP MR lands at the start of its page (docs/lesson16-odp.md).
constexpr uint32_t kPiece = 1024;
constexpr char kPattern = 'W';          // what the client WRITEs; the server checks every byte
const unsigned kRemote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;  // what the client does to the region

// Memory from mmap: the kernel gives pages only when they are first touched,
// so nothing of it is resident yet (alloc_buffer zeroes, which touches).
struct Unmap {
    size_t bytes;
    void operator()(char* p) const noexcept { munmap(p, bytes); }
};
using Mapping = std::unique_ptr<char, Unmap>;
Mapping map_untouched(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) wb::fail("mmap of " + std::to_string(bytes) + " bytes failed: " + wb::errno_str(errno));
    return Mapping(static_cast<char*>(p), Unmap{bytes});
}

// "SEND RECV WRITE READ" for one transport's odp_caps bits (ibv_odp_transport_cap_bits).
std::string op_bits(uint32_t caps) {
    std::string s;
    const char* names[] = {"SEND", "RECV", "WRITE", "READ", "ATOMIC", "SRQ_RECV", "FLUSH", "ATOMIC_WRITE"};
    for (int i = 0; i < 8; ++i)
        if (caps & (1u << i)) s += std::string(s.empty() ? "" : " ") + names[i];
    return s.empty() ? "none" : s;
}

// One line of /proc/self/status, in kB ("VmRSS:", "VmPin:"): what the kernel says about our memory.
long status_kb(const char* key) {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.starts_with(key)) return std::stol(line.substr(std::strlen(key)));
    return -1;
}

// Plumbing, not RDMA (lesson 2 explains it): drop CAP_IPC_LOCK from our
// effective set, so that RLIMIT_MEMLOCK applies to us as to any user.
void drop_ipc_lock() {
    __user_cap_header_struct hdr{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    __user_cap_data_struct data[2]{};
    CHECK_ERRNO(syscall(SYS_capget, &hdr, data));
    data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    CHECK_ERRNO(syscall(SYS_capset, &hdr, data));
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One kPiece WRITE from (or READ into) our buffer at `remote`, waited for.
// Returns how long it took, in microseconds.
double one(ibv_qp* qp, ibv_cq* cq, const ibv_mr* mr, ibv_wr_opcode op, uint64_t remote, uint32_t rkey,
           const wb::Options& opt, const wb::Connection& conn) {
    const auto t0 = std::chrono::steady_clock::now();
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = kPiece, .lkey = mr->lkey};
    ibv_send_wr wr = {
        .wr_id = remote,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = op,
        .send_flags = IBV_SEND_SIGNALED,
        .wr = {.rdma = {.remote_addr = remote, .rkey = rkey}},
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
    wb::poll_success(cq, opt.timeout_s, op == IBV_WR_RDMA_WRITE ? "an RDMA WRITE" : "an RDMA READ", conn);
    return ms_since(t0) * 1000;
}

// The median of some timings: the typical page, unmoved by the odd resend
// (67 ms) or a busy host. At least 1 us, the resolution printed, so that a
// ratio of two medians is always a number.
double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return std::max(v[v.size() / 2], 1.0);
}

}  // namespace

int main(int argc, char** argv) {
    std::string size_text;
    const wb::ExtraOption extra[] = {
        {'s', "size", "BYTES", "server: bytes of never-touched memory to expose, a multiple of 8192,\n"
                               "                        131072..1073741824 (default: 4194304 = 4 MiB)", &size_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]        server: expose memory it never touched, registered on demand\n"
                    "  lesson16 [options] HOST   client: WRITE half of it and READ the other half, twice, timed",
        .summary = "on-demand paging: the NIC faults a peer's first WRITE and READ in, nothing is pinned",
        .notes = "The server needs a device with ODP (rxe from Linux 6.15: LAB_KERNEL=trixie-backports in the lab);\n"
                 "without it, it says which kernel it needs and exits 1.",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 1) wb::usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (!is_server && opt.given('s')) wb::usage_error("-s is a server option; the client uses what the server exposes");
    const size_t region = opt.given('s') ? wb::parse_range(size_text, "-s", kMinBytes, kMaxBytes) : kDefaultBytes;
    if (region % (2 * kPage) != 0)  // two halves of whole pages
        wb::usage_error("-s: '" + size_text + "' is not a multiple of " + std::to_string(2 * kPage) + " (two halves of whole pages)");

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);

    // 2. What the device can page on demand. general_caps says whether it
    //    can at all (and whether it can cover the whole address space, the
    //    implicit MR); per transport, which operations may touch an ODP MR.
    //    The server is the responder of RC WRITEs and READs: it needs both.
    if (is_server) {
        ibv_device_attr_ex dev{};
        CHECK_RC(ibv_query_device_ex(ctx.get(), nullptr, &dev));
        const ibv_odp_caps& odp = dev.odp_caps;
        std::printf("odp: general_caps 0x%llx: ODP_SUPPORT %s, ODP_SUPPORT_IMPLICIT %s\n",
                    static_cast<unsigned long long>(odp.general_caps), odp.general_caps & IBV_ODP_SUPPORT ? "yes" : "no",
                    odp.general_caps & IBV_ODP_SUPPORT_IMPLICIT ? "yes" : "no");
        std::printf("odp: rc_odp_caps 0x%x (%s), ud_odp_caps 0x%x (%s)\n", odp.per_transport_caps.rc_odp_caps,
                    op_bits(odp.per_transport_caps.rc_odp_caps).c_str(), odp.per_transport_caps.ud_odp_caps,
                    op_bits(odp.per_transport_caps.ud_odp_caps).c_str());
        const uint32_t needed = IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ;
        if (!(odp.general_caps & IBV_ODP_SUPPORT) || (odp.per_transport_caps.rc_odp_caps & needed) != needed) {
            utsname u{};
            uname(&u);
            wb::fail(std::string(ibv_get_device_name(ctx->device)) +
                         " cannot page RC WRITE and READ on demand (no ODP on this kernel, " + u.release + ")",
                     "rxe has ODP from Linux 6.15; in the lab: scripts/lab.sh down, then "
                     "LAB_KERNEL=trixie-backports scripts/lab.sh up (docs/lesson16-odp.md)");
        }
    }

    // 3. The objects of an RC connection, in creation order (reverse destruction: lesson 2).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},  // one WR at a time
        .qp_type = IBV_QPT_RC,  // WRITE and READ exist only on reliable connections
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    if (is_server) {
        // 4. Pinning against ODP. Like an ordinary user: a 64 KiB memlock
        //    limit and no CAP_IPC_LOCK (root has it; lesson 2 step 6).
        rlimit lim{};
        CHECK_ERRNO(getrlimit(RLIMIT_MEMLOCK, &lim));
        lim.rlim_cur = kMemlockLimit;
        CHECK_ERRNO(setrlimit(RLIMIT_MEMLOCK, &lim));
        drop_ipc_lock();
        std::printf("server: RLIMIT_MEMLOCK soft limit now 64 KiB, CAP_IPC_LOCK dropped (as for a user)\n");
        Mapping mem = map_untouched(region);
        const unsigned access = IBV_ACCESS_LOCAL_WRITE | kRemote;  // REMOTE_WRITE needs LOCAL_WRITE (lesson 2)
        // Without ODP: every page is pinned at once, so all of it must fit under the limit.
        ibv_mr* pinned = ibv_reg_mr(pd.get(), mem.get(), region, access);
        if (pinned != nullptr) wb::fail("ibv_reg_mr without ON_DEMAND pinned more than RLIMIT_MEMLOCK allows");
        std::printf("server: ibv_reg_mr(%zu KiB, no ON_DEMAND) -> %s: pinning must fit under the limit\n",
                    region >> 10, wb::errno_str(errno).c_str());
        // With ODP: nothing is pinned, so the limit does not apply.
        auto t0 = std::chrono::steady_clock::now();
        wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), mem.get(), region, access | IBV_ACCESS_ON_DEMAND))};
        std::printf("server: ibv_reg_mr(%zu KiB, ON_DEMAND) -> rkey 0x%x in %.2f ms; VmPin %ld kB, VmRSS %ld kB\n",
                    region >> 10, mr->rkey, ms_since(t0), status_kb("VmPin:"), status_kb("VmRSS:"));
        // An ODP MR may be larger than the memory there is: only what is used gets pages.
        Mapping huge = map_untouched(kHugeBytes);
        t0 = std::chrono::steady_clock::now();
        wb::MemoryRegion huge_mr{
            CHECK_PTR(ibv_reg_mr(pd.get(), huge.get(), kHugeBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND),
                      "an ODP MR still costs the kernel a table entry per page; rxe refuses 2 GiB and more")};
        std::printf("server: ibv_reg_mr(%zu MiB, ON_DEMAND) -> lkey 0x%x in %.2f ms; VmPin %ld kB\n",
                    kHugeBytes >> 20, huge_mr->lkey, ms_since(t0), status_kb("VmPin:"));

        // 5. The implicit ODP MR: one key for the whole address space
        //    (addr NULL, length SIZE_MAX). Only where general_caps says so.
        ibv_mr* implicit = ibv_reg_mr(pd.get(), nullptr, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
        const std::string got = implicit ? "lkey " + std::to_string(implicit->lkey) : wb::errno_str(errno);
        std::printf("server: implicit ODP MR ibv_reg_mr(NULL, SIZE_MAX, ON_DEMAND) -> %s\n", got.c_str());
        if (implicit) CHECK_RC(ibv_dereg_mr(implicit));

        // 6. Prefetch: ibv_advise_mr asks the kernel to fault a range in
        //    before the NIC needs it (here the huge MR's first MiB, not the
        //    region, whose first touch the client times). FLUSH: synchronous.
        ibv_sge pre = {.addr = reinterpret_cast<uintptr_t>(huge.get()), .length = 1 << 20, .lkey = huge_mr->lkey};
        const int rc = ibv_advise_mr(pd.get(), IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &pre, 1);
        std::printf("server: ibv_advise_mr(PREFETCH_WRITE, 1 MiB) -> %s\n",
                    rc == 0 ? "done" : (wb::errno_str(rc) + ": this provider has no prefetch (rxe's: rdma-core 59)").c_str());

        // 7. Out-of-band exchange: QP number, PSN, GID, and where the region is.
        wb::Listener listener(opt.tcp_port);
        std::printf("server: waiting for a client on TCP port %u\n", opt.tcp_port);
        wb::Connection conn = listener.accept(opt.accept_timeout_s());
        wb::PeerInfo mine = wb::local_info(kLesson, qp.get(), psn, addr);
        mine.addr = reinterpret_cast<uintptr_t>(mem.get());
        mine.length = static_cast<uint32_t>(region);
        mine.rkey = mr->rkey;
        const wb::PeerInfo peer = wb::exchange(conn, mine, opt.timeout_s);
        std::printf("server: client %s is QP 0x%x\n", conn.peer().c_str(), peer.qp_num);

        // 8. Lesson 3's transitions; the QP lets the client WRITE and READ.
        wb::qp_to_init(qp.get(), addr, kRemote);
        wb::qp_to_rtr(qp.get(), addr, peer);
        wb::qp_to_rts(qp.get(), psn);
        const long rss_before = status_kb("VmRSS:");
        std::printf("server: VmRSS %ld kB before the client; waiting for its DONE\n", rss_before);
        wb::send_token(conn, "RTR!");  // our QP is past RTR (lesson 4, step 8)
        wb::expect_token(conn, "DONE", opt.timeout_s);

        // 9. What the NIC's faults left behind: resident pages, and the bytes.
        const long rss_after = status_kb("VmRSS:");
        std::printf("server: VmRSS %ld kB after (+%ld kB), VmPin %ld kB\n", rss_after, rss_after - rss_before,
                    status_kb("VmPin:"));
        const size_t pages = region / 2 / kPage;  // the WRITE half; its first kPiece bytes each
        size_t good = 0;
        for (size_t p = 0; p < pages; ++p)
            good += std::count(mem.get() + p * kPage, mem.get() + p * kPage + kPiece, kPattern) == kPiece;
        if (good != pages) wb::result_error(std::to_string(pages - good) + " of the " + std::to_string(pages) +
                                            " pages the client wrote do not hold its bytes");
        std::printf("result: all %zu pages the client wrote hold its %u bytes\n", pages, kPiece);
        return 0;
    }

    // Client.
    // 3. One piece of ordinary pinned memory: the WRITEs' source, the READs'
    //    target (LOCAL_WRITE: our NIC writes READ responses into it).
    wb::Buffer buf = wb::alloc_buffer(kPiece);
    std::memset(buf.get(), kPattern, kPiece);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), kPiece, IBV_ACCESS_LOCAL_WRITE),
                                  "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. Out-of-band exchange: we learn the server's QP and where its region is.
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("client: server QP 0x%x offers %u bytes at 0x%llx, rkey 0x%x\n", peer.qp_num, peer.length,
                static_cast<unsigned long long>(peer.addr), peer.rkey);
    // Never trust the peer's numbers (exchange() refused a length without an
    // address, or one that wraps): a lesson-16 server offers what its -s
    // allows (kMinBytes..kMaxBytes, two halves of whole pages), at a page's start.
    if (peer.length < kMinBytes || peer.length > kMaxBytes || peer.length % (2 * kPage) != 0 || peer.addr % kPage != 0)
        wb::fail("no lesson-16 server offers that: it offers " + std::to_string(kMinBytes) + ".." +
                     std::to_string(kMaxBytes) + " bytes, a multiple of " + std::to_string(2 * kPage) +
                     ", at a page's start",
                 "is the server a lesson-16 server of this workbook?");
    const uint32_t half = peer.length / 2;

    // 5. Lesson 3's transitions. The server may do nothing to our memory.
    wb::qp_to_init(qp.get(), addr, 0);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    wb::expect_token(conn, "RTR!", opt.timeout_s);

    // 6. Every page twice, back to back: first into a page the server never
    //    touched (its NIC faults it in), then again (it is there). WRITEs
    //    into the first half, READs from the second.
    double med[2][2];  // [WRITE, READ][first touch, again]
    for (int op = 0; op < 2; ++op) {
        const ibv_wr_opcode opcode = op == 0 ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
        std::vector<double> first, again;
        // rxe's port counters (hw_counters, what `rdma statistic` shows):
        // completer_retry_err is how often our QP resent a request whose
        // answer did not come in time.
        const wb::PortCounters counters(ctx.get(), addr.port);
        for (uint32_t off = 0; off < half; off += kPage) {
            const uint64_t page = peer.addr + op * half + off;
            first.push_back(one(qp.get(), cq.get(), mr.get(), opcode, page, peer.rkey, opt, conn));
            again.push_back(one(qp.get(), cq.get(), mr.get(), opcode, page, peer.rkey, opt, conn));
        }
        med[op][0] = median(first);
        med[op][1] = median(again);
        std::printf("client: %-5s %u pages: median %4.0f us first touch, %4.0f us again (%.1fx); %llu resent\n",
                    op == 0 ? "WRITE" : "READ", half / kPage, med[op][0], med[op][1], med[op][0] / med[op][1],
                    static_cast<unsigned long long>(counters.moved("completer_retry_err")));
    }
    // Never-touched anonymous memory reads as zeros, whoever reads it first.
    size_t zeros = 0;
    for (uint32_t i = 0; i < kPiece; ++i) zeros += buf.get()[i] == 0;

    // 7. Tell the server we are done, so that it may look at its memory and exit.
    wb::send_token(conn, "DONE");
    std::printf("result: first touch against again, median per page: WRITE %.1fx, READ %.1fx; the never-written "
                "pages READ as zeros (%zu of %u bytes)\n", med[0][0] / med[0][1], med[1][0] / med[1][1], zeros, kPiece);
    return 0;
}
