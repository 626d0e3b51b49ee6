// lesson12.cpp - unreliable datagrams (UD): lesson 4's sum without a connection.
//
// Lessons 4 to 9 use RC queue pairs: one QP talks to one peer, and its NIC
// acknowledges, resends and orders every message. A UD QP has no peer: each
// SEND names its destination in the work request (wr.ud: an address handle,
// the remote QP number and Q_Key), and nothing is acknowledged. A datagram
// that finds no receive, or carries the wrong Q_Key, is dropped without a
// word while the sender's completion says IBV_WC_SUCCESS; so the client waits
// a bounded time for the answer and sends again (up to kTries times), as every
// UD application does. A datagram is one packet (no longer than the path
// MTU), and every receive buffer starts with the 40-byte Global Route Header
// (IBV_WC_GRH) of its packet, from which the server makes the address of its
// answer (ibv_create_ah_from_wc). Multicast, one datagram to many UD QPs, is
// the lesson's second program: lesson12_mcast.cpp.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson12                       server: waits for one client
//     ./lesson12 127.0.0.1 2 3         client: prints "result: 2 + 3 = 5"
//     ./lesson12 --no-recv             server that posts its receive 1.5 s late:
//                                      the client's first datagrams are lost
//     ./lesson12 -q 7 127.0.0.1 2 3    client that sends with a wrong Q_Key: all are lost
// On two hosts: ./lesson12 on host A, ./lesson12 A 2 3 on host B. Both sides
// take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson12 -h).
//
// Verbs it introduces:
//     IBV_QPT_UD; ibv_modify_qp to RTR and RTS with no remote fields, a Q_Key (IBV_QP_QKEY)
//     ibv_create_ah (ibv_ah_attr: GID, sgid_index, hop_limit), ibv_create_ah_from_wc
//     ibv_post_send's wr.ud: ah, remote_qpn, remote_qkey; IBV_WC_GRH, wc.src_qp,
//     ibv_init_ah_from_wc (who sent a datagram: checked against the peer of the exchange)
//
// Read more: man ibv_create_ah, man ibv_create_ah_from_wc, man ibv_post_send
// (the ud fields), rdma-core's ibv_ud_pingpong; docs/lesson12-ud-multicast.md
// (diagram, what the wire shows, exercises, common errors).
#include <infiniband/verbs.h>

#include <endian.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
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
#include "ud.hpp"  // the UD steps both of lesson 12's programs take, read in this order

namespace {

constexpr uint16_t kLesson = 12;  // sent in the exchange: a lesson-12 client only talks to a lesson-12 server

// The client waits this long for an answer before it sends the request
// again, at most kTries times: UD's only reliability is the one we write.
constexpr std::chrono::milliseconds kAnswerWait{1000};
constexpr int kTries = 4;
// --no-recv: the server posts its receive this long after the exchange.
constexpr std::chrono::milliseconds kLateReceive{1500};

// The client can send up to this many bytes with -B, to try the path-MTU limit.
constexpr uint32_t kMaxSendBytes = 4096;

// wr_id: our own label for a work request, handed back in its completion.
constexpr uint64_t kRecvId = 0;  // the one receive slot
constexpr uint64_t kSendId = 1;


}  // namespace

