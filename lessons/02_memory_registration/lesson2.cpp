// lesson2.cpp - memory registration: what ibv_reg_mr gives, what each access flag allows, and its limits.
//
// A NIC can only touch memory that was registered: ibv_reg_mr pins the pages
// (so the kernel cannot move or swap them) and tells the NIC where they are.
// It returns an lkey, which our own work requests name, and an rkey, which a
// peer names in RDMA WRITE, READ and atomic requests. The access flags decide
// what the NIC may do with the memory, and for whom. This lesson allocates a
// protection domain, registers buffers with different flags, prints address,
// length, lkey and rkey, and shows the rules by trying them:
//   - REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is refused (EINVAL);
//   - registering memory that does not exist is refused;
//   - pinned memory counts against RLIMIT_MEMLOCK (ulimit -l): over it,
//     ibv_reg_mr fails with ENOMEM, unless the process has CAP_IPC_LOCK;
//   - a PD cannot be freed while MRs are in it (EBUSY): deregister first.
//
// Run it (no peer: one process, no network traffic):
//     ./lesson2                  on the first device
//     ./lesson2 -d rxe0          on that device
// On two hosts there is nothing to run twice: registration is local. The
// rkey printed here is what lessons 5 to 7 send to their peer.
//
// Verbs it introduces:
//     ibv_alloc_pd / ibv_dealloc_pd
//     ibv_reg_mr / ibv_dereg_mr, IBV_ACCESS_LOCAL_WRITE, _REMOTE_WRITE,
//     _REMOTE_READ, _REMOTE_ATOMIC; mr->addr, length, lkey, rkey
//     (and, from the C library: getrlimit/setrlimit(RLIMIT_MEMLOCK))
//
// Verbs from earlier lessons, through common/: ibv_get_device_list and
// ibv_open_device (lesson 1's walk, in wb::open_device, common/device.cpp).
//
// Read more: man ibv_alloc_pd, man ibv_reg_mr, man getrlimit (RLIMIT_MEMLOCK),
// man capabilities (CAP_IPC_LOCK); docs/lesson2-memory-registration.md.
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "check.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr size_t kBigRegistration = 1 << 20;  // 1 MiB: the registration that goes over the lowered limit
constexpr rlim_t kLoweredLimit = 64 << 10;    // 64 KiB: the soft RLIMIT_MEMLOCK we set to show the rule

// "LOCAL_WRITE|REMOTE_READ", or "0 (local read only)".
std::string access_str(int access) {
    std::string s;
    auto add = [&](int flag, const char* name) {
        if (access & flag) s += (s.empty() ? "" : "|") + std::string(name);
    };
    add(IBV_ACCESS_LOCAL_WRITE, "LOCAL_WRITE");
    add(IBV_ACCESS_REMOTE_WRITE, "REMOTE_WRITE");
    add(IBV_ACCESS_REMOTE_READ, "REMOTE_READ");
    add(IBV_ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC");
    return s.empty() ? "0 (local read only)" : s;
}

void print_mr(const char* what, const ibv_mr* mr, int access) {
    std::printf("  %-13s addr %p length %6zu lkey 0x%08x rkey 0x%08x access %s\n", what, mr->addr, mr->length,
                mr->lkey, mr->rkey, access_str(access).c_str());
}

// Try a registration the rules forbid: it must fail, and we show how.
// Returns the errno name it failed with.
std::string expect_refused(ibv_mr* mr, const char* call, const char* rule) {
    if (mr != nullptr) {
        ibv_dereg_mr(mr);
        wb::fail(std::string(call) + " succeeded, but " + rule, "is this a provider that ignores the rule?");
    }
    int err = errno;
    std::printf("  %s\n    -> refused: %s\n    rule: %s\n", call, wb::errno_str(err).c_str(), rule);
    const char* name = strerrorname_np(err);
    return name ? name : std::to_string(err);
}

std::string bytes_str(rlim_t v) {
    if (v == RLIM_INFINITY) return "unlimited";
    return std::to_string(v) + " bytes (" + std::to_string(v >> 10) + " KiB)";
}

// VmPin from /proc/self/status: how much memory this process has pinned.
std::string pinned_now() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.starts_with("VmPin:")) return line.substr(line.find_first_not_of(" \t", 6));
    return "unknown";
}

// Plumbing, not RDMA: read or change CAP_IPC_LOCK in our effective set with
// the raw capget/capset system calls (man capget). Dropping it from the
// effective set keeps it in the permitted set, so it can be raised again.
bool ipc_lock_effective() {
    __user_cap_header_struct hdr{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    __user_cap_data_struct data[2]{};
    CHECK_ERRNO(syscall(SYS_capget, &hdr, data));
    return data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32));
}
void set_ipc_lock_effective(bool on) {
    __user_cap_header_struct hdr{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    __user_cap_data_struct data[2]{};
    CHECK_ERRNO(syscall(SYS_capget, &hdr, data));
    if (on) data[CAP_IPC_LOCK / 32].effective |= 1u << (CAP_IPC_LOCK % 32);
    else data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    CHECK_ERRNO(syscall(SYS_capset, &hdr, data));
}

}  // namespace

