// ex10_2.cpp - exercise 10.2: bring a failed queue pair back, and use it again.
//
// A SENDs to B before B has posted a receive, with rnr_retry 0: the SEND
// completes with IBV_WC_RNR_RETRY_EXC_ERR (13) and A's QP is in ERR. A QP in
// ERR does nothing but flush: every WR posted to it completes with
// IBV_WC_WR_FLUSH_ERR (5). The exercise brings both QPs back through
// RESET -> INIT -> RTR -> RTS, with fresh PSNs, and SENDs the text again,
// which must arrive. The task is in README.md beside this file;
// `make grade EX=10.2` runs it with a text of its own.
//
// Plumbing, not this exercise's subject: A and B are two RC QPs of one
// process connected to each other by wb::qp_to_init, qp_to_rtr and
// qp_to_rts (common/qp.cpp, lesson 3); the device's loopback carries
// the packets. rnr_retry 0 needs its own RTS transition (to_rts_rnr0).
//
// Run it (one process):
//     build/exercises/starter/ex10_2 [-d DEV] [-i PORT] [-g INDEX] [--message TEXT]
//     scripts/lab.sh run -- build/exercises/starter/ex10_2 --message 'any text'     (host without RDMA)
//
// Verbs involved: ibv_modify_qp to IBV_QPS_RESET and onwards (lessons 3 and
// 10), ibv_query_qp (wb::query_state), ibv_post_recv, IBV_WR_SEND (lesson 4).
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
constexpr uint32_t kText = 64;  // bytes each SEND carries: --message's text, NUL-padded

// Wait (at most 3 s) for one completion on `cq` and print it as
// "WHAT: IBV_WC_... (N, text)"; returns its status.
ibv_wc_status print_completion(ibv_cq* cq, const char* what) {
    ibv_wc wc{};
    const auto deadline = Clock::now() + std::chrono::seconds(3);
    int n = 0;
    while ((n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc))) == 0 && Clock::now() < deadline) std::this_thread::yield();
    if (n == 0) wb::fail(std::string("no completion for ") + what + " within 3 s");
    std::printf("%s: %s (%d, %s)\n", what, wb::wc_status_name(wc.status), wc.status, ibv_wc_status_str(wc.status));
    return wc.status;
}

// "A: QP is IBV_QPS_RESET": the state ibv_query_qp reports now.
void print_state(ibv_qp* qp, const char* who) {
    std::printf("%s: QP is %s\n", who, wb::qp_state_name(wb::query_state(qp)));
}

// B's receive, for the whole inbox (the starter never posts it).
[[maybe_unused]] void post_receive(ibv_qp* qp, const ibv_mr* mr) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = kText, .lkey = mr->lkey};
    ibv_recv_wr wr = {.wr_id = 2, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

void post_send(ibv_qp* qp, const ibv_mr* mr) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = kText, .lkey = mr->lkey};
    ibv_send_wr wr = {.wr_id = 1, .next = nullptr, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                      .send_flags = IBV_SEND_SIGNALED};
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

// RTR -> RTS like wb::qp_to_rts, but with rnr_retry 0: the first RNR NAK is fatal.
void to_rts_rnr0(ibv_qp* qp, uint32_t psn) {
    ibv_qp_attr attr = {.qp_state = IBV_QPS_RTS, .sq_psn = psn, .max_rd_atomic = 1, .timeout = 14,
                        .retry_cnt = 6, .rnr_retry = 0};
    CHECK_RC(ibv_modify_qp(qp, &attr,
                           IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT |
                               IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY));
}

}  // namespace

int main(int argc, char** argv) {
    std::string text = "Hello again, B";
    const wb::ExtraOption extra[] = {
        {0, "message", "TEXT", "what A sends, at most 63 bytes (default: \"Hello again, B\")", &text},
    };
    const wb::Usage usage = {
        .synopsis = "[-d DEV] [-i PORT] [-g INDEX] [--message TEXT]",
        .summary = "exercise 10.2: a SEND fails with RNR, the QPs are recovered, the SEND is made again",
        .network = false,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "'");
    if (text.size() >= kText) wb::usage_error("--message: at most " + std::to_string(kText - 1) + " bytes");

    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress a = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), a);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq_a{CHECK_PTR(ibv_create_cq(ctx.get(), 2, nullptr, nullptr, 0))},
        cq_b{CHECK_PTR(ibv_create_cq(ctx.get(), 2, nullptr, nullptr, 0))};  // one CQ per QP
    // A's source: only read by the NIC. B's inbox: written by B's NIC.
    wb::Buffer src = wb::alloc_buffer(kText);
    std::memcpy(src.get(), text.c_str(), text.size());
    wb::MemoryRegion src_mr{CHECK_PTR(ibv_reg_mr(pd.get(), src.get(), kText, 0))};
    wb::Buffer inbox = wb::alloc_buffer(kText);
    wb::MemoryRegion inbox_mr{CHECK_PTR(ibv_reg_mr(pd.get(), inbox.get(), kText, IBV_ACCESS_LOCAL_WRITE))};
    ibv_qp_init_attr init_a = {
        .send_cq = cq_a.get(),
        .recv_cq = cq_a.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    ibv_qp_init_attr init_b = init_a;
    init_b.send_cq = init_b.recv_cq = cq_b.get();
    wb::QueuePair qa{CHECK_PTR(ibv_create_qp(pd.get(), &init_a))};
    wb::QueuePair qb{CHECK_PTR(ibv_create_qp(pd.get(), &init_b))};

    // 1. Connect A and B; B posts NO receive, A's rnr_retry is 0.
    wb::qp_to_init(qa.get(), a, 0);
    wb::qp_to_init(qb.get(), a, 0);
    uint32_t psn_a = wb::random_psn(), psn_b = wb::random_psn();
    wb::qp_to_rtr(qa.get(), a, wb::local_info(10, qb.get(), psn_b, a));
    wb::qp_to_rtr(qb.get(), a, wb::local_info(10, qa.get(), psn_a, a));
    to_rts_rnr0(qa.get(), psn_a);
    wb::qp_to_rts(qb.get(), psn_b);

    // 2. The failure: B's NIC answers RNR NAK, A gives up at once.
    post_send(qa.get(), src_mr.get());
    print_completion(cq_a.get(), "A: first SEND");
    print_state(qa.get(), "A");
    print_state(qb.get(), "B");

    // TODO(10.2): bring A and B back. For each QP: ibv_modify_qp to
    // IBV_QPS_RESET (mask IBV_QP_STATE), then INIT, RTR and RTS again as in
    // step 1, with fresh PSNs (wb::random_psn) so that neither side expects
    // the PSN of the SEND that failed; print_state after each step. B's
    // receive goes in while B is in INIT or later, before A sends again. A
    // may keep rnr_retry 0, or use wb::qp_to_rts (rnr_retry 7).

    // 3. The SEND again, on the recovered QPs.
    post_send(qa.get(), src_mr.get());
    if (print_completion(cq_a.get(), "A: second SEND") != IBV_WC_SUCCESS) {
        std::printf("result: error: the second SEND failed too: a QP in ERR flushes every work request\n");
        return 1;
    }
    if (print_completion(cq_b.get(), "B: RECV") != IBV_WC_SUCCESS) {
        std::printf("result: error: B's receive failed\n");
        return 1;
    }
    std::printf("result: recovered: B received \"%s\"\n", wb::printable(inbox.get(), strnlen(inbox.get(), kText)).c_str());
    return 0;  // ~qb, ~qa; ~inbox_mr, ~inbox; ~src_mr, ~src; ~cq_b, ~cq_a; ~pd; ~ctx
}
