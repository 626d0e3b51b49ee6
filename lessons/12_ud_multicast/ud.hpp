// ud.hpp - lesson 12's UD steps, which both of its programs take: lesson12.cpp
// (the sum over UD) and lesson12_mcast.cpp (multicast). In the order the
// verbs are called: a UD QP to RTS, a receive with room for the GRH, a
// datagram's three wr.ud fields, and the wait for the peer's next datagram,
// which ignores everyone else's.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>  // RDMA_UDP_QKEY only

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "check.hpp"
#include "completion.hpp"
#include "device.hpp"
#include "exchange.hpp"

namespace ud {

// The Q_Key: a 32-bit number that a UD QP compares with the one every
// incoming datagram carries (in its DETH header); a mismatch is dropped. Not a
// password (it travels in clear text), only a guard against stray datagrams.
// Every lesson-12 QP uses this one: rdma_cm's RDMA_UDP_QKEY (0x01234567), the
// Q_Key it gives every member of a multicast group (lesson12_mcast).
inline constexpr uint32_t kQkey = RDMA_UDP_QKEY;

// Every UD receive buffer begins with room for the 40-byte Global Route
// Header of the packet that filled it (on RoCE v2 over IPv4, rxe puts the
// 20-byte IPv4 header in its last 20 bytes). The NIC writes it whether or not
// we want it; a buffer without the 40 bytes loses the end of the message.
inline constexpr uint32_t kGrhBytes = 40;

// The multicast QP number (IBTA: the 24-bit "all ones", 0xFFFFFF): a datagram
// sent to it goes to every QP attached to the group its address names.
inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;

// RESET -> INIT -> RTR -> RTS for a UD QP. Compare lesson 3's RC transitions:
// INIT takes a Q_Key instead of access flags (a datagram can only be a SEND,
// which never touches our memory), and RTR and RTS take no remote fields at
// all: no destination QP, no GID, no PSN to expect, no path MTU. A UD QP is
// bound to no peer, so it can reach RTS before it knows anyone.
inline void qp_to_rts(ibv_qp* qp, const wb::PortAddress& a, uint32_t psn) {
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

// One QP's receive buffers, all in `mr`: receive `wr_id` i fills slot i, the
// `slot_bytes` at base + i * slot_bytes. A slot is 40 GRH bytes and a whole
// MTU of our port: a datagram longer than its receive fails it, and rxe then
// puts the QP in the error state (measured), so a stray of any size would end
// us; with a whole MTU, none is too long (rxe sends nothing longer: measured).
struct Receives {
    ibv_qp* qp;
    ibv_cq* cq;  // the QP's receive CQ
    const ibv_mr* mr;
    char* base;
    uint32_t slot_bytes;
    char* slot(uint64_t wr_id) const { return base + wr_id * slot_bytes; }
};

// Post receive `wr_id` (its slot, GRH included).
inline void post_receive(const Receives& r, uint64_t wr_id) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(r.slot(wr_id)),
        .length = r.slot_bytes,  // 40 bytes of GRH + the longest datagram
        .lkey = r.mr->lkey,
    };
    ibv_recv_wr wr = {.wr_id = wr_id, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(r.qp, &wr, &bad));
}

// Post one signaled datagram of `length` bytes from the start of `mr` to QP
// `remote_qpn` at the address `ah`: the three wr.ud fields are the whole of UD
// addressing (an RC QP's RTR holds them instead).
inline void post_datagram(ibv_qp* qp, const ibv_mr* mr, uint32_t length, ibv_ah* ah, uint32_t remote_qpn,
                          uint32_t remote_qkey, uint64_t wr_id) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr),
        .length = length,
        .lkey = mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = wr_id,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,            // UD knows only SEND (and SEND with immediate)
        .send_flags = IBV_SEND_SIGNALED,  // the completion says the datagram LEFT, nothing more
        .wr = {.ud = {
                   .ah = ah,                   // where: the peer's GID (or LID), port, hop limit
                   .remote_qpn = remote_qpn,   // which QP there (kMulticastQpn: every QP of a group)
                   .remote_qkey = remote_qkey, // must equal the Q_Key of that QP, or it is dropped
               }},
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