int main(int argc, char** argv) {
    wb::Usage usage{
        .synopsis = "[-d DEV]",
        .summary = "register memory with different access flags and show the rules by trying them",
        .network = false,
        .port_and_gid = false,  // lesson 2 registers memory: it needs a device, no port and no GID
    };
    wb::Options opt = wb::parse_options(argc, argv, usage);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "': lesson 2 takes no host");

    // The handles below are declared in creation order: C++ destroys locals
    // in reverse, which is the order rdma-core requires (step 7 shows why).
    // Every later lesson relies on this and says only "in creation order".
    //
    // 1. The device: wb::open_device is lesson 1's ibv_get_device_list +
    //    ibv_open_device walk (the first device, or -d).
    wb::Context ctx = wb::open_device(opt.device);
    std::printf("device: %s (opened with wb::open_device, lesson 1's walk)\n", ibv_get_device_name(ctx->device));

    // 2. A protection domain: every MR and QP belongs to one, and a QP can
    //    only use MRs of its own PD. Its deleter is ibv_dealloc_pd.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    std::printf("ibv_alloc_pd: protection domain handle %u\n", pd->handle);

    // 3. Memory to register: page-aligned, zeroed. Four pages, one per use.
    //    It must outlive its MRs (the NIC may touch it until ibv_dereg_mr),
    //    so it is declared before them and freed after them.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    wb::Buffer buf = wb::alloc_buffer(4 * page);
    char* send_src = buf.get();             // page 0: what we SEND
    char* recv_dst = buf.get() + page;      // page 1: where incoming SENDs land
    char* exposed = buf.get() + 2 * page;   // page 2: what a peer may WRITE, or READ
    char* counter = buf.get() + 3 * page;   // page 3: an 8-byte counter for a peer's atomics

    // 4. Register each piece with exactly the access its use needs. The NIC
    //    may always READ registered memory for our own requests (access 0).
    std::printf("ibv_reg_mr, least privilege (lkey: our work requests name it; rkey: a peer's do):\n");
    // The source of our SENDs: the NIC only reads it, for us. No flag at all.
    const int send_access = 0;
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_src, page, send_access))};
    print_mr("send source", send_mr.get(), send_access);
    // A receive buffer: the NIC WRITES incoming SENDs here, for us: LOCAL_WRITE.
    const int recv_access = IBV_ACCESS_LOCAL_WRITE;
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_dst, page, recv_access))};
    print_mr("recv target", recv_mr.get(), recv_access);
    // A peer may RDMA WRITE here (lesson 5): REMOTE_WRITE, which needs LOCAL_WRITE too.
    const int write_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    wb::MemoryRegion write_mr{CHECK_PTR(ibv_reg_mr(pd.get(), exposed, page, write_access))};
    print_mr("write target", write_mr.get(), write_access);
    // The same page, for a different peer who may only RDMA READ it (lesson 6):
    // a second MR over the same memory gets its own keys and its own rights.
    const int read_access = IBV_ACCESS_REMOTE_READ;
    wb::MemoryRegion read_mr{CHECK_PTR(ibv_reg_mr(pd.get(), exposed, page, read_access))};
    print_mr("read source", read_mr.get(), read_access);
    // A peer may run compare-and-swap / fetch-and-add on 8 bytes (lesson 7):
    // REMOTE_ATOMIC, which writes, so LOCAL_WRITE too. Only 8 bytes exposed.
    const int atomic_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    wb::MemoryRegion atomic_mr{CHECK_PTR(ibv_reg_mr(pd.get(), counter, sizeof(uint64_t), atomic_access))};
    print_mr("atomic target", atomic_mr.get(), atomic_access);
    std::printf("  a peer can use an rkey only for what the MR's flags allow (an MR without remote\n"
                "  access may show rkey 0): a WRITE to the read source fails at the peer with\n"
                "  IBV_WC_REM_ACCESS_ERR. An rkey is a key to your memory: send it only to the peer\n"
                "  that needs it, with only the rights it needs; deregister the MR to take it back.\n");
    std::printf("  pinned by this process now: VmPin %s (/proc/self/status)\n", pinned_now().c_str());

    // 5. The rules, by trying them. These calls must fail; we check that they do.
    std::printf("registrations the rules refuse:\n");
    std::string einval_write = expect_refused(
        ibv_reg_mr(pd.get(), exposed, page, IBV_ACCESS_REMOTE_WRITE),
        "ibv_reg_mr(pd, exposed, page, IBV_ACCESS_REMOTE_WRITE)",
        "REMOTE_WRITE needs LOCAL_WRITE: a peer's write is a write by our NIC into our memory");
    std::string einval_atomic = expect_refused(
        ibv_reg_mr(pd.get(), counter, sizeof(uint64_t), IBV_ACCESS_REMOTE_ATOMIC),
        "ibv_reg_mr(pd, counter, 8, IBV_ACCESS_REMOTE_ATOMIC)",
        "REMOTE_ATOMIC needs LOCAL_WRITE too: an atomic writes its result into our memory");
    std::string efault = expect_refused(
        ibv_reg_mr(pd.get(), nullptr, page, IBV_ACCESS_LOCAL_WRITE),
        "ibv_reg_mr(pd, nullptr, page, IBV_ACCESS_LOCAL_WRITE)",
        "only memory that exists in this process can be pinned and registered");

    // 6. RLIMIT_MEMLOCK: registered pages are pinned, and pinned memory
    //    counts against this limit (ulimit -l) unless the process has
    //    CAP_IPC_LOCK (root has it). Docker's default is 8 MiB.
    rlimit old{};
    CHECK_ERRNO(getrlimit(RLIMIT_MEMLOCK, &old));
    const bool privileged = ipc_lock_effective();
    std::printf("RLIMIT_MEMLOCK (getrlimit): soft %s, hard %s\n", bytes_str(old.rlim_cur).c_str(),
                bytes_str(old.rlim_max).c_str());
    std::printf("  CAP_IPC_LOCK: %s\n", privileged ? "yes (root or granted): the kernel does not apply the limit"
                                                   : "no: every ibv_reg_mr must fit under the soft limit");
    rlimit lowered = old;
    lowered.rlim_cur = kLoweredLimit;
    CHECK_ERRNO(setrlimit(RLIMIT_MEMLOCK, &lowered));
    std::printf("  setrlimit: soft limit lowered to %s; now registering %zu KiB:\n",
                bytes_str(kLoweredLimit).c_str(), kBigRegistration >> 10);
    wb::Buffer big = wb::alloc_buffer(kBigRegistration);
    if (privileged) {
        // First with the capability: the limit does not apply.
        ibv_mr* mr = CHECK_PTR(ibv_reg_mr(pd.get(), big.get(), kBigRegistration, IBV_ACCESS_LOCAL_WRITE));
        std::printf("  with CAP_IPC_LOCK: ibv_reg_mr succeeded (lkey 0x%08x): the capability bypasses the limit\n",
                    mr->lkey);
        CHECK_RC(ibv_dereg_mr(mr));
        // Then without it, as an ordinary user would run.
        set_ipc_lock_effective(false);
        std::printf("  CAP_IPC_LOCK dropped from the effective set (capset), as for an ordinary user:\n");
    }
    std::string enomem = expect_refused(
        ibv_reg_mr(pd.get(), big.get(), kBigRegistration, IBV_ACCESS_LOCAL_WRITE),
        "ibv_reg_mr(pd, big, 1 MiB, IBV_ACCESS_LOCAL_WRITE)",
        "pinned memory may not exceed RLIMIT_MEMLOCK without CAP_IPC_LOCK: raise ulimit -l "
        "(/etc/security/limits.conf, docker --ulimit memlock=-1)");
    if (privileged) set_ipc_lock_effective(true);
    CHECK_ERRNO(setrlimit(RLIMIT_MEMLOCK, &old));
    std::printf("  setrlimit: soft limit restored to %s\n", bytes_str(old.rlim_cur).c_str());

    // 7. Teardown order. A PD cannot go while MRs are in it: the kernel refuses.
    std::printf("teardown order:\n");
    int rc = ibv_dealloc_pd(pd.get());  // returns 0 or an errno value
    if (rc == 0) {
        (void)pd.release();  // it is gone: do not free it twice
        wb::fail("ibv_dealloc_pd succeeded with 5 MRs still registered", "is this provider checking use counts?");
    }
    std::printf("  ibv_dealloc_pd(pd) with 5 MRs still in it -> refused: %s\n", wb::errno_str(rc).c_str());
    std::printf("  so: ibv_dereg_mr for each MR, then free the memory, then ibv_dealloc_pd, then\n"
                "  ibv_close_device. The handles are declared in creation order, and C++ destroys\n"
                "  them in reverse: exactly that order.\n");
    std::printf("result: 5 MRs registered with least privilege; refused as the rules say: REMOTE_WRITE "
                "without LOCAL_WRITE %s, REMOTE_ATOMIC without LOCAL_WRITE %s, unmapped memory %s, 1 MiB over "
                "a 64 KiB RLIMIT_MEMLOCK %s, a PD with MRs %s\n",
                einval_write.c_str(), einval_atomic.c_str(), efault.c_str(), enomem.c_str(), strerrorname_np(rc));
    return 0;  // ~big: free; ~atomic_mr ... ~send_mr: ibv_dereg_mr; ~buf: free; ~pd: ibv_dealloc_pd; ~ctx: ibv_close_device
}
