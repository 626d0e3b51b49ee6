// lesson6.cpp - RDMA READ: the client reads the server's memory; the server's CPU takes no part.
//
// The server puts a line of text in a buffer, registers it with
// IBV_ACCESS_REMOTE_READ and nothing else, and tells the client where it is
// (address, length, rkey) over the TCP side channel. The client posts one
// IBV_WR_RDMA_READ: its NIC asks the server's NIC for those bytes (a READ
// Request), the server's NIC answers from memory (a READ Response), and the
// bytes land in the client's own buffer. The server posts nothing, polls
// nothing and gets no completion: it only waits for the client to say DONE.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson6                      server: exposes "Hello from the server's memory"
//     ./lesson6 --message 'any text' server: exposes that text instead
//     ./lesson6 127.0.0.1            client: reads it and prints it
// On two hosts: ./lesson6 on host A, ./lesson6 A on host B. Both sides take
// -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson6 -h).
//
// Verbs it introduces:
//     ibv_post_send with IBV_WR_RDMA_READ (wr.rdma.remote_addr / rkey)
//     IBV_ACCESS_REMOTE_READ on an MR and on the QP (qp_access_flags)
//     max_rd_atomic / max_dest_rd_atomic: how many READs may be in flight
//
// Read more: man ibv_post_send, man ibv_reg_mr, man ibv_modify_qp;
// docs/lesson6-rdma-read.md (sequence diagram, what the wire shows, exercises).
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

constexpr uint16_t kLesson = 6;  // sent in the exchange: a lesson-6 client only talks to a lesson-6 server
const char* const kDefaultText = "Hello from the server's memory";
constexpr size_t kMaxServerText = 65536;   // bytes the server agrees to expose with --message
constexpr size_t kClientBufferSize = 4096; // bytes the client can receive; it refuses more
// READs one side may have outstanding at the other. The client issues one
// READ at a time, so 1 is enough on both sides: max_rd_atomic (client, RTS)
// must not exceed the server's max_dest_rd_atomic (server, RTR).
constexpr uint8_t kReadsInFlight = 1;

}  // namespace

