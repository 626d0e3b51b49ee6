// lesson15.cpp - the extended verbs: lesson 4's sum, posted with ibv_wr_* and polled with ibv_start_poll.
//
// The same two processes, messages and steps as lesson 4 (diff the two files:
// only the API changes). The classic ibv_post_send takes a linked list of
// ibv_send_wr structs that the provider walks and translates for every post,
// and ibv_poll_cq copies a whole ibv_wc per completion, fields we never read
// included. The extended API writes a work request field by field straight
// into the send queue (ibv_wr_start, ibv_wr_send, ibv_wr_set_sge,
// ibv_wr_complete), and reads a completion field by field from the CQ entry
// itself (ibv_start_poll, ibv_wc_read_*, ibv_end_poll), only the fields the
// CQ was created to hold. New opcodes (atomic write, flush) come as new
// ibv_wr_* functions, not as new ibv_send_wr members.
// Receives are still posted with ibv_post_recv: the new API covers the send
// queue and the CQ. docs/lesson15-extended-verbs.md says what changed, line by line.
// Where lesson 4's code is unchanged here, its comments are not repeated:
// lesson4.cpp explains it.
//
// What the device can do (the extended device query, as a matrix) is the
// lesson's second program: lesson15_probe.cpp (./lesson15_probe).
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson15                       server: waits for one client
//     ./lesson15 127.0.0.1 2 3         client: prints "result: 2 + 3 = 5"
// On two hosts: ./lesson15 on host A, ./lesson15 A 2 3 on host B. Both sides
// take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson15 -h).
//
// Verbs it introduces:
//     ibv_create_cq_ex (wc_flags: which fields a completion holds), ibv_cq_ex_to_cq
//     ibv_create_qp_ex (comp_mask, send_ops_flags), ibv_qp_to_qp_ex
//     ibv_wr_start, ibv_wr_send, ibv_wr_set_sge, ibv_wr_complete
//     ibv_start_poll, ibv_end_poll, ibv_wc_read_opcode, ibv_wc_read_byte_len
//
// Read more: man ibv_create_qp_ex, man ibv_wr_post, man ibv_create_cq_ex;
// docs/lesson15-extended-verbs.md (the diff against lesson 4, ibv_next_poll
// for a batch of completions, exercises, common errors).
#include <infiniband/verbs.h>

#include <endian.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

constexpr uint16_t kLesson = 15;  // sent in the exchange: a lesson-15 client only talks to a lesson-15 server

// Lesson 4's messages (common/sum_protocol.hpp), buffer sizes, wr_ids and
// post_receive, unchanged (lesson4.cpp says why each is so).
constexpr uint32_t kRecvBufferBytes = 64;
constexpr uint32_t kMaxSendBytes = 128;
constexpr uint64_t kRecvId = 1;
constexpr uint64_t kSendId = 2;

void post_receive(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr),
        .length = length,
        .lkey = mr->lkey,
    };
    ibv_recv_wr wr = {.wr_id = kRecvId, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

// Post one signaled SEND of `length` bytes from the start of `mr`, with the
// extended API: no ibv_send_wr and no list. Between ibv_wr_start and
// ibv_wr_complete each call writes straight into the next send queue entry;
// ibv_wr_complete rings the doorbell for all of them (here one), or returns
// an errno value and posts none (ibv_wr_abort drops them on purpose).
void post_send(ibv_qp_ex* qpx, const ibv_mr* mr, uint32_t length) {
    ibv_wr_start(qpx);
    qpx->wr_id = kSendId;
    qpx->wr_flags = IBV_SEND_SIGNALED;  // we want a completion: it says the peer's NIC acknowledged it
    ibv_wr_send(qpx);                   // the opcode: must be one of the QP's send_ops_flags
    ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<uintptr_t>(mr->addr), length);
    CHECK_RC(ibv_wr_complete(qpx));
}

