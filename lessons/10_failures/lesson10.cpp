// lesson10.cpp - when RDMA fails: every classic error made on purpose, and recovered from.
//
// Lessons 4 to 9 avoid every mistake. This one makes them, one per scenario,
// for real: the client names a scenario, the server plays its side of it, and
// each side prints what its completion queue says, the QP's state, the
// asynchronous events, and the port counters that moved. The client's last
// line is
//     result: SCENARIO: IBV_WC_<ENUM> (<number>), as expected: why
// and it exits 0 when the failure happened as taught, 1 (saying what happened
// instead) when it did not. The server's last line is "result: server: ...".
//
// A failed completion carries only wr_id, status, vendor_err and qp_num:
// its opcode and byte_len are not set (man ibv_poll_cq). The first error in
// a CQ is the cause; the IBV_WC_WR_FLUSH_ERR completions after it are its echo.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson10 --list                 the scenarios, one line each
//     ./lesson10                        server: plays one client's scenario
//     ./lesson10 127.0.0.1 rnr          client: result: rnr: IBV_WC_RNR_RETRY_EXC_ERR (13), ...
// On two hosts: ./lesson10 on host A, ./lesson10 A SCENARIO on host B. Both
// sides take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS.
//
// Verbs it introduces:
//     ibv_modify_qp with the failure knobs: rnr_retry, retry_cnt, timeout (RTS),
//         min_rnr_timer, path_mtu (RTR); ERR -> RESET -> INIT -> RTR -> RTS to recover
//     ibv_get_async_event / ibv_ack_async_event on ctx->async_fd, bounded with poll()
//     the port's counters: /sys/class/infiniband/DEV/ports/N/hw_counters/* (wb::PortCounters)
//
// Read more: man ibv_poll_cq (the status list), man ibv_modify_qp,
// man ibv_get_async_event; docs/lesson10-failures.md (what now? table, the
// wire of each failure, the fixes, exercises).
#include <infiniband/verbs.h>

#include <fcntl.h>
#include <poll.h>

#include <array>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

constexpr uint16_t kLesson = 10;  // sent in the exchange: a lesson-10 client only talks to a lesson-10 server
// The client names its scenario in the first bytes it sends on the TCP
// connection: exactly 16 bytes, the name padded with NUL bytes.
constexpr size_t kNameBytes = 16;
constexpr uint32_t kBufferBytes = 4096;  // every MR: one page
// After the exchange the two sides keep in step with 4-byte tokens on the TCP
// connection (wb::send_token): "RTR!" the server's QP is ready (lesson 4);
// "DONE" the client has its result, the server may report; "NEXT" (rnr-wait)
// the server changed its RNR timer; "SENT" (rnr-wait) the client has posted
// its SEND, so the server's second of lateness starts then; "AGIN" (recover)
// the client failed and both start again from RESET.

// wr_id: our own label for a work request, handed back in its completion
// (also in a failed one: wr_id and status are all a failed completion carries).
constexpr uint64_t kRecvId = 1;
constexpr uint64_t kSendId = 2;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Everything one side holds, declared in creation order (reverse destruction).
struct Side {
    wb::Options opt;
    bool server = true;
    const char* who = "server";
    wb::Context ctx;
    wb::PortAddress addr;
    wb::ProtectionDomain pd;
    wb::CompletionQueue send_cq, recv_cq;
    wb::QueuePair qp;
    wb::Buffer buf;
    wb::MemoryRegion mr;  // registered by each scenario, with the access it needs
    wb::Connection conn;
    uint32_t psn = 0;
    wb::PeerInfo peer;
    std::optional<wb::PortCounters> counters;  // the port's hw_counters since we started
    Clock::time_point posted;                  // when the last work request was posted
};

// --- the knobs the failures turn: the QP's transitions, by hand -------------------

