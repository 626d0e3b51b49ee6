// connect.cpp - see connect.hpp. The values and their meaning are explained
// field by field in lessons/03_qp_state_machine/lesson3.cpp.
#include "connect.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "check.hpp"
#include "options.hpp"

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

const char* wc_opcode_str(ibv_wc_opcode op) {
    switch (op) {
    case IBV_WC_SEND: return "IBV_WC_SEND";
    case IBV_WC_RDMA_WRITE: return "IBV_WC_RDMA_WRITE";
    case IBV_WC_RDMA_READ: return "IBV_WC_RDMA_READ";
    case IBV_WC_COMP_SWAP: return "IBV_WC_COMP_SWAP";
    case IBV_WC_FETCH_ADD: return "IBV_WC_FETCH_ADD";
    case IBV_WC_BIND_MW: return "IBV_WC_BIND_MW";
    case IBV_WC_RECV: return "IBV_WC_RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "IBV_WC_RECV_RDMA_WITH_IMM";
    default: return "other";
    }
}

const char* wc_status_name(ibv_wc_status status) {
    switch (status) {
    case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR: return "IBV_WC_LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR: return "IBV_WC_MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR: return "IBV_WC_BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR: return "IBV_WC_LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR";
    case IBV_WC_LOC_RDD_VIOL_ERR: return "IBV_WC_LOC_RDD_VIOL_ERR";
    case IBV_WC_REM_INV_RD_REQ_ERR: return "IBV_WC_REM_INV_RD_REQ_ERR";
    case IBV_WC_REM_ABORT_ERR: return "IBV_WC_REM_ABORT_ERR";
    case IBV_WC_INV_EECN_ERR: return "IBV_WC_INV_EECN_ERR";
    case IBV_WC_INV_EEC_STATE_ERR: return "IBV_WC_INV_EEC_STATE_ERR";
    case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR: return "IBV_WC_RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR: return "IBV_WC_GENERAL_ERR";
    case IBV_WC_TM_ERR: return "IBV_WC_TM_ERR";
    case IBV_WC_TM_RNDV_INCOMPLETE: return "IBV_WC_TM_RNDV_INCOMPLETE";
    }
    return "IBV_WC_(unknown)";
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

void check_wc(const ibv_wc& wc, const char* what, const char* likely_cause) {
    if (wc.status == IBV_WC_SUCCESS) return;
    const char* hint = "";
    switch (wc.status) {
    case IBV_WC_RETRY_EXC_ERR:
        hint = "the peer never acknowledged (7 tries in 0.5 s): the peer exited, or a wrong GID index or "
               "address, a path MTU the peers disagree on, UDP 4791 blocked; or, on rxe, the peer had no "
               "receive posted for more than 0.6 s (RNR: docs/lesson4-send-recv.md)";
        break;
    case IBV_WC_RNR_RETRY_EXC_ERR: hint = "the peer had no receive posted (post receives before RTR)"; break;
    case IBV_WC_REM_ACCESS_ERR:
        hint = "the peer refused: wrong rkey, an address outside its MR, or an MR without that access";
        break;
    case IBV_WC_LOC_PROT_ERR: hint = "a local SGE is outside its MR or uses the wrong lkey"; break;
    case IBV_WC_LOC_LEN_ERR: hint = "the incoming message is larger than the posted receive buffer"; break;
    case IBV_WC_LOC_QP_OP_ERR:
        hint = "our QP could not carry out the request; Soft-RoCE (rxe) reports an incoming SEND larger "
               "than the posted receive buffer this way";
        break;
    case IBV_WC_REM_OP_ERR:
        hint = "the peer's NIC could not complete our request, e.g. a SEND larger than the receive buffer "
               "the peer posted: see the peer's output";
        break;
    case IBV_WC_REM_INV_REQ_ERR: hint = "the peer's QP does not allow this operation (qp_access_flags)"; break;
    case IBV_WC_WR_FLUSH_ERR: hint = "the QP was already in the error state: the first failure is the cause"; break;
    default: break;
    }
    if (likely_cause) hint = likely_cause;
    // "status transport retry counter exceeded (12, IBV_WC_RETRY_EXC_ERR, vendor_err 0)": the
    // library's words, then the number and the enum's name, which a learner can grep for.
    fail(std::string(what) + " completed with status " + ibv_wc_status_str(wc.status) + " (" +
             std::to_string(wc.status) + ", " + wc_status_name(wc.status) + ", vendor_err " +
             std::to_string(wc.vendor_err) + ")",
         hint);
}

// The status of RDMA_CM_EVENT_REJECTED on InfiniBand and RoCE is the IB CM's
// reject reason (IBTA, "REJ reason" table); librdmacm has no string for it.
constexpr int kRejectNoListener = 8;  // "invalid service ID": nothing listens on that port
constexpr int kRejectConsumer = 28;   // "consumer defined": the peer's program called rdma_reject

void check_cm_event(const rdma_cm_event* ev, rdma_cm_event_type expected) {
    if (ev->event == expected) return;
    std::string status = "status " + std::to_string(ev->status);
    if (ev->event == RDMA_CM_EVENT_REJECTED)
        status = "reject reason " + std::to_string(ev->status) +
                 (ev->status == kRejectNoListener ? ": invalid service ID, nothing listens on that port"
                  : ev->status == kRejectConsumer ? ": consumer defined, the server's program rejected us"
                                                  : "");
    else if (ev->status < 0)
        status += ", " + errno_str(-ev->status);
    const char* hint = "see the peer's output";
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_ERROR:
        hint = "is HOST an IP address reachable through an RDMA netdev (rdma link show; ip route get HOST)? "
               "in a container or network namespace rdma_cm may not see the device (scripts/doctor.sh --peer HOST checks this)";
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR: hint = "is there a route to HOST over the RDMA netdev? (ip route get HOST)"; break;
    case RDMA_CM_EVENT_UNREACHABLE:
        hint = "the server's CM never answered: is it running there? is UDP 4791 open? is HOST right? (scripts/doctor.sh --peer HOST checks this)";
        break;
    case RDMA_CM_EVENT_REJECTED:
        hint = ev->status == kRejectNoListener
                   ? "is the server running there, listening (its \"listening\" line) on the same -p?"
                   : "see the server's output";
        break;
    case RDMA_CM_EVENT_CONNECT_ERROR: hint = "the connection failed after the reply: see the peer's output"; break;
    default: break;
    }
    fail(std::string("expected ") + rdma_event_str(expected) + ", got " + rdma_event_str(ev->event) + " (" +
             status + ")",
         hint);
}

