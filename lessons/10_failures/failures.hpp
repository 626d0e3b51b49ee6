// failures.hpp - what lesson 10's two programs share: one side of a scenario,
// and the plumbing around the mistakes.
//
// lesson10.cpp (the QP's knobs: rnr, rnr-wait, retry, mtu, gid, recover) and
// lesson10_nak.cpp (what a responder refuses: rem-access, qp-access, len,
// flush) are one lesson in two programs, and they run their scenarios the same
// way: the same Side, the same command line, the same meeting over TCP, the
// same posts, and the same last lines on each side. That is kept here, once,
// in the lesson's own folder rather than in common/, because no other lesson
// uses it: it prints lesson 10's own result lines. Read the scenarios first
// (each program's top); this is the plumbing, in the order main calls it.
//
// Each program is one translation unit that includes this header once, so
// its functions are defined here, inline.
#pragma once

#include <infiniband/verbs.h>

#include <fcntl.h>
#include <poll.h>

#include <array>
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
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace failures {

constexpr uint16_t kLesson = 10;  // sent in the exchange: lesson 10's programs talk to each other only
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

inline double seconds_since(Clock::time_point t0) {
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

struct Scenario {
    const char* name;
    const char* breaks;  // one line for --list
    int (*play)(Side&);  // both sides: the server's part and the client's
};

// --- main's steps ---------------------------------------------------------------

inline const Scenario* find_scenario(std::span<const Scenario> scenarios, const std::string& name) {
    for (const Scenario& sc : scenarios)
        if (name == sc.name) return &sc;
    return nullptr;
}

// The command line: no HOST, the server; HOST SCENARIO, a client, whose
// scenario this returns; --list prints the scenarios and exits 0. `sibling`
// is the lesson's other program, which plays the other scenarios.
inline const Scenario* parse_command_line(Side& s, int argc, char** argv, const wb::Usage& usage,
                                          std::span<const Scenario> scenarios, const char* sibling) {
    std::string list_flag;
    const wb::ExtraOption extra[] = {
        {'l', "list", nullptr, "list the scenarios, one line each, and exit", &list_flag},
    };
    s.opt = wb::parse_options(argc, argv, usage, extra);
    if (s.opt.given('l')) {
        if (!s.opt.args.empty()) wb::usage_error("--list takes no HOST or SCENARIO");
        for (const Scenario& sc : scenarios) std::printf("%-11s %s\n", sc.name, sc.breaks);
        std::exit(0);
    }
    s.server = s.opt.args.empty();
    s.who = s.server ? "server" : "client";
    if (s.server) return nullptr;
    if (s.opt.args.size() != 2)
        wb::usage_error("a client needs HOST SCENARIO, got " + std::to_string(s.opt.args.size()) + " argument(s)");
    const Scenario* scenario = find_scenario(scenarios, s.opt.args[1]);
    if (!scenario)
        wb::usage_error("unknown scenario '" + wb::printable(s.opt.args[1].data(), s.opt.args[1].size()) + "' (" +
                        wb::program_name() + " --list shows them, " + sibling + " --list the others)");
    return scenario;
}

// Steps 1 and 2: the device, port and address (lesson 1), and the counters as
// they are now; a PD, two CQs (4 entries: flush's three WRs and more), an RC
// QP and a buffer (lesson 4's steps 2 and 3).
inline void open_side(Side& s) {
    s.ctx = wb::open_device(s.opt.device);
    s.addr = wb::choose_address(s.ctx.get(), s.opt.ib_port, s.opt.gid_index);
    wb::print_address(ibv_get_device_name(s.ctx->device), s.addr);
    s.counters.emplace(s.ctx.get(), s.addr.port);
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
}

// Step 3: the TCP connection, and the scenario's name on it: 16 bytes,
// NUL-padded. The client sends its `scenario`; the server learns its own,
// which this returns (a name it does not know may be its `sibling`'s).
inline const Scenario* meet(Side& s, std::span<const Scenario> scenarios, const Scenario* scenario,
                            const char* sibling) {
    std::array<uint8_t, kNameBytes> name{};
    if (s.server) {
        wb::Listener listener(s.opt.tcp_port);
        std::printf("server: waiting for a client on TCP port %u\n", s.opt.tcp_port);
        s.conn = listener.accept(s.opt.accept_timeout_s());
        if (!wb::recv_exact(s.conn, name, s.opt.timeout_s))
            wb::fail("the client " + s.conn.peer() + " closed the connection before naming a scenario");
        const size_t n = strnlen(reinterpret_cast<const char*>(name.data()), kNameBytes);
        scenario = find_scenario(scenarios, std::string(reinterpret_cast<const char*>(name.data()), n));
        if (!scenario)
            wb::fail("the client " + s.conn.peer() + " asked for scenario \"" +
                         wb::printable(reinterpret_cast<const char*>(name.data()), n) + "\", which this server does not know",
                     std::string("is the client ") + wb::program_name() + " too, of the same version? (" + sibling +
                         "'s scenarios need a " + sibling + " server)");
    } else {
        s.conn = wb::connect_to(s.opt.args[0], s.opt.tcp_port, s.opt.timeout_s);
        std::memcpy(name.data(), scenario->name, std::strlen(scenario->name));
        wb::send_all(s.conn, name);
    }
    std::printf("%s: scenario %s: %s\n", s.who, scenario->name, scenario->breaks);
    return scenario;
}

// --- what the scenarios call: connecting and posting -----------------------------

// Our MR, with exactly `access`.
inline void register_buffer(Side& s, int access) {
    s.mr.reset(CHECK_PTR(ibv_reg_mr(s.pd.get(), s.buf.get(), kBufferBytes, access),
                         "ulimit -l: is locked memory limited? (make doctor checks this)"));
}

// Lesson 4's exchange, offering our buffer.
inline void exchange(Side& s) {
    s.psn = wb::random_psn();
    wb::PeerInfo me = wb::local_info(kLesson, s.qp.get(), s.psn, s.addr);
    me.addr = reinterpret_cast<uintptr_t>(s.buf.get());
    me.length = kBufferBytes;
    me.rkey = s.mr->rkey;
    s.peer = wb::exchange(s.conn, me, s.opt.timeout_s);
    std::printf("%s: peer %s is QP 0x%x, first PSN %u\n", s.who, s.conn.peer().c_str(), s.peer.qp_num, s.peer.psn);
}

// The server's "RTR!" (lesson 4, step 8).
inline void go(Side& s) {
    if (s.server) wb::send_token(s.conn, "RTR!");
    else wb::expect_token(s.conn, "RTR!", s.opt.timeout_s);
}

inline void post_receive(Side& s, uint32_t length) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(s.mr->addr), .length = length, .lkey = s.mr->lkey};
    ibv_recv_wr wr = {.wr_id = kRecvId, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(s.qp.get(), &wr, &bad));
}

