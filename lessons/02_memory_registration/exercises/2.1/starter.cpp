// ex2_1.cpp - exercise 2.1: which access flags does the kernel refuse, and why?
//
// Lesson 2 shows two refusals: REMOTE_WRITE and REMOTE_ATOMIC without
// LOCAL_WRITE are EINVAL. This program tries every one of the 16
// combinations of the four access flags on one page, and prints one line per
// combination: registered (with its lkey and rkey), or refused with the errno
// name. The task is in README.md beside this file; `make grade EX=2.1` runs it
// under strace and checks each verdict against the kernel's own answer.
//
// Run it (no peer: one process):
//     build/exercises/starter/ex2_1 [-d DEV]
//     scripts/lab.sh run -- build/exercises/starter/ex2_1     (host without RDMA)
//
// Verbs involved: ibv_alloc_pd, ibv_reg_mr / ibv_dereg_mr, IBV_ACCESS_LOCAL_WRITE,
// _REMOTE_WRITE, _REMOTE_READ, _REMOTE_ATOMIC (lesson 2).
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "check.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

// The four flags of lesson 2, in the order of enum ibv_access_flags.
struct Flag {
    int bit;
    const char* name;
};
[[maybe_unused]] constexpr Flag kFlags[] = {
    {IBV_ACCESS_LOCAL_WRITE, "LOCAL_WRITE"},
    {IBV_ACCESS_REMOTE_WRITE, "REMOTE_WRITE"},
    {IBV_ACCESS_REMOTE_READ, "REMOTE_READ"},
    {IBV_ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC"},
};

// "LOCAL_WRITE|REMOTE_READ", or "0" for no flag at all.
[[maybe_unused]] std::string access_str(int access) {
    std::string s;
    for (const Flag& f : kFlags)
        if (access & f.bit) s += (s.empty() ? "" : "|") + std::string(f.name);
    return s.empty() ? "0" : s;
}

}  // namespace

int main(int argc, char** argv) {
    const wb::Usage usage = {
        .synopsis = "[-d DEV]",
        .summary = "exercise 2.1: register one page with each combination of the access flags",
        .network = false,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "'");

    wb::Context ctx = wb::open_device(opt.device);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    wb::Buffer buf = wb::alloc_buffer(page);
    std::printf("device: %s, one page of %zu bytes at %p\n", ibv_get_device_name(ctx->device), page,
                static_cast<void*>(buf.get()));

    // TODO(2.1): for each of the 16 combinations of kFlags (0 to 15, one bit
    // per flag), call ibv_reg_mr(pd.get(), buf.get(), page, access) and print
    //     access <access_str(access)>: registered, lkey 0x%08x rkey 0x%08x
    // (then ibv_dereg_mr it), or, when it returns NULL,
    //     access <access_str(access)>: refused <wb::errno_str(errno)>
    // A refusal is an answer here, not an error: do not CHECK_PTR these calls.

    return 0;  // ~buf: free; ~pd: ibv_dealloc_pd; ~ctx: ibv_close_device
}
