// lesson5.cpp - RDMA WRITE with immediate: the client writes straight into the server's memory.
//
// The server registers a buffer that the client's NIC may write into
// (IBV_ACCESS_REMOTE_WRITE), and tells the client where it is: address,
// length and rkey, in the TCP exchange. The client posts one
// IBV_WR_RDMA_WRITE_WITH_IMM: the bytes go directly into that buffer, and the
// 32-bit immediate value that rides along (here: the message's length)
// consumes one receive on the server and raises an IBV_WC_RECV_RDMA_WITH_IMM
// completion there. A plain RDMA WRITE would be silent on the server; the
// immediate is how the writer says "done, and here is how much".
//
// Neither side trusts the other: the client refuses a message longer than
// the buffer the server advertised, before it posts anything; the server
// refuses an immediate that claims more bytes than its buffer holds, and
// never reads beyond it.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson5                          server: a 4096-byte buffer (-s to change it)
//     ./lesson5 127.0.0.1 'hello there'  client: writes the message into it
// On two hosts: ./lesson5 on host A, ./lesson5 A 'hello' on host B. Both
// sides take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson5 -h).
//
// Verbs it introduces:
//     ibv_reg_mr with IBV_ACCESS_REMOTE_WRITE (and the LOCAL_WRITE it requires)
//     ibv_post_send with IBV_WR_RDMA_WRITE_WITH_IMM (wr.rdma.remote_addr / rkey, imm_data)
//     ibv_post_recv with no scatter list (num_sge = 0): a receive that only catches the immediate
//     the completion it raises: IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_WITH_IMM, wc.imm_data
//
// Verbs from earlier lessons, through common/: ibv_poll_cq (lesson 3's loop,
// bounded, in wb::poll_success, common/completion.cpp).
//
// Read more: man ibv_reg_mr, man ibv_post_send, man ibv_post_recv,
// man ibv_poll_cq; docs/lesson5-rdma-write-imm.md (diagram, the wire, exercises).
#include <infiniband/verbs.h>

#include <arpa/inet.h>

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

namespace {

constexpr uint16_t kLesson = 5;  // sent in the exchange: a lesson-5 client only talks to a lesson-5 server
constexpr int64_t kDefaultBufferBytes = 4096;
constexpr int64_t kMaxBufferBytes = 1 << 20;  // 1 MiB: -s may not ask for more
const char* const kDefaultMessage = "Hello from the client, by RDMA WRITE with immediate";


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
         "client: put N in the immediate (default: the message's length);\n"
         "                        another value plays a misbehaving client",
         &lie_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]                  server: offer a buffer, print what is written into it\n"
                    "  lesson5 [options] HOST [MESSAGE]   client: RDMA WRITE the MESSAGE into it, with its\n"
                    "                                     length as the immediate value",
        .summary = "RDMA WRITE with immediate: the client writes into the server's memory and says how much",
        .notes = "MESSAGE defaults to \"Hello from the client, by RDMA WRITE with immediate\".",
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
    //    One CQ each side: the server only ever waits for the
    //    immediate's RECV completion, the client only for its WRITE's.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {
            .max_send_wr = 1,   // the client posts one WRITE
            .max_recv_wr = 1,   // the server posts one receive, for the immediate
            .max_send_sge = 1,  // the message is one contiguous buffer
            .max_recv_sge = 1,  // (the receive uses none; 1 is the smallest legal value)
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
                                      "ulimit -l: is locked memory limited? (make doctor checks this)")};
        std::printf("server: offering %u bytes at 0x%llx, rkey 0x%x (REMOTE_WRITE + LOCAL_WRITE)\n", buffer_bytes,
                    static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(buf.get())), mr->rkey);

        // 4. RESET -> INIT (lesson 3). The QP must allow remote writes too:
        //    an MR with REMOTE_WRITE behind a QP without it still refuses.
        wb::qp_to_init(qp.get(), addr, IBV_ACCESS_REMOTE_WRITE);

        // 5. The receive that the immediate will consume, posted before the
        //    client can write. The data goes where the client's WRITE says
        //    (our buffer), not into this receive, so it needs no buffer:
        //    no scatter list at all.
        ibv_recv_wr recv_wr = {.wr_id = 1, .next = nullptr, .sg_list = nullptr, .num_sge = 0};
        ibv_recv_wr* bad_recv = nullptr;
        CHECK_RC(ibv_post_recv(qp.get(), &recv_wr, &bad_recv));
        std::printf("server: posted a zero-length receive for the immediate\n");

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

        // 7. INIT -> RTR -> RTS (lesson 3's transitions, common/qp.cpp).
        wb::qp_to_rtr(qp.get(), addr, peer);
        wb::qp_to_rts(qp.get(), psn);
        wb::send_token(conn, "RTR!");  // our QP is past RTR: the client may write (lesson 4, step 8)
        std::printf("server: QP 0x%x is RTS; waiting for the client's WRITE with immediate\n", qp->qp_num);

        // 8. The immediate arrives as a RECV completion. Until then our CPU
        //    cannot know that anything was written.
        const ibv_wc wc = wb::poll_success(cq.get(), opt.timeout_s, "the client's WRITE with immediate (RECV)", conn);
        if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM))
            wb::result_error(std::string("expected IBV_WC_RECV_RDMA_WITH_IMM, got ") + wb::wc_opcode_str(wc.opcode));
        // imm_data is carried in network byte order (big-endian) end to end:
        // the verbs API hands it over exactly as it travelled in the packet's
        // ImmDt header. The sender wrote htonl(length); we read ntohl().
        const uint32_t length = ntohl(wc.imm_data);
        std::printf("server: completion %s, immediate %u (byte_len %u)\n", wb::wc_opcode_str(wc.opcode), length,
                    wc.byte_len);

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
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), length, 0), "ulimit -l: is locked memory limited? (make doctor checks this)")};

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

    // 8. The WRITE with immediate: our buffer (lkey) -> the server's address (rkey).
    //    imm_data is a __be32: it must be in network byte order, hence htonl.
    const uint32_t told = lie >= 0 ? static_cast<uint32_t>(lie) : length;
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(buf.get()),
        .length = length,
        .lkey = mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = 1,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED,  // we want a completion: the server's NIC has the data
        .imm_data = htonl(told),          // the length, as the server will read it with ntohl
        .wr = {.rdma = {.remote_addr = peer.addr, .rkey = peer.rkey}},
    };
    ibv_send_wr* bad = nullptr;
    // The narration follows the work request itself, so that it stays true
    // when an exercise changes the opcode.
    const bool with_imm = wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr.opcode == IBV_WR_SEND_WITH_IMM;
    const std::string imm_text = with_imm ? " immediate " + std::to_string(told) : "";
    std::printf("client: posting %s: %u bytes to 0x%llx%s%s\n", wr_opcode_words(wr.opcode), length,
                static_cast<unsigned long long>(peer.addr), with_imm ? ("," + imm_text).c_str() : "",
                with_imm && lie >= 0 ? " (a lie, from -L)" : "");
    CHECK_RC(ibv_post_send(qp.get(), &wr, &bad));

    // 9. Our completion: the server's NIC acknowledged the write (the bytes
    //    are in its memory, and the immediate in its CQ).
    const ibv_wc wc = wb::poll_success(cq.get(), opt.timeout_s, "the RDMA WRITE with immediate", conn);
    std::printf("client: completion %s, status %s\n", wb::wc_opcode_str(wc.opcode), ibv_wc_status_str(wc.status));
    std::printf("result: wrote %u bytes%s\n", length, with_imm ? (" with" + imm_text).c_str() : "");
    return 0;
}
