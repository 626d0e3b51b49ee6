// ex10_1.cpp - exercise 10.1: three mistakes, three statuses. Read each one, find its cause, fix it.
//
// A puts a text into B's page with an RDMA WRITE, then SENDs the same text
// into a receive that B posted. As given, this program fails: the first
// completion that is not IBV_WC_SUCCESS stops it, printed by its enum name
// and number. Look that status up in docs/lesson10-failures.md ("what
// now?"), fix its cause, run again: the next mistake shows. There are three.
// The task is in README.md beside this file; `make grade EX=10.1` checks
// that the WRITE and the SEND both carry the grader's text.
//
// Plumbing, not this exercise's subject: A and B are two RC QPs of one
// process connected to each other by wb::qp_to_init, qp_to_rtr and qp_to_rts
// (common/qp.cpp, lesson 3): the device's loopback carries the packets.
//
// Run it (one process):
//     build/exercises/starter/ex10_1 [-d DEV] [-i PORT] [-g INDEX] [--message TEXT]
//     scripts/lab.sh run -- build/exercises/starter/ex10_1 --message 'any text'     (host without RDMA)
//
// Verbs involved: ibv_reg_mr access flags (lesson 2), qp_access_flags
// (lesson 3), ibv_post_recv / IBV_WR_SEND (lesson 4), IBV_WR_RDMA_WRITE
// (lesson 5), ibv_poll_cq and wc.status (lesson 10).
#include <infiniband/verbs.h>

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
constexpr uint32_t kText = 64;  // bytes the WRITE and the SEND carry: --message's text, NUL-padded

// Wait (at most 3 s: loopback takes microseconds) for one completion on `cq`,
// print it as "WHO: WHAT: IBV_WC_... (N, text)", and stop the program at the
// first one that failed: after it, every other is a flush, its echo.
void expect_success(ibv_cq* cq, const char* who_what) {
    ibv_wc wc{};
    const auto deadline = Clock::now() + std::chrono::seconds(3);
    int n = 0;
    while ((n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc))) == 0 && Clock::now() < deadline) std::this_thread::yield();
    if (n == 0) wb::fail(std::string("no completion for ") + who_what + " within 3 s");
    std::printf("%s: %s (%d, %s)\n", who_what, wb::wc_status_name(wc.status), wc.status, ibv_wc_status_str(wc.status));
    if (wc.status != IBV_WC_SUCCESS) {
        std::printf("result: error: %s failed with %s: docs/lesson10-failures.md says what now\n", who_what,
                    wb::wc_status_name(wc.status));
        std::exit(1);
    }
}

void post_send(ibv_qp* qp, const ibv_mr* mr, ibv_wr_opcode opcode, uint64_t remote_addr, uint32_t rkey) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = kText, .lkey = mr->lkey};
    // .wr.rdma is ignored by a SEND.
    ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = opcode, .send_flags = IBV_SEND_SIGNALED,
        .wr = {.rdma = {.remote_addr = remote_addr, .rkey = rkey}}};
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

}  // namespace