int main(int argc, char** argv) {
    std::string send_bytes_text, qkey_text, no_recv_text;
    const wb::ExtraOption extra[] = {
        {'B', "send-bytes", "N",
         "client: send N bytes, 0..4096 (default: 16, one request);\n"
         "                        more than the path MTU is refused: a datagram is one packet",
         &send_bytes_text},
        {'q', "qkey", "Q", "client: send with Q_Key Q (default: 0x01234567, the server's; any other is dropped)",
         &qkey_text},
        {0, "no-recv", nullptr, "server: post the receive 1.5 s after the exchange (default: before)", &no_recv_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]              server: add the two numbers a client sends, over UD\n"
                    "  lesson12 [options] HOST A B     client: send A and B in a datagram, print the sum",
        .summary = "unreliable datagrams: the sum over UD QPs, and what UD loses without a word",
        .notes = "A and B are signed 64-bit integers. Q accepts decimal or 0x hex.\n"
                 "Multicast is the lesson's second program: ./lesson12_mcast -h.",
        .numbers_after_host = true,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    // No host: server. HOST A B: client (common/sum_protocol.cpp checks them).
    const wb::SumArgs sum_args = wb::parse_sum_args(opt);
    const bool is_server = sum_args.is_server;
    if (is_server && (opt.given('B') || opt.given('q'))) wb::usage_error("-B and -q are client options");
    if (!is_server && opt.given("no-recv")) wb::usage_error("--no-recv is a server option");
    const int64_t a = sum_args.a, b = sum_args.b;
    const uint32_t send_bytes = opt.given('B')
                                    ? static_cast<uint32_t>(wb::parse_range(send_bytes_text, "-B", 0, kMaxSendBytes))
                                    : sizeof(wb::SumRequest);
    const uint32_t qkey = opt.given('q') ? static_cast<uint32_t>(wb::parse_hex(qkey_text, "-q", 32)) : ud::kQkey;

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    const char* who = is_server ? "server" : "client";

    // 2. The objects, in creation order (reverse destruction: lesson 2). The
    //    QP is IBV_QPT_UD: unreliable (no ACK, no resend), datagram (no peer).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue send_cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    wb::CompletionQueue recv_cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = send_cq.get(),
        .recv_cq = recv_cq.get(),
        .cap = {
            .max_send_wr = 1,   // one datagram outstanding at a time
            .max_recv_wr = 1,   // one receive posted at a time
            .max_send_sge = 1,
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_UD,  // unreliable datagram: no connection, no acknowledgement
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    // 3. Memory. Each side's receive takes the 40-byte GRH plus a whole MTU
    //    (1024 bytes on a 1500-byte link), the longest datagram, so that any
    //    datagram lands, the client's 16-byte answer or anyone's stray
    //    (ud.hpp's Receives says why). Access as in lesson 4: LOCAL_WRITE
    //    where our NIC writes.
    const uint32_t mtu = static_cast<uint32_t>(wb::mtu_bytes(addr.attr.active_mtu));
    const uint32_t recv_len = ud::kGrhBytes + mtu;
    wb::Buffer recv_buf = wb::alloc_buffer(recv_len);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE),
                                       "ulimit -l: is locked memory limited?")};
    wb::Buffer send_buf = wb::alloc_buffer(kMaxSendBytes);
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), kMaxSendBytes, 0),
                                       "ulimit -l: is locked memory limited?")};

    const ud::Receives receives = {
        .qp = qp.get(), .cq = recv_cq.get(), .mr = recv_mr.get(), .base = recv_buf.get(), .slot_bytes = recv_len};

    // 4. RESET -> INIT -> RTR -> RTS (ud.hpp), all before the exchange: UD
    //    needs nothing from the peer to get there.
    ud::qp_to_rts(qp.get(), addr, psn);
    std::printf("%s: UD QP 0x%x is RTS with Q_Key 0x%08x, before knowing any peer\n", who, qp->qp_num, ud::kQkey);

    // 5. The receive, before the exchange as in lesson 4; but where an RC
    //    sender would be told "not ready" (RNR NAK) and try again, a datagram
    //    that finds no receive is simply dropped. --no-recv shows it.
    if (!opt.given("no-recv")) {
        ud::post_receive(receives, kRecvId);
        std::printf("%s: posted a %u-byte receive (40 GRH + %u) before the exchange\n", who, recv_len,
                    recv_len - ud::kGrhBytes);
    } else {
        std::printf("server: --no-recv: no receive posted; one follows %lld ms after the exchange\n",
                    static_cast<long long>(kLateReceive.count()));
    }

    // 6. Out-of-band exchange over TCP: QP number and GID (or LID), as in lesson 4;
    //    the PSN is sent but unused: UD packets are never acknowledged nor resent.
    const long long pkts_before = wb::PortCounters::read(ctx.get(), addr.port, "rcvd_pkts");
    wb::Connection conn = wb::meet_peer(opt, is_server);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    if (peer.qp_num == ud::kMulticastQpn)
        wb::fail("the peer " + conn.peer() + " runs multicast receivers", "send to them with ./lesson12_mcast HOST");
    std::printf("%s: peer %s is QP 0x%x\n", who, conn.peer().c_str(), peer.qp_num);
    ud::PeerDatagrams from_peer = {.ctx = ctx.get(), .port = addr.port, .peer = peer, .me = who};

    if (is_server) {
        if (opt.given("no-recv")) {
            // Whatever the client sends now finds no receive. No NAK goes back,
            // no completion appears here: only the port's packet counter moves.
            std::this_thread::sleep_for(kLateReceive);
            const long long pkts = wb::PortCounters::read(ctx.get(), addr.port, "rcvd_pkts");
            if (pkts >= 0 && pkts_before >= 0)
                std::printf("server: in those %lld ms the port received %lld packets (rcvd_pkts) and our CQ got "
                            "nothing: dropped\n",
                            static_cast<long long>(kLateReceive.count()), pkts - pkts_before);
            ud::post_receive(receives, kRecvId);
            std::printf("server: posted a %u-byte receive (40 GRH + %u), late\n", recv_len, recv_len - ud::kGrhBytes);
        }
        // 7. Wait for the request. byte_len counts the 40 GRH bytes too (IBV_WC_GRH
        //    says they are there); wc.src_qp is the sender's QP. Only the client
        //    of the exchange is answered (ud.hpp's PeerDatagrams), within
        //    --timeout however many strays arrive.
        std::printf("server: waiting for the client's datagram\n");
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.timeout_s);
        const std::optional<ibv_wc> request =
            from_peer.next(receives, deadline, "the client's request (RECV)", &conn);
        if (!request)
            wb::fail("no request from the client " + conn.peer() + " within " + std::to_string(opt.timeout_s) +
                         " s (" + std::to_string(from_peer.strays) + " datagrams from others ignored)",
                     "is the client sending with our Q_Key? raise --timeout if the machine is slow");
        ibv_wc wc = *request;
        const uint32_t len = ud::message_length(wc);
        std::printf("server: completion %s, %u bytes = 40 GRH + %u message, from QP 0x%x at %s\n",
                    wb::wc_opcode_str(wc.opcode), wc.byte_len, len, wc.src_qp,
                    addr.roce ? ud::grh_source_ipv4(recv_buf.get()).c_str() : "(IB)");

        // The application's part (common/sum_protocol.cpp), on the bytes after the GRH.
        const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get() + ud::kGrhBytes, len);
        if (len == sizeof(wb::SumRequest))
            std::printf("server: request %" PRId64 " + %" PRId64 "\n", answer.a, answer.b);

        // 8. Answer whoever asked: ibv_create_ah_from_wc reads the sender's
        //    address out of the GRH in our buffer, and wc.src_qp is its QP
        //    (from_peer made sure it is the client's).
        wb::AddressHandle reply_ah{CHECK_PTR(
            ibv_create_ah_from_wc(pd.get(), &wc, reinterpret_cast<ibv_grh*>(recv_buf.get()), addr.port))};
        std::memcpy(send_buf.get(), &answer.response, sizeof answer.response);
        ud::post_datagram(qp.get(), send_mr.get(), sizeof answer.response, reply_ah.get(), wc.src_qp, ud::kQkey,
                          kSendId);
        wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the response", conn);
        std::printf("server: response sent (status %u)\n", be32toh(answer.response.status));
        if (!answer.error.empty()) wb::result_error(answer.error);
        std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answer.a, answer.b, answer.sum);
        return 0;
    }

    // Client.
    // 7. An address handle for the server: its GID and our GID index on RoCE
    //    (the GRH is mandatory there), its LID on InfiniBand. An RC QP keeps
    //    this in its RTR attributes; a UD work request carries it.
    ibv_ah_attr ah_attr = {.dlid = peer.lid, .sl = 0, .is_global = 0, .port_num = addr.port};  // LID: IB only
    if (addr.gid_index >= 0) {
        ah_attr.is_global = 1;  // service level 0 above; hop_limit: the IP TTL on RoCE v2
        ah_attr.grh = {.dgid = peer.gid, .sgid_index = static_cast<uint8_t>(addr.gid_index), .hop_limit = 64};
    }
    wb::AddressHandle ah{CHECK_PTR(ibv_create_ah(pd.get(), &ah_attr),
                                   "compare both sides' gid: lines: both IPv4-mapped (::ffff:a.b.c.d) or both IPv6 (-g)")};
    std::printf("client: address handle for GID %s, QP 0x%x, Q_Key 0x%08x\n", wb::gid_to_string(peer.gid).c_str(),
                peer.qp_num, qkey);

    // A datagram is one packet: no longer than the smaller MTU of the two ports.
    const uint32_t path_mtu = static_cast<uint32_t>(
        wb::mtu_bytes(std::min(addr.attr.active_mtu, static_cast<ibv_mtu>(peer.mtu))));
    if (send_bytes > path_mtu)
        wb::result_error(std::to_string(send_bytes) + " bytes do not fit in one datagram: the path MTU is " +
                         std::to_string(path_mtu) + " bytes");

    // 8. SEND the request and wait for the answer, kTries times at most. The
    //    SEND's completion only says the datagram left our port.
    const wb::SumRequest request = wb::make_sum_request(a, b);
    std::memcpy(send_buf.get(), &request, sizeof request);
    std::optional<ibv_wc> answer;
    for (int attempt = 1; attempt <= kTries && !answer; ++attempt) {
        std::printf("client: sending %" PRId64 " and %" PRId64 " (%u bytes), try %d of %d\n", a, b, send_bytes,
                    attempt, kTries);
        ud::post_datagram(qp.get(), send_mr.get(), send_bytes, ah.get(), peer.qp_num, qkey, kSendId);
        const ibv_wc sent = wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the request", conn);
        std::printf("client: send completion %s: the datagram left; nobody tells us whether it arrived\n",
                    wb::wc_status_name(sent.status));
        // The answer, from the server of the exchange only (ud.hpp's
        // PeerDatagrams): a datagram from anyone else is ignored within the same wait.
        answer = from_peer.next(receives, std::chrono::steady_clock::now() + kAnswerWait,
                                "the server's response (RECV)");
        if (!answer)
            std::printf("client: no answer within %lld ms: the datagram or its answer was lost\n",
                        static_cast<long long>(kAnswerWait.count()));
    }
    if (!answer)
        wb::result_error("no answer after " + std::to_string(kTries) +
                         " tries: every datagram was dropped (is the server running? is the Q_Key right?)");

    // 9. The answer: 40 GRH bytes, then the response.
    const uint32_t len = ud::message_length(*answer);
    std::printf("client: completion %s, %u bytes = 40 GRH + %u message\n", wb::wc_opcode_str(answer->opcode),
                answer->byte_len, len);
    const wb::SumResult r = wb::read_sum_response(recv_buf.get() + ud::kGrhBytes, len, a, b);
    if (r.status == wb::kSumBadRequest)  // we know what we sent: say it
        wb::result_error("the server refused the request: it was " + std::to_string(send_bytes) + " bytes, not " +
                         std::to_string(sizeof(wb::SumRequest)));
    if (!r.error.empty()) wb::result_error(r.error);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", a, b, r.sum);
    return 0;
}