// INIT -> RTR, as common/connect.cpp's qp_to_rtr does, but with the two
// receiver-side knobs as arguments, and the return code handed back (the gid
// scenario wants to see it fail).
int to_rtr(Side& s, ibv_mtu path_mtu, uint8_t min_rnr_timer) {
    ibv_qp_attr attr = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = path_mtu,          // the largest packet payload: IBV_MTU_1024 = 1024 bytes
        .rq_psn = s.peer.psn,
        .dest_qp_num = s.peer.qp_num,
        .ah_attr = {.dlid = s.peer.lid, .is_global = 0, .port_num = s.addr.port},
        .max_dest_rd_atomic = 1,
        .min_rnr_timer = min_rnr_timer,  // the wait our RNR NAKs ask for: code 12 = 0.64 ms, 0 = 655.36 ms
    };
    if (s.addr.gid_index >= 0) {  // RoCE: GRH addressing (lesson 3)
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh = {.dgid = s.peer.gid, .sgid_index = static_cast<uint8_t>(s.addr.gid_index), .hop_limit = 64};
    }
    return ibv_modify_qp(s.qp.get(), &attr,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

// RTR -> RTS with the three sender-side knobs.
void to_rts(Side& s, uint8_t retry_cnt, uint8_t rnr_retry) {
    ibv_qp_attr attr = {
        .qp_state = IBV_QPS_RTS,
        .sq_psn = s.psn,
        .max_rd_atomic = 1,
        .timeout = 14,           // ACK timeout 4.096 us x 2^14 = 67 ms before a resend
        .retry_cnt = retry_cnt,  // resends when no ACK comes at all (7: for ever, on rxe)
        .rnr_retry = rnr_retry,  // resends after an RNR NAK (7: for ever)
    };
    CHECK_RC(ibv_modify_qp(s.qp.get(), &attr,
                           IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT |
                               IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY));
}

// The lessons' values (lesson 3): the smaller active MTU, min_rnr_timer 12,
// retry_cnt 6, rnr_retry 7.
constexpr uint8_t kMinRnrTimer = 12, kRetryCnt = 6, kRnrRetry = 7;
ibv_mtu common_mtu(const Side& s) { return std::min(s.addr.attr.active_mtu, static_cast<ibv_mtu>(s.peer.mtu)); }
void to_rtr_rts(Side& s) {
    CHECK_RC(to_rtr(s, common_mtu(s), kMinRnrTimer));
    to_rts(s, kRetryCnt, kRnrRetry);
}

// --- the plumbing the scenarios share (defined after main) ---------------------
// Completions are waited for with wb::poll_any (common/connect.hpp): where
// lessons 4 to 9's wb::poll_one exits on a failed completion, it returns it,
// since here failure is the point.

void register_buffer(Side& s, int access);  // our MR, with exactly `access`
void exchange(Side& s);                     // lesson 4's exchange, offering our buffer
void go(Side& s);                           // the server's "RTR!" (lesson 4, step 8)
void post_receive(Side& s, uint32_t length);
void post(Side& s, ibv_wr_opcode opcode, uint32_t length, uint32_t rkey = 0, uint32_t offset = 0);
int client_expects(Side& s, const char* scenario, ibv_wc_status expected, const std::string& why, bool timed = false);
int server_reports(Side& s, const char* scenario, std::string seen = "");
void print_completion(const Side& s, const ibv_wc& wc);
void print_async_events(const Side& s, int ms);
void print_counters(const Side& s);
void print_state(const Side& s, const char* step);

// --- the scenarios: each plays both sides ---------------------------------------

// rnr: a SEND finds no receive posted, and the sender accepts no RNR NAK.
int rnr(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);  // SEND/RECV only: no remote access
    wb::qp_to_init(s.qp.get(), s.addr, 0);
    // THE MISTAKE: the server posts no receive (lesson 4 posts it here).
    exchange(s);
    CHECK_RC(to_rtr(s, common_mtu(s), kMinRnrTimer));
    to_rts(s, kRetryCnt, s.server ? kRnrRetry : 0);  // client: rnr_retry 0, the first RNR NAK is fatal
    go(s);
    if (s.server) return server_reports(s, "rnr");
    post(s, IBV_WR_SEND, 16);
    return client_expects(s, "rnr", IBV_WC_RNR_RETRY_EXC_ERR,
                          "the server had no receive posted, its NIC answered RNR NAK, and rnr_retry 0 gives up at once");
}

// rnr-wait: the receive comes a second late, and rnr_retry 7 waits for it:
// no error, a stall. Twice: with min_rnr_timer 12 (0.64 ms) and 0 (655 ms).
int rnr_wait(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    wb::qp_to_init(s.qp.get(), s.addr, 0);
    exchange(s);
    CHECK_RC(to_rtr(s, common_mtu(s), kMinRnrTimer));
    // rnr_retry 7 waits for ever; retry_cnt must be 7 too on rxe, whose ACK
    // timer keeps running during RNR waits and spends retry_cnt: with 6 the
    // SEND would end in IBV_WC_RETRY_EXC_ERR after about 0.65 s.
    to_rts(s, 7, 7);
    go(s);
    if (s.server) {
        std::string seen;
        for (uint8_t timer : {kMinRnrTimer, uint8_t{0}}) {
            if (timer != kMinRnrTimer) {
                // The RNR timer may change in RTS (RTS -> RTS, IBV_QP_MIN_RNR_TIMER).
                ibv_qp_attr attr = {.qp_state = IBV_QPS_RTS, .min_rnr_timer = timer};
                CHECK_RC(ibv_modify_qp(s.qp.get(), &attr, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER));
                wb::send_token(s.conn, "NEXT");
            }
            wb::expect_token(s.conn, "SENT", s.opt.timeout_s);
            std::printf("server: min_rnr_timer %u; the client's SEND is posted: posting the receive in 1 s\n", timer);
            std::this_thread::sleep_for(std::chrono::seconds(1));  // THE MISTAKE: a receive posted late
            post_receive(s, 16);
            const std::optional<ibv_wc> wc = wb::poll_any(s.recv_cq.get(), s.opt.timeout_s);
            if (!wc) wb::fail("no RECV within " + std::to_string(s.opt.timeout_s) + " s");
            print_completion(s, *wc);
            seen += (seen.empty() ? "" : ", ") + wb::wc_status_text(wc->status);
        }
        return server_reports(s, "rnr-wait", seen);
    }
    std::string took;
    for (int round = 0; round < 2; ++round) {
        if (round == 1) wb::expect_token(s.conn, "NEXT", s.opt.timeout_s);
        const uint64_t naks_before = s.counters->moved("rcvd_rnr_err");
        const auto t0 = Clock::now();
        post(s, IBV_WR_SEND, 16);
        wb::send_token(s.conn, "SENT");
        const std::optional<ibv_wc> wc = wb::poll_any(s.send_cq.get(), s.opt.timeout_s);
        const double secs = seconds_since(t0);
        const uint64_t naks = s.counters->moved("rcvd_rnr_err") - naks_before;
        if (!wc || wc->status != IBV_WC_SUCCESS) {
            wb::send_token(s.conn, "DONE");
            wb::result_error(std::string("rnr-wait: expected ") + wb::wc_status_text(IBV_WC_SUCCESS) + ", got " +
                             (wc ? wb::wc_status_text(wc->status) : "no completion"));
        }
        print_completion(s, *wc);
        std::printf("client: the SEND completed %.3f s after the post, after %" PRIu64 " RNR NAKs (rcvd_rnr_err)\n",
                    secs, naks);
        char line[128];
        std::snprintf(line, sizeof line, "%s%.2f s and %" PRIu64 " RNR NAKs with min_rnr_timer %d", round ? "; " : "",
                      secs, naks, round ? 0 : kMinRnrTimer);
        took += line;
    }
    print_counters(s);
    wb::send_token(s.conn, "DONE");
    std::printf("result: rnr-wait: %s, as expected: both SENDs landed late, no error: %s\n",
                wb::wc_status_text(IBV_WC_SUCCESS).c_str(), took.c_str());
    return 0;
}