// One signaled work request of `length` bytes from our buffer, at `offset`
// in it; an RDMA WRITE or READ targets the peer's buffer with `rkey`.
inline void post(Side& s, ibv_wr_opcode opcode, uint32_t length, uint32_t rkey = 0, uint32_t offset = 0) {
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

inline void print_counters(const Side& s) {
    std::printf("%s: port counters that moved: %s\n", s.who, s.counters->moved_list().c_str());
}

inline void print_state(const Side& s, const char* step) {
    std::printf("%s: %-14s QP is %s\n", s.who, step, wb::qp_state_name(wb::query_state(s.qp.get())));
}

// --- how each side ends and reports ----------------------------------------------

// The client: wait for its one completion, compare it with what the lesson
// teaches, tell the server "DONE", and print the result line (with the time
// the completion took, when `timed`).
inline int client_expects(Side& s, const char* scenario, ibv_wc_status expected, const std::string& why,
                          bool timed = false) {
    const std::optional<ibv_wc> wc = wb::try_poll(s.send_cq.get(), s.opt.timeout_s);
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
inline int server_reports(Side& s, const char* scenario, std::string seen = "") {
    wb::expect_token(s.conn, "DONE", s.opt.timeout_s);
    for (ibv_cq* cq : {s.recv_cq.get(), s.send_cq.get()}) {
        while (const std::optional<ibv_wc> wc = wb::try_poll(cq, 0)) {
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

}  // namespace failures
