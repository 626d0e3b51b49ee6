// ex6_1.cpp - exercise 6.1: RDMA WRITE a pattern into the server's memory, then READ it back.
//
// Lesson 6 READs the server's text. Here the client first overwrites the
// start of that text with a pattern of its own (-w), with an RDMA WRITE
// from one local buffer, then READs the whole server buffer into a second
// local buffer and checks that it starts with the pattern. What follows the
// pattern is still the server's own text: only a real READ can know it. The
// server's CPU takes no part until the client's DONE; then it prints what
// its buffer holds now.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./ex6_1 -m 'the server text'         server: exposes that text (default: the lesson's)
//     ./ex6_1 127.0.0.1 -w 'PATTERN'       client: writes PATTERN over its start, reads it all back
// Both sides take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./ex6_1 -h).
//
// Verbs involved:
//     ibv_post_send with IBV_WR_RDMA_WRITE, then IBV_WR_RDMA_READ (wr.rdma.remote_addr / rkey)
//     IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ on the server's MR and QP
//     (and IBV_ACCESS_LOCAL_WRITE, which ibv_reg_mr demands with REMOTE_WRITE)
//
// The task is in README.md beside this file; `make grade EX=6.1` checks it.
// Read more: docs/lesson6-rdma-read.md, docs/lesson5-rdma-write-imm.md, man ibv_reg_mr.
#include <infiniband/verbs.h>

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

namespace {

constexpr uint16_t kLesson = 6;  // sent in the exchange: both sides run this lesson's protocol
const char* const kDefaultText = "Hello from the server's memory";
const char* const kDefaultPattern = "WRITTEN";
constexpr size_t kMaxServerText = 65536;   // bytes the server agrees to expose with --message
constexpr size_t kClientBufferSize = 4096; // bytes the client can receive; it refuses more
// READs one side may have outstanding at the other. The client issues one
// READ at a time, so 1 is enough on both sides: max_rd_atomic (client, RTS)
// must not exceed the server's max_dest_rd_atomic (server, RTR).
constexpr uint8_t kReadsInFlight = 1;

}  // namespace