// rem-access: an RDMA WRITE into memory the server registered for READ only.
int rem_access(Side& s) {
    // THE MISTAKE, on the server: the MR allows REMOTE_READ, not REMOTE_WRITE.
    // The client's buffer is only the source of its WRITE: no access flag.
    register_buffer(s, s.server ? IBV_ACCESS_REMOTE_READ : 0);
    // The QP allows both: the MR alone refuses the WRITE.
    wb::qp_to_init(s.qp.get(), s.addr, s.server ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0);
    exchange(s);
    to_rtr_rts(s);
    go(s);
    if (s.server) return server_reports(s, "rem-access");
    post(s, IBV_WR_RDMA_WRITE, 16, s.peer.rkey);
    return client_expects(s, "rem-access", IBV_WC_REM_ACCESS_ERR,
                          "the server's MR allows REMOTE_READ only; its NIC answered NAK remote access error");
}

// qp-access: an RDMA READ at a QP whose qp_access_flags lack REMOTE_READ.
int qp_access(Side& s) {
    // The server's MR allows the READ; the client's buffer receives the READ's
    // data, written by its own NIC: LOCAL_WRITE.
    register_buffer(s, s.server ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_LOCAL_WRITE);
    // THE MISTAKE, on the server: the QP allows no remote operation at all.
    wb::qp_to_init(s.qp.get(), s.addr, 0);
    exchange(s);
    to_rtr_rts(s);
    go(s);
    if (s.server) return server_reports(s, "qp-access");
    post(s, IBV_WR_RDMA_READ, 16, s.peer.rkey);
    return client_expects(s, "qp-access", IBV_WC_REM_INV_REQ_ERR,
                          "the server's QP was not given IBV_ACCESS_REMOTE_READ (qp_access_flags), "
                          "although its MR was; its NIC answered NAK invalid request");
}

// len: a SEND larger than the receive the server posted.
int len(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    wb::qp_to_init(s.qp.get(), s.addr, 0);
    if (s.server) post_receive(s, 16);  // THE MISTAKE: room for 16 bytes...
    exchange(s);
    to_rtr_rts(s);
    go(s);
    if (s.server) return server_reports(s, "len");
    post(s, IBV_WR_SEND, 64);  // ...and 64 arrive
    return client_expects(s, "len", IBV_WC_REM_OP_ERR,
                          "64 bytes for a 16-byte receive: the server's receive failed (rxe: IBV_WC_LOC_QP_OP_ERR, "
                          "most NICs: IBV_WC_LOC_LEN_ERR) and its NIC answered NAK remote operational error");
}

// retry: the server's QP never reaches RTR, so it drops every packet in silence.
int retry(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    wb::qp_to_init(s.qp.get(), s.addr, 0);
    if (s.server) post_receive(s, 16);
    exchange(s);
    if (!s.server) to_rtr_rts(s);
    // THE MISTAKE: the server says RTR! while its QP is still in INIT.
    go(s);
    if (s.server) return server_reports(s, "retry");
    post(s, IBV_WR_SEND, 16);
    // Each try waits for the ACK timeout: 4.096 us x 2^timeout; retry_cnt resends after the first.
    const double predicted = (kRetryCnt + 1) * 4.096e-6 * std::pow(2.0, 14);
    char why[160];
    std::snprintf(why, sizeof why,
                  "nothing answered: %d tries x 67 ms (timeout 14, retry_cnt %d) predict %.2f s", kRetryCnt + 1,
                  kRetryCnt, predicted);
    return client_expects(s, "retry", IBV_WC_RETRY_EXC_ERR, why, true);
}

