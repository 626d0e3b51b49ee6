// ex4_2.cpp - exercise 4.2: make RNR happen on purpose, name the status, then survive it.
//
// Lesson 4 posts every receive before the exchange, so a SEND always finds
// one. Here the server posts its receive LATE: after RTS, after telling the
// client "RTR!", after sleeping kLate. The client's SEND reaches a QP with
// no receive: the server's NIC answers with an RNR NAK (receiver not ready)
// and the client's NIC retries after min_rnr_timer, at most rnr_retry times
// (7 means for ever). With -r 0 the client's SEND completes at once with
// IBV_WC_RNR_RETRY_EXC_ERR and its QP is in the error state; with -r 7 the
// retries go on until the receive is there, and the sum arrives. The task
// is in README.md beside this file; `make grade EX=4.2` runs both and
// checks the statuses and the port counters.
//
// As it is, this is lesson 4 with one request: the receive is posted early,
// the client's rnr_retry is common/qp.cpp's 7, and the client's SEND
// completion goes through wb::poll_success. TODO(4.2) marks the four changes.
//
// Run it on one host (two terminals):
//     ex4_2                          server: posts its receive 200 ms late
//     ex4_2 -r 0 127.0.0.1 2 3       client: "client: SEND completed with IBV_WC_RNR_RETRY_EXC_ERR (13)"
//     ex4_2 -r 7 127.0.0.1 2 3       client: retries until it fits, "result: 2 + 3 = 5"
//
// Verbs: ibv_modify_qp (RTR -> RTS with rnr_retry), ibv_query_qp, ibv_post_recv,
// ibv_post_send (IBV_WR_SEND), ibv_poll_cq (wc.status by hand).
#include <infiniband/verbs.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "sum_protocol.hpp"

namespace {

constexpr uint16_t kLesson = 4;  // the exchange says lesson 4: the protocol is lesson 4's
constexpr uint32_t kRecvBufferBytes = 64;
// How late the server posts its receive. Not much more: on rxe the ACK
// timer keeps running while RNR NAKs come back, so a SEND still unanswered
// after 7 x 67 ms (retry_cnt 6, timeout 14) ends with IBV_WC_RETRY_EXC_ERR
// (12) even with rnr_retry 7 (measured: 1000 ms late, 5 of 5 runs).
constexpr std::chrono::milliseconds kLate{200};

constexpr uint64_t kRecvId = 1;
constexpr uint64_t kSendId = 2;

void post_receive(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = length, .lkey = mr->lkey};
    ibv_recv_wr wr = {.wr_id = kRecvId, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

void post_send(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = length, .lkey = mr->lkey};
    ibv_send_wr wr = {
        .wr_id = kSendId,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

// RTR -> RTS with rnr_retry chosen by the caller.
void qp_to_rts(ibv_qp* qp, uint32_t psn, [[maybe_unused]] uint8_t rnr_retry) {
    // TODO(4.2): a copy of common/qp.cpp's qp_to_rts (one attr struct,
    // one mask, every value commented), with rnr_retry from the argument.
    wb::qp_to_rts(qp, psn);
}

}  // namespace

int main(int argc, char** argv) {
    std::string rnr_text;
    const wb::ExtraOption extra[] = {
        {'r', "rnr-retry", "N", "client: rnr_retry of its QP, 0..7 (7 = resend for ever; default: 7)", &rnr_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]              server: posts its receive 200 ms after RTS\n"
                    "  ex4_2 [options] HOST A B       client: SEND A and B with rnr_retry -r",
        .summary = "exercise 4.2: a receive posted late, an RNR NAK, and rnr_retry",
        .numbers_after_host = true,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const wb::SumArgs sum_args = wb::parse_sum_args(opt);
    const bool is_server = sum_args.is_server;
    if (is_server && opt.given('r')) wb::usage_error("-r is a client option");
    const auto rnr_retry = static_cast<uint8_t>(opt.given('r') ? wb::parse_range(rnr_text, "-r", 0, 7) : 7);

    // 1. Device, port, address; 2. PD, CQs, QP; 3. memory (lesson 4, steps 1 to 3).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue send_cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    wb::CompletionQueue recv_cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = send_cq.get(),
        .recv_cq = recv_cq.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();
    const uint32_t recv_len = is_server ? kRecvBufferBytes : sizeof(wb::SumResponse);
    wb::Buffer recv_buf = wb::alloc_buffer(recv_len);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};
    wb::Buffer send_buf = wb::alloc_buffer(sizeof(wb::SumRequest));
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), sizeof(wb::SumRequest), 0),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. RESET -> INIT. 5. Both sides post their receive now, as in lesson 4.
    // TODO(4.2): only the client posts now; the server posts in step 8, late.
    wb::qp_to_init(qp.get(), addr, 0);
    post_receive(qp.get(), recv_mr.get(), recv_len);

    // 6. Exchange; 7. INIT -> RTR -> RTS, with our own rnr_retry.
    wb::Connection conn = wb::meet_peer(opt, is_server);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    wb::qp_to_rtr(qp.get(), addr, peer);
    qp_to_rts(qp.get(), psn, rnr_retry);
    // What the QP really holds, not what we meant to set: ask it.
    ibv_qp_attr now{};
    ibv_qp_init_attr now_init{};
    CHECK_RC(ibv_query_qp(qp.get(), &now, IBV_QP_RNR_RETRY, &now_init));
    std::printf("%s: QP 0x%x is RTS, rnr_retry %u (ibv_query_qp)\n", is_server ? "server" : "client", qp->qp_num,
                now.rnr_retry);

    if (is_server) {
        // 8. Tell the client it may SEND.
        // TODO(4.2): then sleep kLate, and only then post the receive for the
        // request (and say so: "server: posted the receive 200 ms late").
        wb::send_token(conn, "RTR!");

        // 9. The request (if the client is still retrying), then the answer (lesson 4).
        const ibv_wc wc = wb::poll_success(recv_cq.get(), opt.timeout_s, "the client's request (RECV)", conn);
        const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get(), wc.byte_len);
        std::memcpy(send_buf.get(), &answer.response, sizeof answer.response);
        post_send(qp.get(), send_mr.get(), sizeof answer.response);
        wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the response", conn);
        if (!answer.error.empty()) wb::result_error(answer.error);
        std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answer.a, answer.b, answer.sum);
        return 0;
    }

    // Client. 8. Wait for "RTR!", then SEND at once: the server has no receive yet.
    wb::expect_token(conn, "RTR!", opt.timeout_s);
    const wb::SumRequest request = wb::make_sum_request(sum_args.a, sum_args.b);
    std::memcpy(send_buf.get(), &request, sizeof request);
    post_send(qp.get(), send_mr.get(), sizeof request);

    // 9. The SEND's completion.
    // TODO(4.2): poll send_cq by hand (bounded by opt.timeout_s), print
    // "client: SEND completed with <IBV_WC_... name> (<number>)" whatever the
    // status, then exit 1 (wb::fail, saying what to check) unless it is
    // IBV_WC_SUCCESS. wb::poll_success exits on a failed completion before you
    // could print it.
    wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the request", conn);

    // 10. The answer, in the receive posted in step 5.
    const ibv_wc rwc = wb::poll_success(recv_cq.get(), opt.timeout_s, "the server's response (RECV)", conn);
    const wb::SumResult r = wb::read_sum_response(recv_buf.get(), rwc.byte_len, sum_args.a, sum_args.b);
    if (!r.error.empty()) wb::result_error(r.error);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", sum_args.a, sum_args.b, r.sum);
    return 0;
}
