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
//         min_rnr_timer, path_mtu (RTR): failures.hpp's Knobs and connect_qp(); here,
//         min_rnr_timer changed in RTS (rnr-wait), a QP moved to ERR (mtu), an RTR
//         that fails (gid), and ERR -> RESET -> INIT -> RTR -> RTS (recover)
//     ibv_get_async_event / ibv_ack_async_event on ctx->async_fd, bounded with poll()
//         (failures.hpp's print_async_events, which both programs call)
//     the port's counters: /sys/class/infiniband/DEV/ports/N/hw_counters/* (wb::PortCounters)
// Verbs from earlier lessons, called in failures.hpp: ibv_alloc_pd, ibv_create_cq,
//     ibv_create_qp (run), ibv_reg_mr (register_buffer), ibv_post_recv, ibv_post_send;
//     here: ibv_query_gid_ex (lesson 1; gid takes a GID of the other family);
//     through common/: ibv_poll_cq (wb::try_poll, wb::poll_completion, wb::poll_success),
//     ibv_query_qp (wb::query_state), RESET -> INIT (wb::qp_to_init, lesson 3)
//
// The file reads: the scenarios, each with THE MISTAKE marked, then main.
// main hands them to failures.hpp's run() (steps 1 to 4: the device, PD,
// CQs and QP; the TCP connection; the scenario), which both programs share.
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
#include "device.hpp"
#include "exchange.hpp"
#include "failures.hpp"
#include "options.hpp"
#include "qp.hpp"
#include "sum_protocol.hpp"

namespace {

using namespace failures;  // Side, Knobs, connect_qp and the rest: failures.hpp

// --- the scenarios: each plays both sides ---------------------------------------
// Each registers its MR and connects (failures.hpp's connect_qp, lesson 4's
// steps) with THE MISTAKE in the knobs it turns; then the client posts and
// checks the completion, and the server reports what its side saw.

// rnr: a SEND finds no receive posted, and the sender accepts no RNR NAK.
int rnr(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);  // SEND/RECV only: no remote access
    Knobs k;
    k.receives = 0;                  // THE MISTAKE: the server posts no receive (lesson 4 posts one)...
    if (!s.server) k.rnr_retry = 0;  // ...and the client gives up at the first RNR NAK
    connect_qp(s, k);
    if (s.server) return server_reports(s, "rnr");
    post(s, IBV_WR_SEND, 16);
    return client_expects(s, "rnr", IBV_WC_RNR_RETRY_EXC_ERR,
                          "the server had no receive posted, its NIC answered RNR NAK, and rnr_retry 0 gives up at once");
}

// rnr-wait's server, one round: with min_rnr_timer `timer`, its receive
// comes a second after the client's SEND. Returns the RECV's status.
std::string late_receive(Side& s, uint8_t timer) {
    if (timer != kMinRnrTimer) {
        // The RNR timer may change in RTS (RTS -> RTS, IBV_QP_MIN_RNR_TIMER).
        ibv_qp_attr attr = {.qp_state = IBV_QPS_RTS, .min_rnr_timer = timer};
        CHECK_RC(ibv_modify_qp(s.qp, &attr, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER));
        wb::send_token(s.conn, "NEXT");
    }
    wb::expect_token(s.conn, "SENT", s.opt.timeout_s);
    std::printf("server: min_rnr_timer %u; the client's SEND is posted: posting the receive in 1 s\n", timer);
    std::this_thread::sleep_for(std::chrono::seconds(1));  // THE MISTAKE: a receive posted late
    post_receive(s, 16);
    const ibv_wc wc = wb::poll_completion(s.recv_cq, s.opt.timeout_s, "the late RECV");
    print_completion(s, wc);
    return wb::wc_status_text(wc.status);
}

