// lesson19.cpp - fork() and registered memory: what the kernel copies into a
// child, what MADV_DONTFORK takes away from it, and the registrations that
// split a process's address space until the kernel says no.
//
// A process that has registered memory and then forks (explicitly, or
// through system(), popen(), Python's multiprocessing, a test harness) has
// two processes that map the buffer the NIC writes into. Which of them owns
// the pages the NIC was given? Four steps, in the order the verbs are called:
//   1. ibv_is_fork_initialized(): IBV_FORK_UNNEEDED means that this kernel
//      (Linux 5.13 and later) copies pinned pages into the child at fork(),
//      so the parent keeps the very pages the NIC writes.
//   2. The default, on such a kernel: the server registers a buffer and
//      forks; parent and child each write to their copy; the client's RDMA
//      WRITE with immediate (lesson 5) lands in the parent's buffer and the
//      child never sees it. Then what that copy costs: fork() timed with a
//      large region unregistered and registered.
//   3. The old way, ibv_fork_init() (or RDMAV_FORK_SAFE=1): every MR's pages
//      become MADV_DONTFORK, absent from every child. A child that touches an
//      ordinary variable sharing a page with a registered buffer dies of
//      SIGSEGV (rdma-core #1222), and the parent reports the child's signal.
//   4. What that does in production: each registration inside a larger
//      mapping splits it in three. The program counts its mappings in
//      /proc/self/maps as it registers; where vm.max_map_count is low enough
//      (the tests lower it in a throw-away guest: this program only reads
//      it), ibv_reg_mr fails while memory and memlock are plentiful, and then
//      so does every verb that needs a new mapping. The fix: buffers in a
//      page-aligned mapping of their own, registered once.
// ibv_fork_init() must come before any verb that registers memory (it
// refuses with EINVAL after one), so steps 3 and 4 run in a second process
// that the server starts with posix_spawn(), the way to start a program from
// an RDMA process (docs/lesson19-fork.md: what to do instead of fork()).
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson19                     server: steps 1-4 (step 2 waits for the client)
//     ./lesson19 127.0.0.1 'hello'   client: step 1, then writes the message into
//                                    the server's buffer while its child is alive
//     ./lesson19 --fork-safe         steps 3 and 4 alone, no client
// On two hosts: ./lesson19 on host A, ./lesson19 A on host B. Both take
// -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson19 -h).
//
// Verbs it introduces:
//     ibv_is_fork_initialized: IBV_FORK_DISABLED, IBV_FORK_ENABLED, IBV_FORK_UNNEEDED
//     ibv_fork_init (what RDMAV_FORK_SAFE=1 calls for you)
//     ibv_reg_mr and ibv_dereg_mr as fork-safe mode runs them: madvise(MADV_DONTFORK)
//     and MADV_DOFORK on the pages they cover
//
// Read more: man ibv_fork_init, man ibv_is_fork_initialized, man 2 madvise,
// man 2 fork, man 3 posix_spawn; docs/lesson19-fork.md (diagram, the errors,
// the production reports, exercises).
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "check.hpp"
#include "completion.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "qp.hpp"

extern char** environ;

namespace {

constexpr uint16_t kLesson = 19;  // sent in the exchange: a lesson-19 client only talks to a lesson-19 server
constexpr uint32_t kBufferBytes = 4096;  // step 2: the buffer the client writes, one page
constexpr int64_t kDefaultRegionBytes = 64 << 20;  // step 2: the region whose fork() is timed, 64 MiB
constexpr int64_t kMaxRegionBytes = 1 << 30;  // 1 GiB: -s may not ask for more
constexpr int kTimedForks = 5;  // forks timed per case; the median is printed
constexpr int kRequests = 64;   // step 4: buffers registered, one per request in flight
constexpr size_t kRequestBytes = 1024;  // step 4: each request's buffer
const char* const kDefaultMessage = "written by the peer into the parent's buffer";
const char kParentBytes[] = "the parent's own bytes";
const char kChildBytes[] = "the child's own copy";

const char* fork_status_name(ibv_fork_status s) {
    switch (s) {
    case IBV_FORK_DISABLED: return "IBV_FORK_DISABLED";
    case IBV_FORK_ENABLED: return "IBV_FORK_ENABLED";
    case IBV_FORK_UNNEEDED: return "IBV_FORK_UNNEEDED";
    }
    return "an unknown ibv_fork_status";
}

// How many mappings (VMAs) this process has: one line of /proc/self/maps
// each. vm.max_map_count bounds this number, process by process.
int count_mappings() {
    std::ifstream maps("/proc/self/maps");
    if (!maps) wb::fail("cannot read /proc/self/maps", "is /proc mounted?");
    int n = 0;
    for (std::string line; std::getline(maps, line);) ++n;
    return n;
}

// Whether the mapping that holds `addr` has the VM_DONTCOPY flag that
// MADV_DONTFORK sets: "dc" in its VmFlags line of /proc/self/smaps.
bool dont_copy(const void* addr) {
    const auto where = reinterpret_cast<uintptr_t>(addr);
    std::ifstream smaps("/proc/self/smaps");
    bool inside = false;
    for (std::string line; std::getline(smaps, line);) {
        unsigned long start = 0, end = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2) {
            inside = start <= where && where < end;
        } else if (inside && line.starts_with("VmFlags:")) {
            return (line + " ").find(" dc ") != std::string::npos;
        }
    }
    wb::fail("no mapping in /proc/self/smaps holds " + std::to_string(where), "is /proc mounted?");
}

