// ex6_2.cpp - exercise 6.2: READ one byte past what the server registered, and say who refused it.
//
// Lesson 6, with one change the client can ask for: --past-end makes its
// RDMA READ one byte longer than the server's MR. The client's buffer has
// room for it, so our own NIC has no objection; the server's NIC checks the
// request against the MR it names (rkey, address, length) and refuses it.
// The client names the status of its completion by enum name and number;
// the server, which posts nothing and gets no completion, asks its QP what
// state it is in after the client's DONE.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./ex6_2                        server: exposes "Hello from the server's memory"
//     ./ex6_2 127.0.0.1              client: reads it (the lesson's READ)
//     ./ex6_2 127.0.0.1 --past-end   client: reads one byte more than the server registered
// Both sides take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./ex6_2 -h).
//
// Verbs involved:
//     ibv_post_send with IBV_WR_RDMA_READ (lesson 6), sge.length past the remote MR
//     ibv_poll_cq: a completion with a status other than IBV_WC_SUCCESS
//     ibv_query_qp: the responder's QP state after it refused a request
//
// The task is in README.md beside this file; `make grade EX=6.2` checks it.
// Read more: docs/lesson6-rdma-read.md ("Errors you may meet"), man ibv_poll_cq, man ibv_query_qp.
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
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr uint16_t kLesson = 6;  // sent in the exchange: both sides run this lesson's protocol
const char* const kDefaultText = "Hello from the server's memory";
constexpr size_t kMaxServerText = 65536;   // bytes the server agrees to expose with --message
constexpr size_t kClientBufferSize = 4096; // bytes the client can receive; it refuses more
constexpr uint8_t kReadsInFlight = 1;      // one READ at a time (lesson 6)