// rnr-wait's client, one round: the SEND, and how long it took to land and
// how many RNR NAKs came back meanwhile (rcvd_rnr_err).
std::string timed_send(Side& s, uint8_t timer) {
    if (timer != kMinRnrTimer) wb::expect_token(s.conn, "NEXT", s.opt.timeout_s);
    const uint64_t naks_before = s.counters.moved("rcvd_rnr_err");
    post(s, IBV_WR_SEND, 16);
    wb::send_token(s.conn, "SENT");
    const std::optional<ibv_wc> wc = wb::try_poll(s.send_cq, s.opt.timeout_s);
    const double secs = seconds_since(s.posted);
    const uint64_t naks = s.counters.moved("rcvd_rnr_err") - naks_before;
    require(s, "rnr-wait", wc, IBV_WC_SUCCESS);
    print_completion(s, *wc);
    std::printf("client: the SEND completed %.3f s after the post, after %" PRIu64 " RNR NAKs (rcvd_rnr_err)\n", secs,
                naks);
    char line[96];
    std::snprintf(line, sizeof line, "%.2f s and %" PRIu64 " RNR NAKs with min_rnr_timer %u", secs, naks, timer);
    return line;
}

// rnr-wait: the receive comes a second late, and rnr_retry 7 waits for it:
// no error, a stall. Twice: with min_rnr_timer 12 (0.64 ms) and 0 (655 ms).
int rnr_wait(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    // rnr_retry 7 waits for ever; retry_cnt must be 7 too on rxe, whose ACK
    // timer keeps running during RNR waits and spends retry_cnt: with 6 the
    // SEND would end in IBV_WC_RETRY_EXC_ERR after about 0.65 s.
    connect_qp(s, {.retry_cnt = 7, .rnr_retry = 7});
    std::string seen;  // the server's two RECVs, or the client's two waits
    for (const uint8_t timer : {kMinRnrTimer, uint8_t{0}}) {
        if (!seen.empty()) seen += s.server ? ", " : "; ";
        seen += s.server ? late_receive(s, timer) : timed_send(s, timer);
    }
    if (s.server) return server_reports(s, "rnr-wait", seen);
    print_counters(s);
    wb::send_token(s.conn, "DONE");
    std::printf("result: rnr-wait: %s, as expected: both SENDs landed late, no error: %s\n",
                wb::wc_status_text(IBV_WC_SUCCESS).c_str(), seen.c_str());
    return 0;
}

// retry: the server's QP never reaches RTR, so it drops every packet in silence.
int retry(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    Knobs k;
    if (s.server) {
        k.receives = 1;          // a receive is there: this is not rnr
        k.up_to = IBV_QPS_INIT;  // THE MISTAKE: the server says RTR! while its QP is still in INIT
    }
    connect_qp(s, k);
    if (s.server) return server_reports(s, "retry");
    post(s, IBV_WR_SEND, 16);
    // Each try waits for the ACK timeout: 4.096 us x 2^timeout; retry_cnt resends after the first.
    const double each = 4.096e-6 * std::pow(2.0, k.timeout), predicted = (k.retry_cnt + 1) * each;
    char why[160];
    std::snprintf(why, sizeof why, "nothing answered: %d tries x %.0f ms (timeout %u, retry_cnt %u) predict %.2f s",
                  k.retry_cnt + 1, each * 1e3, k.timeout, k.retry_cnt, predicted);
    return client_expects(s, "retry", IBV_WC_RETRY_EXC_ERR, why, true);
}

// mtu across two hosts: the 4000-byte packet does not fit the link, rxe's
// every attempt to send it fails (send_err), and it tries again, for ever: no
// completion, no retry_cnt. We wait 2 s, then move the QP to ERR ourselves,
// which flushes the stuck SEND: that is how a program gets its WRs back.
void flush_the_stuck_send(Side& s) {
    if (const std::optional<ibv_wc> early = wb::try_poll(s.send_cq, 2)) {
        print_completion(s, *early);
        wb::send_token(s.conn, "DONE");
        wb::result_error("mtu: expected no completion within 2 s, got " + wb::wc_status_text(early->status));
    }
    std::printf("client: no completion after %.1f s; send_err +%" PRIu64 "; moving our QP to ERR\n",
                seconds_since(s.posted), s.counters.moved("send_err"));
    ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
    CHECK_RC(ibv_modify_qp(s.qp, &err, IBV_QP_STATE));
}

// mtu: the client's path MTU is 4096, larger than its 1500-byte link carries.
int mtu(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    Knobs k;
    if (s.server) k = {.receives = 1, .receive_bytes = kBufferBytes};
    else k.path_mtu = IBV_MTU_4096;  // THE MISTAKE, on the client: whatever the ports say
    connect_qp(s, k);
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
    flush_the_stuck_send(s);
    return client_expects(s, "mtu", IBV_WC_WR_FLUSH_ERR,
                          "the 4000-byte packet never fit the 1500-byte link; rxe retried it for ever (send_err) "
                          "until we moved the QP to ERR, which flushed it");
}

