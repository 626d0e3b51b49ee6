// lesson12.cpp - unreliable datagrams (UD): lesson 4's sum without a connection, then multicast.
//
// Lessons 4 to 9 use RC queue pairs: one QP talks to one peer, and its NIC
// acknowledges, resends and orders every message. A UD QP has no peer. Each
// SEND names its destination in the work request (wr.ud: an address handle,
// the remote QP number and the remote Q_Key), one QP can talk to any number
// of others, and nothing is acknowledged: a datagram that finds no receive
// posted, or that carries the wrong Q_Key, is dropped without a word, and the
// sender's completion says IBV_WC_SUCCESS all the same. So the client here
// does what every UD application does: it waits a bounded time for the
// answer and sends again (up to kTries times).
//
// Two more rules of UD: a datagram is one packet, so a message can be no
// longer than the path MTU; and every receive buffer starts with 40 bytes
// for the Global Route Header (GRH) of the packet that filled it
// (IBV_WC_GRH): the message itself begins at byte 40. The server answers
// whoever asked by building the address handle from that header
// (ibv_create_ah_from_wc), once it has checked that whoever asked is the
// client of the exchange: without a connection, any UD QP can send to ours.
//
// With --mcast, one process runs R receiver QPs that join a multicast group,
// and a sender sends K datagrams ONCE to the group's GID: each receiver QP
// gets its own copy of each.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson12                       server: waits for one client
//     ./lesson12 127.0.0.1 2 3         client: prints "result: 2 + 3 = 5"
//     ./lesson12 --no-recv             server that posts its receive 1.5 s late:
//                                      the client's first datagrams are lost
//     ./lesson12 -q 7 127.0.0.1 2 3    client that sends with a wrong Q_Key: all are lost
//     ./lesson12 --mcast [GROUP]       R receivers (-r, default 3) join GROUP (default 239.1.2.3)
//     ./lesson12 --mcast HOST          sender: K datagrams (-k, default 3) once to that group
// On two hosts: ./lesson12 on host A, ./lesson12 A 2 3 on host B. Both sides
// take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson12 -h).
//
// Verbs it introduces:
//     IBV_QPT_UD; ibv_modify_qp to RTR and RTS with no remote fields, a Q_Key (IBV_QP_QKEY)
//     ibv_create_ah (ibv_ah_attr: GID, sgid_index, hop_limit), ibv_create_ah_from_wc
//     ibv_post_send's wr.ud: ah, remote_qpn, remote_qkey; IBV_WC_GRH, wc.src_qp,
//     ibv_init_ah_from_wc (who sent a datagram: checked against the peer of the exchange)
//     rdma_join_multicast (RDMA_PS_UDP), RDMA_CM_EVENT_MULTICAST_JOIN, ibv_attach_mcast, ibv_detach_mcast,
//     rdma_leave_multicast
//
// Read more: man ibv_create_ah, man ibv_create_ah_from_wc, man ibv_post_send
// (the ud fields), man ibv_attach_mcast, man rdma_join_multicast, rdma-core's
// ibv_ud_pingpong and mckey; docs/lesson12-ud-multicast.md (diagram, what the
// wire shows, why rdma_join_multicast, exercises, common errors).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <endian.h>
#include <poll.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "connect.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "sum_protocol.hpp"

