// SPOILER: a reference solution of exercise 5.1 (the starter is ../5.1/ex5_1.cpp).
// ex5_1.cpp - exercise 5.1: a plain RDMA WRITE, then a SEND that says how much.
//
// Lesson 5 writes with immediate: the immediate consumes a receive on the
// server and raises IBV_WC_RECV_RDMA_WITH_IMM. A plain RDMA WRITE is silent
// on the server: no receive, no completion, its CPU cannot know. So the
// client follows the WRITE with a SEND of the length (4 bytes, big-endian).
// Both go in one ibv_post_send, chained through `next`; on an RC QP the
// server's NIC executes them in order, so when the SEND's IBV_WC_RECV
// arrives, the written bytes are already in the buffer. The server checks
// that the message is 4 bytes, that the length fits its buffer, and prints
// what was written. The task is in ../5.1/README.md.
//
// Run it on one host (two terminals):
//     ex5_1                          server: a 4096-byte buffer (-s to change it)
//     ex5_1 127.0.0.1 'hello there'  client: WRITE the message, then SEND its length
//
// Verbs: ibv_post_send with IBV_WR_RDMA_WRITE (unsignaled) and IBV_WR_SEND
// (signaled) chained in one call; ibv_post_recv with a 4-byte buffer;
// ibv_poll_cq: IBV_WC_RECV on the server, IBV_WC_SEND on the client.
#include <infiniband/verbs.h>

#include <arpa/inet.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "check.hpp"
#include "connect.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr uint16_t kLesson = 5;  // sent in the exchange: a lesson-5 client only talks to a lesson-5 server
constexpr int64_t kDefaultBufferBytes = 4096;
constexpr int64_t kMaxBufferBytes = 1 << 20;  // 1 MiB: -s may not ask for more
const char* const kDefaultMessage = "Hello from the client, by RDMA WRITE and then a SEND";


// The SEND after the WRITE: the number of bytes written, big-endian.
struct LengthMessage {
    uint32_t length;  // big-endian (htonl / ntohl)
};
static_assert(sizeof(LengthMessage) == 4, "no padding on the wire");

