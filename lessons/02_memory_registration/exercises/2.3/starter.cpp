// ex2_3.cpp - exercise 2.3: deregister an MR to take its rkey back, and see a peer refused.
//
// Lesson 2 says: an rkey is a key to your memory, and ibv_dereg_mr takes it
// back. Here B exposes one page for RDMA READ (lesson 6's operation), and A,
// a peer that kept B's rkey, reads it. The exercise deregisters that MR and
// registers the same page again, with the same flags: the page is exposed as
// before, under a new rkey. A's READ with the new rkey brings the page back;
// its READ with the old one is refused by B's NIC, and A's completion says
// so: IBV_WC_REM_ACCESS_ERR. The task is in README.md beside this file;
// `make grade EX=2.3` checks both READs with a text of its own choosing.
//
// Plumbing, not this exercise's subject: A and B are two RC QPs of one
// process connected to each other by wb::qp_to_init, qp_to_rtr and qp_to_rts
// (common/qp.cpp, lesson 3), and the READ is lesson 6's work request.
//
// Run it (one process, through the device's own loopback):
//     build/exercises/starter/ex2_3 [-d DEV] [-i PORT] [-g INDEX] [-m TEXT]
//     scripts/lab.sh run -- build/exercises/starter/ex2_3 -m 'any text'     (host without RDMA)
//
// Verbs involved: ibv_reg_mr / ibv_dereg_mr, IBV_ACCESS_REMOTE_READ, mr->rkey
// (lesson 2); ibv_post_send with IBV_WR_RDMA_READ, ibv_poll_cq (lessons 3, 6).
#include <infiniband/verbs.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kText = 64;                     // bytes: the most of -m's text the page and the READs carry
constexpr auto kWait = std::chrono::seconds(3);  // a loopback READ takes microseconds

// Poll `cq` for one completion, at most until `deadline`; false if none came.
bool poll_until(ibv_cq* cq, Clock::time_point deadline, ibv_wc& wc) {
    for (;;) {
        int n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc));  // how many it filled (0: none yet)
        if (n == 1) return true;
        if (Clock::now() >= deadline) return false;
        std::this_thread::yield();  // let the device (a kernel thread on rxe) work
    }
}


// A reads B's page with `rkey` into its own buffer `dst`, and prints the
// completion by name; on success, also the text that arrived.
void read_page(ibv_qp* qa, ibv_cq* cq, const ibv_mr* dst_mr, const char* page, uint32_t rkey, const char* which) {
    char* dst = static_cast<char*>(dst_mr->addr);
    std::memset(dst, 0, kText);
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(dst), .length = kText, .lkey = dst_mr->lkey};
    ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,
        .wr = {.rdma = {.remote_addr = reinterpret_cast<uintptr_t>(page), .rkey = rkey}}};
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qa, &wr, &bad));
    ibv_wc wc{};
    if (!poll_until(cq, Clock::now() + kWait, wc)) wb::fail(std::string("no completion for the READ with ") + which);
    std::printf("READ with the %s rkey 0x%08x: %s (%d, %s)", which, rkey, wb::wc_status_name(wc.status), wc.status,
                ibv_wc_status_str(wc.status));
    if (wc.status == IBV_WC_SUCCESS) std::printf(", read back \"%s\"", wb::printable(dst, strnlen(dst, kText)).c_str());
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    std::string text = "Hello from B's page";
    const wb::ExtraOption extra[] = {
        {'m', "message", "TEXT", "what B's page holds, at most 63 bytes (default: \"Hello from B's page\")", &text},
    };
    const wb::Usage usage = {
        .synopsis = "[-d DEV] [-i PORT] [-g INDEX] [-m TEXT]",
        .summary = "exercise 2.3: re-register B's page, then READ it with the new rkey and with the old one",
        .network = false,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "'");
    if (text.size() >= kText) wb::usage_error("-m: at most " + std::to_string(kText - 1) + " bytes");

    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress a = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), a);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};

    // B's page, which a peer may READ: REMOTE_READ only (lesson 2's read source).
    const size_t page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    wb::Buffer page = wb::alloc_buffer(page_size);
    std::memcpy(page.get(), text.c_str(), text.size() + 1);
    wb::MemoryRegion page_mr{CHECK_PTR(ibv_reg_mr(pd.get(), page.get(), page_size, IBV_ACCESS_REMOTE_READ))};
    const uint32_t old_rkey = page_mr->rkey;  // what A was given, and kept
    // A's buffer, where READ responses land: our NIC writes it, so LOCAL_WRITE.
    wb::Buffer dst = wb::alloc_buffer(kText);
    wb::MemoryRegion dst_mr{CHECK_PTR(ibv_reg_mr(pd.get(), dst.get(), kText, IBV_ACCESS_LOCAL_WRITE))};

    // Plumbing (lesson 3): A and B connected; B's QP allows remote READs.
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 4, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_init = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
    };
    wb::QueuePair qa{CHECK_PTR(ibv_create_qp(pd.get(), &qp_init))};
    wb::QueuePair qb{CHECK_PTR(ibv_create_qp(pd.get(), &qp_init))};
    wb::qp_to_init(qa.get(), a, 0);
    wb::qp_to_init(qb.get(), a, IBV_ACCESS_REMOTE_READ);
    const uint32_t psn_a = wb::random_psn(), psn_b = wb::random_psn();
    wb::qp_to_rtr(qa.get(), a, wb::local_info(2, qb.get(), psn_b, a));
    wb::qp_to_rtr(qb.get(), a, wb::local_info(2, qa.get(), psn_a, a));
    wb::qp_to_rts(qa.get(), psn_a);
    wb::qp_to_rts(qb.get(), psn_b);

    // TODO(2.3): take the key back, and expose the same page again:
    // deregister page_mr (wb::MemoryRegion::reset() calls ibv_dereg_mr), then
    // register the same page, with the same flags, into page_mr.
    std::printf("B's page: rkey 0x%08x before, 0x%08x after ibv_dereg_mr and ibv_reg_mr again\n", old_rkey,
                page_mr->rkey);

    // A reads with the new key, then with the old one it kept. The new one
    // first: a refused request puts both QPs in ERR.
    read_page(qa.get(), cq.get(), dst_mr.get(), page.get(), page_mr->rkey, "new");
    read_page(qa.get(), cq.get(), dst_mr.get(), page.get(), old_rkey, "old");
    return 0;  // ~qb, ~qa; ~cq; ~dst_mr, ~dst; ~page_mr, ~page; ~pd; ~ctx
}