rdma_cm_event* take_cm_event(rdma_event_channel* ec, rdma_cm_event_type waiting_for, int timeout_s) {
    pollfd p{.fd = ec->fd, .events = POLLIN, .revents = 0};
    if (CHECK_ERRNO(poll(&p, 1, timeout_s < 0 ? -1 : timeout_s * 1000)) == 0)
        fail("no rdma_cm event within " + std::to_string(timeout_s) + " s while waiting for " +
                 rdma_event_str(waiting_for),
             waiting_for == RDMA_CM_EVENT_MULTICAST_JOIN  // answered by this host's rdma_cm, not by a peer
                 ? "is the RDMA netdev up? (rdma link show)"
                 : "is the peer still running and reachable? raise --timeout if the machine is slow");
    rdma_cm_event* ev = nullptr;
    CHECK_ERRNO(rdma_get_cm_event(ec, &ev));
    std::printf("cm event: %s\n", rdma_event_str(ev->event));
    return ev;
}

rdma_cm_event* next_cm_event(rdma_event_channel* ec, rdma_cm_event_type expected, int timeout_s) {
    rdma_cm_event* ev = take_cm_event(ec, expected, timeout_s);
    check_cm_event(ev, expected);
    return ev;
}

sockaddr_storage ip_address(const std::string& host, uint16_t port, const char* what) {
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;  // rdma_cm needs an address, not a name
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0)
        usage_error(std::string(what) + ": '" + host + "' is not an IPv4 or IPv6 address");
    sockaddr_storage ss{};
    std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return ss;
}

