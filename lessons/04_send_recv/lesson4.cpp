// lesson4.cpp - SEND/RECV: the client SENDs two numbers, the server SENDs back their sum.
//
// The first lesson with two processes, and the pattern lessons 5 to 8 follow:
// each side opens the device, creates its PD, CQs and an RC queue pair,
// registers its buffers and POSTS ITS RECEIVES BEFORE THE PEER CAN SEND; the
// two sides then trade QP number, PSN and GID over TCP (common/exchange.cpp),
// bring their QPs to RTS (lesson 3's transitions), and talk with
// IBV_WR_SEND. A SEND consumes one receive that the peer posted earlier: the
// peer's NIC writes the message into that receive's buffer and raises an
// IBV_WC_RECV completion whose byte_len says how much arrived.
//
// The request and the response are fixed 16-byte big-endian structs
// (common/sum_protocol.hpp); a sum that overflows is an error on both sides
// (exit 1), never a wrapped number.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson4                        server: waits for one client
//     ./lesson4 127.0.0.1 2 3          client: prints "result: 2 + 3 = 5"
//     ./lesson4 127.0.0.1 -- -7 3      negative numbers go after --
// On two hosts: ./lesson4 on host A, ./lesson4 A 2 3 on host B. Both sides
// take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson4 -h).
//
// Verbs it introduces:
//     ibv_post_recv (ibv_recv_wr, ibv_sge): hand the NIC a buffer for the next SEND
//     ibv_post_send with IBV_WR_SEND and IBV_SEND_SIGNALED
//     the completions IBV_WC_RECV (wc.byte_len) and IBV_WC_SEND
//
// Verbs from earlier lessons, through common/: ibv_poll_cq (lesson 3's loop,
// bounded, in wb::poll_success, common/completion.cpp) and ibv_modify_qp
// (lesson 3's transitions, common/qp.cpp).
//
// Read more: man ibv_post_recv, man ibv_post_send, man ibv_poll_cq,
// man ibv_modify_qp (min_rnr_timer, rnr_retry); docs/lesson4-send-recv.md
// (sequence diagram, RNR, what the wire shows, exercises, common errors).
#include <infiniband/verbs.h>

#include <endian.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

constexpr uint16_t kLesson = 4;  // sent in the exchange: a lesson-4 client only talks to a lesson-4 server

// The wire format of the two messages, SumRequest and SumResponse, lives in
// common/sum_protocol.hpp (lessons 8 and 9 reuse it): two fixed 16-byte
// structs, integers big-endian, and a status in the response so that the
// server can tell the client why it did not answer with a sum.

// The server's receive buffer is larger than a request, so that a message of
// the wrong length still lands and byte_len can tell us how long it was (a
// message larger than the whole buffer fails in the NIC instead, with
// IBV_WC_LOC_LEN_ERR on most NICs; rxe reports IBV_WC_LOC_QP_OP_ERR here and
// IBV_WC_REM_OP_ERR at the sender, see docs/lesson4-send-recv.md).
constexpr uint32_t kRecvBufferBytes = 64;
// The client can send up to this many bytes with -B, to play a misbehaving client.
constexpr uint32_t kMaxSendBytes = 128;

// wr_id: our own label for a work request, handed back in its completion.
constexpr uint64_t kRecvId = 1;
constexpr uint64_t kSendId = 2;

// Post one receive for a whole buffer: the NIC will put the next incoming
// SEND there. Written out so the reader sees every field.
void post_receive(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr),
        .length = length,  // the most the NIC may write; a longer SEND fails (IBV_WC_LOC_LEN_ERR on most NICs)
        .lkey = mr->lkey,  // proves to our NIC that this memory is registered
    };
    ibv_recv_wr wr = {.wr_id = kRecvId, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

// Post one signaled SEND of `length` bytes from the start of `mr`.
void post_send(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr),
        .length = length,
        .lkey = mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = kSendId,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,  // we want a completion: it says the peer's NIC acknowledged it
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

}  // namespace

