// lesson8.cpp - event-driven completions: sleep on a completion channel
// instead of spinning on ibv_poll_cq.
//
// What it teaches
//   Lesson 4's sum service, made event-driven on both sides. A CQ bound to a
//   completion channel raises an event (one readable fd) when it is "armed"
//   with ibv_req_notify_cq and a completion arrives. The program sleeps in
//   poll() on that fd, with a timeout, next to its TCP socket; it takes the
//   event with ibv_get_cq_event, RE-ARMS the CQ, and only THEN drains it with
//   ibv_poll_cq until it is empty (arming after draining loses completions:
//   see the comment at rearm_then_drain). Events are acknowledged with
//   ibv_ack_cq_events, in batches, and all of them before the CQ is destroyed
//   (else ibv_destroy_cq waits forever). Nothing busy-polls.
//
//   The client sends COUNT requests at once (-n, default 1), so several
//   completions pile up per event: both sides end by printing
//   "events: E, completions: C, empty events: X"; the docs explain why E and
//   C differ.
//
// How to run it
//   one host, two terminals:  ./lesson8                 ./lesson8 -n 3 127.0.0.1 2 3
//   two hosts:                hostA$ ./lesson8          hostB$ ./lesson8 -n 3 hostA 2 3
//   Soft-RoCE lab (no RDMA here):
//     scripts/lab.sh run -- bash -c './lesson8 --timeout 20 & sleep 1; ./lesson8 -n 3 127.0.0.1 2 3; wait'
//   Negative numbers follow --:  ./lesson8 -n 2 127.0.0.1 -- -7 3
//
// Verbs it introduces
//   ibv_create_comp_channel, ibv_create_cq (with a channel), ibv_req_notify_cq,
//   ibv_get_cq_event, ibv_ack_cq_events, ibv_destroy_comp_channel (the
//   wb::CompletionChannel handle); poll(2) and fcntl(2) on the channel's fd.
//
// Read more
//   man ibv_create_comp_channel, man ibv_req_notify_cq, man ibv_get_cq_event
//   (its EXAMPLES are the pattern used here), man poll; docs/lesson8-event-driven-cq.md
#include <infiniband/verbs.h>

#include <endian.h>
#include <fcntl.h>
#include <poll.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "connect.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr uint16_t kLesson = 8;

// The server posts this many receives before the client connects and never
// re-posts them, so a client may send at most this many requests (-n).
constexpr int kMaxRequests = 64;

// Up to this many work completions per ibv_poll_cq call while draining.
constexpr int kPollBatch = 16;

// wr_id is ours to choose and comes back in every completion, even a failed
// one (whose opcode is undefined): receives use the slot number, sends the
// slot number plus this tag, so a completion says what it belongs to.
constexpr uint64_t kSendTag = uint64_t{1} << 32;

// ibv_ack_cq_events takes a mutex, so acknowledge events in batches of this
// many (and the rest before the CQ is destroyed).
constexpr unsigned kAckBatch = 16;

// The sum service's messages, as in lesson 4: fixed size, big-endian.
//   request  (client -> server): int64 A, int64 B                      16 bytes
//   response (server -> client): uint32 status, 4 zero bytes, int64 SUM 16 bytes
constexpr uint32_t kRequestSize = 16;
constexpr uint32_t kResponseSize = 16;
constexpr uint32_t kStatusOk = 0;        // SUM is A + B
constexpr uint32_t kStatusOverflow = 1;  // A + B does not fit in int64; SUM is 0

void put_i64(uint8_t* p, int64_t v) {
    uint64_t be = htobe64(static_cast<uint64_t>(v));  // 64-bit conversion, not htonl
    std::memcpy(p, &be, 8);
}
int64_t get_i64(const uint8_t* p) {
    uint64_t be;
    std::memcpy(&be, p, 8);
    return static_cast<int64_t>(be64toh(be));
}
void put_u32(uint8_t* p, uint32_t v) {
    uint32_t be = htobe32(v);
    std::memcpy(p, &be, 4);
}
uint32_t get_u32(const uint8_t* p) {
    uint32_t be;
    std::memcpy(&be, p, 4);
    return be32toh(be);
}