// flush: three work requests, the first fails; the rest are flushed.
int flush(Side& s) {
    // The server's MR allows the WRITE (and the SENDs' receives); the client's is a source only.
    register_buffer(s, s.server ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0);
    wb::qp_to_init(s.qp.get(), s.addr, s.server ? IBV_ACCESS_REMOTE_WRITE : 0);
    if (s.server) {
        post_receive(s, 16);
        post_receive(s, 16);
    }
    exchange(s);
    to_rtr_rts(s);
    go(s);
    if (s.server) return server_reports(s, "flush");
    // THE MISTAKE: the first WR's rkey is wrong. Three WRs in one post:
    // WRITE (bad rkey), SEND, SEND, each signaled, wr_id 1, 2, 3.
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(s.mr->addr), .length = 16, .lkey = s.mr->lkey};
    ibv_send_wr wrs[3] = {};
    for (int i = 0; i < 3; ++i)
        wrs[i] = {.wr_id = static_cast<uint64_t>(i + 1), .next = i < 2 ? &wrs[i + 1] : nullptr, .sg_list = &sge,
                  .num_sge = 1, .opcode = i == 0 ? IBV_WR_RDMA_WRITE : IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
                  .wr = {.rdma = {.remote_addr = s.peer.addr, .rkey = s.peer.rkey + 1}}};  // + 1: not its rkey
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(s.qp.get(), wrs, &bad));
    std::vector<ibv_wc> got;
    while (got.size() < 3)
        if (const std::optional<ibv_wc> wc = wb::poll_any(s.send_cq.get(), s.opt.timeout_s)) {
            print_completion(s, *wc);
            got.push_back(*wc);
        } else break;
    print_counters(s);
    wb::send_token(s.conn, "DONE");
    const bool as_taught = got.size() == 3 && got[0].status == IBV_WC_REM_ACCESS_ERR &&
                           got[1].status == IBV_WC_WR_FLUSH_ERR && got[2].status == IBV_WC_WR_FLUSH_ERR;
    if (!as_taught)
        wb::result_error("flush: expected " + wb::wc_status_text(IBV_WC_REM_ACCESS_ERR) + " then two " +
                         wb::wc_status_text(IBV_WC_WR_FLUSH_ERR) + ", got " + std::to_string(got.size()) +
                         " completions, the first " + (got.empty() ? "none" : wb::wc_status_text(got[0].status)));
    std::printf("result: flush: %s, as expected: the first error (%s, a wrong rkey) is the cause, "
                "the two flushed SENDs its echo\n",
                wb::wc_status_text(IBV_WC_WR_FLUSH_ERR).c_str(), wb::wc_status_text(IBV_WC_REM_ACCESS_ERR).c_str());
    return 0;
}

// mtu: the client's path MTU is 4096, larger than its 1500-byte link carries.
int mtu(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    wb::qp_to_init(s.qp.get(), s.addr, 0);
    if (s.server) post_receive(s, kBufferBytes);
    exchange(s);
    // THE MISTAKE, on the client: IBV_MTU_4096 whatever the ports say.
    CHECK_RC(to_rtr(s, s.server ? common_mtu(s) : IBV_MTU_4096, kMinRnrTimer));
    to_rts(s, kRetryCnt, kRnrRetry);
    go(s);
    if (s.server) return server_reports(s, "mtu");
    std::printf("client: path MTU 4096, port's active MTU %d: sending 4000 bytes as one packet\n",
                wb::mtu_bytes(s.addr.attr.active_mtu));
    post(s, IBV_WR_SEND, 4000);
    // Both sides on one host: rxe's loopback hands the packet over without a
    // link, so nothing is too big, and the mistake goes unnoticed.
    if (std::memcmp(&s.peer.gid, &s.addr.gid, sizeof s.peer.gid) == 0)
        return client_expects(s, "mtu", IBV_WC_SUCCESS,
                              "one host: rxe's loopback carries any size, so the wrong MTU goes unnoticed here; "
                              "across two hosts the SEND never completes (docs/lesson10-failures.md)");
    // Two hosts: the 4000-byte packet does not fit the link, rxe's every
    // attempt to send it fails (send_err), and it tries again, for ever: no
    // completion, no retry_cnt. We wait 2 s, then move the QP to ERR ourselves,
    // which flushes the stuck SEND: that is how a program gets its WRs back.
    if (const std::optional<ibv_wc> early = wb::poll_any(s.send_cq.get(), 2)) {
        print_completion(s, *early);
        wb::send_token(s.conn, "DONE");
        wb::result_error("mtu: expected no completion within 2 s, got " + wb::wc_status_text(early->status));
    }
    std::printf("client: no completion after %.1f s; send_err +%" PRIu64 "; moving our QP to ERR\n",
                seconds_since(s.posted), s.counters->moved("send_err"));
    ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
    CHECK_RC(ibv_modify_qp(s.qp.get(), &err, IBV_QP_STATE));
    return client_expects(s, "mtu", IBV_WC_WR_FLUSH_ERR,
                          "the 4000-byte packet never fit the 1500-byte link; rxe retried it for ever (send_err) "
                          "until we moved the QP to ERR, which flushed it");
}

