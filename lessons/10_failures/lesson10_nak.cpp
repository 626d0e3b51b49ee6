// lesson10_nak.cpp - when RDMA fails: requests the responder refuses with a NAK, and the flushes after one.
//
// Lesson 10's second program (lesson10.cpp is the first: the QP's knobs turned
// wrong, and a QP recovered). It runs its scenarios the same way, with the
// same main (failures.hpp's run): the client names a scenario, the server plays
// its side of it, both print their completions, the QP's state, the async
// events and the counters that moved, and the client's last line is
//     result: SCENARIO: IBV_WC_<ENUM> (<number>), as expected: why
// (exit 0 when the failure happened as taught, 1 when not). Here the QPs are
// connected as lesson 4 connects them, with lesson 3's values (failures.hpp's
// connect_qp), and the mistake is in what the server allows or posts: its
// MR's access, its QP's access, the receive's length, or the rkey the client
// uses. The server's NIC checks each request as it arrives and answers the
// wrong one with a NAK (AETH opcode 3, its code the reason: 1 invalid
// request, 2 remote access error, 3 remote operational error); the client's
// request fails with that status, and both QPs end in ERR.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson10_nak --list                  the scenarios, one line each
//     ./lesson10_nak                         server: plays one client's scenario
//     ./lesson10_nak 127.0.0.1 rem-access    client: result: rem-access: IBV_WC_REM_ACCESS_ERR (10), ...
// On two hosts: ./lesson10_nak on host A, ./lesson10_nak A SCENARIO on host B.
// Both sides take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS.
//
// Verbs it introduces:
//     ibv_reg_mr's access flags and ibv_modify_qp's qp_access_flags, each
//         refusing an operation the other allows (failures.hpp's
//         register_buffer, and connect_qp's RESET -> INIT through
//         wb::qp_to_init, common/qp.hpp, with the access each scenario gives)
//     the receive's length against the SEND's; a list of three work requests
//         in one ibv_post_send (here, flush), the first failing and the rest flushed
// Verbs from earlier lessons: as lesson10.cpp's header lists them, in
//     failures.hpp and through common/.
//
// Read more: man ibv_poll_cq, man ibv_reg_mr, man ibv_modify_qp;
// docs/lesson10-failures.md, "lesson10_nak" (the wire of each NAK, the fixes).
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "check.hpp"
#include "completion.hpp"
#include "failures.hpp"
#include "options.hpp"

namespace {

using namespace failures;  // Side, Knobs, connect_qp and the rest: failures.hpp

// --- the scenarios: each plays both sides ---------------------------------------
// Each registers its MR and connects (failures.hpp's connect_qp, lesson 4's
// steps with lesson 3's values), with THE MISTAKE in what the server's MR or
// QP allows or what it posts; then the client posts and checks the
// completion, and the server reports what its side saw.

// rem-access: an RDMA WRITE into memory the server registered for READ only.
int rem_access(Side& s) {
    // THE MISTAKE, on the server: the MR allows REMOTE_READ, not REMOTE_WRITE.
    // The client's buffer is only the source of its WRITE: no access flag.
    register_buffer(s, s.server ? IBV_ACCESS_REMOTE_READ : 0);
    // The server's QP allows both: the MR alone refuses the WRITE.
    connect_qp(s, {.qp_access = s.server ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0});
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
    connect_qp(s, {.qp_access = 0});  // THE MISTAKE, on the server: its QP allows no remote operation at all
    if (s.server) return server_reports(s, "qp-access");
    post(s, IBV_WR_RDMA_READ, 16, s.peer.rkey);
    return client_expects(s, "qp-access", IBV_WC_REM_INV_REQ_ERR,
                          "the server's QP was not given IBV_ACCESS_REMOTE_READ (qp_access_flags), "
                          "although its MR was; its NIC answered NAK invalid request");
}

// len: a SEND larger than the receive the server posted.
int len(Side& s) {
    register_buffer(s, IBV_ACCESS_LOCAL_WRITE);
    connect_qp(s, {.receives = s.server ? 1 : 0, .receive_bytes = 16});  // THE MISTAKE: room for 16 bytes...
    if (s.server) return server_reports(s, "len");
    post(s, IBV_WR_SEND, 64);  // ...and 64 arrive
    return client_expects(s, "len", IBV_WC_REM_OP_ERR,
                          "64 bytes for a 16-byte receive: the server's receive failed (rxe: IBV_WC_LOC_QP_OP_ERR, "
                          "most NICs: IBV_WC_LOC_LEN_ERR) and its NIC answered NAK remote operational error");
}

// flush's client: three signaled WRs in one ibv_post_send, wr_id 1, 2, 3:
// an RDMA WRITE with `rkey`, then two SENDs.
void post_write_and_two_sends(Side& s, uint32_t rkey) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(s.buf), .length = 16, .lkey = s.mr->lkey};
    ibv_send_wr wrs[3] = {};
    for (int i = 0; i < 3; ++i)
        wrs[i] = {.wr_id = static_cast<uint64_t>(i + 1), .next = i < 2 ? &wrs[i + 1] : nullptr, .sg_list = &sge,
                  .num_sge = 1, .opcode = i == 0 ? IBV_WR_RDMA_WRITE : IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
                  .wr = {.rdma = {.remote_addr = s.peer.addr, .rkey = rkey}}};  // ignored by a SEND
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(s.qp, wrs, &bad));
}