int main(int argc, char** argv) {
    std::string text;
    const wb::ExtraOption extra[] = {
        {0, "message", "TEXT", "server: the text to expose (default: \"Hello from the server's memory\")", &text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]        server: expose TEXT for the client to READ\n"
                    "  lesson6 [options] HOST   client: RDMA READ the server's text and print it",
        .summary = "RDMA READ: the client reads the server's memory, the server's CPU takes no part",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 1) wb::usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (!is_server && opt.given("message")) wb::usage_error("--message is a server option; the client reads whatever the server exposes");
    if (is_server && !opt.given("message")) text = kDefaultText;
    if (is_server && text.empty()) wb::usage_error("--message: the text must not be empty");
    if (is_server && text.size() > kMaxServerText)
        wb::usage_error("--message: the text is " + std::to_string(text.size()) + " bytes, at most " +
                        std::to_string(kMaxServerText) + " allowed");

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);

    // 2. The objects every RC connection needs, in creation order (reverse destruction: lesson 2).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    // The server's CQ will stay empty (that is the point of this lesson), but
    // every QP needs one. One entry per request we keep in flight.
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1 + kReadsInFlight, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {
            .max_send_wr = kReadsInFlight,  // the client posts one READ at a time
            .max_recv_wr = 1,               // we post no receive (nobody SENDs here); 1 suits every provider
            .max_send_sge = 1,              // the READ lands in one local buffer
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,              // READ exists only on reliable connections
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    if (is_server) {
        // 3. The buffer the client will read. REMOTE_READ only: the client's
        //    NIC may read these bytes and do nothing else; no LOCAL_WRITE is
        //    needed because no NIC ever writes into this buffer (our CPU filled
        //    it before registering, and local read access is always granted).
        wb::Buffer buf = wb::alloc_buffer(text.size());
        std::memcpy(buf.get(), text.data(), text.size());
        wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), text.size(), IBV_ACCESS_REMOTE_READ),
                                      "ulimit -l: is locked memory limited? (make doctor checks this)")};
        std::printf("server: exposing %zu bytes at 0x%llx, rkey 0x%x (IBV_ACCESS_REMOTE_READ only)\n",
                    text.size(), static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(buf.get())), mr->rkey);

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

        // 5. Lesson 3's transitions. The QP's qp_access_flags must allow READ
        //    too: an MR with REMOTE_READ behind a QP without it still refuses.
        //    max_dest_rd_atomic = how many READ requests the client may have
        //    outstanding at us; the NIC keeps one responder resource for each.
        wb::qp_to_init(qp.get(), addr, IBV_ACCESS_REMOTE_READ);
        wb::qp_to_rtr(qp.get(), addr, peer, kReadsInFlight);
        wb::qp_to_rts(qp.get(), psn, kReadsInFlight);
        std::printf("server: QP 0x%x is RTS; telling the client it may READ now\n", qp->qp_num);
        wb::send_token(conn, "RTR!");  // our QP is past RTR (lesson 4, step 8)

        // 6. Nothing to post, nothing to poll: the NIC answers the READ alone.
        //    The client tells us on the TCP side channel when it is done.
        std::printf("server: waiting for the client's DONE (this CPU does nothing meanwhile)\n");
        wb::expect_token(conn, "DONE", opt.timeout_s);

        // 7. Proof: our CQ is still empty. A READ consumes no receive and
        //    raises no completion at the responder.
        ibv_wc wc{};
        const int n = CHECK_POLL(ibv_poll_cq(cq.get(), 1, &wc));
        std::printf("server: completions on this side: %d\n", n);
        std::printf("result: the client read %zu bytes; the server saw %d completions\n", text.size(), n);
        return 0;
    }

    // Client.
    // 3. Where the READ response lands. LOCAL_WRITE only: our own NIC writes
    //    the response data into it; no peer may touch it, so no REMOTE_* flag.
    wb::Buffer buf = wb::alloc_buffer(kClientBufferSize);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), kClientBufferSize, IBV_ACCESS_LOCAL_WRITE),
                                  "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. Out-of-band exchange: we learn the server's QP and where its text is.
    const std::string& host = opt.args[0];
    wb::Connection conn = wb::connect_to(host, opt.tcp_port, opt.timeout_s);
    std::printf("client: connected to %s\n", conn.peer().c_str());
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("client: server QP 0x%x offers %u bytes at 0x%llx, rkey 0x%x\n", peer.qp_num, peer.length,
                static_cast<unsigned long long>(peer.addr), peer.rkey);
    // Never trust what the peer advertises: the READ would write `length`
    // bytes into our buffer, so a length beyond it must be refused here,
    // before anything is posted (our NIC would otherwise fail the READ with
    // IBV_WC_LOC_PROT_ERR, or worse, with a bigger MR, overwrite memory).
    if (peer.addr == 0 || peer.length == 0)
        wb::fail("the server offers no buffer to read (length " + std::to_string(peer.length) + ")",
                 "is the server a lesson-6 server of this workbook?");
    if (peer.length > kClientBufferSize)
        wb::fail("the server advertises " + std::to_string(peer.length) + " bytes, more than this client's " +
                     std::to_string(kClientBufferSize) + "-byte buffer: refusing to READ",
                 "run the server with a shorter --message TEXT");

    // 5. Lesson 3's transitions. The client lets the server do nothing to its
    //    memory (remote access 0). max_rd_atomic = how many READs we may have
    //    outstanding at the server; it must not exceed the server's
    //    max_dest_rd_atomic, or the extra requests are NAKed.
    wb::qp_to_init(qp.get(), addr, 0);
    wb::qp_to_rtr(qp.get(), addr, peer, kReadsInFlight);
    wb::qp_to_rts(qp.get(), psn, kReadsInFlight);
    wb::expect_token(conn, "RTR!", opt.timeout_s);  // not before the server's QP can answer (lesson 4, step 8)

    // 6. The READ: local buffer (lkey) <- remote address (rkey).
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(buf.get()),
        .length = peer.length,  // checked above against our buffer
        .lkey = mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = 1,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,  // we want a completion: it says the data has arrived
        .wr = {.rdma = {.remote_addr = peer.addr, .rkey = peer.rkey}},
    };
    ibv_send_wr* bad = nullptr;
    std::printf("client: posting RDMA READ of %u bytes from 0x%llx\n", peer.length,
                static_cast<unsigned long long>(peer.addr));
    CHECK_RC(ibv_post_send(qp.get(), &wr, &bad));

    // 7. One completion on OUR CQ: until it arrives the buffer is not ours to read.
    //    (This poll_success also watches the TCP connection: if the server dies,
    //    we hear it at once instead of after the NIC's retries.)
    const ibv_wc wc = wb::poll_success(cq.get(), opt.timeout_s, "the RDMA READ", conn);
    std::printf("client: completion %s, status %s\n", wb::wc_opcode_str(wc.opcode), ibv_wc_status_str(wc.status));

    // 8. Tell the server we are done, so that it may exit and free its buffer.
    wb::send_token(conn, "DONE");
    std::printf("result: read %u bytes: \"%s\"\n", peer.length, wb::printable(buf.get(), peer.length).c_str());
    return 0;
}