// What each side counts, and prints at the end.
struct EventCounts {
    unsigned long events = 0;        // ibv_get_cq_event calls that returned an event
    unsigned long completions = 0;   // work completions drained with ibv_poll_cq
    unsigned long empty_events = 0;  // events whose drain found the CQ already empty
    unsigned unacked = 0;            // events not yet passed to ibv_ack_cq_events
};

// What poll() found ready.
struct Ready {
    bool cq = false;   // the completion channel's fd: a CQ event is waiting
    bool tcp = false;  // the TCP side channel: the peer sent something, or closed
};

// Sleep until the completion channel or the TCP connection has news, for at
// most timeout_s seconds. This is the only place the program waits, and it
// does not spin: poll() sleeps in the kernel until an fd becomes readable.
Ready wait_for_news(ibv_comp_channel* channel, const wb::Connection& conn, int timeout_s,
                    const std::string& waiting_for) {
    pollfd fds[2] = {
        {.fd = channel->fd, .events = POLLIN, .revents = 0},  // readable = a CQ event
        {.fd = conn.fd(), .events = POLLIN, .revents = 0},    // readable = data or EOF
    };
    int n;
    do {
        n = poll(fds, 2, timeout_s * 1000);  // milliseconds
    } while (n == -1 && errno == EINTR);
    CHECK_ERRNO(n);
    if (n == 0)
        wb::fail("no completion event within " + std::to_string(timeout_s) + " s while waiting for " +
                     waiting_for,
                 "is the peer still running? is the CQ armed (ibv_req_notify_cq)? raise --timeout if "
                 "the machine is slow");
    return Ready{.cq = (fds[0].revents & POLLIN) != 0, .tcp = fds[1].revents != 0};
}

// The heart of the lesson: one CQ event, taken, acknowledged (in batches),
// the CQ re-armed, and then drained. Returns the completions found; the
// caller checks and handles each.
//
// Why re-arm BEFORE draining: ibv_req_notify_cq asks for one event at the
// NEXT completion. If we drained first and armed afterwards, a completion
// arriving between our last (empty) ibv_poll_cq and the arm would sit in the
// CQ with no event ever raised for it: we would sleep in poll() until the
// timeout (or forever, without one). Arming first closes that window: a
// completion that lands after the arm raises a new event, and one that landed
// before it is found by the drain. The price is an occasional event whose
// completions were already drained by the previous turn (an "empty event").
std::vector<ibv_wc> rearm_then_drain(ibv_comp_channel* channel, ibv_cq* cq, EventCounts& counts) {
    std::vector<ibv_wc> found;
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    // The fd is O_NONBLOCK: if the event is gone (poll() can report readiness
    // that someone else consumed), this returns -1 with EAGAIN instead of
    // blocking forever.
    if (ibv_get_cq_event(channel, &ev_cq, &ev_ctx) == -1) {
        if (errno == EAGAIN) return found;
        CHECK_ERRNO(-1, "ibv_get_cq_event(channel, &ev_cq, &ev_ctx)");
    }
    if (ev_cq != cq) wb::fail("ibv_get_cq_event returned an event for a CQ this program did not bind");
    ++counts.events;
    // Every event returned must be acknowledged once; batching saves the mutex.
    if (++counts.unacked == kAckBatch) {
        ibv_ack_cq_events(cq, counts.unacked);
        counts.unacked = 0;
    }
    // Re-arm first (0 = any completion, not only "solicited" ones) ...
    CHECK_RC(ibv_req_notify_cq(cq, 0));
    // ... then drain until ibv_poll_cq finds nothing.
    for (;;) {
        ibv_wc wc[kPollBatch];
        int n = ibv_poll_cq(cq, kPollBatch, wc);
        if (n < 0) wb::fail("ibv_poll_cq(cq, kPollBatch, wc) failed (returned " + std::to_string(n) + ")");
        if (n == 0) break;
        found.insert(found.end(), wc, wc + n);
    }
    counts.completions += found.size();
    if (found.empty()) ++counts.empty_events;
    return found;
}