// The index of a RoCE v2 GID of the other family than `a`'s: IPv6 when `a`
// is IPv4-mapped, IPv4-mapped when it is IPv6. -1 when the port has none.
int other_family_gid(ibv_context* ctx, const wb::PortAddress& a) {
    for (int i = 0; i < a.attr.gid_tbl_len; ++i) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx, a.port, i, &e, 0) != 0 || e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
        if (!wb::gid_is_zero(e.gid) && wb::gid_is_ipv4_mapped(e.gid) != wb::gid_is_ipv4_mapped(a.gid)) return i;
    }
    return -1;
}

// gid: the client picks a GID of the other family (IPv6 link-local against
// the server's IPv4-mapped one): INIT -> RTR fails on both sides.
int gid(Side& s) {
    if (!s.server) {  // THE MISTAKE, on the client: the other kind of GID
        const int other = other_family_gid(s.ctx.get(), s.addr);
        if (other < 0) wb::fail("this port has no RoCE v2 GID of the other family", "ibv_devinfo -v lists the GIDs");
        s.addr = wb::choose_address(s.ctx.get(), s.addr.port, other);
        std::printf("client: using GID index %d %s instead\n", other, wb::gid_to_string(s.addr.gid).c_str());
    }
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    wb::qp_to_init(s.qp.get(), s.addr, 0);
    exchange(s);
    const int rc = to_rtr(s, common_mtu(s), kMinRnrTimer);
    const int err = rc > 0 ? rc : errno;
    std::printf("%s: ibv_modify_qp(INIT -> RTR) from %s to %s: %s\n", s.who, wb::gid_to_string(s.addr.gid).c_str(),
                wb::gid_to_string(s.peer.gid).c_str(), rc == 0 ? "ok" : wb::errno_str(err).c_str());
    print_counters(s);
    // No RTR!: neither QP got there. The client ends, the server follows.
    if (s.server) {
        wb::expect_token(s.conn, "DONE", s.opt.timeout_s);
        std::printf("result: server: gid: INIT -> RTR %s; our QP is %s\n",
                    rc == 0 ? "succeeded" : ("failed with " + wb::errno_str(err)).c_str(),
                    wb::qp_state_name(wb::query_state(s.qp.get())));
        return 0;
    }
    wb::send_token(s.conn, "DONE");
    if (rc == 0 || err != EINVAL)
        wb::result_error("gid: expected EINVAL from ibv_modify_qp(INIT -> RTR), got " +
                         (rc == 0 ? std::string("success") : wb::errno_str(err)));
    std::printf("result: gid: EINVAL from ibv_modify_qp(INIT -> RTR), as expected: no completion at all; "
                "an IPv6 GID cannot route to an IPv4-mapped one: give both sides the same kind (-g)\n");
    return 0;
}

// recover's messages: the receive owns the buffer's first bytes, what we send starts here.
constexpr uint32_t kSendOffset = 64;

