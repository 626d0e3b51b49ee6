// lesson12_mcast.cpp - multicast: one UD datagram, sent once, received by every QP of a group.
//
// Lesson 12's second program (lesson12.cpp is the first: the sum over UD). It
// takes the same UD steps, from the lesson's ud.hpp: QPs to RTS with the Q_Key,
// receives with room for the GRH, datagrams, and only the peer's datagrams
// counted. R receiver QPs join a multicast group and a sender sends N datagrams ONCE to
// the group's GID and the multicast QPN 0xFFFFFF: each receiver QP gets its own
// copy of each, made past the sender (by the receiving NIC; on a fabric, also
// by the switches). On RoCE v2 a group is an IP multicast group, which the host
// must join (IGMP) before its IP layer lets the packets through:
// rdma_join_multicast does that and answers with the group's GID and Q_Key;
// ibv_attach_mcast then tells the device which QPs get copies, and each QP is
// detached again before it is destroyed.
//
// Run it on one host (two terminals; rxe loops multicast back to its own QPs):
//     ./lesson12_mcast                 receivers: 3 QPs (--receivers) join 239.1.2.3, wait for a sender
//     ./lesson12_mcast 127.0.0.1       sender: 3 datagrams (-n), once, to the receivers' group
//     ./lesson12_mcast --receivers 5 -n 2 239.9.8.7   5 receivers, 2 datagrams, group 239.9.8.7
// On two hosts: ./lesson12_mcast on host A, ./lesson12_mcast A on host B. Both
// take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson12_mcast -h).
//
// Verbs it introduces:
//     rdma_create_id (RDMA_PS_UDP), rdma_bind_addr, rdma_join_multicast,
//     RDMA_CM_EVENT_MULTICAST_JOIN (param.ud: the group's GID and Q_Key), rdma_leave_multicast
//     ibv_attach_mcast, ibv_detach_mcast; ibv_create_ah for a group GID; remote_qpn 0xFFFFFF
//
// Read more: man ibv_attach_mcast, man rdma_join_multicast, man rdma_leave_multicast,
// rdma-core's mckey; docs/lesson12-ud-multicast.md, "Multicast" (why
// rdma_join_multicast, the group's addresses, detach before destroy, the wire).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "check.hpp"
#include "cm.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "ud.hpp"  // the UD steps both of lesson 12's programs take

namespace {

constexpr uint16_t kLesson = 12;  // sent in the exchange: lesson 12's programs talk to each other only

constexpr uint64_t kSendId = 0;  // wr_id of a datagram; a receive's wr_id is its slot number

// After the sender's DONE, the receivers wait this long for the datagrams
// still missing before they count them as lost (UD resends nothing).
constexpr std::chrono::milliseconds kStragglerWait{1000};

constexpr const char* kDefaultGroup = "239.1.2.3";  // in 239.0.0.0/8, the site-local ("administratively scoped") range
constexpr int kDefaultReceivers = 3, kMaxReceivers = 8;  // a device's own limit: max_mcast_qp_attach
constexpr int kDefaultCount = 3, kMaxCount = 16;


// The plumbing, at the end of this file.
std::string ipv4_multicast_mac(in_addr group);

}  // namespace