namespace {

constexpr uint16_t kLesson = 12;  // sent in the exchange: a lesson-12 client only talks to a lesson-12 server

// The Q_Key: a 32-bit number that a UD QP compares with the one every
// incoming datagram carries (in its DETH header); a mismatch is dropped.
// It is not a password (it travels in clear text), only a guard against
// stray datagrams. Both sides use this one, so the exchange need not carry
// it: it is rdma_cm's RDMA_UDP_QKEY (0x01234567), the Q_Key rdma_cm gives
// every member of a multicast group in its UDP port space (--mcast below).
constexpr uint32_t kQkey = RDMA_UDP_QKEY;

// Every UD receive buffer begins with room for the 40-byte Global Route
// Header of the packet that filled it (on RoCE v2 over IPv4, rxe puts the
// 20-byte IPv4 header in its last 20 bytes). The NIC writes it whether or not
// we want it; a buffer without the 40 bytes loses the end of the message.
constexpr uint32_t kGrhBytes = 40;
constexpr uint32_t kIpv4HeaderOffset = 20;  // where the IPv4 header starts in those 40 bytes

// The multicast QP number: a datagram sent to QPN 0xFFFFFF goes to every QP
// attached to the destination group (IBTA: the 24-bit "all ones" QPN).
constexpr uint32_t kMulticastQpn = 0xFFFFFF;

// The client waits this long for an answer before it sends the request
// again, at most kTries times: UD's only reliability is the one we write.
constexpr std::chrono::milliseconds kAnswerWait{1000};
constexpr int kTries = 4;
// --no-recv: the server posts its receive this long after the exchange.
constexpr std::chrono::milliseconds kLateReceive{1500};

// The client can send up to this many bytes with -B, to try the path-MTU limit.
constexpr uint32_t kMaxSendBytes = 4096;

// wr_id: our own label for a work request, handed back in its completion.
constexpr uint64_t kRecvId = 1;
constexpr uint64_t kSendId = 2;

// RESET -> INIT -> RTR -> RTS for a UD QP. Compare lesson 3's RC transitions:
// INIT takes a Q_Key instead of access flags (a datagram can only be a SEND,
// which never touches our memory), and RTR and RTS take no remote fields at
// all: no destination QP, no GID, no PSN to expect, no path MTU. A UD QP is
// bound to no peer, so it can reach RTS before it knows anyone.
void ud_qp_to_rts(ibv_qp* qp, const wb::PortAddress& a, uint32_t psn) {
    ibv_qp_attr init = {
        .qp_state = IBV_QPS_INIT,
        .qkey = kQkey,      // incoming datagrams must carry this Q_Key
        .pkey_index = 0,    // the default partition
        .port_num = a.port,
    };
    CHECK_RC(ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
    ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR};
    CHECK_RC(ibv_modify_qp(qp, &rtr, IBV_QP_STATE));
    ibv_qp_attr rts = {
        .qp_state = IBV_QPS_RTS,
        .sq_psn = psn,      // 24-bit PSN of our first datagram; nobody checks UD's PSNs
    };
    CHECK_RC(ibv_modify_qp(qp, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

// Post one receive of `length` bytes at `addr` inside `mr`. For UD, the
// first kGrhBytes of it are the GRH's.
void post_receive(ibv_qp* qp, const ibv_mr* mr, char* addr, uint32_t length, uint64_t id = kRecvId) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(addr),
        .length = length,  // 40 bytes of GRH + the longest message we accept
        .lkey = mr->lkey,
    };
    ibv_recv_wr wr = {.wr_id = id, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

// Post one signaled datagram of `length` bytes from the start of `mr` to the
// QP `remote_qpn` at the address `ah` stands for. The three wr.ud fields are
// the whole of UD addressing: an RC QP's RTR holds them instead.
void post_datagram(ibv_qp* qp, const ibv_mr* mr, uint32_t length, ibv_ah* ah, uint32_t remote_qpn,
                   uint32_t remote_qkey) {
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
        .opcode = IBV_WR_SEND,            // UD knows only SEND (and SEND with immediate)
        .send_flags = IBV_SEND_SIGNALED,  // the completion says the datagram LEFT, nothing more
        .wr = {.ud = {
                   .ah = ah,                   // where: the peer's GID (or LID), port, hop limit
                   .remote_qpn = remote_qpn,   // which QP there (0xFFFFFF: every QP of a multicast group)
                   .remote_qkey = remote_qkey, // must equal the Q_Key of that QP, or it is dropped
               }},
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

// Poll `cq` for at most `wait`: the completion, or nothing. A datagram that
// was lost leaves no trace, so "nothing" is a normal outcome here, not an
// error as in poll_one.
std::optional<ibv_wc> poll_for(ibv_cq* cq, std::chrono::milliseconds wait, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    ibv_wc wc{};
    for (;;) {
        int n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc));
        if (n == 1) {
            wb::check_wc(wc, what);
            return wc;
        }
        if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
        std::this_thread::yield();
    }
}

// The message's length in a UD receive: byte_len less the 40 GRH bytes it
// also counts. A completion without IBV_WC_GRH, or shorter than 40 bytes,
// is not one we can read (never trust a length beyond what it says).
uint32_t message_length(const ibv_wc& wc) {
    if (!(wc.wc_flags & IBV_WC_GRH) || wc.byte_len < kGrhBytes)
        wb::fail("a UD receive without its 40-byte GRH (" + std::to_string(wc.byte_len) + " bytes)");
    return wc.byte_len - kGrhBytes;
}

// One of the port's counters (rxe: /sys/class/infiniband/DEV/ports/N/hw_counters);
// -1 when the device has no such counter. It is how we see a dropped datagram at all.
long long port_counter(const char* device, uint8_t port, const char* name) {
    std::ifstream f(std::string("/sys/class/infiniband/") + device + "/ports/" + std::to_string(port) +
                    "/hw_counters/" + name);
    long long v = -1;
    return (f >> v) ? v : -1;
}

// UD has no connection: any UD QP that knows our QP number and the Q_Key
// can send us a datagram. So each one is checked against the peer of the
// exchange: its QP (wc.src_qp) and its GID (the GRH's source, as
// ibv_init_ah_from_wc reads it: on RoCE v2, from the IPv4 header) or, with
// no GRH (InfiniBand), its LID. A datagram from anyone else is counted in
// `strays` and reported in one line; the caller ignores it, posts its
// receive again and keeps waiting.
bool from_peer(ibv_context* ctx, uint8_t port, ibv_wc& wc, char* buf, const wb::PeerInfo& peer, const char* me,
               int& strays) {
    std::string sender, expected;
    if (wc.wc_flags & IBV_WC_GRH) {
        ibv_ah_attr from{};
        CHECK_RC(ibv_init_ah_from_wc(ctx, port, &wc, reinterpret_cast<ibv_grh*>(buf), &from));
        if (wc.src_qp == peer.qp_num && std::memcmp(&from.grh.dgid, &peer.gid, sizeof peer.gid) == 0) return true;
        sender = wb::gid_to_string(from.grh.dgid);
        expected = wb::gid_to_string(peer.gid);
    } else {
        if (wc.src_qp == peer.qp_num && wc.slid == peer.lid) return true;
        sender = "LID " + std::to_string(wc.slid);
        expected = "LID " + std::to_string(peer.lid);
    }
    ++strays;
    std::printf("%s: ignored a datagram from QP 0x%x at %s: not the peer of the exchange (QP 0x%x at %s); %d so far\n",
                me, wc.src_qp, sender.c_str(), peer.qp_num, expected.c_str(), strays);
    return false;
}

// What is left of a wait that ends at `deadline` (zero once it has passed).
std::chrono::milliseconds left_until(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return std::max(left, std::chrono::milliseconds(0));
}

// The source IPv4 address in a receive buffer's GRH area (RoCE v2 over IPv4).
std::string grh_source_ipv4(const char* buf) {
    char text[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, buf + kIpv4HeaderOffset + 12, text, sizeof text);  // iphdr.saddr is at offset 12
    return text;
}

int run_multicast(const wb::Options& opt, const std::string& group_text, bool is_sender, int receivers, int count);

}  // namespace

int main(int argc, char** argv) {
    std::string send_bytes_text, qkey_text, receivers_text, count_text, no_recv_text, mcast_text;
    const wb::ExtraOption extra[] = {
        {'B', "send-bytes", "N",
         "client: send N bytes, 0..4096 (default: 16, one request);\n"
         "                        more than the path MTU is refused: a datagram is one packet",
         &send_bytes_text},
        {'q', "qkey", "Q", "client: send with Q_Key Q (default: 0x01234567, the server's; any other is dropped)",
         &qkey_text},
        {'n', "no-recv", nullptr, "server: post no receive until 1.5 s after the exchange", &no_recv_text},
        {'M', "mcast", nullptr, "multicast: receivers (no HOST, or a GROUP), or a sender (HOST)", &mcast_text},
        {'r', "receivers", "R", "multicast receivers: R QPs join the group, 1..8 (default: 3)", &receivers_text},
        {'k', "count", "K", "multicast: the sender sends K datagrams, receivers expect K, 1..16 (default: 3)", &count_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]              server: add the two numbers a client sends, over UD\n"
                    "  lesson12 [options] HOST A B     client: send A and B in a datagram, print the sum\n"
                    "  lesson12 --mcast [-r R] [GROUP] receivers: R QPs join GROUP (default 239.1.2.3)\n"
                    "  lesson12 --mcast [-k K] HOST    sender: K datagrams, once, to the receivers' group",
        .summary = "unreliable datagrams: the sum over UD QPs, what UD loses without a word, and multicast",
        .notes = "A and B are signed 64-bit integers. Q accepts decimal or 0x hex. With --mcast, an\n"
                 "argument in 224.0.0.0/4 is the GROUP (receivers); any other address is HOST (sender).",
        .numbers_after_host = true,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool mcast = opt.given('M');
    if (mcast) {
        if (opt.given('B') || opt.given('q') || opt.given('n')) wb::usage_error("-B, -q and -n are not multicast options");
        if (opt.args.size() > 1) wb::usage_error("--mcast takes one GROUP or one HOST, got " + std::to_string(opt.args.size()) + " arguments");
        in_addr ip{};
        const bool group_given = !opt.args.empty() && inet_pton(AF_INET, opt.args[0].c_str(), &ip) == 1 &&
                                 IN_MULTICAST(ntohl(ip.s_addr));
        const bool is_sender = !opt.args.empty() && !group_given;
        if (is_sender && opt.given('r')) wb::usage_error("-r is a receivers' option (no HOST)");
        const int receivers = opt.given('r') ? static_cast<int>(wb::parse_range(receivers_text, "-r", 1, 8)) : 3;
        const int count = opt.given('k') ? static_cast<int>(wb::parse_range(count_text, "-k", 1, 16)) : 3;
        return run_multicast(opt, group_given ? opt.args[0] : "239.1.2.3", is_sender, receivers, count);
    }
    if (opt.given('r') || opt.given('k')) wb::usage_error("-r and -k need --mcast");
    // No host: server. HOST A B: client (common/sum_protocol.cpp checks them).
    const wb::SumArgs sum_args = wb::parse_sum_args(opt);
    const bool is_server = sum_args.is_server;
    if (is_server && (opt.given('B') || opt.given('q'))) wb::usage_error("-B and -q are client options");
    if (!is_server && opt.given('n')) wb::usage_error("-n is a server option");
    const int64_t a = sum_args.a, b = sum_args.b;
    const uint32_t send_bytes = opt.given('B')
                                    ? static_cast<uint32_t>(wb::parse_range(send_bytes_text, "-B", 0, kMaxSendBytes))
                                    : sizeof(wb::SumRequest);
    uint32_t qkey = kQkey;
    if (opt.given('q')) {
        char* end = nullptr;
        errno = 0;
        const unsigned long long v = std::strtoull(qkey_text.c_str(), &end, 0);  // base 0: decimal or 0x hex
        if (qkey_text.empty() || qkey_text[0] == '-' || *end != '\0' || errno == ERANGE || v > 0xFFFFFFFFull)
            wb::usage_error("-q: '" + qkey_text + "' is not a 32-bit Q_Key (decimal or 0x hex)");
        qkey = static_cast<uint32_t>(v);
    }

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

    // 3. Memory. The longest datagram is one packet: the port's active MTU
    //    (1024 bytes on a 1500-byte Ethernet link). The server's receive
    //    buffer takes the 40-byte GRH plus a whole MTU, so that any datagram
    //    lands and byte_len can tell how long it was. Access: as in lesson 4,
    //    LOCAL_WRITE for what our NIC writes into, nothing for what it reads.
    const uint32_t mtu = static_cast<uint32_t>(wb::mtu_bytes(addr.attr.active_mtu));
    const uint32_t recv_len = kGrhBytes + (is_server ? mtu : static_cast<uint32_t>(sizeof(wb::SumResponse)));
    wb::Buffer recv_buf = wb::alloc_buffer(recv_len);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE),
                                       "ulimit -l: is locked memory limited?")};
    wb::Buffer send_buf = wb::alloc_buffer(kMaxSendBytes);
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), kMaxSendBytes, 0),
                                       "ulimit -l: is locked memory limited?")};

    // 4. RESET -> INIT -> RTR -> RTS, all before the exchange: UD needs
    //    nothing from the peer to get there.
    ud_qp_to_rts(qp.get(), addr, psn);
    std::printf("%s: UD QP 0x%x is RTS with Q_Key 0x%08x, before knowing any peer\n", who, qp->qp_num, kQkey);

    // 5. The receive, before the exchange as in lesson 4; but where an RC
    //    sender would be told "not ready" (RNR NAK) and try again, a datagram
    //    that finds no receive is simply dropped. --no-recv shows it.
    if (!opt.given('n')) {
        post_receive(qp.get(), recv_mr.get(), recv_buf.get(), recv_len);
        std::printf("%s: posted a %u-byte receive (40 GRH + %u) before the exchange\n", who, recv_len,
                    recv_len - kGrhBytes);
    } else {
        std::printf("server: --no-recv: no receive posted; one follows %lld ms after the exchange\n",
                    static_cast<long long>(kLateReceive.count()));
    }

    // 6. Out-of-band exchange over TCP: QP number and GID (or LID), as in
    //    lesson 4. The Q_Key is the constant kQkey on both sides; the PSN is
    //    sent but unused: UD packets are never acknowledged, so never resent
    //    or put back in order.
    const long long pkts_before = port_counter(ibv_get_device_name(ctx->device), addr.port, "rcvd_pkts");
    wb::Connection conn;
    if (is_server) {
        wb::Listener listener(opt.tcp_port);
        std::printf("server: waiting for a client on TCP port %u\n", opt.tcp_port);
        conn = listener.accept(opt.accept_timeout_s());
    } else {
        conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    }
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    if (peer.qp_num == kMulticastQpn)
        wb::fail("the peer " + conn.peer() + " runs multicast receivers", "run this side with --mcast too");
    std::printf("%s: peer %s is QP 0x%x\n", who, conn.peer().c_str(), peer.qp_num);

    if (is_server) {
        if (opt.given('n')) {
            // Whatever the client sends now finds no receive. No NAK goes back,
            // no completion appears here: only the port's packet counter moves.
            std::this_thread::sleep_for(kLateReceive);
            const long long pkts = port_counter(ibv_get_device_name(ctx->device), addr.port, "rcvd_pkts");
            if (pkts >= 0 && pkts_before >= 0)
                std::printf("server: in those %lld ms the port received %lld packets (rcvd_pkts) and our CQ got "
                            "nothing: dropped\n",
                            static_cast<long long>(kLateReceive.count()), pkts - pkts_before);
            post_receive(qp.get(), recv_mr.get(), recv_buf.get(), recv_len);
            std::printf("server: posted a %u-byte receive (40 GRH + %u), late\n", recv_len, recv_len - kGrhBytes);
        }
        // 7. Wait for the request. byte_len counts the 40 GRH bytes too, and
        //    IBV_WC_GRH says they are there; wc.src_qp is the sender's QP.
        //    Only the client of the exchange is answered (from_peer); for
        //    anyone else's datagram the receive is posted again, and the wait
        //    goes on within the same --timeout.
        std::printf("server: waiting for the client's datagram\n");
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.timeout_s);
        int strays = 0;
        ibv_wc wc = wb::poll_one(recv_cq.get(), opt.timeout_s, "the client's request (RECV)", conn);
        while (!from_peer(ctx.get(), addr.port, wc, recv_buf.get(), peer, "server", strays)) {
            post_receive(qp.get(), recv_mr.get(), recv_buf.get(), recv_len);
            const auto left_s = (left_until(deadline).count() + 999) / 1000;  // whole seconds, rounded up
            wc = wb::poll_one(recv_cq.get(), static_cast<int>(std::max<long long>(left_s, 1)),
                              "the client's request (RECV)", conn);
        }
        const uint32_t len = message_length(wc);
        std::printf("server: completion %s, %u bytes = 40 GRH + %u message, from QP 0x%x at %s\n",
                    wb::wc_opcode_str(wc.opcode), wc.byte_len, len, wc.src_qp,
                    addr.roce ? grh_source_ipv4(recv_buf.get()).c_str() : "(IB)");

        // The application's part (common/sum_protocol.cpp), on the bytes after the GRH.
        const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get() + kGrhBytes, len);
        if (len == sizeof(wb::SumRequest))
            std::printf("server: request %" PRId64 " + %" PRId64 "\n", answer.a, answer.b);

        // 8. Answer whoever asked: ibv_create_ah_from_wc reads the sender's
        //    address out of the GRH in our buffer, and wc.src_qp is its QP.
        //    Any UD QP that knows our QPN and Q_Key could have sent one:
        //    from_peer above made sure this one is the client's.
        wb::AddressHandle reply_ah{CHECK_PTR(
            ibv_create_ah_from_wc(pd.get(), &wc, reinterpret_cast<ibv_grh*>(recv_buf.get()), addr.port))};
        std::memcpy(send_buf.get(), &answer.response, sizeof answer.response);
        post_datagram(qp.get(), send_mr.get(), sizeof answer.response, reply_ah.get(), wc.src_qp, kQkey);
        wb::poll_one(send_cq.get(), opt.timeout_s, "the SEND of the response", conn);
        std::printf("server: response sent (status %u)\n", be32toh(answer.response.status));
        if (!answer.error.empty()) wb::result_error(answer.error);
        std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answer.a, answer.b, answer.sum);
        return 0;
    }

    // Client.
    // 7. An address handle for the server: its GID and our GID index on RoCE
    //    (the GRH is mandatory there), its LID on InfiniBand. An RC QP keeps
    //    this in its RTR attributes; a UD work request carries it.
    ibv_ah_attr ah_attr = {
        .dlid = peer.lid,  // InfiniBand; 0 on RoCE
        .sl = 0,           // service level 0
        .src_path_bits = 0,
        .is_global = 0,
        .port_num = addr.port,
    };
    if (addr.gid_index >= 0) {
        ah_attr.is_global = 1;
        ah_attr.grh = {
            .dgid = peer.gid,
            .flow_label = 0,
            .sgid_index = static_cast<uint8_t>(addr.gid_index),
            .hop_limit = 64,  // IP TTL on RoCE v2
            .traffic_class = 0,
        };
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
    int strays = 0;
    for (int attempt = 1; attempt <= kTries && !answer; ++attempt) {
        std::printf("client: sending %" PRId64 " and %" PRId64 " (%u bytes), try %d of %d\n", a, b, send_bytes,
                    attempt, kTries);
        post_datagram(qp.get(), send_mr.get(), send_bytes, ah.get(), peer.qp_num, qkey);
        const ibv_wc sent = wb::poll_one(send_cq.get(), opt.timeout_s, "the SEND of the request", conn);
        std::printf("client: send completion %s: the datagram left; nobody tells us whether it arrived\n",
                    wb::wc_status_name(sent.status));
        // The answer, from the server of the exchange only (from_peer): a
        // datagram from anyone else is ignored within the same wait.
        const auto until = std::chrono::steady_clock::now() + kAnswerWait;
        for (;;) {
            answer = poll_for(recv_cq.get(), left_until(until), "the server's response (RECV)");
            if (!answer || from_peer(ctx.get(), addr.port, *answer, recv_buf.get(), peer, "client", strays)) break;
            answer.reset();
            post_receive(qp.get(), recv_mr.get(), recv_buf.get(), recv_len);
        }
        if (!answer)
            std::printf("client: no answer within %lld ms: the datagram or its answer was lost\n",
                        static_cast<long long>(kAnswerWait.count()));
    }
    if (!answer)
        wb::result_error("no answer after " + std::to_string(kTries) +
                         " tries: every datagram was dropped (is the server running? is the Q_Key right?)");

    // 9. The answer: 40 GRH bytes, then the response.
    const uint32_t len = message_length(*answer);
    std::printf("client: completion %s, %u bytes = 40 GRH + %u message\n", wb::wc_opcode_str(answer->opcode),
                answer->byte_len, len);
    const wb::SumResult r = wb::read_sum_response(recv_buf.get() + kGrhBytes, len, a, b);
    if (r.status == wb::kSumBadRequest)  // we know what we sent: say it
        wb::result_error("the server refused the request: it was " + std::to_string(send_bytes) + " bytes, not " +
                         std::to_string(sizeof(wb::SumRequest)));
    if (!r.error.empty()) wb::result_error(r.error);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", a, b, r.sum);
    return 0;
}