// Like wb::poll_success, but a failed completion is returned, not fatal: the
// caller wants to name its status. Nothing at all within timeout_s still is.
ibv_wc wait_completion(ibv_cq* cq, int timeout_s, const char* waiting_for) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    ibv_wc wc{};
    for (;;) {
        const int n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc));
        if (n == 1) return wc;
        if (std::chrono::steady_clock::now() >= deadline)
            wb::fail(std::string("no completion for ") + waiting_for + " within " + std::to_string(timeout_s) + " s",
                     "is the server still running? raise --timeout if the machine is slow");
        std::this_thread::yield();
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string text;
    std::string past_end;  // "1" when --past-end is given
    const wb::ExtraOption extra[] = {
        {0, "message", "TEXT", "server: the text to expose (default: \"Hello from the server's memory\")", &text},
        {'x', "past-end", nullptr, "client: READ one byte more than the server registered (default: off)", &past_end},
    };
    const wb::Usage usage = {
        .synopsis = "[options]                   server: expose TEXT for the client to READ\n"
                    "  ex6_2 [options] HOST [--past-end]  client: RDMA READ it (one byte too many with --past-end)",
        .summary = "exercise 6.2: READ past the end of the server's MR and name the status",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 1) wb::usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (!is_server && opt.given("message")) wb::usage_error("--message is a server option; the client reads whatever the server exposes");
    if (is_server && !past_end.empty()) wb::usage_error("--past-end is a client option (./ex6_2 HOST --past-end)");
    if (is_server && !opt.given("message")) text = kDefaultText;
    if (is_server && text.empty()) wb::usage_error("--message: the text must not be empty");
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
            .max_send_wr = kReadsInFlight,  // the client posts one READ at a time
            .max_recv_wr = 1,               // we post no receive; 1 suits every provider
            .max_send_sge = 1,
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,              // READ exists only on reliable connections
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    if (is_server) {
        // 3. The buffer the client will read: exactly the text, REMOTE_READ only.
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

        // 5. Lesson 3's transitions, with REMOTE_READ in qp_access_flags.
        wb::qp_to_init(qp.get(), addr, IBV_ACCESS_REMOTE_READ);
        wb::qp_to_rtr(qp.get(), addr, peer, kReadsInFlight);
        wb::qp_to_rts(qp.get(), psn, kReadsInFlight);
        std::printf("server: QP 0x%x is RTS; telling the client it may READ now\n", qp->qp_num);
        wb::send_token(conn, "RTR!");

        // 6. Nothing to post, nothing to poll: the NIC answers (or refuses) alone.
        std::printf("server: waiting for the client's DONE (this CPU does nothing meanwhile)\n");
        wb::expect_token(conn, "DONE", opt.timeout_s);

        // 7. Our CQ is still empty, refused READ or not; but the QP remembers.
        ibv_wc wc{};
        const int n = CHECK_POLL(ibv_poll_cq(cq.get(), 1, &wc));
        std::printf("server: completions on this side: %d\n", n);
        // TODO(6.2): ask the QP which state it is in now (ibv_query_qp, as
        // lesson 3 does, or wb::query_state) and print
        //     server: QP 0x<qp_num> is now IBV_QPS_<STATE>
        // with qp_state_name above.
        std::printf("result: the server saw %d completions\n", n);
        return 0;
    }

    // Client.
    // 3. Where the READ response lands: LOCAL_WRITE only (our NIC writes it).
    wb::Buffer buf = wb::alloc_buffer(kClientBufferSize);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), kClientBufferSize, IBV_ACCESS_LOCAL_WRITE),
                                  "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. Out-of-band exchange: the server's QP and where its text is.
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    std::printf("client: connected to %s\n", conn.peer().c_str());
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("client: server QP 0x%x offers %u bytes at 0x%llx, rkey 0x%x\n", peer.qp_num, peer.length,
                static_cast<unsigned long long>(peer.addr), peer.rkey);
    // One byte more than offered must still fit OUR buffer: that keeps our
    // own NIC out of it, so that only the server's NIC can object.
    if (peer.addr == 0 || peer.length == 0)
        wb::fail("the server offers no buffer to read (length " + std::to_string(peer.length) + ")",
                 "is the server an ex6_2 server?");
    if (peer.length + 1 > kClientBufferSize)
        wb::fail("the server advertises " + std::to_string(peer.length) + " bytes; this client reads at most " +
                     std::to_string(kClientBufferSize - 1) + " (one byte is kept for --past-end)",
                 "run the server with a shorter --message TEXT");
    // TODO(6.2): with --past-end (past_end is "1"), READ one byte more than the server offers.
    const uint32_t length = peer.length;

    // 5. Lesson 3's transitions; the server may do nothing to our memory.
    wb::qp_to_init(qp.get(), addr, 0);
    wb::qp_to_rtr(qp.get(), addr, peer, kReadsInFlight);
    wb::qp_to_rts(qp.get(), psn, kReadsInFlight);
    wb::expect_token(conn, "RTR!", opt.timeout_s);

    // 6. The READ: local buffer (lkey) <- remote address (rkey), `length` bytes.
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(buf.get()),
        .length = length,  // at most peer.length + 1, inside our buffer (checked above)
        .lkey = mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = 1,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,
        .wr = {.rdma = {.remote_addr = peer.addr, .rkey = peer.rkey}},
    };
    ibv_send_wr* bad = nullptr;
    std::printf("client: posting RDMA READ of %u bytes from 0x%llx (the server registered %u)\n", length,
                static_cast<unsigned long long>(peer.addr), peer.length);
    CHECK_RC(ibv_post_send(qp.get(), &wr, &bad));

    // 7. One completion on our CQ, whatever its status: name it.
    const ibv_wc wc = wait_completion(cq.get(), opt.timeout_s, "the RDMA READ");
    std::printf("client: completion of the READ of %u bytes: %s (%d, %s)\n", length, wb::wc_status_name(wc.status),
                static_cast<int>(wc.status), ibv_wc_status_str(wc.status));

    // 8. DONE either way, so that the server can look at its QP and exit.
    wb::send_token(conn, "DONE");
    if (wc.status != IBV_WC_SUCCESS)
        wb::result_error(std::string("the READ of ") + std::to_string(length) + " bytes failed: " +
                         wb::wc_status_name(wc.status) + " (" + std::to_string(wc.status) + ")");
    std::printf("result: read %u bytes: \"%s\"\n", length, wb::printable(buf.get(), length).c_str());
    return 0;
}