int main(int argc, char** argv) {
    std::string receivers_text, count_text;
    const wb::ExtraOption extra[] = {
        {0, "receivers", "R", "receivers: R QPs join the group, 1..8 (default: 3)", &receivers_text},
        {'n', "count", "N", "the sender sends N datagrams, the receivers expect N, 1..16 (default: 3)", &count_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options] [--receivers R] [-n N] [GROUP]   receivers: R QPs join GROUP (default: 239.1.2.3)\n"
                    "  lesson12_mcast [options] [-n N] HOST                     sender: N datagrams, once, to the group",
        .summary = "multicast over UD: a datagram sent once, a copy for every receiver QP of the group",
        .notes = "An argument in 224.0.0.0/4 is the GROUP (receivers); any other address is HOST (sender).\n"
                 "Both sides take -n, and must give the same. The sum over UD is ./lesson12.",
        .timeout_help = "the sender's connect retries and every wait on the peer",
        .server_scope = "The receivers listen on every address of this host (IPv4 and IPv6, port -p) and serve\n"
                        "one sender: the first connection that goes wrong ends them (exit 1). Run them where you\n"
                        "trust whoever can reach that port.",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    if (opt.args.size() > 1)
        wb::usage_error("give one GROUP or one HOST, not " + std::to_string(opt.args.size()) + " arguments");
    in_addr ip{};
    const bool group_given = !opt.args.empty() && inet_pton(AF_INET, opt.args[0].c_str(), &ip) == 1 &&
                             IN_MULTICAST(ntohl(ip.s_addr));
    const bool is_sender = !opt.args.empty() && !group_given;
    if (is_sender && opt.given("receivers")) wb::usage_error("--receivers is a receivers' option (no HOST)");
    const int receivers = opt.given("receivers")
                              ? static_cast<int>(wb::parse_range(receivers_text, "--receivers", 1, kMaxReceivers))
                              : kDefaultReceivers;
    const int count = opt.given('n') ? static_cast<int>(wb::parse_range(count_text, "-n", 1, kMaxCount)) : kDefaultCount;
    const std::string group_text = group_given ? opt.args[0] : kDefaultGroup;

    // 1. Device, port and address. A RoCE v2 multicast group is an IPv4 (or
    //    IPv6) multicast address, so this side needs an IP GID.
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    if (!addr.roce || !wb::gid_is_ipv4_mapped(addr.gid))
        wb::fail("multicast needs a RoCE v2 port with an IPv4 GID (::ffff:a.b.c.d); this GID is " +
                     wb::gid_to_string(addr.gid),
                 "choose one with -g (./lesson1 lists the GID table)");
    const uint32_t mtu = static_cast<uint32_t>(wb::mtu_bytes(addr.attr.active_mtu));
    const uint32_t slot = ud::kGrhBytes + mtu;  // one receive: the GRH and a whole packet

    // 2. The objects: one UD QP per receiver, each with its own CQ (the
    //    sender: one QP). Reverse destruction tears the QPs down before the
    //    CQs, but not a QP still attached to a group: step 9 detaches each.
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
    //    one receive per datagram it expects, before anyone can send:
    //    receiver i's slots are the i-th `count` of the buffer.
    const uint32_t psn = wb::random_psn();
    std::vector<ud::Receives> receives;
    for (int i = 0; i < qps; ++i) {
        ud::qp_to_rts(qp[i].get(), addr, psn);
        if (is_sender) continue;
        receives.push_back({.qp = qp[i].get(),
                            .cq = cqs[i].get(),
                            .mr = mr.get(),
                            .base = buf.get() + static_cast<size_t>(i) * count * slot,
                            .slot_bytes = slot});
        for (int k = 0; k < count; ++k) ud::post_receive(receives.back(), k);
    }
    if (is_sender) {
        std::printf("sender: UD QP 0x%x is RTS with Q_Key 0x%08x\n", qp[0]->qp_num, ud::kQkey);
    } else {
        for (int i = 0; i < qps; ++i)
            std::printf("receiver %d: UD QP 0x%x is RTS with Q_Key 0x%08x, %d receives of %u bytes posted\n", i + 1,
                        qp[i]->qp_num, ud::kQkey, count, slot);
    }

    // The receivers' rdma_cm objects: the join (step 6) and the leave (step 9).
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
        rdma_cm_event* ev = wb::next_cm_event(channel.get(), RDMA_CM_EVENT_MULTICAST_JOIN, opt.timeout_s);
        group_gid = ev->param.ud.ah_attr.grh.dgid;
        const uint32_t join_qkey = ev->param.ud.qkey;
        CHECK_ERRNO(rdma_ack_cm_event(ev));
        const in_addr g = reinterpret_cast<sockaddr_in*>(&group)->sin_addr;
        std::printf("receivers: joined group %s: GID %s (the IPv4 group as ::ffff:a.b.c.d), Ethernet %s, "
                    "Q_Key 0x%08x\n",
                    group_text.c_str(), wb::gid_to_string(group_gid).c_str(), ipv4_multicast_mac(g).c_str(),
                    join_qkey);
        if (join_qkey != ud::kQkey) wb::fail("the group's Q_Key is not the one our QPs have");
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
        mine.qp_num = ud::kMulticastQpn;
        mine.gid = group_gid;
    }
    const wb::PeerInfo peer = wb::exchange(conn, mine, opt.timeout_s);
    char peer_qpn[16];
    std::snprintf(peer_qpn, sizeof peer_qpn, "0x%x", peer.qp_num);  // in hex, as every other line
    if (is_sender && peer.qp_num != ud::kMulticastQpn)
        wb::fail("the peer " + conn.peer() + " is not multicast receivers (it gave QP " + peer_qpn +
                     ", not 0xffffff)",
                 "start the receivers: ./lesson12_mcast with no HOST");
    if (!is_sender && peer.qp_num == ud::kMulticastQpn)
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
                    wb::gid_to_string(peer.gid).c_str(), group_ip, ipv4_multicast_mac(g).c_str(), ud::kMulticastQpn,
                    ud::kQkey);

        // 9. Each datagram is sent ONCE; the network and the receiving NIC copy it.
        for (int k = 1; k <= count; ++k) {
            const int n = std::snprintf(buf.get(), mtu, "datagram %d of %d", k, count);
            ud::post_datagram(qp[0].get(), mr.get(), static_cast<uint32_t>(n), ah.get(), ud::kMulticastQpn, ud::kQkey,
                              kSendId);
            const ibv_wc wc = wb::poll_success(cqs[0].get(), opt.timeout_s, "the SEND of a datagram", conn);
            std::printf("sender: \"%s\" sent once, completion %s\n", buf.get(), wb::wc_status_name(wc.status));
        }
        wb::send_token(conn, "DONE");
        std::printf("result: sent %d datagrams once to group %s\n", count, group_ip);
        return 0;
    }

    // 8. Receivers: the sender says DONE after its last completion; what has
    //    not arrived a moment later was lost (UD resends nothing). Only the
    //    sender of the exchange counts (ud.hpp's PeerDatagrams): anyone can
    //    send to the group's address and QPN with the group's Q_Key, and a
    //    stray is ignored, though the receive it took may have been the one a
    //    datagram of the sender then did not find.
    wb::expect_token(conn, "DONE", opt.timeout_s);
    std::printf("receivers: the sender is done; collecting\n");
    const auto deadline = std::chrono::steady_clock::now() + kStragglerWait;
    bool all = true;
    int sender_count = 0;  // the sender's -n, announced in each datagram ("datagram K of N")
    for (int i = 0; i < qps; ++i) {
        ud::PeerDatagrams from_sender = {
            .ctx = ctx.get(), .port = addr.port, .peer = peer, .me = "receiver " + std::to_string(i + 1), .to_group = true};
        std::string got;
        int n = 0;
        while (n < count) {
            const std::optional<ibv_wc> wc = from_sender.next(receives[i], deadline, "a multicast datagram (RECV)");
            if (!wc) break;
            const char* slot_start = receives[i].slot(wc->wr_id);
            const std::string text = wb::printable(slot_start + ud::kGrhBytes, ud::message_length(*wc));
            std::printf("receiver %d: \"%s\" from QP 0x%x at %s\n", i + 1, text.c_str(), wc->src_qp,
                        ud::grh_source_ipv4(slot_start).c_str());
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
    //    that is still attached to a group (EBUSY from ibv_destroy_qp, and
    //    then its CQs and the PD are busy too). Then leave the group, the
    //    counterpart of rdma_join_multicast: it frees what librdmacm keeps
    //    for the join (rdma_destroy_id alone would leak it).
    for (int i = 0; i < qps; ++i) CHECK_RC(ibv_detach_mcast(qp[i].get(), &group_gid, 0));
    CHECK_ERRNO(rdma_leave_multicast(id.get(), reinterpret_cast<sockaddr*>(&group)));
    if (sender_count != 0 && sender_count != count)
        wb::result_error("the sender sent " + std::to_string(sender_count) + " datagrams, the receivers expect " +
                         std::to_string(count) + ": the two sides' -n differ; give both the same -n");
    if (!all) wb::result_error("not every receiver got every datagram (lines above)");
    std::printf("result: each of %d receivers got all %d datagrams\n", receivers, count);
    return 0;
}

namespace {

// "01:00:5e:01:02:03": the Ethernet address IPv4 multicast maps a group to
// (RFC 1112: 01:00:5e, then the group's low 23 bits).
std::string ipv4_multicast_mac(in_addr group) {
    const uint32_t g = ntohl(group.s_addr);
    char text[18];
    std::snprintf(text, sizeof text, "01:00:5e:%02x:%02x:%02x", (g >> 16) & 0x7f, (g >> 8) & 0xff, g & 0xff);
    return text;
}

}  // namespace