namespace {

// Wait (bounded) for the next rdma_cm event, as lesson 9's next_cm_event
// does; exits 1 unless it is `expected`. The caller acks it.
rdma_cm_event* next_cm_event(rdma_event_channel* ec, rdma_cm_event_type expected, int timeout_s) {
    pollfd p{.fd = ec->fd, .events = POLLIN, .revents = 0};
    if (CHECK_ERRNO(poll(&p, 1, timeout_s * 1000)) == 0)
        wb::fail("no rdma_cm event within " + std::to_string(timeout_s) + " s while waiting for " +
                     rdma_event_str(expected),
                 "is the RDMA netdev up? (rdma link show)");
    rdma_cm_event* ev = nullptr;
    CHECK_ERRNO(rdma_get_cm_event(ec, &ev));
    std::printf("cm event: %s\n", rdma_event_str(ev->event));
    wb::check_cm_event(ev, expected);
    return ev;
}

// "01:00:5e:01:02:03": the Ethernet address IPv4 multicast maps a group to
// (RFC 1112: 01:00:5e, then the group's low 23 bits).
std::string ipv4_multicast_mac(in_addr group) {
    const uint32_t g = ntohl(group.s_addr);
    char text[18];
    std::snprintf(text, sizeof text, "01:00:5e:%02x:%02x:%02x", (g >> 16) & 0x7f, (g >> 8) & 0xff, g & 0xff);
    return text;
}

// --mcast: the receivers (no HOST) or the sender (HOST). The steps are
// lesson 12's own, with a group in place of the peer.
int run_multicast(const wb::Options& opt, const std::string& group_text, bool is_sender, int receivers, int count) {
    // 1. Device, port and address. A RoCE v2 multicast group is an IPv4 (or
    //    IPv6) multicast address, so this side needs an IP GID.
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    if (!addr.roce || !wb::gid_is_ipv4_mapped(addr.gid))
        wb::fail("--mcast needs a RoCE v2 port with an IPv4 GID (::ffff:a.b.c.d); this GID is " +
                     wb::gid_to_string(addr.gid),
                 "choose one with -g (./lesson1 lists the GID table)");
    const uint32_t mtu = static_cast<uint32_t>(wb::mtu_bytes(addr.attr.active_mtu));
    const uint32_t slot = kGrhBytes + mtu;  // one receive: the GRH and a whole packet

    // 2. The objects: one UD QP per receiver, each with its own CQ (the
    //    sender: one QP). Reverse destruction tears the QPs down before the
    //    CQs; destroying a QP also detaches it from its groups.
    const int qps = is_sender ? 1 : receivers;
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    std::vector<wb::CompletionQueue> cqs;
    std::vector<wb::QueuePair> qp;
    for (int i = 0; i < qps; ++i) {
        cqs.emplace_back(CHECK_PTR(ibv_create_cq(ctx.get(), count, nullptr, nullptr, 0)));
        ibv_qp_init_attr qp_attr = {
            .send_cq = cqs.back().get(),
            .recv_cq = cqs.back().get(),
            .cap = {
                .max_send_wr = 1,                            // the sender: one datagram at a time
                .max_recv_wr = static_cast<uint32_t>(count),  // a receiver: one receive per datagram
                .max_send_sge = 1,
                .max_recv_sge = 1,
            },
            .qp_type = IBV_QPT_UD,
        };
        qp.emplace_back(CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr)));
    }

    // 3. Memory: COUNT slots per receiver QP (our NIC writes them: LOCAL_WRITE);
    //    the sender's one message buffer (read only: no flag).
    const size_t bytes = is_sender ? mtu : static_cast<size_t>(slot) * count * receivers;
    wb::Buffer buf = wb::alloc_buffer(bytes);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), bytes, is_sender ? 0 : IBV_ACCESS_LOCAL_WRITE),
                                  "ulimit -l: is locked memory limited?")};

    // 4 and 5. Every QP to RTS with the group's Q_Key; each receiver posts
    //    one receive per datagram it expects, before anyone can send.
    const uint32_t psn = wb::random_psn();
    for (int i = 0; i < qps; ++i) {
        ud_qp_to_rts(qp[i].get(), addr, psn);
        for (int k = 0; k < count && !is_sender; ++k)
            post_receive(qp[i].get(), mr.get(), buf.get() + (static_cast<size_t>(i) * count + k) * slot, slot, k);
    }
    if (is_sender) {
        std::printf("sender: UD QP 0x%x is RTS with Q_Key 0x%08x\n", qp[0]->qp_num, kQkey);
    } else {
        for (int i = 0; i < qps; ++i)
            std::printf("receiver %d: UD QP 0x%x is RTS with Q_Key 0x%08x, %d receives of %u bytes posted\n", i + 1,
                        qp[i]->qp_num, kQkey, count, slot);
    }

    // The receivers' rdma_cm objects (declared here so that they outlive the QPs'
    // attachment; the group is left with rdma_leave_multicast at the end).
    wb::EventChannel channel;
    wb::CmId id;
    ibv_gid group_gid{};
    sockaddr_storage group{};
    if (!is_sender) {
        // 6. Join the group. On RoCE v2 a group is an IP multicast group, and
        //    the host must JOIN it (IGMP), or the IP layer drops the packets
        //    before rxe sees them. rdma_join_multicast does that (rdma_cm
        //    sends the IGMP report and adds the group's Ethernet address to
        //    the netdev) and answers with the group's GID and Q_Key;
        //    ibv_attach_mcast alone would only tell rxe which QPs get copies.
        //    So: rdma_join_multicast once, then ibv_attach_mcast per QP.
        group = wb::ip_address(group_text, 0, "GROUP");
        in_addr local_ip{};
        std::memcpy(&local_ip, addr.gid.raw + 12, 4);  // our GID ::ffff:a.b.c.d is the IPv4 address a.b.c.d
        sockaddr_in local = {.sin_family = AF_INET, .sin_port = 0, .sin_addr = local_ip, .sin_zero = {}};
        channel.reset(CHECK_PTR(rdma_create_event_channel()));
        rdma_cm_id* raw_id = nullptr;
        CHECK_ERRNO(rdma_create_id(channel.get(), &raw_id, nullptr, RDMA_PS_UDP));  // UDP port space: UD QPs
        id.reset(raw_id);
        CHECK_ERRNO(rdma_bind_addr(id.get(), reinterpret_cast<sockaddr*>(&local)),
                    "is this GID's IPv4 address on an RDMA netdev? (ip addr; rdma link show)");
        CHECK_ERRNO(rdma_join_multicast(id.get(), reinterpret_cast<sockaddr*>(&group), nullptr));
        rdma_cm_event* ev = next_cm_event(channel.get(), RDMA_CM_EVENT_MULTICAST_JOIN, opt.timeout_s);
        group_gid = ev->param.ud.ah_attr.grh.dgid;
        const uint32_t join_qkey = ev->param.ud.qkey;
        rdma_ack_cm_event(ev);
        const in_addr g = reinterpret_cast<sockaddr_in*>(&group)->sin_addr;
        std::printf("receivers: joined group %s: GID %s (the IPv4 group as ::ffff:a.b.c.d), Ethernet %s, "
                    "Q_Key 0x%08x\n",
                    group_text.c_str(), wb::gid_to_string(group_gid).c_str(), ipv4_multicast_mac(g).c_str(),
                    join_qkey);
        if (join_qkey != kQkey) wb::fail("the group's Q_Key is not the one our QPs have");
        for (int i = 0; i < qps; ++i) {
            CHECK_RC(ibv_attach_mcast(qp[i].get(), &group_gid, 0));  // LID 0: RoCE has no multicast LIDs
            std::printf("receiver %d: QP 0x%x attached to %s\n", i + 1, qp[i]->qp_num,
                        wb::gid_to_string(group_gid).c_str());
        }
    }

    // 7. The exchange, lesson 4's, with one twist: the receivers give the
    //    group's GID and the multicast QPN 0xFFFFFF in place of their own
    //    GID and QPN: that is the address a sender must send to.
    wb::Connection conn;
    if (!is_sender) {
        wb::Listener listener(opt.tcp_port);
        std::printf("receivers: waiting for a sender on TCP port %u\n", opt.tcp_port);
        conn = listener.accept(opt.accept_timeout_s());
    } else {
        conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s, "sender");
    }
    wb::PeerInfo mine = wb::local_info(kLesson, qp[0].get(), psn, addr);
    if (!is_sender) {
        mine.qp_num = kMulticastQpn;
        mine.gid = group_gid;
    }
    const wb::PeerInfo peer = wb::exchange(conn, mine, opt.timeout_s);
    char peer_qpn[16];
    std::snprintf(peer_qpn, sizeof peer_qpn, "0x%x", peer.qp_num);  // in hex, as every other line
    if (is_sender && peer.qp_num != kMulticastQpn)
        wb::fail("the peer " + conn.peer() + " is not multicast receivers (it gave QP " + peer_qpn +
                     ", not 0xffffff)",
                 "start the receivers with --mcast");
    if (!is_sender && peer.qp_num == kMulticastQpn)
        wb::fail("the peer " + conn.peer() + " is multicast receivers too", "the sender needs a HOST");

    if (is_sender) {
        // 8. One address handle for the whole group: its GID, hop limit 1.
        ibv_ah_attr ah_attr = {
            .is_global = 1,
            .port_num = addr.port,
        };
        ah_attr.grh = {
            .dgid = peer.gid,
            .flow_label = 0,
            .sgid_index = static_cast<uint8_t>(addr.gid_index),
            .hop_limit = 1,  // IP TTL 1: the datagrams stay on this link, as rdma_cm's join sets
            .traffic_class = 0,
        };
        wb::AddressHandle ah{CHECK_PTR(ibv_create_ah(pd.get(), &ah_attr))};
        in_addr g{};
        std::memcpy(&g, peer.gid.raw + 12, 4);
        char group_ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &g, group_ip, sizeof group_ip);
        std::printf("sender: group GID %s = IPv4 %s = Ethernet %s; QP 0x%x, Q_Key 0x%08x\n",
                    wb::gid_to_string(peer.gid).c_str(), group_ip, ipv4_multicast_mac(g).c_str(), kMulticastQpn,
                    kQkey);

        // 9. Each datagram is sent ONCE; the network and the receiving NIC copy it.
        for (int k = 1; k <= count; ++k) {
            const int n = std::snprintf(buf.get(), mtu, "datagram %d of %d", k, count);
            post_datagram(qp[0].get(), mr.get(), static_cast<uint32_t>(n), ah.get(), kMulticastQpn, kQkey);
            const ibv_wc wc = wb::poll_one(cqs[0].get(), opt.timeout_s, "the SEND of a datagram", conn);
            std::printf("sender: \"%s\" sent once, completion %s\n", buf.get(), wb::wc_status_name(wc.status));
        }
        wb::send_token(conn, "DONE");
        std::printf("result: sent %d datagrams once to group %s\n", count, group_ip);
        return 0;
    }

    // 8. Receivers: the sender says DONE after its last completion; what has
    //    not arrived a moment later was lost (UD resends nothing).
    wb::expect_token(conn, "DONE", opt.timeout_s);
    std::printf("receivers: the sender is done; collecting\n");
    bool all = true;
    int sender_count = 0;  // the sender's -k, announced in each datagram ("datagram K of N")
    for (int i = 0; i < qps; ++i) {
        std::string got;
        int n = 0;
        while (n < count) {
            const std::optional<ibv_wc> wc = poll_for(cqs[i].get(), kAnswerWait, "a multicast datagram (RECV)");
            if (!wc) break;
            const char* slot_start = buf.get() + (static_cast<size_t>(i) * count + wc->wr_id) * slot;
            const uint32_t len = message_length(*wc);
            const std::string text = wb::printable(slot_start + kGrhBytes, len);
            std::printf("receiver %d: \"%s\" from QP 0x%x at %s\n", i + 1, text.c_str(), wc->src_qp,
                        grh_source_ipv4(slot_start).c_str());
            int k = 0, of = 0;
            if (std::sscanf(text.c_str(), "datagram %d of %d", &k, &of) == 2) sender_count = of;
            got += (n ? ", \"" : "\"") + text + "\"";
            ++n;
        }
        std::printf("receiver %d (QP 0x%x) got %d of %d: %s\n", i + 1, qp[i]->qp_num, n, count,
                    n ? got.c_str() : "nothing");
        all = all && n == count;
    }
    // 9. Detach before the QPs are destroyed: rxe refuses to destroy a QP
    //    that is still attached to a group (EBUSY, and then its CQs and the
    //    PD are busy too). Then leave the group, the counterpart of
    //    rdma_join_multicast: it frees what librdmacm keeps for the join
    //    (rdma_destroy_id alone would leak it).
    for (int i = 0; i < qps; ++i) CHECK_RC(ibv_detach_mcast(qp[i].get(), &group_gid, 0));
    CHECK_ERRNO(rdma_leave_multicast(id.get(), reinterpret_cast<sockaddr*>(&group)));
    if (sender_count != 0 && sender_count != count)
        wb::result_error("the sender sent " + std::to_string(sender_count) + " datagrams, the receivers expect " +
                         std::to_string(count) + ": the two sides' -k differ; give both the same -k");
    if (!all) wb::result_error("not every receiver got every datagram (lines above)");
    std::printf("result: each of %d receivers got all %d datagrams\n", receivers, count);
    return 0;
}

}  // namespace