// gid's client: a RoCE v2 GID of the other family than the one it has (IPv6
// when it is IPv4-mapped, IPv4-mapped when it is IPv6).
void take_other_family_gid(Side& s) {
    for (int i = 0; i < s.addr.attr.gid_tbl_len; ++i) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(s.ctx, s.addr.port, i, &e, 0) != 0 || e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
        if (wb::gid_is_zero(e.gid) || wb::gid_is_ipv4_mapped(e.gid) == wb::gid_is_ipv4_mapped(s.addr.gid)) continue;
        s.addr = wb::choose_address(s.ctx, s.addr.port, i);
        std::printf("client: using GID index %d %s instead\n", i, wb::gid_to_string(s.addr.gid).c_str());
        return;
    }
    wb::fail("this port has no RoCE v2 GID of the other family", "ibv_devinfo -v lists the GIDs");
}

// gid: the client picks a GID of the other family (IPv6 link-local against
// the server's IPv4-mapped one): INIT -> RTR fails on both sides.
int gid(Side& s) {
    if (!s.server) take_other_family_gid(s);  // THE MISTAKE, on the client: the other kind of GID
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    // connect_qp's first steps, by hand: RTR is where this one fails, on both sides.
    wb::qp_to_init(s.qp, s.addr, 0);
    exchange(s);
    ibv_qp_attr rtr = rtr_attr(s, Knobs{});
    const int rc = ibv_modify_qp(s.qp, &rtr, kToRtr);  // its failure is the lesson: checked below
    const int err = rc > 0 ? rc : errno;
    const std::string outcome = rc == 0 ? "ok" : wb::errno_str(err);
    std::printf("%s: ibv_modify_qp(INIT -> RTR) from %s to %s: %s\n", s.who, wb::gid_to_string(s.addr.gid).c_str(),
                wb::gid_to_string(s.peer.gid).c_str(), outcome.c_str());
    print_counters(s);
    if (s.server) {  // no "RTR!": neither QP got there. The client ends, the server follows.
        wb::expect_token(s.conn, "DONE", s.opt.timeout_s);
        std::printf("result: server: gid: INIT -> RTR %s; our QP is %s\n",
                    rc == 0 ? "succeeded" : ("failed with " + outcome).c_str(), wb::qp_state_name(wb::query_state(s.qp)));
        return 0;
    }
    wb::send_token(s.conn, "DONE");
    if (rc == 0 || err != EINVAL)
        wb::result_error("gid: expected EINVAL from ibv_modify_qp(INIT -> RTR), got " + (rc == 0 ? "success" : outcome));
    std::printf("result: gid: EINVAL from ibv_modify_qp(INIT -> RTR), as expected: no completion at all; "
                "an IPv6 GID cannot route to an IPv4-mapped one: give both sides the same kind (-g)\n");
    return 0;
}

// recover's messages: the receive owns the buffer's first bytes, what we send starts here.
constexpr uint32_t kSendOffset = 64;

// recover's client, step 2: the SEND fails as in rnr; every other completion
// of the broken QP (here none) is a flush; then ask the server to start again.
ibv_wc fail_as_rnr_does(Side& s) {
    post(s, IBV_WR_SEND, 16);
    const std::optional<ibv_wc> failed = wb::try_poll(s.send_cq, s.opt.timeout_s);
    require(s, "recover", failed, IBV_WC_RNR_RETRY_EXC_ERR);
    print_completion(s, *failed);
    print_async_events(s, 100);
    while (const std::optional<ibv_wc> wc = wb::try_poll(s.send_cq, 0)) print_completion(s, *wc);
    wb::send_token(s.conn, "AGIN");
    return *failed;
}

