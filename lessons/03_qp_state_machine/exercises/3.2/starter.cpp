// ex3_2.cpp - exercise 3.2: move a QP to ERR by hand, and see what flushes.
//
// A QP in ERR sends nothing and receives nothing: every work request still
// queued on it, and every one posted afterwards, completes at once with
// IBV_WC_WR_FLUSH_ERR. That is what a learner sees after any first failure
// (lesson 3's "errors you may meet": the first error is the cause), and at
// teardown. Here QP A sends one message to QP B, as in lesson 3; then the
// exercise moves A to ERR with ibv_modify_qp, posts a second SEND on A, moves
// B to ERR with a receive still posted, and prints each completion by enum
// name and number. The task is in README.md beside this file; `make grade
// EX=3.2` checks the statuses, the states, and the port's packet counter.
//
// This is a slice of lesson 3: two RC QPs of one process, connected to each
// other with wb::qp_to_init, qp_to_rtr and qp_to_rts (common/qp.cpp, the
// same calls with the same values as lesson 3's steps 5, 7 and 8).
//
// Run it (one process, through the device's own loopback):
//     build/exercises/starter/ex3_2 [-d DEV] [-i PORT] [-g INDEX]
//     scripts/lab.sh run -- build/exercises/starter/ex3_2     (host without RDMA)
//
// Verbs involved: ibv_modify_qp (any state -> IBV_QPS_ERR), ibv_query_qp,
// ibv_post_send, ibv_post_recv, ibv_poll_cq (lesson 3).
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
constexpr auto kWait = std::chrono::seconds(3);  // a loopback SEND takes microseconds; a flush less

// Poll `cq` for one completion, at most until `deadline`; false if none came.
bool poll_until(ibv_cq* cq, Clock::time_point deadline, ibv_wc& wc) {
    for (;;) {
        int n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc));  // how many it filled (0: none yet)
        if (n == 1) return true;
        if (Clock::now() >= deadline) return false;
        std::this_thread::yield();  // let the device (a kernel thread on rxe) work
    }
}


// The work requests of this program, by wr_id.
const char* const kWorkRequest[] = {"?", "A's SEND", "B's RECV", "A's second SEND", "B's second RECV"};

// Wait for the next completion (at most kWait) and print it by name:
// "A's SEND: IBV_WC_SUCCESS (0, success)".
void complete(ibv_cq* cq) {
    ibv_wc wc{};
    if (!poll_until(cq, Clock::now() + kWait, wc)) wb::fail("no completion within 3 s");
    std::printf("%s: %s (%d, %s)\n", wc.wr_id < std::size(kWorkRequest) ? kWorkRequest[wc.wr_id] : "?",
                wb::wc_status_name(wc.status), wc.status, ibv_wc_status_str(wc.status));
}

}  // namespace

int main(int argc, char** argv) {
    const wb::Usage usage = {
        .synopsis = "[-d DEV] [-i PORT] [-g INDEX]",
        .summary = "exercise 3.2: one SEND, then QP A and QP B moved to ERR: what flushes",
        .network = false,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "'");

    // Lesson 3, steps 1 to 8: device, address, PD, MR, CQ, two RC QPs, B's
    // receive, and both QPs brought to RTS, each the other's peer.
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress a = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), a);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::Buffer buf = wb::alloc_buffer(2 * kSlot);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), 2 * kSlot, IBV_ACCESS_LOCAL_WRITE))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 8, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_init = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1},
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
    const uint32_t psn_a = wb::random_psn(), psn_b = wb::random_psn();
    wb::qp_to_rtr(qa.get(), a, wb::local_info(3, qb.get(), psn_b, a));
    wb::qp_to_rtr(qb.get(), a, wb::local_info(3, qa.get(), psn_a, a));
    wb::qp_to_rts(qa.get(), psn_a);
    wb::qp_to_rts(qb.get(), psn_b);
    std::printf("QP A 0x%x and QP B 0x%x in %s, B with a receive posted\n", qa->qp_num, qb->qp_num,
                wb::qp_state_str(wb::query_state(qa.get())));

    // Step 9: A's SEND, signaled so that it completes on the CQ; B's RECV takes it.
    std::memcpy(buf.get(), kMessage, sizeof kMessage);
    ibv_sge send_sge = {.addr = reinterpret_cast<uintptr_t>(buf.get()), .length = sizeof kMessage, .lkey = mr->lkey};
    ibv_send_wr send_wr = {.wr_id = 1, .sg_list = &send_sge, .num_sge = 1, .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED};
    ibv_send_wr* bad_send = nullptr;
    CHECK_RC(ibv_post_send(qa.get(), &send_wr, &bad_send));
    complete(cq.get());  // B's RECV and A's SEND, in either order
    complete(cq.get());

    // TODO(3.2): move QP A to IBV_QPS_ERR with ibv_modify_qp (which mask?) and
    // print "QP A is now <state> (ibv_query_qp)"; post a second SEND on A
    // (send_wr again, wr_id 3) and complete() it. Then post a second receive
    // on B (recv_wr, wr_id 4), move B to ERR, print "QP B is now <state>
    // (ibv_query_qp)", and complete() that receive.

    return 0;  // ~qb, ~qa: ibv_destroy_qp; ~cq; ~mr; ~buf; ~pd; ~ctx: the order of lesson 3's step 11
}