// What a work request does, in the words the narration uses.
const char* wr_opcode_words(ibv_wr_opcode op) {
    switch (op) {
    case IBV_WR_RDMA_WRITE_WITH_IMM: return "RDMA WRITE with immediate";
    case IBV_WR_RDMA_WRITE: return "RDMA WRITE";
    case IBV_WR_SEND_WITH_IMM: return "SEND with immediate";
    case IBV_WR_SEND: return "SEND";
    default: return "a work request";
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string size_text, lie_text;
    const wb::ExtraOption extra[] = {
        {'s', "size", "BYTES", "server: the buffer the client may write, 1..1048576 (default: 4096)", &size_text},
        {'L', "lie-length", "N",
         "client: put N in the length message (default: the message's length);\n"
         "                        another value plays a misbehaving client",
         &lie_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]                  server: offer a buffer, print what is written into it\n"
                    "  ex5_1 [options] HOST [MESSAGE]     client: RDMA WRITE the MESSAGE into it, then SEND\n"
                    "                                     its length",
        .summary = "exercise 5.1: a plain RDMA WRITE into the server's memory, then a SEND of the length",
        .notes = "MESSAGE defaults to \"Hello from the client, by RDMA WRITE and then a SEND\".",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 2)
        wb::usage_error("expected at most HOST MESSAGE, got " + std::to_string(opt.args.size()) + " arguments");
    if (!is_server && opt.given('s')) wb::usage_error("-s is a server option; the server decides its buffer size");
    if (is_server && opt.given('L')) wb::usage_error("-L is a client option");
    const uint32_t buffer_bytes = static_cast<uint32_t>(
        opt.given('s') ? wb::parse_range(size_text, "-s", 1, kMaxBufferBytes) : kDefaultBufferBytes);
    const std::string message = opt.args.size() == 2 ? opt.args[1] : kDefaultMessage;
    if (message.empty()) wb::usage_error("MESSAGE must not be empty");
    const int64_t lie = opt.given('L') ? wb::parse_range(lie_text, "-L", 0, UINT32_MAX) : -1;

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);

    // 2. PD, CQ and QP, in creation order (reverse destruction: lesson 2).
    //    One CQ each side: the server only ever waits for the SEND's
    //    RECV completion, the client only for its SEND's (the WRITE
    //    before it is unsignaled: it makes no completion of its own).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {
            .max_send_wr = 2,   // the client posts a WRITE and a SEND, in one call
            .max_recv_wr = 1,   // the server posts one receive, for the SEND
            .max_send_sge = 1,  // the message is one contiguous buffer
            .max_recv_sge = 1,  // the receive is one 4-byte buffer
        },
        .qp_type = IBV_QPT_RC,  // RDMA WRITE needs a connected QP (RC, or UC without ACKs)
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    if (is_server) {
        // 3. The buffer the client writes into. REMOTE_WRITE lets the
        //    client's NIC write it with our rkey; LOCAL_WRITE: required with
        //    REMOTE_WRITE (lesson 2). Nothing else: no REMOTE_READ or
        //    REMOTE_ATOMIC, so the client can neither read our memory nor run
        //    atomics on it.
        wb::Buffer buf = wb::alloc_buffer(buffer_bytes);
        wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), buffer_bytes,
                                                 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE),
                                      "ulimit -l: is locked memory limited?")};
        std::printf("server: offering %u bytes at 0x%llx, rkey 0x%x (REMOTE_WRITE + LOCAL_WRITE)\n", buffer_bytes,
                    static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(buf.get())), mr->rkey);

        // 4. RESET -> INIT (lesson 3). The QP must allow remote writes too:
        //    an MR with REMOTE_WRITE behind a QP without it still refuses.
        wb::qp_to_init(qp.get(), addr, IBV_ACCESS_REMOTE_WRITE);

        // 5. The receive that the client's SEND will consume, posted before
        //    the client can send. Unlike the immediate, a SEND carries bytes:
        //    the receive needs a buffer, registered with LOCAL_WRITE because
        //    our own NIC writes the incoming message into it. Twice the
        //    length message, so that a longer SEND still lands and byte_len
        //    shows it.
        wb::Buffer len_buf = wb::alloc_buffer(2 * sizeof(LengthMessage));
        wb::MemoryRegion len_mr{CHECK_PTR(ibv_reg_mr(pd.get(), len_buf.get(), 2 * sizeof(LengthMessage),
                                                     IBV_ACCESS_LOCAL_WRITE),
                                          "ulimit -l: is locked memory limited?")};
        ibv_sge recv_sge = {
            .addr = reinterpret_cast<uintptr_t>(len_buf.get()),
            .length = 2 * sizeof(LengthMessage),
            .lkey = len_mr->lkey,
        };
        ibv_recv_wr recv_wr = {.wr_id = 1, .next = nullptr, .sg_list = &recv_sge, .num_sge = 1};
        ibv_recv_wr* bad_recv = nullptr;
        CHECK_RC(ibv_post_recv(qp.get(), &recv_wr, &bad_recv));
        std::printf("server: posted a %zu-byte receive for the length\n", 2 * sizeof(LengthMessage));

        // 6. Out-of-band exchange: QP number, PSN, GID, and our buffer.
        wb::Listener listener(opt.tcp_port);
        std::printf("server: waiting for a client on TCP port %u\n", opt.tcp_port);
        wb::Connection conn = listener.accept(opt.accept_timeout_s());
        wb::PeerInfo mine = wb::local_info(kLesson, qp.get(), psn, addr);
        mine.addr = reinterpret_cast<uintptr_t>(buf.get());
        mine.length = buffer_bytes;
        mine.rkey = mr->rkey;
        const wb::PeerInfo peer = wb::exchange(conn, mine, opt.timeout_s);
        std::printf("server: client %s is QP 0x%x\n", conn.peer().c_str(), peer.qp_num);

        // 7. INIT -> RTR -> RTS (lesson 3's transitions, common/connect.cpp).
        wb::qp_to_rtr(qp.get(), addr, peer);
        wb::qp_to_rts(qp.get(), psn);
        wb::send_token(conn, "RTR!");  // our QP is past RTR: the client may write (lesson 4, step 8)
        std::printf("server: QP 0x%x is RTS; waiting for the client's WRITE and SEND\n", qp->qp_num);

        // 8. The WRITE raised nothing here; the SEND after it arrives as a
        //    RECV completion. RC executes them in order: the bytes are in.
        const ibv_wc wc = wb::poll_one(cq.get(), opt.timeout_s, "the client's SEND of the length (RECV)", conn);
        std::printf("server: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);
        if (wc.opcode != IBV_WC_RECV)
            wb::result_error(std::string("expected IBV_WC_RECV, got ") + wb::wc_opcode_str(wc.opcode));
        // The message is the client's word: exactly one LengthMessage, or nothing is read.
        if (wc.byte_len != sizeof(LengthMessage))
            wb::result_error("the length message is " + std::to_string(wc.byte_len) + " bytes, not " +
                             std::to_string(sizeof(LengthMessage)));
        LengthMessage msg{};
        std::memcpy(&msg, len_buf.get(), sizeof msg);
        const uint32_t length = ntohl(msg.length);  // the sender wrote htonl(length)

        // 9. Trust, but bound: the length is the client's word. Never read
        //    beyond what we registered.
        if (length > buffer_bytes)
            wb::result_error("the client says it wrote " + std::to_string(length) + " bytes, but the buffer holds " +
                         std::to_string(buffer_bytes) + ": not reading beyond it");
        std::printf("result: received %u bytes: \"%s\"\n", length, wb::printable(buf.get(), length).c_str());
        return 0;
    }

    // Client.
    // 3. The message to write. Our NIC only reads this buffer, and local read
    //    access is always granted: no access flag at all.
    const uint32_t length = static_cast<uint32_t>(message.size());
    wb::Buffer buf = wb::alloc_buffer(length);
    std::memcpy(buf.get(), message.data(), length);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), length, 0), "ulimit -l: is locked memory limited?")};

    //    The length message: 4 bytes, no access flag either.
    wb::Buffer len_buf = wb::alloc_buffer(sizeof(LengthMessage));
    wb::MemoryRegion len_mr{CHECK_PTR(ibv_reg_mr(pd.get(), len_buf.get(), sizeof(LengthMessage), 0),
                                      "ulimit -l: is locked memory limited?")};

    // 4. RESET -> INIT. The server does nothing to our memory: remote access 0.
    //    (No receive to post: the server never sends to us.)
    wb::qp_to_init(qp.get(), addr, 0);

    // 5. Out-of-band exchange: we learn the server's QP and where its buffer is.
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    std::printf("client: connected to %s\n", conn.peer().c_str());
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("client: server QP 0x%x offers %u bytes at 0x%llx, rkey 0x%x\n", peer.qp_num, peer.length,
                static_cast<unsigned long long>(peer.addr), peer.rkey);

    // 6. Refuse, before anything is posted, a message that does not fit. The
    //    server's NIC would refuse it too (IBV_WC_REM_ACCESS_ERR, and our QP
    //    in the error state), but a clear error here is kinder. Returning
    //    closes the TCP connection, which tells the server we gave up.
    if (peer.addr == 0 || peer.length == 0)
        wb::result_error("the server offers no buffer to write into");
    if (length > peer.length)
        wb::result_error("the message is " + std::to_string(length) + " bytes, the server's buffer only " +
                     std::to_string(peer.length) + ": not sending it");

    // 7. INIT -> RTR -> RTS (lesson 3's transitions).
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    wb::expect_token(conn, "RTR!", opt.timeout_s);  // not before the server's QP is in RTR (lesson 4, step 8)

    // 8. The plain WRITE: our buffer (lkey) -> the server's address (rkey).
    //    Unsignaled: it makes no completion; the SEND's will cover it.
    ibv_sge write_sge = {
        .addr = reinterpret_cast<uintptr_t>(buf.get()),
        .length = length,
        .lkey = mr->lkey,
    };
    //    Then the SEND of the length, big-endian. It consumes the server's
    //    receive and raises its IBV_WC_RECV; RC delivers it after the WRITE.
    const uint32_t told = lie >= 0 ? static_cast<uint32_t>(lie) : length;
    const LengthMessage len_msg = {.length = htonl(told)};
    std::memcpy(len_buf.get(), &len_msg, sizeof len_msg);
    ibv_sge send_sge = {
        .addr = reinterpret_cast<uintptr_t>(len_buf.get()),
        .length = sizeof(LengthMessage),
        .lkey = len_mr->lkey,
    };
    ibv_send_wr send_wr = {
        .wr_id = 2,
        .next = nullptr,
        .sg_list = &send_sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,  // its completion: both are acknowledged (RC acknowledges in order)
    };
    ibv_send_wr write_wr = {
        .wr_id = 1,
        .next = &send_wr,  // one ibv_post_send for both: the WRITE first, then the SEND
        .sg_list = &write_sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = 0,  // unsignaled: no completion of its own
        .wr = {.rdma = {.remote_addr = peer.addr, .rkey = peer.rkey}},
    };
    ibv_send_wr* bad = nullptr;
    std::printf("client: posting %s: %u bytes to 0x%llx, then %s of the length %u%s\n",
                wr_opcode_words(write_wr.opcode), length, static_cast<unsigned long long>(peer.addr),
                wr_opcode_words(send_wr.opcode), told, lie >= 0 ? " (a lie, from -L)" : "");
    CHECK_RC(ibv_post_send(qp.get(), &write_wr, &bad));

    // 9. One completion, the SEND's: the server's NIC acknowledged the
    //    SEND, and with it the WRITE before it.
    const ibv_wc wc = wb::poll_one(cq.get(), opt.timeout_s, "the RDMA WRITE and SEND", conn);
    std::printf("client: completion %s, status %s\n", wb::wc_opcode_str(wc.opcode), ibv_wc_status_str(wc.status));
    std::printf("result: wrote %u bytes, then sent the length %u\n", length, told);
    return 0;
}
