// qp.cpp - see qp.hpp. The values and their meaning are explained field by
// field in lessons/03_qp_state_machine/lesson3.cpp.
#include "qp.hpp"

#include <cstring>
#include <random>

#include "check.hpp"

namespace wb {

uint32_t random_psn() {
    std::random_device rd;
    return rd() & 0xFFFFFF;  // 24 bits
}

PeerInfo local_info(uint16_t lesson, const ibv_qp* qp, uint32_t psn, const PortAddress& a) {
    PeerInfo me;
    me.lesson = lesson;
    me.qp_num = qp->qp_num;
    me.psn = psn;
    me.lid = a.attr.lid;
    me.gid = a.gid;  // zero on InfiniBand LID addressing
    me.mtu = a.attr.active_mtu;
    return me;
}

void qp_to_init(ibv_qp* qp, const PortAddress& a, unsigned remote_access) {
    ibv_qp_attr attr = {
        .qp_state = IBV_QPS_INIT,
        .qp_access_flags = remote_access,  // what the peer's requests may do here
        .pkey_index = 0,                    // the default partition
        .port_num = a.port,
    };
    CHECK_RC(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

void qp_to_rtr(ibv_qp* qp, const PortAddress& a, const PeerInfo& peer, uint8_t rd_atomic) {
    ibv_mtu mtu = std::min(a.attr.active_mtu, static_cast<ibv_mtu>(peer.mtu));
    ibv_qp_attr attr = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = mtu,                 // the smaller active MTU of the two ports
        .rq_psn = peer.psn,              // the first PSN we expect from the peer
        .dest_qp_num = peer.qp_num,
        .ah_attr = {
            .dlid = peer.lid,            // used on InfiniBand; 0 on RoCE
            .sl = 0,                     // service level 0
            .src_path_bits = 0,
            .is_global = 0,
            .port_num = a.port,
        },
        .max_dest_rd_atomic = rd_atomic, // READ/atomic requests the peer may have in flight at us
        .min_rnr_timer = 12,             // RNR NAK delay code 12 = 0.64 ms before the peer retries
    };
    if (a.gid_index >= 0) {  // RoCE always (GRH is mandatory); InfiniBand only with -g
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh = {
            .dgid = peer.gid,
            .flow_label = 0,
            .sgid_index = static_cast<uint8_t>(a.gid_index),
            .hop_limit = 64,             // IP TTL on RoCE v2; enough for any routed path
            .traffic_class = 0,
        };
        if (gid_is_zero(peer.gid))
            fail("the peer sent a zero GID, but this port needs GRH addressing",
                 "is the peer on an InfiniBand port using LID addressing? give both sides -g");
    }
    // A RoCE v2 GID is an IP address, and the kernel finds the peer's MAC by
    // routing from our address to the peer's: EINVAL here when one side's GID
    // is IPv6 (fe80::..., -g 0 on rxe) and the other's IPv4-mapped (::ffff:a.b.c.d).
    const std::string hint =
        a.gid_index < 0 ? "is the peer's LID right? (./lesson1 shows the port)"
                        : "compare both sides' gid: lines: ours is " + gid_to_string(a.gid) + " (" +
                              a.gid_type + "), the peer's " + gid_to_string(peer.gid) +
                              "; both must have the same type, and be both IPv4-mapped (::ffff:a.b.c.d) " +
                              "or both IPv6 (-g; ./lesson1 lists the table)";
    CHECK_RC(ibv_modify_qp(qp, &attr,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
             hint.c_str());
}

void qp_to_rts(ibv_qp* qp, uint32_t psn, uint8_t rd_atomic) {
    ibv_qp_attr attr = {
        .qp_state = IBV_QPS_RTS,
        .sq_psn = psn,                 // our first PSN, as told to the peer
        .max_rd_atomic = rd_atomic,    // READ/atomic requests we may have in flight at the peer
        .timeout = 14,                 // ACK timeout 4.096 us * 2^14 = 67 ms
        .retry_cnt = 6,                // resend 6 times without an ACK (7 tries, ~0.5 s), then IBV_WC_RETRY_EXC_ERR;
                                       // not 7: rxe never gives up at 7 (lesson 3)
        .rnr_retry = 7,                // 7 = retry forever on RNR NAK; our CQ waits are bounded instead
    };
    CHECK_RC(ibv_modify_qp(qp, &attr,
                           IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT |
                               IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY));
}

ibv_qp_state query_state(ibv_qp* qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    CHECK_RC(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init));
    return attr.qp_state;
}

const char* qp_state_name(ibv_qp_state state) {
    switch (state) {
    case IBV_QPS_RESET: return "IBV_QPS_RESET";
    case IBV_QPS_INIT: return "IBV_QPS_INIT";
    case IBV_QPS_RTR: return "IBV_QPS_RTR";
    case IBV_QPS_RTS: return "IBV_QPS_RTS";
    case IBV_QPS_SQD: return "IBV_QPS_SQD";
    case IBV_QPS_SQE: return "IBV_QPS_SQE";
    case IBV_QPS_ERR: return "IBV_QPS_ERR";
    case IBV_QPS_UNKNOWN: return "IBV_QPS_UNKNOWN";
    }
    return "IBV_QPS_(unknown)";
}

const char* qp_state_str(ibv_qp_state state) { return qp_state_name(state) + std::strlen("IBV_QPS_"); }

uint32_t reconnect(ibv_qp* qp, const PortAddress& a, Connection& conn, uint16_t lesson, unsigned remote_access,
                   bool is_server, int timeout_s) {
    ibv_qp_attr attr = {.qp_state = IBV_QPS_RESET};
    CHECK_RC(ibv_modify_qp(qp, &attr, IBV_QP_STATE));
    qp_to_init(qp, a, remote_access);
    const uint32_t psn = random_psn();  // the old PSNs are not safe to reuse
    const PeerInfo peer = exchange(conn, local_info(lesson, qp, psn, a), timeout_s);
    qp_to_rtr(qp, a, peer);
    qp_to_rts(qp, psn);
    if (is_server) {
        send_token(conn, "RTR!");
    } else {
        expect_token(conn, "RTR!", timeout_s);
    }
    return psn;
}

}  // namespace wb
