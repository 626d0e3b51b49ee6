// sum_client - a sum client for any lesson's server (4 or 8), one that can
// lie: it sends a request of -B bytes instead of 16. Lesson 8 has no -B of its
// own, so tests/lesson8_event_driven_cq.bats plays its misbehaving client
// with this. It is lesson 4's client (lessons/04_send_recv/lesson4.cpp, steps
// 1 to 10), busy-polling, with the lesson number of the exchange as -l.
//
//   build/tests/sum_client -l LESSON [-B BYTES] [-p PORT] [--timeout S] HOST A B
//
// Prints "sum_client: completion IBV_WC_RECV, N bytes" and lesson 4's result
// line ("result: ..." or "result: error: ..."; exit 1), and says "DONE" on the
// TCP connection at the end when the server is lesson 8's, as its client does.
#include <infiniband/verbs.h>

#include <cinttypes>
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

int main(int argc, char** argv) {
    std::string lesson_text, bytes_text;
    const wb::ExtraOption extra[] = {
        {'l', "lesson", "LESSON", "the lesson number to claim in the exchange (required)", &lesson_text},
        {'B', "send-bytes", "N", "send N bytes, 0..64 (default: 16, one request)", &bytes_text},
    };
    const wb::Usage usage = {
        .synopsis = "-l LESSON [-B N] [options] HOST A B",
        .summary = "a sum client for lesson 4's or 8's server that may send a request of the wrong length",
        .numbers_after_host = true,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const wb::SumArgs args = wb::parse_sum_args(opt);
    if (args.is_server || lesson_text.empty()) wb::usage_error("sum_client is a client: -l LESSON HOST A B");
    const auto lesson = static_cast<uint16_t>(wb::parse_range(lesson_text, "-l", 1, 99));
    constexpr uint32_t kMaxBytes = 64;
    const auto send_bytes = static_cast<uint32_t>(
        bytes_text.empty() ? sizeof(wb::SumRequest) : wb::parse_range(bytes_text, "-B", 0, kMaxBytes));

    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
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
    wb::Buffer recv_buf = wb::alloc_buffer(sizeof(wb::SumResponse));
    wb::MemoryRegion recv_mr{
        CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), sizeof(wb::SumResponse), IBV_ACCESS_LOCAL_WRITE))};
    wb::Buffer send_buf = wb::alloc_buffer(kMaxBytes);
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), kMaxBytes, 0))};
    wb::qp_to_init(qp.get(), addr, 0);

    // The receive for the answer goes up before the exchange (lesson 4).
    ibv_sge rsge = {.addr = reinterpret_cast<uintptr_t>(recv_buf.get()),
                    .length = sizeof(wb::SumResponse),
                    .lkey = recv_mr->lkey};
    ibv_recv_wr rwr = {.wr_id = 1, .next = nullptr, .sg_list = &rsge, .num_sge = 1};
    ibv_recv_wr* bad_recv = nullptr;
    CHECK_RC(ibv_post_recv(qp.get(), &rwr, &bad_recv));

    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(lesson, qp.get(), psn, addr), opt.timeout_s);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    wb::expect_token(conn, "RTR!", opt.timeout_s);

    const wb::SumRequest request = wb::make_sum_request(args.a, args.b);
    std::memcpy(send_buf.get(), &request, sizeof request);
    ibv_sge ssge = {.addr = reinterpret_cast<uintptr_t>(send_buf.get()), .length = send_bytes, .lkey = send_mr->lkey};
    ibv_send_wr swr = {.wr_id = 2,
                       .next = nullptr,
                       .sg_list = &ssge,
                       .num_sge = 1,
                       .opcode = IBV_WR_SEND,
                       .send_flags = IBV_SEND_SIGNALED};
    ibv_send_wr* bad_send = nullptr;
    CHECK_RC(ibv_post_send(qp.get(), &swr, &bad_send));
    std::printf("sum_client: sent %u bytes as a lesson-%u client\n", send_bytes, lesson);
    wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the request", conn);
    const ibv_wc wc = wb::poll_success(recv_cq.get(), opt.timeout_s, "the server's response (RECV)", conn);
    std::printf("sum_client: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);
    const wb::SumResult r = wb::read_sum_response(recv_buf.get(), wc.byte_len, args.a, args.b);
    if (lesson == 8) wb::send_token(conn, "DONE");  // lesson 8's server waits for it
    if (r.status == wb::kSumBadRequest)
        wb::result_error("the server refused the request (status 2): it was " + std::to_string(send_bytes) +
                         " bytes, not " + std::to_string(sizeof(wb::SumRequest)));
    if (!r.error.empty()) wb::result_error(r.error);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", args.a, args.b, r.sum);
    return 0;
}