// "event 3: 3 completions (2 x IBV_WC_RECV, 1 x IBV_WC_SEND)": what one turn found.
void narrate(const EventCounts& counts, const std::vector<ibv_wc>& wcs) {
    int recvs = 0, sends = 0, errors = 0;
    for (const ibv_wc& wc : wcs) {
        if (wc.status != IBV_WC_SUCCESS) ++errors;
        else if (wc.opcode == IBV_WC_RECV) ++recvs;
        else ++sends;
    }
    std::string what;
    if (recvs) what += std::to_string(recvs) + " x IBV_WC_RECV";
    if (sends) what += (what.empty() ? "" : ", ") + std::to_string(sends) + " x IBV_WC_SEND";
    if (errors) what += (what.empty() ? "" : ", ") + std::to_string(errors) + " failed";
    if (what.empty()) what = "already drained after the previous event";
    std::printf("event %lu: %zu completion%s (%s)\n", counts.events, wcs.size(), wcs.size() == 1 ? "" : "s",
                what.c_str());
}

void print_counts(const EventCounts& c) {
    std::printf("events: %lu, completions: %lu, empty events: %lu\n", c.events, c.completions, c.empty_events);
}

}  // namespace

int main(int argc, char** argv) {
    std::string count_arg;
    const wb::ExtraOption extra[] = {
        {'n', "count", "COUNT", "client: how many requests to send at once, 1..64 (default: 1)", &count_arg},
    };
    const wb::Usage usage = {
        .synopsis = "[options]                        server\n"
                    "  lesson8 [options] [-n COUNT] HOST A B   client: ask for A + B, COUNT times",
        .summary = "lesson 4's sum service, event-driven: a completion channel and poll() instead of busy polling",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_client = !opt.args.empty();
    if (is_client && opt.args.size() != 3)
        wb::usage_error("a client needs HOST A B (got " + std::to_string(opt.args.size()) + " arguments)");
    if (!is_client && !count_arg.empty()) wb::usage_error("-n is for the client (give HOST A B too)");
    const int count = count_arg.empty() ? 1 : static_cast<int>(wb::parse_range(count_arg, "-n", 1, kMaxRequests));
    const int64_t a = is_client ? wb::parse_i64(opt.args[1], "A") : 0;
    const int64_t b = is_client ? wb::parse_i64(opt.args[2], "B") : 0;

    // --- Device, port and address: lessons 1 and 3. ---
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);

    // Handles are declared in creation order; C++ destroys them in reverse,
    // which is the order rdma-core needs (QP, CQ, channel, MR, PD, context).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};

    // One buffer: kMaxRequests receive slots, then kMaxRequests send slots.
    // Receives are written by our own NIC, so the MR needs LOCAL_WRITE; the
    // peer never touches our memory directly (no REMOTE_* access).
    const size_t recv_bytes = kMaxRequests * size_t{kRequestSize > kResponseSize ? kRequestSize : kResponseSize};
    const size_t slot = recv_bytes / kMaxRequests;
    wb::Buffer buf = wb::alloc_buffer(2 * recv_bytes);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), 2 * recv_bytes, IBV_ACCESS_LOCAL_WRITE))};
    uint8_t* const recv_slot0 = reinterpret_cast<uint8_t*>(buf.get());
    uint8_t* const send_slot0 = recv_slot0 + recv_bytes;

    // --- New in this lesson: the completion channel. ---
    // A channel is a file descriptor the CQ raises events on. Make it
    // non-blocking so that ibv_get_cq_event can never block: we wait in poll().
    wb::CompletionChannel channel{CHECK_PTR(ibv_create_comp_channel(ctx.get()))};
    const int fd_flags = CHECK_ERRNO(fcntl(channel->fd, F_GETFL));
    CHECK_ERRNO(fcntl(channel->fd, F_SETFL, fd_flags | O_NONBLOCK));

    // The CQ is bound to the channel (4th argument); room for every receive
    // and every send completion (comp_vector 0: the first interrupt vector).
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 2 * kMaxRequests, nullptr, channel.get(), 0))};
    // Arm it before any completion can exist: the first completion raises an event.
    CHECK_RC(ibv_req_notify_cq(cq.get(), 0));
    std::printf("completion channel fd %d (O_NONBLOCK), CQ armed with ibv_req_notify_cq\n", channel->fd);

    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),  // one CQ, one channel: sends and receives raise the same events
        .cap = {.max_send_wr = kMaxRequests, .max_recv_wr = kMaxRequests, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    wb::qp_to_init(qp.get(), addr, 0);  // 0: the peer may not READ/WRITE our memory

    // Post the receives now, in INIT, before the peer can send (lesson 4):
    // the server one per request it may get, the client one per answer.
    const int receives = is_client ? count : kMaxRequests;
    for (int i = 0; i < receives; ++i) {
        ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(recv_slot0 + i * slot),
                       .length = static_cast<uint32_t>(slot),
                       .lkey = mr->lkey};
        ibv_recv_wr wr = {.wr_id = static_cast<uint64_t>(i), .next = nullptr, .sg_list = &sge, .num_sge = 1};
        ibv_recv_wr* bad = nullptr;
        CHECK_RC(ibv_post_recv(qp.get(), &wr, &bad));
    }
    std::printf("posted %d receive%s\n", receives, receives == 1 ? "" : "s");

    // --- The TCP side channel and the QP transitions: lesson 4. ---
    const uint32_t psn = wb::random_psn();
    wb::Connection conn;
    if (is_client) {
        conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    } else {
        wb::Listener listener(opt.tcp_port);
        std::printf("waiting for a client on TCP port %u\n", opt.tcp_port);
        conn = listener.accept(opt.accept_timeout_s());
    }
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    std::printf("connected to %s: local qp 0x%x, remote qp 0x%x, RTS\n", conn.peer().c_str(), qp->qp_num,
                peer.qp_num);

    EventCounts counts;
    if (is_client) {
        // --- Client: send COUNT requests at once, then sleep until the answers are in. ---
        for (int i = 0; i < count; ++i) {
            uint8_t* req = send_slot0 + i * slot;
            put_i64(req, a);
            put_i64(req + 8, b);
            ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(req), .length = kRequestSize, .lkey = mr->lkey};
            ibv_send_wr wr = {
                .wr_id = kSendTag | static_cast<uint64_t>(i),
                .sg_list = &sge,
                .num_sge = 1,
                .opcode = IBV_WR_SEND,
                .send_flags = IBV_SEND_SIGNALED,  // a completion (and so an event) for each send
            };
            ibv_send_wr* bad = nullptr;
            CHECK_RC(ibv_post_send(qp.get(), &wr, &bad));
        }
        std::printf("sent %d request%s: %lld + %lld\n", count, count == 1 ? "" : "s", static_cast<long long>(a),
                    static_cast<long long>(b));

        int sends_done = 0, answers = 0;
        int64_t sum = 0;
        bool overflow = false;
        while (sends_done < count || answers < count) {
            Ready ready = wait_for_news(channel.get(), conn, opt.timeout_s, "the server's answers");
            if (ready.tcp)  // the server says nothing on TCP until we are done: it exited
                wb::fail("the server " + conn.peer() + " closed the connection before answering every request",
                         "see the server's output");
            if (!ready.cq) continue;
            const std::vector<ibv_wc> wcs = rearm_then_drain(channel.get(), cq.get(), counts);
            narrate(counts, wcs);
            for (const ibv_wc& wc : wcs) {
                const bool is_send = wc.wr_id & kSendTag;
                wb::check_wc(wc, is_send ? "a request's SEND" : "the receive of an answer");
                if (is_send) {
                    ++sends_done;
                    continue;
                }
                // An answer: never trust its length, check it.
                if (wc.byte_len != kResponseSize)
                    wb::fail("the server sent a " + std::to_string(wc.byte_len) + "-byte answer, expected " +
                                 std::to_string(kResponseSize),
                             "is the server lesson 8 of this workbook?");
                const uint8_t* resp = recv_slot0 + wc.wr_id * slot;
                const uint32_t status = get_u32(resp);
                if (status != kStatusOk && status != kStatusOverflow)
                    wb::fail("the server answered with unknown status " + std::to_string(status),
                             "is the server lesson 8 of this workbook?");
                if (status == kStatusOverflow) overflow = true;
                sum = get_i64(resp + 8);
                ++answers;
            }
        }
        // Tell the server we are done; it stops waiting for requests.
        wb::send_token(conn, "DONE");
        // Every event must be acknowledged before the CQ is destroyed at the
        // end of main(): ibv_destroy_cq waits for the count to match, forever.
        ibv_ack_cq_events(cq.get(), counts.unacked);
        counts.unacked = 0;
        print_counts(counts);
        if (overflow)
            wb::fail(std::to_string(a) + " + " + std::to_string(b) + " overflows a 64-bit integer (the server says so)",
                     "choose A and B whose sum lies in -2^63 .. 2^63-1");
        std::printf("result: %lld + %lld = %lld\n", static_cast<long long>(a), static_cast<long long>(b),
                    static_cast<long long>(sum));
        return 0;
    }

    // --- Server: answer each request as its completion arrives, until the client says DONE. ---
    int requests = 0, sends_done = 0, overflows = 0;
    bool done = false;
    while (!done || sends_done < requests) {
        Ready ready = wait_for_news(channel.get(), conn, opt.timeout_s,
                                    done ? "the answers' SEND completions" : "requests");
        if (ready.tcp && !done) {
            // The client writes only "DONE", after its last answer (EOF first = it died).
            wb::expect_token(conn, "DONE", opt.timeout_s);
            done = true;
            std::printf("client says DONE\n");
        }
        if (!ready.cq) continue;
        const std::vector<ibv_wc> wcs = rearm_then_drain(channel.get(), cq.get(), counts);
        narrate(counts, wcs);
        for (const ibv_wc& wc : wcs) {
            const bool is_send = wc.wr_id & kSendTag;
            wb::check_wc(wc, is_send ? "the SEND of an answer" : "the receive of a request");
            if (is_send) {
                ++sends_done;
                continue;
            }
            if (wc.byte_len != kRequestSize)
                wb::fail("the client sent a " + std::to_string(wc.byte_len) + "-byte request, expected " +
                             std::to_string(kRequestSize),
                         "is the client lesson 8 of this workbook?");
            const uint8_t* req = recv_slot0 + wc.wr_id * slot;
            const int64_t ra = get_i64(req), rb = get_i64(req + 8);
            int64_t rsum = 0;
            const bool overflow = __builtin_add_overflow(ra, rb, &rsum);
            ++requests;
            if (overflow) {
                ++overflows;
                std::printf("request %d: %lld + %lld overflows int64\n", requests, static_cast<long long>(ra),
                            static_cast<long long>(rb));
            } else {
                std::printf("request %d: %lld + %lld = %lld\n", requests, static_cast<long long>(ra),
                            static_cast<long long>(rb), static_cast<long long>(rsum));
            }
            // The answer goes out of the send slot that matches the receive slot:
            // each slot is used once, so no buffer is rewritten while a SEND is in flight.
            uint8_t* resp = send_slot0 + wc.wr_id * slot;
            put_u32(resp, overflow ? kStatusOverflow : kStatusOk);
            put_u32(resp + 4, 0);
            put_i64(resp + 8, overflow ? 0 : rsum);
            ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(resp), .length = kResponseSize, .lkey = mr->lkey};
            ibv_send_wr wr = {
                .wr_id = kSendTag | wc.wr_id,
                .sg_list = &sge,
                .num_sge = 1,
                .opcode = IBV_WR_SEND,
                .send_flags = IBV_SEND_SIGNALED,
            };
            ibv_send_wr* bad = nullptr;
            CHECK_RC(ibv_post_send(qp.get(), &wr, &bad));
        }
    }
    ibv_ack_cq_events(cq.get(), counts.unacked);  // all acked before ~CompletionQueue: see the client
    counts.unacked = 0;
    print_counts(counts);
    if (overflows > 0) {
        std::printf("result: %d request%s, %d overflowed int64\n", requests, requests == 1 ? "" : "s", overflows);
        wb::fail(std::to_string(overflows) + " request(s) overflowed a 64-bit integer; the client was told");
    }
    std::printf("result: served %d request%s\n", requests, requests == 1 ? "" : "s");
    return 0;
}