long read_number(const char* path) {
    std::ifstream in(path);
    long n = -1;
    if (!(in >> n)) wb::fail(std::string("cannot read a number from ") + path);
    return n;
}

// "MemAvailable" of /proc/meminfo, in MiB.
long available_mib() {
    std::ifstream in("/proc/meminfo");
    for (std::string key; in >> key;) {
        long kib = 0;
        in >> kib;
        if (key == "MemAvailable:") return kib / 1024;
        in.ignore(64, '\n');
    }
    return -1;
}

std::string memlock_text() {
    rlimit lim{};
    CHECK_ERRNO(getrlimit(RLIMIT_MEMLOCK, &lim));
    if (lim.rlim_cur == RLIM_INFINITY) return "unlimited";
    return std::to_string(lim.rlim_cur / 1024) + " KiB";
}

// Anonymous, private, page-aligned memory of its own mapping, touched so that
// every page is there (a fork copies only pages that exist).
char* map_pages(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) wb::fail("mmap of " + std::to_string(bytes) + " bytes failed: " + wb::errno_str(errno));
    std::memset(p, 1, bytes);
    return static_cast<char*>(p);
}

// What a wait status says: "exited with status 0", "was killed by signal 11 (Segmentation fault)".
std::string status_text(int status) {
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    return "stopped (status " + std::to_string(status) + ")";
}