// flush: three work requests, the first fails; the rest are flushed.
int flush(Side& s) {
    // The server's MR allows the WRITE (and the SENDs' receives); the client's is a source only.
    register_buffer(s, s.server ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0);
    connect_qp(s, {.qp_access = s.server ? IBV_ACCESS_REMOTE_WRITE : 0, .receives = s.server ? 2 : 0});
    if (s.server) return server_reports(s, "flush");
    post_write_and_two_sends(s, s.peer.rkey + 1);  // THE MISTAKE: + 1, not the server's rkey
    std::vector<ibv_wc> got;
    while (got.size() < 3) {
        const std::optional<ibv_wc> wc = wb::try_poll(s.send_cq, s.opt.timeout_s);
        if (!wc) break;
        print_completion(s, *wc);
        got.push_back(*wc);
    }
    print_counters(s);
    wb::send_token(s.conn, "DONE");
    if (got.size() != 3 || got[0].status != IBV_WC_REM_ACCESS_ERR || got[1].status != IBV_WC_WR_FLUSH_ERR ||
        got[2].status != IBV_WC_WR_FLUSH_ERR)
        wb::result_error("flush: expected " + wb::wc_status_text(IBV_WC_REM_ACCESS_ERR) + " then two " +
                         wb::wc_status_text(IBV_WC_WR_FLUSH_ERR) + ", got " + std::to_string(got.size()) +
                         " completions, the first " + (got.empty() ? "none" : wb::wc_status_text(got[0].status)));
    std::printf("result: flush: %s, as expected: the first error (%s, a wrong rkey) is the cause, "
                "the two flushed SENDs its echo\n",
                wb::wc_status_text(IBV_WC_WR_FLUSH_ERR).c_str(), wb::wc_status_text(IBV_WC_REM_ACCESS_ERR).c_str());
    return 0;
}

constexpr Scenario kScenarios[] = {
    {"rem-access", "an RDMA WRITE into an MR registered for REMOTE_READ only", rem_access},
    {"qp-access", "an RDMA READ at a QP whose qp_access_flags lack REMOTE_READ", qp_access},
    {"len", "a 64-byte SEND into a 16-byte receive", len},
    {"flush", "WRITE with a wrong rkey, then two SENDs: one error, two flushes", flush},
};

constexpr Program kProgram = {
    .summary = "when RDMA fails: requests the responder refuses with a NAK, on both sides",
    .scenarios = kScenarios,
    .sibling = "lesson10",
    .sibling_plays = "rnr rnr-wait retry mtu gid recover",
};

}  // namespace

int main(int argc, char** argv) {
    // failures.hpp's run(): the command line, then steps 1 to 4 (device, PD,
    // CQs, QP; the TCP connection; the scenario, one of kScenarios above).
    return failures::run(argc, argv, kProgram);
}
