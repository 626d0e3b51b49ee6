// ex3_3.cpp - exercise 3.3: mismatched PSNs; predict, then measure, how long until A gives up.
//
// B's rq_psn must be A's sq_psn: it is the packet sequence number B expects
// first. The exercise makes B expect A's sq_psn - 5, as if five of A's packets had been
// lost: A's SEND arrives "out of sequence", B answers once with a NAK and
// then drops every resend, and A, which never gets its ACK, resends after
// each `timeout` until `retry_cnt` resends are used up. Its SEND then
// completes with IBV_WC_RETRY_EXC_ERR. The program prints the predicted time,
// (retry_cnt + 1) tries x 4.096 us x 2^timeout, and the measured one. The
// task is in README.md beside this file; `make grade EX=3.3` runs it with
// -r 6 and -r 1 and checks the status, the times and the port's counters.
//
// This is a slice of lesson 3: two RC QPs of one process, connected to each
// other. It calls wb::qp_to_init and wb::qp_to_rtr (common/qp.cpp, the
// same calls as lesson 3's steps 5 and 7), and makes RTR -> RTS by hand.
//
// Run it (one process, through the device's own loopback):
//     build/exercises/starter/ex3_3 [-d DEV] [-i PORT] [-g INDEX] [-r RETRY_CNT]
//     scripts/lab.sh run -- build/exercises/starter/ex3_3 -r 1     (host without RDMA)
//
// Verbs involved: ibv_modify_qp (rq_psn at INIT -> RTR; sq_psn, timeout,
// retry_cnt at RTR -> RTS), ibv_post_send, ibv_poll_cq (lesson 3).
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
constexpr auto kWait = std::chrono::seconds(3);  // 7 tries of 67 ms take 0.47 s; retry_cnt 7 on rxe: for ever
constexpr uint8_t kTimeout = 14;               // ACK timeout code: 4.096 us * 2^14 = 67.1 ms per try
constexpr uint32_t kPsnGap = 5;                // B expects A's first PSN minus this: "5 packets lost"

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
    std::string retry_text = "6";
    const wb::ExtraOption extra[] = {
        {'r', "retry-cnt", "N", "A's retry_cnt, 0..7: resends without an ACK before giving up (default: 6)",
         &retry_text},
    };
    const wb::Usage usage = {
        .synopsis = "[-d DEV] [-i PORT] [-g INDEX] [-r RETRY_CNT]",
        .summary = "exercise 3.3: B expects a different PSN from A's: how long until A's SEND gives up?",
        .network = false,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "'");
    [[maybe_unused]] const auto retry_cnt = static_cast<uint8_t>(wb::parse_range(retry_text, "-r", 0, 7));

    // Lesson 3, steps 1 to 6: device, address, PD, MR, CQ, two RC QPs in INIT,
    // B's receive posted.
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
    ibv_sge recv_sge = {.addr = reinterpret_cast<uintptr_t>(buf.get() + kSlot), .length = kSlot, .lkey = mr->lkey};
    ibv_recv_wr recv_wr = {.wr_id = 2, .next = nullptr, .sg_list = &recv_sge, .num_sge = 1};
    ibv_recv_wr* bad_recv = nullptr;
    CHECK_RC(ibv_post_recv(qb.get(), &recv_wr, &bad_recv));

    // Step 7: INIT -> RTR. B's rq_psn is the PSN it expects first: lesson 3
    // gives it A's sq_psn, as below.
    const uint32_t psn_a = wb::random_psn(), psn_b = wb::random_psn();
    const uint32_t b_expects = psn_a;  // TODO(3.3): kPsnGap before psn_a, wrapped to 24 bits
    wb::qp_to_rtr(qa.get(), a, wb::local_info(3, qb.get(), psn_b, a));
    wb::qp_to_rtr(qb.get(), a, wb::local_info(3, qa.get(), b_expects, a));
    std::printf("A's sq_psn 0x%06x, B's rq_psn 0x%06x\n", psn_a, b_expects);

    // Step 8: RTR -> RTS by hand.
    ibv_qp_attr rts = {
        .qp_state = IBV_QPS_RTS,
        .max_rd_atomic = 1,      // READ/atomic requests we may have in flight at the peer
        .timeout = kTimeout,     // ACK timeout code: 4.096 us * 2^timeout before resending
        .retry_cnt = 6,          // TODO(3.3): retry_cnt, from -r. Resends without an ACK, then
                                 // IBV_WC_RETRY_EXC_ERR (7: for ever on rxe)
        .rnr_retry = 7,          // 7 = for ever after RNR NAKs (B has its receive posted)
    };
    const int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT |
                         IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
    rts.sq_psn = psn_a;  // 24-bit PSN of A's first packet
    CHECK_RC(ibv_modify_qp(qa.get(), &rts, rts_mask));
    rts.sq_psn = psn_b;
    CHECK_RC(ibv_modify_qp(qb.get(), &rts, rts_mask));

    // TODO(3.3): the prediction: how long will A try before its SEND
    // completes with IBV_WC_RETRY_EXC_ERR? In ms, rounded to the nearest.
    const long predicted_ms = 0;
    std::printf("QP A in RTS, timeout %u, retry_cnt %u: predicted %ld ms\n", rts.timeout, rts.retry_cnt, predicted_ms);

    // Step 9: A's SEND; measure from ibv_post_send to its completion.
    std::memcpy(buf.get(), kMessage, sizeof kMessage);
    ibv_sge send_sge = {.addr = reinterpret_cast<uintptr_t>(buf.get()), .length = sizeof kMessage, .lkey = mr->lkey};
    ibv_send_wr send_wr = {.wr_id = 1, .sg_list = &send_sge, .num_sge = 1, .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED};
    ibv_send_wr* bad_send = nullptr;
    const auto start = Clock::now();
    CHECK_RC(ibv_post_send(qa.get(), &send_wr, &bad_send));

    // Step 10: poll until A's SEND completes; print every completion by name.
    ibv_wc wc{};
    for (;;) {
        if (!poll_until(cq.get(), start + kWait, wc))
            wb::fail("A's SEND did not complete within 3 s", "on rxe, retry_cnt 7 resends for ever (lesson 3)");
        const long ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
        std::printf("%s: %s (%d, %s) after %ld ms\n", wc.wr_id == 1 ? "A's SEND" : "B's RECV",
                    wb::wc_status_name(wc.status), wc.status, ibv_wc_status_str(wc.status), ms);
        if (wc.wr_id == 1) break;
    }
    std::printf("result: B expected PSN 0x%06x, A sent 0x%06x: A's SEND completed with %s (%d), QP A is now %s\n",
                b_expects, psn_a, wb::wc_status_name(wc.status), wc.status, wb::qp_state_str(wb::query_state(qa.get())));
    return 0;  // ~qb, ~qa: ibv_destroy_qp; ~cq; ~mr; ~buf; ~pd; ~ctx: the order of lesson 3's step 11
}