// Wait at most timeout_s for child `pid`; its wait status. Nothing waits
// for ever: a child still there is killed, and we exit with an error.
int wait_child(pid_t pid, int timeout_s, const char* who) {
    for (int i = 0; i < timeout_s * 100; ++i) {
        int status = 0;
        const pid_t done = CHECK_ERRNO(waitpid(pid, &status, WNOHANG));
        if (done == pid) return status;
        usleep(10 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    wb::fail(std::string(who) + " " + std::to_string(pid) + " did not finish within " + std::to_string(timeout_s) +
             " s: killed it");
}

// One byte through a pipe, in either direction: how parent and child of
// step 2 take turns. Waiting is bounded like every wait on a peer.
void send_byte(int fd, char c) {
    if (write(fd, &c, 1) != 1) wb::fail("write to a pipe failed: " + wb::errno_str(errno));
}
void expect_byte(int fd, int timeout_s, const char* what) {
    pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
    char c = 0;
    if (CHECK_ERRNO(poll(&p, 1, timeout_s * 1000)) == 0) wb::fail(std::string("no word from ") + what);
    if (read(fd, &c, 1) != 1) wb::fail(std::string(what) + " closed its pipe");
}

double now_ms() {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// The median time fork() takes to return in the parent, over kTimedForks
// forks whose children exit at once. The kernel does its copying inside
// fork(), before the parent's copy of the call returns.
double median_fork_ms() {
    std::vector<double> ms;
    for (int i = 0; i < kTimedForks; ++i) {
        std::fflush(stdout);  // a child must not inherit, and print again, what we printed
        const double start = now_ms();
        const pid_t pid = CHECK_ERRNO(fork());
        if (pid == 0) _exit(0);
        ms.push_back(now_ms() - start);
        wait_child(pid, 30, "a timed child");
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// Step 1, on both sides: ask libibverbs, which asks the kernel.
void step1_fork_mode(const char* side) {
    const ibv_fork_status mode = ibv_is_fork_initialized();
    std::printf("step 1: %s: ibv_is_fork_initialized() = %s (%d)\n", side, fork_status_name(mode), mode);
    if (mode == IBV_FORK_UNNEEDED)
        std::printf("step 1: %s: this kernel copies pinned pages into a child at fork(): the parent keeps the "
                    "pages its MRs pinned, and ibv_fork_init() is not needed\n",
                    side);
    else
        std::printf("step 1: %s: this kernel shares pages copy-on-write with a child: before Linux 5.13, a "
                    "write after fork() could leave the NIC writing into the child's page\n",
                    side);
}

// The child of step 2. It writes into its copy of the buffer, says so, and
// when the parent has seen the client's WRITE, prints what its copy holds
// (up to its first zero byte: the buffer was zeroed before the fork).
[[noreturn]] void step2_child(char* buf, int to_parent, int from_parent, int timeout_s) {
    std::memcpy(buf, kChildBytes, sizeof kChildBytes);
    send_byte(to_parent, 'w');
    expect_byte(from_parent, timeout_s, "the parent");
    std::printf("step 2: child %d: its copy of the buffer holds \"%s\"\n", getpid(),
                wb::printable(buf, strnlen(buf, kBufferBytes)).c_str());
    std::fflush(stdout);
    _exit(0);  // not exit(): the parent's atexit handlers and destructors are the parent's
}

// Step 2, server side: lesson 5's server (buffer, receive, exchange, RTS),
// with a child forked while the client's WRITE is on its way.
void step2_serve(const wb::Options& opt) {
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},  // lesson 5's
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    // The buffer the client writes into, as in lesson 5 (step 3): REMOTE_WRITE
    // and the LOCAL_WRITE it requires. ibv_reg_mr pins its page: the NIC
    // will write that physical page, whatever a later fork() does.
    wb::Buffer buf = wb::alloc_buffer(kBufferBytes);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), kBufferBytes,
                                             IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE),
                                  "ulimit -l: is locked memory limited? (make doctor checks this)")};
    std::printf("step 2: server: registered %u bytes at 0x%llx, rkey 0x%x (REMOTE_WRITE + LOCAL_WRITE)\n",
                kBufferBytes, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(buf.get())), mr->rkey);
    wb::qp_to_init(qp.get(), addr, IBV_ACCESS_REMOTE_WRITE);
    ibv_recv_wr recv_wr = {.wr_id = 1, .next = nullptr, .sg_list = nullptr, .num_sge = 0};  // for the immediate
    ibv_recv_wr* bad_recv = nullptr;
    CHECK_RC(ibv_post_recv(qp.get(), &recv_wr, &bad_recv));

    wb::Listener listener(opt.tcp_port);
    std::printf("server: waiting for a client on TCP port %u\n", opt.tcp_port);
    wb::Connection conn = listener.accept(opt.accept_timeout_s());
    wb::PeerInfo mine = wb::local_info(kLesson, qp.get(), psn, addr);
    mine.addr = reinterpret_cast<uintptr_t>(buf.get());
    mine.length = kBufferBytes;
    mine.rkey = mr->rkey;
    const wb::PeerInfo peer = wb::exchange(conn, mine, opt.timeout_s);
    std::printf("server: client %s is QP 0x%x\n", conn.peer().c_str(), peer.qp_num);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);

    // The fork, with the MR registered and the client about to write. The
    // child gets a copy of every page; this kernel copies the pinned one at
    // once, so the parent keeps the page the NIC was given.
    int to_parent[2], to_child[2];
    CHECK_ERRNO(pipe(to_parent));
    CHECK_ERRNO(pipe(to_child));
    std::fflush(stdout);
    const pid_t child = CHECK_ERRNO(fork());
    if (child == 0) step2_child(buf.get(), to_parent[1], to_child[0], opt.timeout_s);
    // The parent writes into its buffer too. Before Linux 5.13 this write is
    // what broke RDMA: the page was shared copy-on-write with the child, so
    // the writer got a new page, and the NIC's page was left to the child.
    std::memcpy(buf.get(), kParentBytes, sizeof kParentBytes);
    expect_byte(to_parent[0], opt.timeout_s, "the child");
    std::printf("step 2: server: forked child %d; parent and child each wrote into their copy of the buffer\n",
                child);
    wb::send_token(conn, "RTR!");  // the client may write now (lesson 4, step 8)

    const ibv_wc wc = wb::poll_success(cq.get(), opt.timeout_s, "the client's WRITE with immediate (RECV)", conn);
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM))
        wb::result_error(std::string("expected IBV_WC_RECV_RDMA_WITH_IMM, got ") + wb::wc_opcode_str(wc.opcode));
    const uint32_t length = ntohl(wc.imm_data);  // network byte order, as in lesson 5
    if (length > kBufferBytes)
        wb::result_error("the client says it wrote " + std::to_string(length) + " bytes, but the buffer holds " +
                         std::to_string(kBufferBytes) + ": not reading beyond it");
    std::printf("step 2: parent: its buffer holds \"%s\" (%u bytes, the immediate)\n",
                wb::printable(buf.get(), length).c_str(), length);

    // The child looks at its copy only now, after the WRITE has landed.
    send_byte(to_child[1], 'l');
    const int status = wait_child(child, opt.timeout_s, "the child of step 2");
    std::printf("step 2: child %d %s\n", child, status_text(status).c_str());
    for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

