// ex2_2.cpp - exercise 2.2: what registering the same memory twice pins.
//
// ibv_reg_mr pins the pages it registers, and the kernel adds them to the
// process's pinned-memory count: VmPin in /proc/self/status, the number that
// RLIMIT_MEMLOCK (ulimit -l) limits. This program registers one 1 MiB buffer,
// then the very same buffer a second time (a second MR: its own keys, its own
// rights, as lesson 2's write target and read source), and reads VmPin at
// each step. Predict first: does the second registration of pages that are
// already pinned count again? The task is in README.md beside this file;
// `make grade EX=2.2` checks the numbers, and that the kernel's limit agrees.
//
// Run it (no peer: one process):
//     build/exercises/starter/ex2_2 [-d DEV]
//     scripts/lab.sh run -- build/exercises/starter/ex2_2     (host without RDMA)
//
// Verbs involved: ibv_alloc_pd, ibv_reg_mr / ibv_dereg_mr (lesson 2).
#include <infiniband/verbs.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "check.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr size_t kBuffer = 1 << 20;  // 1 MiB: 256 pages of 4 KiB

// VmPin from /proc/self/status, in kB: how much memory this process has pinned.
long vmpin_kb() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.starts_with("VmPin:")) return std::stol(line.substr(6));  // "VmPin:      1024 kB"
    wb::fail("no VmPin line in /proc/self/status", "is this Linux?");
}

}  // namespace

int main(int argc, char** argv) {
    const wb::Usage usage = {
        .synopsis = "[-d DEV]",
        .summary = "exercise 2.2: VmPin before and after registering the same 1 MiB twice",
        .network = false,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "'");

    wb::Context ctx = wb::open_device(opt.device);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::Buffer buf = wb::alloc_buffer(kBuffer);  // page-aligned: exactly 256 pages, not 257
    std::printf("device: %s, buffer %zu KiB at %p\n", ibv_get_device_name(ctx->device), kBuffer >> 10,
                static_cast<void*>(buf.get()));

    const long before = vmpin_kb();
    std::printf("VmPin before: %ld kB\n", before);

    // One registration, then the same pages again: a second MR with its own keys.
    // TODO(2.2): register buf (kBuffer bytes, IBV_ACCESS_LOCAL_WRITE), then the
    // same buf again as a second MR; after each, print
    //     VmPin after the first registration: N kB (addr %p, lkey 0x%08x)
    //     VmPin after the second registration: N kB (addr %p, lkey 0x%08x)
    // with the MR's own addr and lkey; then ibv_dereg_mr both and print
    //     VmPin after deregistering both: N kB
    // Predict the numbers before you run it.

    return 0;  // ~buf: free; ~pd: ibv_dealloc_pd; ~ctx: ibv_close_device
}