int main(int argc, char** argv) {
    std::string send_bytes_text;
    const wb::ExtraOption extra[] = {
        {'B', "send-bytes", "N",
         "client: send N bytes, 0..128 (default: 16, one request);\n"
         "                        any other length plays a misbehaving client",
         &send_bytes_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]              server: add the two numbers a client sends\n"
                    "  lesson4 [options] HOST A B     client: send A and B, print the sum",
        .summary = "SEND/RECV: the client SENDs two signed 64-bit numbers, the server SENDs back the sum",
        .notes = "A and B are signed 64-bit integers; a sum that overflows is an error on both sides (exit 1).",
        .numbers_after_host = true,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    // No host: server. HOST A B: client (common/sum_protocol.cpp checks them).
    const wb::SumArgs sum_args = wb::parse_sum_args(opt);
    const bool is_server = sum_args.is_server;
    if (is_server && opt.given('B')) wb::usage_error("-B is a client option");
    const int64_t a = sum_args.a, b = sum_args.b;
    const uint32_t send_bytes = opt.given('B')
                                    ? static_cast<uint32_t>(wb::parse_range(send_bytes_text, "-B", 0, kMaxSendBytes))
                                    : sizeof(wb::SumRequest);

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);

    // 2. The objects of an RC connection, in creation order (reverse destruction: lesson 2).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    // Two CQs, one for our SENDs and one for our RECVs, so that each wait
    // below is for exactly one thing. One entry each: one message each way.
    wb::CompletionQueue send_cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    wb::CompletionQueue recv_cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = send_cq.get(),
        .recv_cq = recv_cq.get(),
        .cap = {
            .max_send_wr = 1,   // one SEND outstanding at a time
            .max_recv_wr = 1,   // one receive posted at a time
            .max_send_sge = 1,  // each message is one contiguous buffer
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,  // reliable connected: acknowledged, in order, one peer
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    // 3. Memory. The receive buffer: LOCAL_WRITE, because our own NIC writes
    //    the incoming SEND into it; no REMOTE_* flag, since a SEND never names
    //    our memory (the receive we post decides where it lands). The send
    //    buffer: no flag at all: the NIC only reads it, and local read access
    //    is always granted.
    const uint32_t recv_len = is_server ? kRecvBufferBytes : sizeof(wb::SumResponse);
    wb::Buffer recv_buf = wb::alloc_buffer(recv_len);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};
    wb::Buffer send_buf = wb::alloc_buffer(kMaxSendBytes);
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), kMaxSendBytes, 0),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. RESET -> INIT (lesson 3's first transition): a QP accepts receives
    //    from INIT on. The peer may do nothing to our memory: remote access 0.
    wb::qp_to_init(qp.get(), addr, 0);

    // 5. Post the receive NOW, before the peer learns our QP number: the
    //    peer cannot send before the exchange, so the receive is certainly
    //    there when its SEND arrives. A SEND that finds no receive is answered
    //    with an RNR NAK (receiver not ready) and retried after min_rnr_timer;
    //    with rnr_retry = 0 it would fail at once (docs/lesson4-send-recv.md).
    post_receive(qp.get(), recv_mr.get(), recv_len);
    std::printf("%s: posted a %u-byte receive before the exchange\n", is_server ? "server" : "client", recv_len);

    // 6. Out-of-band exchange over TCP: QP number, PSN, GID (common/exchange.cpp).
    wb::Connection conn = wb::meet_peer(opt, is_server);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("%s: peer %s is QP 0x%x\n", is_server ? "server" : "client", conn.peer().c_str(), peer.qp_num);

    // 7. INIT -> RTR -> RTS: lesson 3's other two transitions (common/qp.cpp,
    //    rnr_retry 7 and min_rnr_timer 12 among them).
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);

    // 8. The client must not SEND before the server's QP is in RTR: a QP in
    //    INIT drops every packet, and the client's NIC would only resend after
    //    its ACK timeout (67 ms). So the server says "RTR!" on the TCP
    //    connection, and the client waits for it. Lessons 5 to 8 do the same.
    if (is_server) {
        wb::send_token(conn, "RTR!");
    } else {
        wb::expect_token(conn, "RTR!", opt.timeout_s);
    }

    if (is_server) {
        // 9. Wait for the request: a RECV completion. byte_len is how many
        //    bytes the client's SEND carried; only exactly one request is valid.
        std::printf("server: QP 0x%x is RTS; waiting for the client's SEND\n", qp->qp_num);
        const ibv_wc wc = wb::poll_success(recv_cq.get(), opt.timeout_s, "the client's request (RECV)", conn);
        std::printf("server: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);

        // The application's part (common/sum_protocol.cpp): decode exactly
        // one request, never reading beyond byte_len; add with overflow check.
        const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get(), wc.byte_len);
        if (wc.byte_len == sizeof(wb::SumRequest))
            std::printf("server: request %" PRId64 " + %" PRId64 "\n", answer.a, answer.b);

        // 10. SEND the response, errors included, so that the client can say
        //    why. Its receive was posted before the exchange, so it is there.
        std::memcpy(send_buf.get(), &answer.response, sizeof answer.response);
        post_send(qp.get(), send_mr.get(), sizeof answer.response);
        wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the response", conn);
        std::printf("server: response sent (status %u)\n", be32toh(answer.response.status));
        if (!answer.error.empty()) wb::result_error(answer.error);
        std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answer.a, answer.b, answer.sum);
        return 0;
    }

    // Client.
    // 9. SEND the request: A and B in network byte order. With -B the client
    //    sends a different length on purpose (the rest is zero bytes).
    const wb::SumRequest request = wb::make_sum_request(a, b);
    std::memcpy(send_buf.get(), &request, sizeof request);
    std::printf("client: sending %" PRId64 " and %" PRId64 " (%u bytes)\n", a, b, send_bytes);
    post_send(qp.get(), send_mr.get(), send_bytes);
    // The SEND's completion: the server's NIC acknowledged the message (it is
    // in the server's receive buffer), not that the server has read it.
    wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the request", conn);

    // 10. The response arrives in the receive we posted in step 5.
    const ibv_wc wc = wb::poll_success(recv_cq.get(), opt.timeout_s, "the server's response (RECV)", conn);
    std::printf("client: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);
    const wb::SumResult r = wb::read_sum_response(recv_buf.get(), wc.byte_len, a, b);
    if (r.status == wb::kSumBadRequest)  // we know what we sent: say it
        wb::result_error("the server refused the request: it was " + std::to_string(send_bytes) + " bytes, not " +
                         std::to_string(sizeof(wb::SumRequest)));
    if (!r.error.empty()) wb::result_error(r.error);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", a, b, r.sum);
    return 0;
}