// Step 2, client side: lesson 5's client, without -L.
void step2_write(const wb::Options& opt, const std::string& message) {
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    // The message; our NIC only reads it: no access flag (lesson 5).
    const uint32_t length = static_cast<uint32_t>(message.size());
    wb::Buffer buf = wb::alloc_buffer(length);
    std::memcpy(buf.get(), message.data(), length);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), length, 0),
                                  "ulimit -l: is locked memory limited? (make doctor checks this)")};
    wb::qp_to_init(qp.get(), addr, 0);

    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    std::printf("client: connected to %s\n", conn.peer().c_str());
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("client: server QP 0x%x offers %u bytes at 0x%llx, rkey 0x%x\n", peer.qp_num, peer.length,
                static_cast<unsigned long long>(peer.addr), peer.rkey);
    if (peer.addr == 0 || peer.length == 0) wb::result_error("the server offers no buffer to write into");
    if (length > peer.length)
        wb::result_error("the message is " + std::to_string(length) + " bytes, the server's buffer only " +
                         std::to_string(peer.length) + ": not sending it");
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    wb::expect_token(conn, "RTR!", opt.timeout_s);  // sent once the server's child is there

    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(buf.get()), .length = length, .lkey = mr->lkey};
    ibv_send_wr wr = {
        .wr_id = 1,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED,
        .imm_data = htonl(length),  // the length, in network byte order (lesson 5)
        .wr = {.rdma = {.remote_addr = peer.addr, .rkey = peer.rkey}},
    };
    ibv_send_wr* bad = nullptr;
    std::printf("step 2: client: posting RDMA WRITE with immediate: %u bytes to 0x%llx, while the server's "
                "child is alive\n",
                length, static_cast<unsigned long long>(peer.addr));
    CHECK_RC(ibv_post_send(qp.get(), &wr, &bad));
    const ibv_wc wc = wb::poll_success(cq.get(), opt.timeout_s, "the RDMA WRITE with immediate", conn);
    std::printf("client: completion %s, status %s\n", wb::wc_opcode_str(wc.opcode), ibv_wc_status_str(wc.status));
    std::printf("result: wrote %u bytes with immediate %u\n", length, length);
}

// Step 2, what the copy costs: fork() with a large region touched, first
// unregistered (the child shares its pages copy-on-write: page tables are
// copied, not pages), then registered (every pinned page copied, now).
void step2_fork_cost(const wb::Options& opt, size_t region_bytes) {
    wb::Context ctx = wb::open_device(opt.device);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    char* region = map_pages(region_bytes);
    const double unregistered = median_fork_ms();
    // LOCAL_WRITE: the region stands for receive buffers our NIC writes into.
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), region, region_bytes, IBV_ACCESS_LOCAL_WRITE),
                                  "ulimit -l: is locked memory limited? (-s takes a smaller region)")};
    const double registered = median_fork_ms();
    std::printf("step 2: fork() with %zu MiB touched: %.2f ms unregistered, %.2f ms registered "
                "(median of %d each): the pinned pages are copied at fork()\n",
                region_bytes >> 20, unregistered, registered, kTimedForks);
    mr.reset();
    munmap(region, region_bytes);
}