// recover's server, step 5: lesson 4's sum, answered on the recovered QP.
int serve_sum(Side& s) {
    const ibv_wc wc = wb::poll_completion(s.recv_cq, s.opt.timeout_s, "the client's request (RECV)");
    wb::check_wc(wc, "the client's request (RECV)");
    const wb::SumAnswer answer = wb::answer_sum_request(s.buf, wc.byte_len);
    std::memcpy(s.buf + kSendOffset, &answer.response, sizeof answer.response);
    post(s, IBV_WR_SEND, sizeof answer.response, 0, kSendOffset);
    wb::poll_success(s.send_cq, s.opt.timeout_s, "the SEND of the response", s.conn);
    wb::expect_token(s.conn, "DONE", s.opt.timeout_s);
    print_counters(s);
    if (!answer.error.empty()) wb::result_error("recover: " + answer.error);
    std::printf("result: server: recover: after RESET -> INIT -> RTR -> RTS, %" PRId64 " + %" PRId64 " = %" PRId64 "\n",
                answer.a, answer.b, answer.sum);
    return 0;
}

// recover's client, step 5: lesson 4's 2 + 3, asked on the recovered QP.
int ask_sum(Side& s, const ibv_wc& failed) {
    const wb::SumRequest request = wb::make_sum_request(2, 3);
    std::memcpy(s.buf + kSendOffset, &request, sizeof request);
    post(s, IBV_WR_SEND, sizeof request, 0, kSendOffset);
    wb::poll_success(s.send_cq, s.opt.timeout_s, "the SEND of the request", s.conn);
    const ibv_wc wc = wb::poll_success(s.recv_cq, s.opt.timeout_s, "the server's response (RECV)", s.conn);
    const wb::SumResult r = wb::read_sum_response(s.buf, wc.byte_len, 2, 3);
    print_counters(s);
    wb::send_token(s.conn, "DONE");
    if (!r.error.empty()) wb::result_error("recover: " + r.error);
    std::printf("result: recover: %s, as expected, then ERR -> RESET -> INIT -> RTR -> RTS and 2 + 3 = %" PRId64 "\n",
                wb::wc_status_text(failed.status).c_str(), r.sum);
    return 0;
}

// recover: after rnr's failure, drain the CQ, take the QP round through RESET
// with fresh PSNs on both sides, and add 2 + 3 (lesson 4) on it.
int recover(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    // 1. THE MISTAKE, rnr's: no receive at the server, rnr_retry 0 at the client.
    Knobs k;
    if (!s.server) k.rnr_retry = 0;
    connect_qp(s, k);
    // 2. The failure, at the client, which then asks the server to start again.
    ibv_wc failed{};
    if (s.server) wb::expect_token(s.conn, "AGIN", s.opt.timeout_s);
    else failed = fail_as_rnr_does(s);
    print_state(s, "after the error");
    // 3. Any state -> RESET: the QP forgets its PSNs and its peer; posted WRs are gone.
    ibv_qp_attr reset = {.qp_state = IBV_QPS_RESET};
    CHECK_RC(ibv_modify_qp(s.qp, &reset, IBV_QP_STATE));
    print_state(s, "-> RESET");
    // 4. Connected again, a receive posted on each side this time (lesson 4),
    //    and fresh PSNs in the exchange: the old ones are not safe to reuse.
    connect_qp(s, {.receives = 1, .print_states = true});
    // 5. Lesson 4's sum on the recovered QP.
    return s.server ? serve_sum(s) : ask_sum(s, failed);
}

constexpr Scenario kScenarios[] = {
    {"rnr", "the server posts no receive; the client's rnr_retry is 0", rnr},
    {"rnr-wait", "the server posts its receive 1 s late; rnr_retry 7 waits (min_rnr_timer 12, then 0)", rnr_wait},
    {"retry", "the server's QP stays in INIT: nothing ever answers", retry},
    {"mtu", "the client's path MTU is 4096 on a 1500-byte link", mtu},
    {"gid", "the client's GID is IPv6 link-local, the server's IPv4-mapped", gid},
    {"recover", "rnr's error, then ERR -> RESET -> INIT -> RTR -> RTS and a good sum", recover},
};

constexpr Program kProgram = {
    .summary = "when RDMA fails: the QP's knobs turned wrong, on both sides, and a QP recovered",
    .scenarios = kScenarios,
    .sibling = "lesson10_nak",
    .sibling_plays = "rem-access qp-access len flush",
};

}  // namespace

int main(int argc, char** argv) {
    // failures.hpp's run(): the command line, then steps 1 to 4 (device, PD,
    // CQs, QP; the TCP connection; the scenario, one of kScenarios above).
    return failures::run(argc, argv, kProgram);
}