// Busy-poll the extended CQ `cq` for one completion, at most timeout_s
// seconds (wb::poll_success takes an ibv_cq and calls ibv_poll_cq: this is its
// loop with the new calls). ibv_start_poll returns ENOENT while the CQ is
// empty, 0 when it has made the oldest completion the current one, or an
// errno value. The current completion is read in place, field by field,
// until ibv_end_poll hands its entry back; ibv_next_poll would move to the
// next one inside the same bracket (one completion at a time here: the docs
// page shows the loop that drains a batch).
// wb::poll_success also watches the peer's TCP connection to report a dead peer
// at once; this loop relies on the timeout alone.
ibv_wc poll_success(ibv_cq_ex* cq, int timeout_s, const char* waiting_for) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    ibv_poll_cq_attr attr = {.comp_mask = 0};  // no options yet: the struct leaves room for them
    int rc;
    while ((rc = ibv_start_poll(cq, &attr)) == ENOENT) {
        if (Clock::now() >= deadline)
            wb::fail(std::string("no completion for ") + waiting_for + " within " + std::to_string(timeout_s) + " s",
                     "is the peer still running? raise --timeout if the machine is slow");
        std::this_thread::yield();  // let the peer run on a busy machine
    }
    if (rc != 0) wb::fail(std::string("ibv_start_poll(cq, &attr) failed: ") + wb::errno_str(rc));
    // wr_id and status are members; every other field has a reader, valid
    // only if the CQ was created with its IBV_WC_EX_WITH_* flag (opcode and
    // vendor_err always are), and only on success, like ibv_wc's fields.
    ibv_wc wc = {.wr_id = cq->wr_id, .status = cq->status, .vendor_err = ibv_wc_read_vendor_err(cq)};
    if (wc.status == IBV_WC_SUCCESS) {
        wc.opcode = ibv_wc_read_opcode(cq);
        wc.byte_len = ibv_wc_read_byte_len(cq);  // IBV_WC_EX_WITH_BYTE_LEN
    }
    ibv_end_poll(cq);  // the entry goes back to the CQ: nothing may be read from it after this
    wb::check_wc(wc, waiting_for);
    return wc;
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
                    "  lesson15 [options] HOST A B     client: send A and B, print the sum",
        .summary = "lesson 4's sum with the extended verbs (ibv_wr_*, ibv_start_poll)",
        .notes = "A and B are signed 64-bit integers; a sum that overflows is an error on both sides (exit 1).\n"
                 "What the device can do, as a matrix, is ./lesson15_probe (formerly lesson15 --probe).",
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

    // 2. The objects of an RC connection, lesson 4's two CQs and QP, made with
    //    the extended calls. An extended CQ holds only the fields wc_flags
    //    names: we read byte_len.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    ibv_cq_init_attr_ex cq_attr = {.cqe = 1, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN};
    // wb::CompletionQueueEx releases it as the ibv_cq inside (common/handles.hpp).
    wb::CompletionQueueEx send_cq{CHECK_PTR(ibv_create_cq_ex(ctx.get(), &cq_attr))};
    wb::CompletionQueueEx recv_cq{CHECK_PTR(ibv_create_cq_ex(ctx.get(), &cq_attr))};
    ibv_qp_init_attr_ex qp_attr = {
        .send_cq = ibv_cq_ex_to_cq(send_cq.get()),  // a QP takes the ibv_cq inside an ibv_cq_ex
        .recv_cq = ibv_cq_ex_to_cq(recv_cq.get()),
        .cap = {
            .max_send_wr = 1,
            .max_recv_wr = 1,
            .max_send_sge = 1,
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,
        // comp_mask says which of the fields below are set: the PD (a
        // member here, an argument of ibv_create_qp) and the opcodes that
        // this QP's ibv_wr_* calls may use, declared up front.
        .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        .pd = pd.get(),
        .send_ops_flags = IBV_QP_EX_WITH_SEND,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp_ex(ctx.get(), &qp_attr))};
    // The same QP seen through its extended interface: the ibv_wr_* calls take
    // this. NULL when the QP has none; it sets no errno, so CHECK_PTR would not do.
    ibv_qp_ex* const qpx = ibv_qp_to_qp_ex(qp.get());
    if (qpx == nullptr)
        wb::fail("ibv_qp_to_qp_ex(qp.get()) returned NULL", "was the QP created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS?");
    const uint32_t psn = wb::random_psn();

    // 3. Memory, as in lesson 4: LOCAL_WRITE for the receive buffer, no flag for the send buffer.
    const uint32_t recv_len = is_server ? kRecvBufferBytes : sizeof(wb::SumResponse);
    wb::Buffer recv_buf = wb::alloc_buffer(recv_len);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};
    wb::Buffer send_buf = wb::alloc_buffer(kMaxSendBytes);
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), kMaxSendBytes, 0),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. RESET -> INIT, as in lesson 4 (remote access 0).
    wb::qp_to_init(qp.get(), addr, 0);

    // 5. Post the receive before the exchange (lesson 4 says why).
    post_receive(qp.get(), recv_mr.get(), recv_len);
    std::printf("%s: posted a %u-byte receive before the exchange\n", is_server ? "server" : "client", recv_len);

    // 6. Out-of-band exchange over TCP, as in lesson 4.
    wb::Connection conn = wb::meet_peer(opt, is_server);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("%s: peer %s is QP 0x%x\n", is_server ? "server" : "client", conn.peer().c_str(), peer.qp_num);

    // 7. INIT -> RTR -> RTS, as in lesson 4.
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);

    // 8. The client SENDs only after the server's "RTR!" (lesson 4 says why).
    if (is_server) {
        wb::send_token(conn, "RTR!");
    } else {
        wb::expect_token(conn, "RTR!", opt.timeout_s);
    }

    if (is_server) {
        // 9. Wait for the request: a RECV completion, read with the extended calls (poll_success above).
        std::printf("server: QP 0x%x is RTS; waiting for the client's SEND\n", qp->qp_num);
        const ibv_wc wc = poll_success(recv_cq.get(), opt.timeout_s, "the client's request (RECV)");
        std::printf("server: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);

        const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get(), wc.byte_len);
        if (wc.byte_len == sizeof(wb::SumRequest))
            std::printf("server: request %" PRId64 " + %" PRId64 "\n", answer.a, answer.b);

        // 10. SEND the response, with ibv_wr_* (post_send above).
        std::memcpy(send_buf.get(), &answer.response, sizeof answer.response);
        post_send(qpx, send_mr.get(), sizeof answer.response);
        poll_success(send_cq.get(), opt.timeout_s, "the SEND of the response");
        std::printf("server: response sent (status %u)\n", be32toh(answer.response.status));
        if (!answer.error.empty()) wb::result_error(answer.error);
        std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answer.a, answer.b, answer.sum);
        return 0;
    }

    // Client.
    // 9. SEND the request, with ibv_wr_* (-B: another length, as in lesson 4).
    const wb::SumRequest request = wb::make_sum_request(a, b);
    std::memcpy(send_buf.get(), &request, sizeof request);
    std::printf("client: sending %" PRId64 " and %" PRId64 " (%u bytes)\n", a, b, send_bytes);
    post_send(qpx, send_mr.get(), send_bytes);
    poll_success(send_cq.get(), opt.timeout_s, "the SEND of the request");

    // 10. The response arrives in the receive we posted in step 5.
    const ibv_wc wc = poll_success(recv_cq.get(), opt.timeout_s, "the server's response (RECV)");
    std::printf("client: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);
    const wb::SumResult r = wb::read_sum_response(recv_buf.get(), wc.byte_len, a, b);
    if (r.status == wb::kSumBadRequest)  // we know what we sent: say it
        wb::result_error("the server refused the request: it was " + std::to_string(send_bytes) + " bytes, not " +
                         std::to_string(sizeof(wb::SumRequest)));
    if (!r.error.empty()) wb::result_error(r.error);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", a, b, r.sum);
    return 0;
}