int main(int argc, char** argv) {
    std::string text, pattern;
    const wb::ExtraOption extra[] = {
        {0, "message", "TEXT", "server: the text to expose (default: \"Hello from the server's memory\")", &text},
        {'w', "write", "PATTERN", "client: the bytes to WRITE over the start of it (default: \"WRITTEN\")", &pattern},
    };
    const wb::Usage usage = {
        .synopsis = "[options] [--message TEXT]    server: expose TEXT to be written and read\n"
                    "  ex6_1 [options] HOST [-w PATTERN]  client: WRITE PATTERN over its start, READ it all back",
        .summary = "exercise 6.1: RDMA WRITE, then RDMA READ back what was written",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 1) wb::usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (!is_server && opt.given("message")) wb::usage_error("--message is a server option; the client reads whatever the server exposes");
    if (is_server && opt.given('w')) wb::usage_error("-w is a client option (./ex6_1 HOST -w PATTERN)");
    if (is_server && !opt.given("message")) text = kDefaultText;
    if (!is_server && !opt.given('w')) pattern = kDefaultPattern;
    if (is_server && text.empty()) wb::usage_error("--message: the text must not be empty");
    if (!is_server && pattern.empty()) wb::usage_error("-w: the pattern must not be empty");
    if (is_server && text.size() > kMaxServerText)
        wb::usage_error("--message: the text is " + std::to_string(text.size()) + " bytes, at most " +
                        std::to_string(kMaxServerText) + " allowed");

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);

    // 2. PD, CQ, QP, declared in creation order (reverse destruction is the right teardown).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1 + kReadsInFlight, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {
            .max_send_wr = 1,     // the client posts one WRITE, waits, then one READ
            .max_recv_wr = 1,     // we post no receive; 1 suits every provider
            .max_send_sge = 1,
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,    // READ exists only on reliable connections
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    if (is_server) {
        // 3. The buffer the client will write and read.
        //    TODO(6.1): the access the client's WRITE needs, besides its READ
        //    (ibv_reg_mr(3): which flag must come with REMOTE_WRITE?).
        wb::Buffer buf = wb::alloc_buffer(text.size());
        std::memcpy(buf.get(), text.data(), text.size());
        wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), text.size(), IBV_ACCESS_REMOTE_READ),
                                      "EINVAL: REMOTE_WRITE without LOCAL_WRITE; ENOMEM: ulimit -l")};
        std::printf("server: exposing %zu bytes at 0x%llx, rkey 0x%x\n", text.size(),
                    static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(buf.get())), mr->rkey);

        // 4. Out-of-band exchange: QP number, PSN, GID, and where the text is.
        wb::Listener listener(opt.tcp_port);
        std::printf("server: waiting for a client on TCP port %u\n", opt.tcp_port);
        wb::Connection conn = listener.accept(opt.accept_timeout_s());
        wb::PeerInfo mine = wb::local_info(kLesson, qp.get(), psn, addr);
        mine.addr = reinterpret_cast<uintptr_t>(buf.get());
        mine.length = static_cast<uint32_t>(text.size());
        mine.rkey = mr->rkey;
        const wb::PeerInfo peer = wb::exchange(conn, mine, opt.timeout_s);
        std::printf("server: client %s is QP 0x%x\n", conn.peer().c_str(), peer.qp_num);

        // 5. Lesson 3's transitions. The QP must allow both operations too.
        //    TODO(6.1): and the WRITE.
        wb::qp_to_init(qp.get(), addr, IBV_ACCESS_REMOTE_READ);
        wb::qp_to_rtr(qp.get(), addr, peer, kReadsInFlight);
        wb::qp_to_rts(qp.get(), psn, kReadsInFlight);
        std::printf("server: QP 0x%x is RTS; telling the client it may WRITE and READ now\n", qp->qp_num);
        wb::send_token(conn, "RTR!");

        // 6. Nothing to post, nothing to poll: the NIC serves both alone.
        std::printf("server: waiting for the client's DONE (this CPU does nothing meanwhile)\n");
        wb::expect_token(conn, "DONE", opt.timeout_s);

        // 7. Now nobody touches the buffer: look at it with the CPU.
        std::printf("server: buffer now holds \"%s\"\n", wb::printable(buf.get(), text.size()).c_str());
        std::printf("result: the server's %zu bytes were written and read by the client's NIC alone\n", text.size());
        return 0;
    }

    // Client.
    // 3. Two buffers: what we WRITE (our NIC only reads it, and local read is
    //    always granted: access 0), and where the READ lands (LOCAL_WRITE: our
    //    NIC writes the response into it). Two, so that the check below
    //    compares what came back with what went out, not a buffer with itself.
    wb::Buffer out = wb::alloc_buffer(pattern.size());
    std::memcpy(out.get(), pattern.data(), pattern.size());
    wb::MemoryRegion out_mr{CHECK_PTR(ibv_reg_mr(pd.get(), out.get(), pattern.size(), 0),
                                      "ulimit -l: is locked memory limited? (make doctor checks this)")};
    wb::Buffer in = wb::alloc_buffer(kClientBufferSize);
    wb::MemoryRegion in_mr{CHECK_PTR(ibv_reg_mr(pd.get(), in.get(), kClientBufferSize, IBV_ACCESS_LOCAL_WRITE),
                                     "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. Out-of-band exchange: the server's QP and where its text is.
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    std::printf("client: connected to %s\n", conn.peer().c_str());
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("client: server QP 0x%x offers %u bytes at 0x%llx, rkey 0x%x\n", peer.qp_num, peer.length,
                static_cast<unsigned long long>(peer.addr), peer.rkey);
    // Never trust what the peer advertises: the READ writes `length` bytes
    // into our buffer, and the pattern must fit inside what is offered.
    if (peer.addr == 0 || peer.length == 0)
        wb::fail("the server offers no buffer (length " + std::to_string(peer.length) + ")",
                 "is the server an ex6_1 server?");
    if (peer.length > kClientBufferSize)
        wb::fail("the server advertises " + std::to_string(peer.length) + " bytes, more than this client's " +
                     std::to_string(kClientBufferSize) + "-byte buffer: refusing to READ",
                 "run the server with a shorter --message TEXT");
    if (pattern.size() > peer.length)
        wb::fail("the pattern is " + std::to_string(pattern.size()) + " bytes, the server offers only " +
                     std::to_string(peer.length) + ": refusing to WRITE past its buffer",
                 "a shorter -w PATTERN, or a longer --message TEXT on the server");

    // 5. Lesson 3's transitions; the server may do nothing to our memory.
    wb::qp_to_init(qp.get(), addr, 0);
    wb::qp_to_rtr(qp.get(), addr, peer, kReadsInFlight);
    wb::qp_to_rts(qp.get(), psn, kReadsInFlight);
    wb::expect_token(conn, "RTR!", opt.timeout_s);

    // 6. The WRITE: local `out` (lkey) -> remote address (rkey), the pattern's bytes.
    // TODO(6.1): post an IBV_WR_RDMA_WRITE of pattern.size() bytes from `out`
    // (out_mr->lkey) to peer.addr / peer.rkey, signaled, and wait for its
    // completion with wb::poll_success(cq.get(), opt.timeout_s, "the RDMA WRITE", conn).
    ibv_send_wr* bad = nullptr;

    // 7. The READ: local `in` (lkey) <- remote address (rkey), the whole buffer.
    ibv_sge in_sge = {
        .addr = reinterpret_cast<uintptr_t>(in.get()),
        .length = peer.length,  // checked above against our buffer
        .lkey = in_mr->lkey,
    };
    ibv_send_wr read_wr = {
        .wr_id = 2,
        .next = nullptr,
        .sg_list = &in_sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,  // its completion: the bytes are in `in`
        .wr = {.rdma = {.remote_addr = peer.addr, .rkey = peer.rkey}},
    };
    std::printf("client: posting RDMA READ of %u bytes from 0x%llx\n", peer.length,
                static_cast<unsigned long long>(peer.addr));
    CHECK_RC(ibv_post_send(qp.get(), &read_wr, &bad));
    const ibv_wc read_wc = wb::poll_success(cq.get(), opt.timeout_s, "the RDMA READ", conn);
    std::printf("client: completion %s, status %s\n", wb::wc_opcode_str(read_wc.opcode),
                ibv_wc_status_str(read_wc.status));

    // 8. DONE, so that the server may look at its buffer and exit. Then the
    //    check: the bytes read back must start with what we wrote.
    wb::send_token(conn, "DONE");
    const std::string back = wb::printable(in.get(), peer.length);
    std::printf("client: read back %u bytes: \"%s\"\n", peer.length, back.c_str());
    if (std::memcmp(in.get(), pattern.data(), pattern.size()) != 0)
        wb::result_error("the first " + std::to_string(pattern.size()) + " bytes read back are \"" +
                         wb::printable(in.get(), pattern.size()) + "\", not what we wrote: \"" +
                         wb::printable(pattern.data(), pattern.size()) + "\"");
    std::printf("result: wrote %zu bytes, read back %u bytes, the first %zu match: \"%s\"\n", pattern.size(),
                peer.length, pattern.size(), back.c_str());
    return 0;
}