// recover: after rnr's failure, drain the CQ, take the QP round through RESET
// with fresh PSNs on both sides, and add 2 + 3 (lesson 4) on it.
int recover(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    wb::qp_to_init(s.qp.get(), s.addr, 0);
    exchange(s);
    CHECK_RC(to_rtr(s, common_mtu(s), kMinRnrTimer));
    to_rts(s, kRetryCnt, s.server ? kRnrRetry : 0);
    go(s);
    // 1. The failure: rnr's (no receive at the server, rnr_retry 0).
    std::optional<ibv_wc> failed;
    if (s.server) {
        wb::expect_token(s.conn, "AGIN", s.opt.timeout_s);  // the client failed and asks to start again
    } else {
        post(s, IBV_WR_SEND, 16);
        failed = wb::poll_any(s.send_cq.get(), s.opt.timeout_s);
        if (!failed || failed->status != IBV_WC_RNR_RETRY_EXC_ERR) {
            wb::send_token(s.conn, "DONE");
            wb::result_error(std::string("recover: expected ") + wb::wc_status_text(IBV_WC_RNR_RETRY_EXC_ERR) + ", got " +
                             (failed ? wb::wc_status_text(failed->status) : "no completion"));
        }
        print_completion(s, *failed);
        print_async_events(s, 100);
        // 2. Drain: every other completion of the broken QP (here none) is a flush.
        while (const std::optional<ibv_wc> wc = wb::poll_any(s.send_cq.get(), 0)) print_completion(s, *wc);
        wb::send_token(s.conn, "AGIN");
    }
    print_state(s, "after the error");
    // 3. Any state -> RESET: the QP forgets its PSNs and its peer; posted WRs are gone.
    ibv_qp_attr reset = {.qp_state = IBV_QPS_RESET};
    CHECK_RC(ibv_modify_qp(s.qp.get(), &reset, IBV_QP_STATE));
    print_state(s, "-> RESET");
    wb::qp_to_init(s.qp.get(), s.addr, 0);
    print_state(s, "-> INIT");
    post_receive(s, 16);  // this time, before the exchange (lesson 4)
    exchange(s);          // 4. fresh PSNs: the old ones are not safe to reuse
    CHECK_RC(to_rtr(s, common_mtu(s), kMinRnrTimer));
    print_state(s, "-> RTR");
    to_rts(s, kRetryCnt, kRnrRetry);
    print_state(s, "-> RTS");
    go(s);
    // 5. Lesson 4's sum on the recovered QP.
    if (s.server) {
        const std::optional<ibv_wc> wc = wb::poll_any(s.recv_cq.get(), s.opt.timeout_s);
        if (!wc) wb::fail("no request within " + std::to_string(s.opt.timeout_s) + " s");
        wb::check_wc(*wc, "the client's request (RECV)");
        const wb::SumAnswer answer = wb::answer_sum_request(s.buf.get(), wc->byte_len);
        std::memcpy(s.buf.get() + kSendOffset, &answer.response, sizeof answer.response);
        post(s, IBV_WR_SEND, sizeof answer.response, 0, kSendOffset);
        wb::poll_one(s.send_cq.get(), s.opt.timeout_s, "the SEND of the response", s.conn);
        wb::expect_token(s.conn, "DONE", s.opt.timeout_s);
        print_counters(s);
        if (!answer.error.empty()) wb::result_error("recover: " + answer.error);
        std::printf("result: server: recover: after RESET -> INIT -> RTR -> RTS, %" PRId64 " + %" PRId64
                    " = %" PRId64 "\n", answer.a, answer.b, answer.sum);
        return 0;
    }
    const wb::SumRequest request = wb::make_sum_request(2, 3);
    std::memcpy(s.buf.get() + kSendOffset, &request, sizeof request);
    post(s, IBV_WR_SEND, sizeof request, 0, kSendOffset);
    wb::poll_one(s.send_cq.get(), s.opt.timeout_s, "the SEND of the request", s.conn);
    const ibv_wc wc = wb::poll_one(s.recv_cq.get(), s.opt.timeout_s, "the server's response (RECV)", s.conn);
    const wb::SumResult r = wb::read_sum_response(s.buf.get(), wc.byte_len, 2, 3);
    print_counters(s);
    wb::send_token(s.conn, "DONE");
    if (!r.error.empty()) wb::result_error("recover: " + r.error);
    std::printf("result: recover: %s, as expected, then ERR -> RESET -> INIT -> RTR -> RTS and 2 + 3 = %" PRId64 "\n",
                wb::wc_status_text(failed->status).c_str(), r.sum);
    return 0;
}

struct Scenario {
    const char* name;
    const char* breaks;  // one line for --list
    int (*play)(Side&);  // both sides: the server's part and the client's
};
constexpr Scenario kScenarios[] = {
    {"rnr", "the server posts no receive; the client's rnr_retry is 0", rnr},
    {"rnr-wait", "the server posts its receive 1 s late; rnr_retry 7 waits (min_rnr_timer 12, then 0)", rnr_wait},
    {"rem-access", "an RDMA WRITE into an MR registered for REMOTE_READ only", rem_access},
    {"qp-access", "an RDMA READ at a QP whose qp_access_flags lack REMOTE_READ", qp_access},
    {"len", "a 64-byte SEND into a 16-byte receive", len},
    {"retry", "the server's QP stays in INIT: nothing ever answers", retry},
    {"flush", "WRITE with a wrong rkey, then two SENDs: one error, two flushes", flush},
    {"mtu", "the client's path MTU is 4096 on a 1500-byte link", mtu},
    {"gid", "the client's GID is IPv6 link-local, the server's IPv4-mapped", gid},
    {"recover", "rnr's error, then ERR -> RESET -> INIT -> RTR -> RTS and a good sum", recover},
};