// Steps 3 and 4 need ibv_fork_init() before any registration, so the server
// runs them in a new process: itself, started with posix_spawn() and
// --fork-safe, waited for like every child.
int spawn_fork_safe_steps(const wb::Options& opt) {
    std::vector<std::string> words = {wb::program_name(), "--fork-safe"};
    if (!opt.device.empty()) words.insert(words.end(), {"-d", opt.device});
    std::vector<char*> spawn_argv;
    for (std::string& w : words) spawn_argv.push_back(w.data());
    spawn_argv.push_back(nullptr);
    std::fflush(stdout);
    pid_t pid = 0;
    CHECK_RC(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, spawn_argv.data(), environ));
    const int status = wait_child(pid, opt.timeout_s, "the fork-safe process");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        wb::fail("the fork-safe process of steps 3 and 4 " + status_text(status), "see its output above");
    return 0;
}

// Step 3: ibv_fork_init(), then a buffer that shares its page with an
// ordinary variable, then a child that touches the variable.
void step3_dontfork(ibv_pd* pd, int timeout_s) {
    // A request as a program might lay it out: a note for itself and the
    // payload the NIC writes, side by side in one page (rdma-core #1222).
    struct Request {
        char note[2048];
        char payload[2048];
    };
    static_assert(sizeof(Request) == 4096);
    wb::Buffer page = wb::alloc_buffer(sizeof(Request));
    auto* req = reinterpret_cast<Request*>(page.get());
    std::strcpy(req->note, "a note beside the payload");
    // LOCAL_WRITE: the payload is where our NIC would put what it receives.
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd, req->payload, sizeof req->payload, IBV_ACCESS_LOCAL_WRITE),
                                  "ulimit -l: is locked memory limited?")};
    // madvise() works on whole pages: the payload's page is the note's too.
    std::printf("step 3: registered the payload at 0x%llx; its page %s, the note's page (0x%llx) %s\n",
                static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(req->payload)),
                dont_copy(req->payload) ? "is VM_DONTCOPY (dc in smaps)" : "is copied into a child",
                static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(req->note)),
                dont_copy(req->note) ? "is VM_DONTCOPY too" : "is copied into a child");

    std::fflush(stdout);
    const pid_t child = CHECK_ERRNO(fork());
    if (child == 0) {
        // The child has no mapping where a VM_DONTCOPY page was: this read
        // of an ordinary variable is a SIGSEGV.
        std::printf("step 3: child %d: the note reads \"%s\"\n", getpid(), req->note);
        std::fflush(stdout);
        _exit(0);
    }
    const int status = wait_child(child, timeout_s, "the child of step 3");
    std::printf("step 3: child %d, which read the note, %s\n", child, status_text(status).c_str());
}

// Step 4: one buffer per request, registered and held, each in the middle
// of a larger mapping, counting this process's mappings as they go.
void step4_split(ibv_context* ctx, ibv_pd* pd) {
    const long page = sysconf(_SC_PAGESIZE);
    const long limit = read_number("/proc/sys/vm/max_map_count");
    // The arena stands for the heap: buffers handed out between other
    // objects, here every other page, each 1 KiB at offset 256.
    char* arena = map_pages(2 * kRequests * page);
    const int before = count_mappings();
    std::printf("step 4: %d mappings before registering; vm.max_map_count is %ld\n", before, limit);

    std::vector<wb::MemoryRegion> mrs;
    for (int i = 0; i < kRequests; ++i) {
        char* buf = arena + 2 * i * page + 256;
        // LOCAL_WRITE: each buffer receives one request's data.
        ibv_mr* mr = ibv_reg_mr(pd, buf, kRequestBytes, IBV_ACCESS_LOCAL_WRITE);
        if (mr == nullptr) {
            // THE FAILURE: madvise(MADV_DONTFORK) must split the arena's
            // mapping once more, and the process is at its limit.
            const int err = errno;
            std::printf("step 4: ibv_reg_mr of buffer %d failed: %s with %d mappings (vm.max_map_count %ld); "
                        "MemAvailable %ld MiB, RLIMIT_MEMLOCK %s, %zu KiB registered\n",
                        i + 1, wb::errno_str(err).c_str(), count_mappings(), limit, available_mib(),
                        memlock_text().c_str(), mrs.size() * kRequestBytes / 1024);
            // At the limit, any verb that needs a new mapping fails too: a
            // CQ's queue is mapped into the process (rxe), so ibv_create_cq
            // fails once the one mapping the limit still allows is taken.
            std::vector<wb::CompletionQueue> cqs;
            for (int k = 0; k < 4; ++k) {
                ibv_cq* cq = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
                if (cq == nullptr) {
                    std::printf("step 4: then ibv_create_cq failed: %s with %d mappings\n",
                                wb::errno_str(errno).c_str(), count_mappings());
                    break;
                }
                cqs.emplace_back(cq);
            }
            break;
        }
        mrs.emplace_back(mr);
        if (mrs.size() % 16 == 0 || mrs.size() <= 2)
            std::printf("step 4: %2zu buffers registered: %d mappings (+%d)\n", mrs.size(), count_mappings(),
                        count_mappings() - before);
    }
    mrs.clear();  // ibv_dereg_mr: MADV_DOFORK, and the kernel merges the pieces again
    std::printf("step 4: all deregistered: %d mappings\n", count_mappings());
    munmap(arena, 2 * kRequests * page);

    // The fix: the request buffers in a page-aligned mapping of their own,
    // registered once; MADV_DONTFORK then covers the whole mapping and
    // splits nothing.
    const int without_pool = count_mappings();
    const size_t pool_bytes = kRequests * kRequestBytes;  // 64 KiB, whole pages
    char* pool = map_pages(pool_bytes);
    wb::MemoryRegion pool_mr{CHECK_PTR(ibv_reg_mr(pd, pool, pool_bytes, IBV_ACCESS_LOCAL_WRITE),
                                       "ulimit -l: is locked memory limited?")};
    std::printf("step 4: the fix: %d buffers of %zu bytes in one mapping of their own, registered once: %d "
                "mappings (+%d)\n",
                kRequests, kRequestBytes, count_mappings(), count_mappings() - without_pool);
    pool_mr.reset();
    munmap(pool, pool_bytes);
}

