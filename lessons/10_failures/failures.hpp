// failures.hpp - what lesson 10's two programs share: their main (run), the
// connection every scenario makes with its one mistake in it (connect_qp), and
// how each side posts and reports.
//
// lesson10.cpp (the QP's knobs: rnr, rnr-wait, retry, mtu, gid, recover) and
// lesson10_nak.cpp (what a responder refuses: rem-access, qp-access, len,
// flush) are one lesson in two programs. Each is a table of scenarios and a
// main that hands it to run(). Read run() first: the lesson's steps 1 to 4,
// in the order of their verbs (its command line and its step 3, meet(), come
// just before it). Then connect_qp(): the connection each scenario makes
// (INIT, receives, exchange, RTR, RTS), with the knobs (Knobs) that a
// scenario's mistake turns. Then one program's scenarios; what they call to
// post and to report is at the end of this file. It lives in the lesson's
// folder, not in common/, because no other lesson uses it.
//
// Each program is one translation unit that includes this header once, so
// its functions are defined here, inline.
#pragma once

#include <infiniband/verbs.h>

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>

#include "check.hpp"
#include "completion.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "qp.hpp"

namespace failures {

constexpr uint16_t kLesson = 10;  // sent in the exchange: lesson 10's programs talk to each other only
// The client names its scenario in the first bytes it sends on the TCP
// connection: exactly 16 bytes, the name padded with NUL bytes.
constexpr size_t kNameBytes = 16;
constexpr uint32_t kBufferBytes = 4096;  // the buffer, and every scenario's MR of it: one page
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

inline double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One side of a scenario: the objects run() created (run() owns them, and
// releases them in reverse when the scenario returns), and what the scenario
// adds to them: its MR, the TCP connection, the peer.
struct Side {
    const wb::Options& opt;
    bool server;
    const char* who;  // "server" or "client", the first word of the lines it prints
    ibv_context* ctx;
    wb::PortAddress addr;              // gid's client takes another GID
    const wb::PortCounters& counters;  // the port's hw_counters since we started
    ibv_pd* pd;
    ibv_cq* send_cq;
    ibv_cq* recv_cq;
    ibv_qp* qp;
    char* buf;  // kBufferBytes
    wb::Connection conn{};
    wb::MemoryRegion mr{};  // registered by each scenario, with the access it needs
    uint32_t psn = 0;       // our first PSN, new at each exchange
    wb::PeerInfo peer{};
    Clock::time_point posted{};  // when the last work request was posted
};

struct Scenario {
    const char* name;
    const char* breaks;  // one line for --list
    int (*play)(Side&);  // both sides: the server's part and the client's
};

// What tells the lesson's two programs apart.
struct Program {
    const char* summary;  // -h's first line
    std::span<const Scenario> scenarios;
    const char* sibling;        // the lesson's other program,
    const char* sibling_plays;  // and its scenarios
};

// --- the program: both mains are run() ---------------------------------------------

inline const Scenario* find_scenario(std::span<const Scenario> scenarios, const std::string& name) {
    for (const Scenario& sc : scenarios)
        if (name == sc.name) return &sc;
    return nullptr;
}

// The command line: no HOST, the server (nullptr: it learns its scenario
// from the client); HOST SCENARIO, a client, whose scenario this returns;
// --list prints the scenarios and exits 0.
inline const Scenario* parse_command_line(int argc, char** argv, const Program& program, wb::Options& opt) {
    wb::set_program_name(argv[0]);
    const std::string me = wb::program_name();
    std::string names, list;
    for (const Scenario& sc : program.scenarios) names += (names.empty() ? "" : " ") + std::string(sc.name);
    const std::string synopsis = "[options]                server: plays its side of the client's scenario\n  " + me +
                                 " [options] HOST SCENARIO  client: make SCENARIO's failure happen\n  " + me +
                                 " --list                   the scenarios";
    const std::string notes = "SCENARIO: " + names + " (" + program.sibling + " plays " + program.sibling_plays +
                              ").\nThe client exits 0 when the failure happened as the lesson teaches, 1 when not.";
    const wb::Usage usage = {.synopsis = synopsis.c_str(), .summary = program.summary, .notes = notes.c_str()};
    const wb::ExtraOption extra[] = {
        {0, "list", nullptr, "list the scenarios, one line each, and exit", &list},
    };
    opt = wb::parse_options(argc, argv, usage, extra);
    if (!list.empty()) {
        if (!opt.args.empty()) wb::usage_error("--list takes no HOST or SCENARIO");
        for (const Scenario& sc : program.scenarios) std::printf("%-11s %s\n", sc.name, sc.breaks);
        std::exit(0);
    }
    if (opt.args.empty()) return nullptr;
    if (opt.args.size() != 2)
        wb::usage_error("a client needs HOST SCENARIO, got " + std::to_string(opt.args.size()) + " argument(s)");
    const Scenario* scenario = find_scenario(program.scenarios, opt.args[1]);
    if (!scenario)
        wb::usage_error("unknown scenario '" + wb::printable(opt.args[1].data(), opt.args[1].size()) + "' (" + me +
                        " --list shows them, " + program.sibling + " --list the others)");
    return scenario;
}

// Step 3: the TCP connection, and the scenario's name on it: 16 bytes,
// NUL-padded. The client sends its `scenario`; the server learns its own,
// which this returns (a name it does not know may be its sibling's).
inline const Scenario* meet(Side& s, const Program& program, const Scenario* scenario) {
    std::array<uint8_t, kNameBytes> name{};
    if (s.server) {
        wb::Listener listener(s.opt.tcp_port);
        std::printf("server: waiting for a client on TCP port %u\n", s.opt.tcp_port);
        s.conn = listener.accept(s.opt.accept_timeout_s());
        if (!wb::recv_exact(s.conn, name, s.opt.timeout_s))
            wb::fail("the client " + s.conn.peer() + " closed the connection before naming a scenario");
        const size_t n = strnlen(reinterpret_cast<const char*>(name.data()), kNameBytes);
        scenario = find_scenario(program.scenarios, std::string(reinterpret_cast<const char*>(name.data()), n));
        if (!scenario)
            wb::fail("the client " + s.conn.peer() + " asked for scenario \"" +
                         wb::printable(reinterpret_cast<const char*>(name.data()), n) + "\", which this server does not know",
                     std::string("is the client ") + wb::program_name() + " too, of the same version? (" +
                         program.sibling + "'s scenarios need a " + program.sibling + " server)");
    } else {
        s.conn = wb::connect_to(s.opt.args[0], s.opt.tcp_port, s.opt.timeout_s);
        std::memcpy(name.data(), scenario->name, std::strlen(scenario->name));
        wb::send_all(s.conn, name);
    }
    std::printf("%s: scenario %s: %s\n", s.who, scenario->name, scenario->breaks);
    return scenario;
}

// Both programs' main: the lesson's steps, in the order of their verbs. The
// objects are locals in creation order, so that leaving run() releases them
// in reverse (each handle's deleter is its destroy verb: common/handles.hpp).
inline int run(int argc, char** argv, const Program& program) {
    wb::Options opt;
    const Scenario* scenario = parse_command_line(argc, argv, program, opt);
    const bool server = scenario == nullptr;

    // 1. Device, port and address (lesson 1), and the port's counters as they are now.
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    const wb::PortCounters counters(ctx.get(), addr.port);

    // 2. A PD, two CQs, an RC QP and a buffer (lesson 4's step 2). Each
    //    scenario registers the buffer with the access it needs (its MR).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    // 4 entries: flush's three WRs and more.
    wb::CompletionQueue send_cq{CHECK_PTR(ibv_create_cq(ctx.get(), 4, nullptr, nullptr, 0))};
    wb::CompletionQueue recv_cq{CHECK_PTR(ibv_create_cq(ctx.get(), 4, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = send_cq.get(),
        .recv_cq = recv_cq.get(),
        .cap = {.max_send_wr = 3, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1},  // flush's 3 and 2
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    wb::Buffer buf = wb::alloc_buffer(kBufferBytes);
    Side s{.opt = opt, .server = server, .who = server ? "server" : "client", .ctx = ctx.get(), .addr = addr,
           .counters = counters, .pd = pd.get(), .send_cq = send_cq.get(), .recv_cq = recv_cq.get(),
           .qp = qp.get(), .buf = buf.get()};

    // 3. The TCP connection, and the scenario's name on it.
    scenario = meet(s, program, scenario);

    // 4. The scenario: its MR, its connection with its mistake, what each side sees.
    return scenario->play(s);
}

// --- a scenario's connection, and the knobs its mistake turns ----------------------

// How one side connects: lesson 4's connection with lesson 3's values, unless
// the scenario's mistake changes one. Each knob is set in one transition.
constexpr uint8_t kMinRnrTimer = 12;  // lesson 3's: RNR NAK delay code 12 = 0.64 ms
struct Knobs {
    int qp_access = 0;                     // RESET -> INIT: what the peer's requests may do at our QP
    int receives = 0;                      // posted in INIT, before the exchange (a receive must be
    uint32_t receive_bytes = 16;           //   there before the peer SENDs: lesson 4), of this length
    std::optional<ibv_mtu> path_mtu;       // INIT -> RTR; none: the smaller active MTU of the two ports
    uint8_t min_rnr_timer = kMinRnrTimer;  // INIT -> RTR: the wait our RNR NAKs ask for (0 = 655.36 ms)
    uint8_t timeout = 14;                  // RTR -> RTS: the ACK timeout, 4.096 us x 2^timeout: 14 = 67 ms
    uint8_t retry_cnt = 6;                 // RTR -> RTS: resends when no ACK comes (7: for ever, on rxe)
    uint8_t rnr_retry = 7;                 // RTR -> RTS: resends after an RNR NAK (7: for ever)
    ibv_qp_state up_to = IBV_QPS_RTS;      // how far our QP goes
    bool print_states = false;             // print the QP's state after each transition (recover)
};

// Our MR of the buffer, with exactly `access`.
inline void register_buffer(Side& s, int access) {
    s.mr.reset(CHECK_PTR(ibv_reg_mr(s.pd, s.buf, kBufferBytes, access),
                         "ulimit -l: is locked memory limited? (make doctor checks this)"));
}

inline void post_receive(Side& s, uint32_t length) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(s.buf), .length = length, .lkey = s.mr->lkey};
    ibv_recv_wr wr = {.wr_id = kRecvId, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(s.qp, &wr, &bad));
}

// Lesson 4's exchange, with a fresh PSN, offering our buffer.
inline void exchange(Side& s) {
    s.psn = wb::random_psn();
    wb::PeerInfo me = wb::local_info(kLesson, s.qp, s.psn, s.addr);
    me.addr = reinterpret_cast<uintptr_t>(s.buf);
    me.length = kBufferBytes;
    me.rkey = s.mr->rkey;
    s.peer = wb::exchange(s.conn, me, s.opt.timeout_s);
    std::printf("%s: peer %s is QP 0x%x, first PSN %u\n", s.who, s.conn.peer().c_str(), s.peer.qp_num, s.peer.psn);
}

inline void print_state(const Side& s, const char* step) {
    std::printf("%s: %-14s QP is %s\n", s.who, step, wb::qp_state_name(wb::query_state(s.qp)));
}

// INIT -> RTR: where the peer is, as common/qp.cpp's qp_to_rtr (lesson 3)
// sets it, and the two receiver-side knobs, path_mtu and min_rnr_timer.
constexpr int kToRtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
inline ibv_qp_attr rtr_attr(const Side& s, const Knobs& k) {
    ibv_qp_attr attr = {
        .qp_state = IBV_QPS_RTR,
        // the largest packet payload: IBV_MTU_1024 = 1024 bytes
        .path_mtu = k.path_mtu.value_or(std::min(s.addr.attr.active_mtu, static_cast<ibv_mtu>(s.peer.mtu))),
        .rq_psn = s.peer.psn,
        .dest_qp_num = s.peer.qp_num,
        .ah_attr = {.dlid = s.peer.lid, .is_global = 0, .port_num = s.addr.port},
        .max_dest_rd_atomic = 1,  // one READ from the peer in flight at a time
        .min_rnr_timer = k.min_rnr_timer,
    };
    if (s.addr.gid_index >= 0) {  // RoCE: GRH addressing (lesson 3)
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh = {.dgid = s.peer.gid,
                            .sgid_index = static_cast<uint8_t>(s.addr.gid_index),
                            .hop_limit = 64};  // the IP TTL of RoCE v2 packets
    }
    return attr;
}

// RTR -> RTS with our first PSN and the three sender-side knobs.
constexpr int kToRts =
    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
inline ibv_qp_attr rts_attr(const Side& s, const Knobs& k) {
    return {
        .qp_state = IBV_QPS_RTS,
        .sq_psn = s.psn,
        .max_rd_atomic = 1,  // one READ of ours in flight at a time
        .timeout = k.timeout,
        .retry_cnt = k.retry_cnt,
        .rnr_retry = k.rnr_retry,
    };
}

// The server's "RTR!" (lesson 4, step 8).
inline void go(Side& s) {
    if (s.server) wb::send_token(s.conn, "RTR!");
    else wb::expect_token(s.conn, "RTR!", s.opt.timeout_s);
}

// Every scenario's connection, lesson 4's steps with `k`'s knobs: RESET ->
// INIT, the receives, the exchange, INIT -> RTR, RTR -> RTS, the server's "RTR!".
inline void connect_qp(Side& s, const Knobs& k) {
    wb::qp_to_init(s.qp, s.addr, k.qp_access);  // ibv_modify_qp to INIT (lesson 3)
    if (k.print_states) print_state(s, "-> INIT");
    for (int i = 0; i < k.receives; ++i) post_receive(s, k.receive_bytes);
    exchange(s);
    if (k.up_to >= IBV_QPS_RTR) {
        ibv_qp_attr rtr = rtr_attr(s, k);
        CHECK_RC(ibv_modify_qp(s.qp, &rtr, kToRtr), "compare both sides' gid: lines (lesson 3)");
        if (k.print_states) print_state(s, "-> RTR");
    }
    if (k.up_to >= IBV_QPS_RTS) {
        ibv_qp_attr rts = rts_attr(s, k);
        CHECK_RC(ibv_modify_qp(s.qp, &rts, kToRts));
        if (k.print_states) print_state(s, "-> RTS");
    }
    go(s);
}

// --- posting ------------------------------------------------------------------------

// One signaled work request of `length` bytes from our buffer, at `offset`
// in it; an RDMA WRITE or READ targets the peer's buffer with `rkey`.
inline void post(Side& s, ibv_wr_opcode opcode, uint32_t length, uint32_t rkey = 0, uint32_t offset = 0) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(s.buf + offset), .length = length, .lkey = s.mr->lkey};
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
    CHECK_RC(ibv_post_send(s.qp, &wr, &bad));
    s.posted = Clock::now();
}

// --- what a failure leaves behind -----------------------------------------------

inline void print_completion(const Side& s, const ibv_wc& wc) {
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
inline void print_async_events(const Side& s, int ms) {
    const int fd = s.ctx->async_fd;
    CHECK_ERRNO(fcntl(fd, F_SETFL, CHECK_ERRNO(fcntl(fd, F_GETFL)) | O_NONBLOCK));
    int seen = 0;
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    while (CHECK_ERRNO(poll(&p, 1, seen ? 0 : ms)) == 1) {
        ibv_async_event ev;
        if (ibv_get_async_event(s.ctx, &ev) == -1) {
            if (errno == EAGAIN) break;  // poll() saw the fd readable, but another reader took the event
            wb::fail("ibv_get_async_event(s.ctx, &ev) failed: " + wb::errno_str(errno));
        }
        std::printf("%s: async event %s (%d)\n", s.who, ibv_event_type_str(ev.event_type), ev.event_type);
        ibv_ack_async_event(&ev);  // every event must be acked, or destroying its QP/CQ hangs
        ++seen;
    }
    if (!seen) std::printf("%s: no async event within %d ms\n", s.who, ms);
}

inline void print_counters(const Side& s) {
    std::printf("%s: port counters that moved: %s\n", s.who, s.counters.moved_list().c_str());
}

// --- how each side ends and reports ----------------------------------------------

// The client's check of one completion: it has the status the lesson
// teaches, or the client tells the server "DONE" and ends, exit 1, with
// "result: error: SCENARIO: expected ..., got ...".
inline void require(Side& s, const char* scenario, const std::optional<ibv_wc>& wc, ibv_wc_status expected) {
    if (wc && wc->status == expected) return;
    wb::send_token(s.conn, "DONE");
    wb::result_error(std::string(scenario) + ": expected " + wb::wc_status_text(expected) + ", got " +
                     (wc ? wb::wc_status_text(wc->status)
                         : "no completion within " + std::to_string(s.opt.timeout_s) + " s"));
}

// The client: wait for its one completion, print what it left behind, check
// it against what the lesson teaches, tell the server "DONE", and print the
// result line (with the time the completion took, when `timed`).
inline int client_expects(Side& s, const char* scenario, ibv_wc_status expected, const std::string& why,
                          bool timed = false) {
    const std::optional<ibv_wc> wc = wb::try_poll(s.send_cq, s.opt.timeout_s);
    const double took = seconds_since(s.posted);
    if (wc) print_completion(s, *wc);
    std::printf("client: %.3f s after the post; our QP is %s\n", took, wb::qp_state_name(wb::query_state(s.qp)));
    print_async_events(s, 100);
    print_counters(s);
    require(s, scenario, wc, expected);
    wb::send_token(s.conn, "DONE");
    std::printf("result: %s: %s, as expected: %s", scenario, wb::wc_status_text(expected).c_str(), why.c_str());
    if (timed) std::printf("; it took %.2f s", took);
    std::printf("\n");
    return 0;
}

// The server: wait for the client's "DONE", then report every completion
// its CQs hold, its QP's state, async events and counters.
inline int server_reports(Side& s, const char* scenario, std::string seen = "") {
    wb::expect_token(s.conn, "DONE", s.opt.timeout_s);
    for (ibv_cq* cq : {s.recv_cq, s.send_cq}) {
        while (const std::optional<ibv_wc> wc = wb::try_poll(cq, 0)) {
            print_completion(s, *wc);
            seen += (seen.empty() ? "" : ", ") + wb::wc_status_text(wc->status);
        }
    }
    const ibv_qp_state state = wb::query_state(s.qp);
    print_async_events(s, 100);
    print_counters(s);
    std::printf("result: server: %s: %s; our QP is %s\n", scenario,
                seen.empty() ? "no completion" : ("completions " + seen).c_str(), wb::qp_state_name(state));
    return 0;
}

}  // namespace failures
