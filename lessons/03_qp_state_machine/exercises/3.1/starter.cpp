// ex3_1.cpp - exercise 3.1: make RNR happen on purpose, and name the status.
//
// Lesson 3 posts B's receive before anything can arrive. This exercise makes
// QP A's SEND reach QP B while B has no receive posted: B answers with an RNR
// NAK ("receiver not ready"), and A either waits and resends (rnr_retry 7:
// for ever, by the spec) or gives up. With rnr_retry 0 it gives up at the
// first RNR NAK: its SEND completes with IBV_WC_RNR_RETRY_EXC_ERR and QP A
// goes to ERR. The program prints A's completion by enum name and number,
// A's state, and then posts B's receive, too late. The task is in README.md
// beside this file; `make grade EX=3.1` checks the status and the port's RNR
// counters.
//
// This is a slice of lesson 3: two RC QPs of one process, connected to each
// other. It calls wb::qp_to_init and wb::qp_to_rtr (common/qp.cpp, the
// same calls as lesson 3's steps 5 and 7), and makes RTR -> RTS by hand.
//
// Run it (one process, through the device's own loopback):
//     build/exercises/starter/ex3_1 [-d DEV] [-i PORT] [-g INDEX]
//     scripts/lab.sh run -- build/exercises/starter/ex3_1     (host without RDMA)
//
// Verbs involved: ibv_modify_qp (rnr_retry at RTR -> RTS), ibv_post_send,
// ibv_post_recv, ibv_poll_cq, ibv_query_qp (lesson 3).
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

const char kMessage[] = "Hello from QP A";
constexpr size_t kSlot = 64;          // bytes: the SEND goes out of buf[0..63], the receive is buf[64..127]
constexpr auto kWait = std::chrono::seconds(3);  // a loopback SEND takes microseconds; an RNR NAK too

// Poll `cq` for one completion, at most until `deadline`; false if none came.
bool poll_until(ibv_cq* cq, Clock::time_point deadline, ibv_wc& wc) {
    for (;;) {
        int n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc));  // how many it filled (0: none yet)
        if (n == 1) return true;
        if (Clock::now() >= deadline) return false;
        std::this_thread::yield();  // let the device (a kernel thread on rxe) work
    }
}

}  // namespace

int main(int argc, char** argv) {
    const wb::Usage usage = {
        .synopsis = "[-d DEV] [-i PORT] [-g INDEX]",
        .summary = "exercise 3.1: a SEND that finds no receive posted (RNR), with rnr_retry 0",
        .network = false,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "'");

    // Lesson 3, steps 1 to 5: device, address, PD, MR, CQ, two RC QPs in INIT.
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress a = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), a);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::Buffer buf = wb::alloc_buffer(2 * kSlot);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), 2 * kSlot, IBV_ACCESS_LOCAL_WRITE))};
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
    wb::qp_to_init(qb.get(), a, 0);
    std::printf("QP A 0x%x and QP B 0x%x in INIT\n", qa->qp_num, qb->qp_num);

    // Step 6: B's receive, posted before anything can arrive (lesson 3).
    // TODO(3.1): post it only after A's SEND has completed (below), so that the
    // SEND finds no receive at B.
    ibv_sge recv_sge = {.addr = reinterpret_cast<uintptr_t>(buf.get() + kSlot), .length = kSlot, .lkey = mr->lkey};
    ibv_recv_wr recv_wr = {.wr_id = 2, .next = nullptr, .sg_list = &recv_sge, .num_sge = 1};
    ibv_recv_wr* bad_recv = nullptr;
    CHECK_RC(ibv_post_recv(qb.get(), &recv_wr, &bad_recv));

    // Step 7: INIT -> RTR, each QP told the other's QP number and first PSN.
    const uint32_t psn_a = wb::random_psn(), psn_b = wb::random_psn();
    wb::qp_to_rtr(qa.get(), a, wb::local_info(3, qb.get(), psn_b, a));
    wb::qp_to_rtr(qb.get(), a, wb::local_info(3, qa.get(), psn_a, a));

    // Step 8: RTR -> RTS by hand. rnr_retry decides what A does with an RNR NAK.
    ibv_qp_attr rts = {
        .qp_state = IBV_QPS_RTS,
        .max_rd_atomic = 1,     // READ/atomic requests we may have in flight at the peer
        .timeout = 14,          // ACK timeout 4.096 us * 2^14 = 67 ms
        .retry_cnt = 6,         // 7 tries without an ACK, then IBV_WC_RETRY_EXC_ERR (lesson 3)
        .rnr_retry = 7,         // TODO(3.1): 0, no resend after an RNR NAK (1..6: that many resends,
                                // each after B's min_rnr_timer; 7: for ever, as in lesson 3)
    };
    const int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT |
                         IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
    rts.sq_psn = psn_a;  // 24-bit PSN of A's first packet: B's rq_psn
    CHECK_RC(ibv_modify_qp(qa.get(), &rts, rts_mask));
    rts.sq_psn = psn_b;
    CHECK_RC(ibv_modify_qp(qb.get(), &rts, rts_mask));
    std::printf("QP A and QP B in RTS, rnr_retry %u\n", rts.rnr_retry);

    // Step 9: A's SEND, signaled so that it completes on the CQ.
    std::memcpy(buf.get(), kMessage, sizeof kMessage);
    ibv_sge send_sge = {.addr = reinterpret_cast<uintptr_t>(buf.get()), .length = sizeof kMessage, .lkey = mr->lkey};
    ibv_send_wr send_wr = {.wr_id = 1, .sg_list = &send_sge, .num_sge = 1, .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED};
    ibv_send_wr* bad_send = nullptr;
    const auto start = Clock::now();
    CHECK_RC(ibv_post_send(qa.get(), &send_wr, &bad_send));
    std::printf("ibv_post_send on A: SEND \"%s\" (%zu bytes) to B\n", kMessage, sizeof kMessage);

    // Step 10: poll until A's SEND completes; print every completion by name.
    ibv_wc wc{};
    const auto deadline = start + kWait;
    for (;;) {
        if (!poll_until(cq.get(), deadline, wc))
            wb::fail("A's SEND did not complete within 3 s", "is the port ACTIVE (lesson 1)?");
        const long ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
        std::printf("%s: %s (%d, %s) after %ld ms\n", wc.wr_id == 1 ? "A's SEND" : "B's RECV",
                    wb::wc_status_name(wc.status), wc.status, ibv_wc_status_str(wc.status), ms);
        if (wc.wr_id == 1) break;
    }
    const ibv_wc_status sent = wc.status;
    std::printf("QP A is now %s (ibv_query_qp)\n", wb::qp_state_str(wb::query_state(qa.get())));

    // TODO(3.1): post B's receive here, after A's SEND completed, and print
    // "ibv_post_recv on B, after A's SEND completed".
    if (poll_until(cq.get(), Clock::now() + std::chrono::milliseconds(200), wc))
        std::printf("B's RECV: %s (%d)\n", wb::wc_status_name(wc.status), wc.status);
    else
        std::printf("B's receive: no completion within 200 ms\n");

    std::printf("result: A's SEND completed with %s (%d), rnr_retry %u\n", wb::wc_status_name(sent), sent, rts.rnr_retry);
    return 0;  // ~qb, ~qa: ibv_destroy_qp; ~cq; ~mr; ~buf; ~pd; ~ctx: the order of lesson 3's step 11
}
