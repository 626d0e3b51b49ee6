// ex4_1.cpp - exercise 4.1: serve N sum requests on one connection.
//
// Lesson 4 trades one request and one answer, then both sides exit. A real
// service keeps its queue pair and answers request after request. Each SEND
// consumes one receive, so a side that expects another message must post
// another receive BEFORE the peer can send it: the server re-posts its
// receive before it answers (the answer is what lets the client send the
// next request), the client posts the receive for answer i before it sends
// request i. With -n N the client asks for (A+0)+B, (A+1)+B, ... (A+N-1)+B
// and prints one "result:" line each; the server answers N requests and
// says "server: served N requests". The task is in README.md beside this
// file; `make grade EX=4.1` checks every sum and the port counters.
//
// As it is, both sides trade ONE request and stop: TODO(4.1) marks the
// two places that must become loops.
//
// Run it on one host (two terminals):
//     ex4_1 -n 3                        server: answer 3 requests, then exit
//     ex4_1 -n 3 127.0.0.1 10 5         client: 10 + 5, 11 + 5, 12 + 5
//
// Verbs (as in lesson 4): ibv_post_recv, ibv_post_send (IBV_WR_SEND),
// ibv_poll_cq (IBV_WC_RECV, IBV_WC_SEND).
#include <infiniband/verbs.h>

#include <endian.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "sum_protocol.hpp"

namespace {

constexpr uint16_t kLesson = 4;            // the exchange says lesson 4: the protocol is lesson 4's
constexpr uint32_t kRecvBufferBytes = 64;  // larger than a request, so byte_len can tell a wrong length
constexpr int64_t kMaxRequests = 1000;     // -n may not ask for more

constexpr uint64_t kRecvId = 1;  // wr_id: our label, handed back in the completion
constexpr uint64_t kSendId = 2;

// Post one receive for the whole buffer (lesson 4's post_receive).
void post_receive(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = length, .lkey = mr->lkey};
    ibv_recv_wr wr = {.wr_id = kRecvId, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

// Post one signaled SEND of `length` bytes from the start of `mr` (lesson 4's post_send).
void post_send(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = length, .lkey = mr->lkey};
    ibv_send_wr wr = {
        .wr_id = kSendId,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,  // a completion: the peer's NIC acknowledged it
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

}  // namespace

int main(int argc, char** argv) {
    std::string count_text;
    const wb::ExtraOption extra[] = {
        {'n', "requests", "N", "both sides: how many requests on the one connection, 1..1000 (default: 1)",
         &count_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]              server: answer N sum requests\n"
                    "  ex4_1 [options] HOST A B       client: ask for (A+i) + B, i = 0..N-1",
        .summary = "exercise 4.1: serve N SEND/RECV sum requests on one connection",
        .numbers_after_host = true,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const wb::SumArgs sum_args = wb::parse_sum_args(opt);
    const bool is_server = sum_args.is_server;
    const int64_t count = opt.given('n') ? wb::parse_range(count_text, "-n", 1, kMaxRequests) : 1;
    int64_t last_a = 0;  // the client's last A, A + N - 1, must fit in 64 bits
    if (!is_server && __builtin_add_overflow(sum_args.a, count - 1, &last_a))
        wb::usage_error("A + N - 1 does not fit in a signed 64-bit integer");

    // 1. Device, port, address; 2. PD, CQs, QP (lesson 4, steps 1 and 2).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue send_cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    wb::CompletionQueue recv_cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = send_cq.get(),
        .recv_cq = recv_cq.get(),
        .cap = {
            .max_send_wr = 1,  // still one SEND outstanding at a time: each is waited for
            .max_recv_wr = 1,  // still one receive posted at a time: re-posted after each use
            .max_send_sge = 1,
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    // 3. Memory: the receive buffer (LOCAL_WRITE: our NIC writes into it), the send buffer (no flag).
    const uint32_t recv_len = is_server ? kRecvBufferBytes : sizeof(wb::SumResponse);
    wb::Buffer recv_buf = wb::alloc_buffer(recv_len);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};
    wb::Buffer send_buf = wb::alloc_buffer(sizeof(wb::SumRequest));
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), sizeof(wb::SumRequest), 0),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. RESET -> INIT; 5. the first receive, before the peer can send.
    wb::qp_to_init(qp.get(), addr, 0);
    post_receive(qp.get(), recv_mr.get(), recv_len);

    // 6. Exchange; 7. INIT -> RTR -> RTS; 8. the "RTR!" token (lesson 4).
    wb::Connection conn = wb::meet_peer(opt, is_server);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    if (is_server) {
        wb::send_token(conn, "RTR!");
    } else {
        wb::expect_token(conn, "RTR!", opt.timeout_s);
    }

    if (is_server) {
        int64_t served = 0;
        // TODO(4.1): answer `count` requests, not one. Each SEND from the
        // client consumes one receive: post the next one before the client
        // can send again (when is that?). Print one "server: request ..."
        // line per request, then "server: served N requests".
        {
            // 9. The request: a RECV completion in the receive posted in step 5.
            const ibv_wc wc = wb::poll_success(recv_cq.get(), opt.timeout_s, "a client's request (RECV)", conn);
            const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get(), wc.byte_len);
            // 10. The answer, errors included, on the same QP.
            std::memcpy(send_buf.get(), &answer.response, sizeof answer.response);
            post_send(qp.get(), send_mr.get(), sizeof answer.response);
            wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of an answer", conn);
            if (!answer.error.empty()) wb::result_error(answer.error);
            served++;
            std::printf("server: request %" PRId64 ": %" PRId64 " + %" PRId64 " = %" PRId64 "\n", served, answer.a,
                        answer.b, answer.sum);
        }
        std::printf("server: served %" PRId64 " requests\n", served);
        return 0;
    }

    // Client.
    // TODO(4.1): send `count` requests, request i asking for (A+i) + B, each
    // waiting for its answer and printing its "result:" line. The answer to
    // request i needs a receive posted before the server can send it.
    {
        const int64_t a = sum_args.a, b = sum_args.b;
        // 9. The request; its answer will land in the receive posted in step 5.
        const wb::SumRequest request = wb::make_sum_request(a, b);
        std::memcpy(send_buf.get(), &request, sizeof request);
        post_send(qp.get(), send_mr.get(), sizeof request);
        wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of a request", conn);
        // 10. The answer.
        const ibv_wc wc = wb::poll_success(recv_cq.get(), opt.timeout_s, "the server's answer (RECV)", conn);
        const wb::SumResult r = wb::read_sum_response(recv_buf.get(), wc.byte_len, a, b);
        if (!r.error.empty()) wb::result_error(r.error);
        std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", a, b, r.sum);
    }
    return 0;
}