const Scenario* find_scenario(const std::string& name) {
    for (const Scenario& sc : kScenarios)
        if (name == sc.name) return &sc;
    return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
    std::string list_flag;
    const wb::ExtraOption extra[] = {
        {'l', "list", nullptr, "list the scenarios, one line each, and exit", &list_flag},
    };
    const wb::Usage usage = {
        .synopsis = "[options]                server: plays its side of the client's scenario\n"
                    "  lesson10 [options] HOST SCENARIO  client: make SCENARIO's failure happen\n"
                    "  lesson10 --list                   the scenarios",
        .summary = "when RDMA fails: each classic error made on purpose, on both sides, and recovered from",
        .notes = "SCENARIO: rnr rnr-wait rem-access qp-access len retry flush mtu gid recover.\n"
                 "The client exits 0 when the failure happened as the lesson teaches, 1 when not.",
    };
    Side s;
    s.opt = wb::parse_options(argc, argv, usage, extra);
    if (s.opt.given('l')) {
        if (!s.opt.args.empty()) wb::usage_error("--list takes no HOST or SCENARIO");
        for (const Scenario& sc : kScenarios) std::printf("%-11s %s\n", sc.name, sc.breaks);
        return 0;
    }
    s.server = s.opt.args.empty();
    s.who = s.server ? "server" : "client";
    const Scenario* scenario = nullptr;
    if (!s.server) {
        if (s.opt.args.size() != 2)
            wb::usage_error("a client needs HOST SCENARIO, got " + std::to_string(s.opt.args.size()) + " argument(s)");
        scenario = find_scenario(s.opt.args[1]);
        if (!scenario)
            wb::usage_error("unknown scenario '" + wb::printable(s.opt.args[1].data(), s.opt.args[1].size()) +
                            "' (lesson10 --list shows them)");
    }

    // 1. Device, port and address (lesson 1), and the counters as they are now.
    s.ctx = wb::open_device(s.opt.device);
    s.addr = wb::choose_address(s.ctx.get(), s.opt.ib_port, s.opt.gid_index);
    wb::print_address(ibv_get_device_name(s.ctx->device), s.addr);
    s.counters.emplace(s.ctx.get(), s.addr.port);

    // 2. PD, CQs (4 entries: flush's three WRs and more), an RC QP, a buffer.
    s.pd.reset(CHECK_PTR(ibv_alloc_pd(s.ctx.get())));
    s.send_cq.reset(CHECK_PTR(ibv_create_cq(s.ctx.get(), 4, nullptr, nullptr, 0)));
    s.recv_cq.reset(CHECK_PTR(ibv_create_cq(s.ctx.get(), 4, nullptr, nullptr, 0)));
    ibv_qp_init_attr qp_attr = {
        .send_cq = s.send_cq.get(),
        .recv_cq = s.recv_cq.get(),
        .cap = {.max_send_wr = 3, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    s.qp.reset(CHECK_PTR(ibv_create_qp(s.pd.get(), &qp_attr)));
    s.buf = wb::alloc_buffer(kBufferBytes);

    // 3. The TCP connection, and the scenario's name on it: 16 bytes, NUL-padded.
    std::array<uint8_t, kNameBytes> name{};
    if (s.server) {
        wb::Listener listener(s.opt.tcp_port);
        std::printf("server: waiting for a client on TCP port %u\n", s.opt.tcp_port);
        s.conn = listener.accept(s.opt.accept_timeout_s());
        if (!wb::recv_exact(s.conn, name, s.opt.timeout_s))
            wb::fail("the client " + s.conn.peer() + " closed the connection before naming a scenario");
        const size_t n = strnlen(reinterpret_cast<const char*>(name.data()), kNameBytes);
        scenario = find_scenario(std::string(reinterpret_cast<const char*>(name.data()), n));
        if (!scenario)
            wb::fail("the client " + s.conn.peer() + " asked for scenario \"" +
                         wb::printable(reinterpret_cast<const char*>(name.data()), n) + "\", which this server does not know",
                     "is it a lesson10 client of the same version?");
    } else {
        s.conn = wb::connect_to(s.opt.args[0], s.opt.tcp_port, s.opt.timeout_s);
        std::memcpy(name.data(), scenario->name, std::strlen(scenario->name));
        wb::send_all(s.conn, name);
    }
    std::printf("%s: scenario %s: %s\n", s.who, scenario->name, scenario->breaks);

    // 4. The scenario: both sides' parts, in one function each.
    return scenario->play(s);
}

namespace {

// --- the plumbing: connecting, posting, and how each side ends and reports ------

void register_buffer(Side& s, int access) {
    s.mr.reset(CHECK_PTR(ibv_reg_mr(s.pd.get(), s.buf.get(), kBufferBytes, access),
                         "ulimit -l: is locked memory limited? (make doctor checks this)"));
}

void exchange(Side& s) {
    s.psn = wb::random_psn();
    wb::PeerInfo me = wb::local_info(kLesson, s.qp.get(), s.psn, s.addr);
    me.addr = reinterpret_cast<uintptr_t>(s.buf.get());
    me.length = kBufferBytes;
    me.rkey = s.mr->rkey;
    s.peer = wb::exchange(s.conn, me, s.opt.timeout_s);
    std::printf("%s: peer %s is QP 0x%x, first PSN %u\n", s.who, s.conn.peer().c_str(), s.peer.qp_num, s.peer.psn);
}

void go(Side& s) {
    if (s.server) wb::send_token(s.conn, "RTR!");
    else wb::expect_token(s.conn, "RTR!", s.opt.timeout_s);
}

void post_receive(Side& s, uint32_t length) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(s.mr->addr), .length = length, .lkey = s.mr->lkey};
    ibv_recv_wr wr = {.wr_id = kRecvId, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(s.qp.get(), &wr, &bad));
}

// One signaled work request of `length` bytes from our buffer, at `offset`
// in it; an RDMA WRITE or READ targets the peer's buffer with `rkey`.
void post(Side& s, ibv_wr_opcode opcode, uint32_t length, uint32_t rkey, uint32_t offset) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(s.buf.get() + offset), .length = length, .lkey = s.mr->lkey};
    ibv_send_wr wr = {
        .wr_id = kSendId,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = opcode,
        .send_flags = IBV_SEND_SIGNALED,
        .wr = {.rdma = {.remote_addr = s.peer.addr, .rkey = rkey}},  // ignored by a SEND
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(s.qp.get(), &wr, &bad));
    s.posted = Clock::now();
}

