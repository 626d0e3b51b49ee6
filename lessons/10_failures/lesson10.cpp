// lesson10.cpp - when RDMA fails: the QP's knobs turned wrong, one scenario each, and a QP recovered.
//
// Lessons 4 to 9 avoid every mistake. This one makes them, one per scenario,
// for real: the client names a scenario, the server plays its side of it, and
// each side prints what its completion queue says, the QP's state, the
// asynchronous events, and the port counters that moved. The client's last
// line is
//     result: SCENARIO: IBV_WC_<ENUM> (<number>), as expected: why
// and it exits 0 when the failure happened as taught, 1 (saying what happened
// instead) when it did not. The server's last line is "result: server: ...".
// This program's scenarios turn the knobs of ibv_modify_qp wrong (rnr_retry,
// min_rnr_timer, retry_cnt, path_mtu, the GID) and bring a QP back from ERR;
// the lesson's second program, lesson10_nak.cpp, has the responder refuse
// requests (MR and QP access, a receive too short, a wrong rkey).
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
//         (failures.hpp's print_async_events, which both programs call)
//     the port's counters: /sys/class/infiniband/DEV/ports/N/hw_counters/* (wb::PortCounters)
//
// The file reads: the knobs (to_rtr, to_rts), the scenarios, main; the
// plumbing both programs share (posting, the exchange, how each side ends)
// is failures.hpp, beside this file.
//
// Read more: man ibv_poll_cq (the status list), man ibv_modify_qp,
// man ibv_get_async_event; docs/lesson10-failures.md (what now? table, the
// wire of each failure, the fixes, exercises).
#include <infiniband/verbs.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "failures.hpp"
#include "options.hpp"
#include "sum_protocol.hpp"

namespace {

using namespace failures;  // Side, Scenario and the plumbing: failures.hpp

// --- the knobs the failures turn: the QP's transitions, by hand -------------------

// INIT -> RTR, as common/qp.cpp's qp_to_rtr does, but with the two
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

// --- the scenarios: each plays both sides ---------------------------------------
// Completions are waited for with wb::poll_completion (common/completion.hpp): where
// lessons 4 to 9's wb::poll_success exits on a failed completion, it returns it,
// since here failure is the point.

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
            const std::optional<ibv_wc> wc = wb::try_poll(s.recv_cq.get(), s.opt.timeout_s);
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
        const std::optional<ibv_wc> wc = wb::try_poll(s.send_cq.get(), s.opt.timeout_s);
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
    if (const std::optional<ibv_wc> early = wb::try_poll(s.send_cq.get(), 2)) {
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
        failed = wb::try_poll(s.send_cq.get(), s.opt.timeout_s);
        if (!failed || failed->status != IBV_WC_RNR_RETRY_EXC_ERR) {
            wb::send_token(s.conn, "DONE");
            wb::result_error(std::string("recover: expected ") + wb::wc_status_text(IBV_WC_RNR_RETRY_EXC_ERR) + ", got " +
                             (failed ? wb::wc_status_text(failed->status) : "no completion"));
        }
        print_completion(s, *failed);
        print_async_events(s, 100);
        // 2. Drain: every other completion of the broken QP (here none) is a flush.
        while (const std::optional<ibv_wc> wc = wb::try_poll(s.send_cq.get(), 0)) print_completion(s, *wc);
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
        const std::optional<ibv_wc> wc = wb::try_poll(s.recv_cq.get(), s.opt.timeout_s);
        if (!wc) wb::fail("no request within " + std::to_string(s.opt.timeout_s) + " s");
        wb::check_wc(*wc, "the client's request (RECV)");
        const wb::SumAnswer answer = wb::answer_sum_request(s.buf.get(), wc->byte_len);
        std::memcpy(s.buf.get() + kSendOffset, &answer.response, sizeof answer.response);
        post(s, IBV_WR_SEND, sizeof answer.response, 0, kSendOffset);
        wb::poll_success(s.send_cq.get(), s.opt.timeout_s, "the SEND of the response", s.conn);
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
    wb::poll_success(s.send_cq.get(), s.opt.timeout_s, "the SEND of the request", s.conn);
    const ibv_wc wc = wb::poll_success(s.recv_cq.get(), s.opt.timeout_s, "the server's response (RECV)", s.conn);
    const wb::SumResult r = wb::read_sum_response(s.buf.get(), wc.byte_len, 2, 3);
    print_counters(s);
    wb::send_token(s.conn, "DONE");
    if (!r.error.empty()) wb::result_error("recover: " + r.error);
    std::printf("result: recover: %s, as expected, then ERR -> RESET -> INIT -> RTR -> RTS and 2 + 3 = %" PRId64 "\n",
                wb::wc_status_text(failed->status).c_str(), r.sum);
    return 0;
}

constexpr Scenario kScenarios[] = {
    {"rnr", "the server posts no receive; the client's rnr_retry is 0", rnr},
    {"rnr-wait", "the server posts its receive 1 s late; rnr_retry 7 waits (min_rnr_timer 12, then 0)", rnr_wait},
    {"retry", "the server's QP stays in INIT: nothing ever answers", retry},
    {"mtu", "the client's path MTU is 4096 on a 1500-byte link", mtu},
    {"gid", "the client's GID is IPv6 link-local, the server's IPv4-mapped", gid},
    {"recover", "rnr's error, then ERR -> RESET -> INIT -> RTR -> RTS and a good sum", recover},
};
constexpr const char* kOtherProgram = "lesson10_nak";  // the lesson's other program plays the other scenarios

}  // namespace

int main(int argc, char** argv) {
    const wb::Usage usage = {
        .synopsis = "[options]                server: plays its side of the client's scenario\n"
                    "  lesson10 [options] HOST SCENARIO  client: make SCENARIO's failure happen\n"
                    "  lesson10 --list                   the scenarios",
        .summary = "when RDMA fails: the QP's knobs turned wrong, on both sides, and a QP recovered",
        .notes = "SCENARIO: rnr rnr-wait retry mtu gid recover (lesson10_nak plays rem-access qp-access len flush).\n"
                 "The client exits 0 when the failure happened as the lesson teaches, 1 when not.",
    };
    Side s;
    const Scenario* scenario = parse_command_line(s, argc, argv, usage, kScenarios, kOtherProgram);

    // 1. Device, port and address (lesson 1), and the counters as they are now.
    // 2. PD, CQs, an RC QP, a buffer (lesson 4; failures.hpp).
    open_side(s);

    // 3. The TCP connection, and the scenario's name on it: 16 bytes, NUL-padded.
    scenario = meet(s, kScenarios, scenario, kOtherProgram);

    // 4. The scenario: both sides' parts, in one function each.
    return scenario->play(s);
}