std::string address_str(const sockaddr* sa) {
    char host[NI_MAXHOST] = "?";
    getnameinfo(sa, sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in), host, sizeof host,
                nullptr, 0, NI_NUMERICHOST);
    return host;
}

namespace {

// True when the peer has closed (or reset) the connection. Data that is
// waiting is only peeked at, never consumed.
bool peer_closed(const Connection& c) {
    pollfd p{.fd = c.fd(), .events = POLLIN | POLLRDHUP, .revents = 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    char byte;
    ssize_t n = ::recv(c.fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

ibv_wc poll_one_until(ibv_cq* cq, int timeout_s, const char* waiting_for, const Connection* peer) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    auto next_look = Clock::now();  // when to look at the peer's connection next
    ibv_wc wc{};
    for (;;) {
        int n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc));
        if (n == 1) break;
        const auto now = Clock::now();
        if (now >= deadline)
            fail(std::string("no completion for ") + waiting_for + " within " + std::to_string(timeout_s) + " s",
                 "is the peer still running? raise --timeout if the machine is slow");
        if (peer && now >= next_look) {
            next_look = now + std::chrono::milliseconds(10);  // a syscall every 10 ms, not every spin
            if (peer_closed(*peer)) {
                // The peer is gone, but our QP may not know yet: a request in
                // flight to its vanished QP ends in IBV_WC_RETRY_EXC_ERR once
                // our retries run out, which says more than "closed". Keep
                // polling for as long as those retries take.
                const auto give_up = Clock::now() + kRetriesGiveUp;
                while ((n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc))) == 0 && Clock::now() < give_up)
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                if (n == 1) {
                    if (wc.status == IBV_WC_RETRY_EXC_ERR)
                        check_wc(wc, waiting_for,
                                 ("the peer " + peer->peer() + " closed its TCP connection too: it exited, and its "
                                  "QP went with it")
                                     .c_str());
                    break;
                }
                fail("the peer " + peer->peer() + " closed the connection while we waited for " + waiting_for,
                     "see the peer's output: it exited, failed, or refused to go on");
            }
        }
        std::this_thread::yield();  // let the peer run on a busy machine
    }
    check_wc(wc, waiting_for);
    return wc;
}

}  // namespace

ibv_wc poll_one(ibv_cq* cq, int timeout_s, const char* waiting_for) {
    return poll_one_until(cq, timeout_s, waiting_for, nullptr);
}

std::optional<ibv_wc> poll_any(ibv_cq* cq, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    ibv_wc wc{};
    for (;;) {
        if (CHECK_POLL(ibv_poll_cq(cq, 1, &wc)) == 1) return wc;
        if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
        std::this_thread::yield();  // let the peer run on a busy machine
    }
}

ibv_wc poll_any(ibv_cq* cq, int timeout_s, const char* waiting_for) {
    const std::optional<ibv_wc> wc = poll_any(cq, static_cast<double>(timeout_s));
    if (!wc)
        fail(std::string("no completion for ") + waiting_for + " within " + std::to_string(timeout_s) + " s",
             "is the peer still running? raise --timeout if the machine is slow");
    return *wc;
}

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

std::string wc_status_text(ibv_wc_status status) {
    return std::string(wc_status_name(status)) + " (" + std::to_string(status) + ")";
}

ibv_wc poll_one(ibv_cq* cq, int timeout_s, const char* waiting_for, const Connection& peer) {
    return poll_one_until(cq, timeout_s, waiting_for, &peer);
}

}  // namespace wb