// The client: wait for its one completion, compare it with what the lesson
// teaches, tell the server "DONE", and print the result line (with the time
// the completion took, when `timed`).
int client_expects(Side& s, const char* scenario, ibv_wc_status expected, const std::string& why, bool timed) {
    const std::optional<ibv_wc> wc = wb::poll_any(s.send_cq.get(), s.opt.timeout_s);
    const double took = seconds_since(s.posted);
    if (wc) print_completion(s, *wc);
    std::printf("client: %.3f s after the post; our QP is %s\n", took,
                wb::qp_state_name(wb::query_state(s.qp.get())));
    print_async_events(s, 100);
    print_counters(s);
    wb::send_token(s.conn, "DONE");
    if (!wc)
        wb::result_error(std::string(scenario) + ": expected " + wb::wc_status_text(expected) + ", got no completion within " +
                         std::to_string(s.opt.timeout_s) + " s");
    if (wc->status != expected)
        wb::result_error(std::string(scenario) + ": expected " + wb::wc_status_text(expected) + ", got " +
                         wb::wc_status_text(wc->status));
    std::printf("result: %s: %s, as expected: %s", scenario, wb::wc_status_text(expected).c_str(), why.c_str());
    if (timed) std::printf("; it took %.2f s", took);
    std::printf("\n");
    return 0;
}

// The server: wait for the client's "DONE", then report every completion
// its CQs hold, its QP's state, async events and counters.
int server_reports(Side& s, const char* scenario, std::string seen) {
    wb::expect_token(s.conn, "DONE", s.opt.timeout_s);
    for (ibv_cq* cq : {s.recv_cq.get(), s.send_cq.get()}) {
        while (const std::optional<ibv_wc> wc = wb::poll_any(cq, 0)) {
            print_completion(s, *wc);
            seen += (seen.empty() ? "" : ", ") + wb::wc_status_text(wc->status);
        }
    }
    const ibv_qp_state state = wb::query_state(s.qp.get());
    print_async_events(s, 100);
    print_counters(s);
    std::printf("result: server: %s: %s; our QP is %s\n", scenario,
                seen.empty() ? "no completion" : ("completions " + seen).c_str(), wb::qp_state_name(state));
    return 0;
}

// --- what a failure leaves behind -----------------------------------------------

void print_completion(const Side& s, const ibv_wc& wc) {
    if (wc.status == IBV_WC_SUCCESS)
        std::printf("%s: completion wr_id %" PRIu64 " %s, %u bytes, IBV_WC_SUCCESS\n", s.who, wc.wr_id,
                    wb::wc_opcode_str(wc.opcode), wc.byte_len);
    else  // opcode and byte_len are not valid in a failed completion
        std::printf("%s: completion wr_id %" PRIu64 " %s: %s, vendor_err 0x%x\n", s.who, wc.wr_id,
                    wb::wc_status_text(wc.status).c_str(), ibv_wc_status_str(wc.status), wc.vendor_err);
}

// Errors that no completion reports (a QP the responder put in ERR, a CQ
// overrun, a port going down) arrive as asynchronous events on the device's
// async_fd. ibv_get_async_event blocks, so we make the fd non-blocking and
// wait for it with poll(), at most `ms` milliseconds.
void print_async_events(const Side& s, int ms) {
    const int fd = s.ctx->async_fd;
    CHECK_ERRNO(fcntl(fd, F_SETFL, CHECK_ERRNO(fcntl(fd, F_GETFL)) | O_NONBLOCK));
    int seen = 0;
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    while (CHECK_ERRNO(poll(&p, 1, seen ? 0 : ms)) == 1) {
        ibv_async_event ev;
        if (ibv_get_async_event(s.ctx.get(), &ev) == -1) {
            if (errno == EAGAIN) break;  // poll() saw the fd readable, but another reader took the event
            wb::fail("ibv_get_async_event(s.ctx.get(), &ev) failed: " + wb::errno_str(errno));
        }
        std::printf("%s: async event %s (%d)\n", s.who, ibv_event_type_str(ev.event_type), ev.event_type);
        ibv_ack_async_event(&ev);  // every event must be acked, or destroying its QP/CQ hangs
        ++seen;
    }
    if (!seen) std::printf("%s: no async event within %d ms\n", s.who, ms);
}

void print_counters(const Side& s) {
    std::printf("%s: port counters that moved: %s\n", s.who, s.counters->moved_list().c_str());
}

void print_state(const Side& s, const char* step) {
    std::printf("%s: %-14s QP is %s\n", s.who, step, wb::qp_state_name(wb::query_state(s.qp.get())));
}

}  // namespace