// The second process: steps 3 and 4 in fork-safe mode.
int fork_safe_steps(const wb::Options& opt) {
    // ibv_fork_init() first, before any verb that registers memory: after
    // one, it refuses with EINVAL (its ranges would not be tracked).
    // RDMAV_FORK_SAFE=1 in the environment does the same when the device
    // list is first read.
    CHECK_RC(ibv_fork_init());
    const ibv_fork_status mode = ibv_is_fork_initialized();
    std::printf("step 3: ibv_fork_init() = 0; ibv_is_fork_initialized() = %s (%d)%s\n", fork_status_name(mode),
                mode,
                mode == IBV_FORK_UNNEEDED ? ": the kernel's answer comes first, but libibverbs now madvises" : "");
    wb::Context ctx = wb::open_device(opt.device);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    step3_dontfork(pd.get(), opt.timeout_s);
    step4_split(ctx.get(), pd.get());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::string size_text, fork_safe_text;
    const wb::ExtraOption extra[] = {
        {'s', "size", "BYTES",
         "server: the region whose fork() step 2 times, 1048576..1073741824\n"
         "                        (default: 67108864, 64 MiB; it must fit in ulimit -l)",
         &size_text},
        {0, "fork-safe", nullptr, "run steps 3 and 4 alone (what the server starts for them)", &fork_safe_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]                  server: steps 1-4; step 2 waits for a client\n"
                    "  lesson19 [options] HOST [MESSAGE]   client: step 1, then RDMA WRITE the MESSAGE into\n"
                    "                                      the server's buffer while the server's child lives\n"
                    "  lesson19 [options] --fork-safe      steps 3 and 4 alone (ibv_fork_init), no peer",
        .summary = "fork() and registered memory: the kernel's copy, MADV_DONTFORK's SIGSEGV, the split address space",
        .notes = "MESSAGE defaults to \"written by the peer into the parent's buffer\".",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool fork_safe = opt.given("fork-safe");
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 2)
        wb::usage_error("expected at most HOST MESSAGE, got " + std::to_string(opt.args.size()) + " arguments");
    if (fork_safe && !is_server) wb::usage_error("--fork-safe runs steps 3 and 4 alone: it takes no HOST");
    if (!is_server && opt.given('s')) wb::usage_error("-s is a server option");
    const size_t region_bytes = static_cast<size_t>(
        opt.given('s') ? wb::parse_range(size_text, "-s", 1 << 20, kMaxRegionBytes) : kDefaultRegionBytes);
    const std::string message = opt.args.size() == 2 ? opt.args[1] : kDefaultMessage;
    if (message.empty()) wb::usage_error("MESSAGE must not be empty");

    if (fork_safe) return fork_safe_steps(opt);

    step1_fork_mode(is_server ? "server" : "client");
    if (!is_server) {
        step2_write(opt, message);
        return 0;
    }
    step2_serve(opt);
    step2_fork_cost(opt, region_bytes);
    return spawn_fork_safe_steps(opt);
}