// The source GID in a UD receive buffer's GRH area: on RoCE v2 over IPv4
// (the IPv4 header in its last 20 bytes, version 4) the IPv4-mapped
// ::ffff:a.b.c.d of the header's source, else the GRH's own sgid.
inline ibv_gid grh_source_gid(const char* buf) {
    constexpr uint32_t kIpv4Header = 20, kIpv4Source = 12;  // offsets: the header in the GRH, saddr in the header
    ibv_gid gid{};
    if ((static_cast<uint8_t>(buf[kIpv4Header]) >> 4) == 4) {
        std::memset(gid.raw + 10, 0xff, 2);
        std::memcpy(gid.raw + 12, buf + kIpv4Header + kIpv4Source, 4);
    } else {
        std::memcpy(&gid, &reinterpret_cast<const ibv_grh*>(buf)->sgid, sizeof gid);
    }
    return gid;
}

// The datagrams of one peer: the QP we exchanged with. UD has no connection:
// any UD QP that knows our QP number and the Q_Key can send us a datagram.
// So each is checked against that peer: its QP (wc.src_qp) and GID (the GRH's
// source, read by ibv_init_ah_from_wc) or, without a GRH (InfiniBand), its
// LID. Anyone else's is a stray: counted, reported in one line and ignored.
// A datagram sent to a group is the exception: ibv_init_ah_from_wc refuses
// it (EINVAL: it looks up our GID for the packet's destination, and the
// group's GID is none of ours; measured), so a receiver of a group
// (`to_group`) reads the source from the GRH itself.
struct PeerDatagrams {
    ibv_context* ctx;
    uint8_t port;
    wb::PeerInfo peer;
    std::string me;  // "client", "receiver 2": how our lines begin
    bool to_group = false;
    int strays = 0;

    bool from_peer(ibv_wc& wc, char* buf) {
        std::string sender, expected;
        if (wc.wc_flags & IBV_WC_GRH) {
            ibv_ah_attr from{};
            if (to_group)
                from.grh.dgid = grh_source_gid(buf);
            else
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
        std::printf("%s: ignored a datagram from QP 0x%x at %s: not the peer of the exchange (QP 0x%x at %s); "
                    "%d so far\n",
                    me.c_str(), wc.src_qp, sender.c_str(), peer.qp_num, expected.c_str(), strays);
        return false;
    }

    // Wait until `deadline` for the peer's next datagram on `r`: its
    // completion, or nothing once the deadline has passed (a datagram
    // already in the CQ is still taken then: the CQ is polled once). A stray's receive
    // is posted again and the wait goes on to the same deadline, so no number
    // of strays stretches it. With `conn`, exit 1 as soon as the peer closes
    // its TCP connection. A failed receive carries no source to check (only
    // wr_id and status are valid), and with whole-MTU slots none fails: when
    // one does, check_wc ends the program saying so.
    std::optional<ibv_wc> next(const Receives& r, std::chrono::steady_clock::time_point deadline, const char* what,
                               const wb::Connection* conn = nullptr) {
        using Clock = std::chrono::steady_clock;
        constexpr std::chrono::milliseconds kLook{10};  // how often we look at the TCP connection
        for (;;) {
            const Clock::duration left = std::max<Clock::duration>(deadline - Clock::now(), Clock::duration::zero());
            const Clock::duration slice = conn ? std::min<Clock::duration>(left, kLook) : left;
            std::optional<ibv_wc> wc = wb::try_poll(r.cq, std::chrono::duration<double>(slice).count());
            if (!wc) {
                if (conn && wb::peer_closed(*conn))
                    wb::fail("the peer " + conn->peer() + " closed the connection while we waited for " + what,
                             "see the peer's output: it exited, failed, or refused to go on");
                if (Clock::now() >= deadline) return std::nullopt;
                continue;
            }
            wb::check_wc(*wc, what);
            if (from_peer(*wc, r.slot(wc->wr_id))) return wc;
            post_receive(r, wc->wr_id);
        }
    }
};

// The message's length in a UD receive: byte_len less the 40 GRH bytes it also
// counts. Without IBV_WC_GRH, or under 40 bytes, it is not one we can read.
inline uint32_t message_length(const ibv_wc& wc) {
    if (!(wc.wc_flags & IBV_WC_GRH) || wc.byte_len < kGrhBytes)
        wb::fail("a UD receive without its 40-byte GRH (" + std::to_string(wc.byte_len) + " bytes)");
    return wc.byte_len - kGrhBytes;
}

// The source IPv4 address in a UD receive buffer's GRH area (RoCE v2 over
// IPv4: the IPv4 header, 20 bytes in, holds its source 12 bytes further), "a.b.c.d".
inline std::string grh_source_ipv4(const char* buf) {
    constexpr uint32_t kIpv4Header = 20, kIpv4Source = 12;  // offsets: the header in the GRH, saddr in the header
    char text[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, buf + kIpv4Header + kIpv4Source, text, sizeof text);
    return text;
}

}  // namespace ud