int main(int argc, char** argv) {
    std::string text = "Hello, B";
    const wb::ExtraOption extra[] = {
        {0, "message", "TEXT", "what A writes and sends, at most 63 bytes (default: \"Hello, B\")", &text},
    };
    const wb::Usage usage = {
        .synopsis = "[-d DEV] [-i PORT] [-g INDEX] [--message TEXT]",
        .summary = "exercise 10.1: an RDMA WRITE and a SEND from A to B, with three mistakes to find",
        .network = false,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "'");
    if (text.size() >= kText) wb::usage_error("--message: at most " + std::to_string(kText - 1) + " bytes");

    // 1. Device, PD, a CQ for each QP.
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress a = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), a);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq_a{CHECK_PTR(ibv_create_cq(ctx.get(), 2, nullptr, nullptr, 0))},
        cq_b{CHECK_PTR(ibv_create_cq(ctx.get(), 2, nullptr, nullptr, 0))};  // one CQ per QP

    // TODO(10.1): steps 2 to 4 hold three mistakes. Run the program, read the
    // status it stops at, look it up in docs/lesson10-failures.md, fix the
    // cause here, and run again, until A's WRITE and SEND and B's RECV all
    // say IBV_WC_SUCCESS. Do not change what A does (step 5).

    // 2. Memory. A's source: the NIC only reads it, no flag. B's page, which
    //    A's RDMA WRITE fills, and B's inbox, where A's SEND lands.
    wb::Buffer src = wb::alloc_buffer(kText);
    std::memcpy(src.get(), text.c_str(), text.size());
    wb::MemoryRegion src_mr{CHECK_PTR(ibv_reg_mr(pd.get(), src.get(), kText, 0))};
    wb::Buffer page = wb::alloc_buffer(kText);
    wb::MemoryRegion page_mr{
        CHECK_PTR(ibv_reg_mr(pd.get(), page.get(), kText, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ))};
    wb::Buffer inbox = wb::alloc_buffer(kText);
    wb::MemoryRegion inbox_mr{CHECK_PTR(ibv_reg_mr(pd.get(), inbox.get(), kText, IBV_ACCESS_LOCAL_WRITE))};

    // 3. Two RC QPs, A and B, connected to each other (lesson 3's values).
    ibv_qp_init_attr init_a = {
        .send_cq = cq_a.get(),
        .recv_cq = cq_a.get(),
        .cap = {.max_send_wr = 2, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    ibv_qp_init_attr init_b = init_a;
    init_b.send_cq = init_b.recv_cq = cq_b.get();
    wb::QueuePair qa{CHECK_PTR(ibv_create_qp(pd.get(), &init_a))};
    wb::QueuePair qb{CHECK_PTR(ibv_create_qp(pd.get(), &init_b))};
    wb::qp_to_init(qa.get(), a, 0);
    wb::qp_to_init(qb.get(), a, IBV_ACCESS_REMOTE_READ);  // what A may do to B's memory through B's QP

    // 4. B's receive, before A can send (lesson 4).
    ibv_sge rsge = {.addr = reinterpret_cast<uintptr_t>(inbox.get()), .length = 8, .lkey = inbox_mr->lkey};
    ibv_recv_wr rwr = {.wr_id = 2, .next = nullptr, .sg_list = &rsge, .num_sge = 1};
    ibv_recv_wr* rbad = nullptr;
    CHECK_RC(ibv_post_recv(qb.get(), &rwr, &rbad));

    const uint32_t psn_a = wb::random_psn(), psn_b = wb::random_psn();
    wb::qp_to_rtr(qa.get(), a, wb::local_info(10, qb.get(), psn_b, a));
    wb::qp_to_rtr(qb.get(), a, wb::local_info(10, qa.get(), psn_a, a));
    wb::qp_to_rts(qa.get(), psn_a);
    wb::qp_to_rts(qb.get(), psn_b);

    // 5. What A does: WRITE the text into B's page, then SEND it to B.
    post_send(qa.get(), src_mr.get(), IBV_WR_RDMA_WRITE, reinterpret_cast<uintptr_t>(page.get()), page_mr->rkey);
    expect_success(cq_a.get(), "A: RDMA WRITE");
    post_send(qa.get(), src_mr.get(), IBV_WR_SEND, 0, 0);
    expect_success(cq_a.get(), "A: SEND");
    expect_success(cq_b.get(), "B: RECV");
    std::printf("result: B's page holds \"%s\", B's inbox \"%s\"\n",
                wb::printable(page.get(), strnlen(page.get(), kText)).c_str(),
                wb::printable(inbox.get(), strnlen(inbox.get(), kText)).c_str());
    return 0;  // ~qb, ~qa; ~inbox_mr ... ~src_mr, ~src; ~cq_b, ~cq_a; ~pd; ~ctx
}
