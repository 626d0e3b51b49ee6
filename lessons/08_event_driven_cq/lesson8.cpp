// lesson8.cpp - event-driven completions: sleep on a completion channel
// instead of spinning on ibv_poll_cq.
//
// Lesson 4's sum service, made event-driven on both sides. A CQ bound to a
// completion channel raises an event, which makes the channel's fd readable,
// when it has been ARMED with ibv_req_notify_cq and a completion arrives.
// The program sleeps in poll() on that fd (next to its TCP socket, with a
// timeout), takes the event with ibv_get_cq_event, RE-ARMS the CQ, and only
// THEN drains it with ibv_poll_cq until it is empty: arming after draining
// can lose a completion (see rearm_then_drain below). Events are acknowledged
// with ibv_ack_cq_events, in batches, and every one of them before the CQ is
// destroyed, or ibv_destroy_cq waits forever. Nothing busy-polls.
//
// The client sends COUNT requests at once (-n, default 1), so several
// completions pile up behind one event. Both sides end by printing
// "events: E, completions: C, empty events: X"; the docs explain why E and C
// differ.
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson8                        server: answers one client, any number of requests
//     ./lesson8 -n 3 127.0.0.1 2 3     client: 3 requests, prints "result: 2 + 3 = 5"
//     ./lesson8 127.0.0.1 -- -7 3      negative numbers go after --
// On two hosts: ./lesson8 on host A, ./lesson8 -n 3 A 2 3 on host B. Both
// sides take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson8 -h).
// In the lab: scripts/lab.sh run -- bash -c './lesson8 --timeout 20 & sleep 1; ./lesson8 -n 3 127.0.0.1 2 3; wait'
//
// Verbs it introduces:
//     ibv_create_comp_channel (and ibv_destroy_comp_channel, via wb::CompletionChannel)
//     ibv_create_cq with a channel; ibv_req_notify_cq
//     ibv_get_cq_event, ibv_ack_cq_events; poll(2) and fcntl(O_NONBLOCK) on channel->fd
//
// Read more: man ibv_create_comp_channel, man ibv_req_notify_cq,
// man ibv_get_cq_event (its EXAMPLES are the pattern used here), man poll;
// docs/lesson8-event-driven-cq.md (the race, events vs completions, exercises).
#include <infiniband/verbs.h>

#include <endian.h>
#include <fcntl.h>
#include <poll.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "sum_protocol.hpp"

namespace {

constexpr uint16_t kLesson = 8;  // sent in the exchange: a lesson-8 client only talks to a lesson-8 server

// The wire format of lesson 4, unchanged: SumRequest and SumResponse in
// common/sum_protocol.hpp, 16 bytes each, integers big-endian.

// The server posts this many receives before the client connects and never
// re-posts them, so a client may send at most this many requests (-n). Each
// side uses receive slot i and send slot i for request i only: no buffer is
// ever rewritten while a SEND from it may still be in flight.
constexpr int kMaxRequests = 64;
// Bytes per slot: larger than a request, so that a message of the wrong
// length still lands and byte_len can tell us how long it was (lesson 4).
constexpr uint32_t kSlotBytes = 64;

// wr_id is ours to choose and comes back in every completion, even a failed
// one (whose opcode is undefined): receives carry the slot number, sends the
// slot number plus this tag, so a completion says what it belongs to.
constexpr uint64_t kSendTag = uint64_t{1} << 32;

// Up to this many work completions per ibv_poll_cq call while draining.
constexpr int kPollBatch = 16;
// ibv_ack_cq_events takes a mutex, so we acknowledge events in batches of
// this many, and the rest before the CQ is destroyed.
constexpr unsigned kAckBatch = 16;

// What each side counts, and prints at the end.
struct EventCounts {
    unsigned long events = 0;        // events ibv_get_cq_event returned
    unsigned long completions = 0;   // work completions ibv_poll_cq returned
    unsigned long empty_events = 0;  // events whose drain found the CQ already empty
    unsigned unacked = 0;            // events not yet passed to ibv_ack_cq_events
};

// What poll() found ready.
struct Ready {
    bool cq = false;   // the completion channel's fd: a CQ event is waiting
    bool tcp = false;  // the TCP side channel: the peer sent something, or closed it
};

// Sleep until the completion channel or the TCP connection has news, at most
// timeout_s seconds. The only place this program waits, and it does not spin:
// poll() sleeps in the kernel until an fd becomes readable. A tcp_fd of -1
// is left out (poll() skips negative fds): a closed connection stays
// readable, and watching it would turn this sleep into a spin.
Ready wait_for_news(const ibv_comp_channel* channel, int tcp_fd, int timeout_s, const char* waiting_for,
                    const char* hint = "is the peer still running? raise --timeout if the machine is slow") {
    pollfd fds[2] = {
        {.fd = channel->fd, .events = POLLIN, .revents = 0},  // readable: a CQ event
        {.fd = tcp_fd, .events = POLLIN, .revents = 0},       // readable: data or the peer's close
    };
    int n;
    do {
        n = poll(fds, 2, timeout_s * 1000);  // milliseconds
    } while (n == -1 && errno == EINTR);
    CHECK_ERRNO(n);
    if (n == 0)
        wb::fail("no completion event within " + std::to_string(timeout_s) + " s while waiting for " + waiting_for,
                 hint);
    return Ready{.cq = (fds[0].revents & POLLIN) != 0, .tcp = fds[1].revents != 0};
}

// The heart of the lesson: take one CQ event, acknowledge it (in batches),
// re-arm the CQ, then drain it. Returns the completions found; the caller
// checks and handles each one.
//
// Why re-arm BEFORE draining: ibv_req_notify_cq asks for one event at the
// NEXT completion. Drain first and arm afterwards, and a completion that
// arrives between the last (empty) ibv_poll_cq and the arm sits in the CQ
// with no event ever raised for it: we sleep in poll() until the timeout, or
// forever without one. Arming first closes that window: a completion that
// lands after the arm raises a new event, one that landed before it is found
// by this drain. The price: sometimes an event whose completions this drain
// already took (an "empty event").
std::vector<ibv_wc> rearm_then_drain(ibv_comp_channel* channel, ibv_cq* cq, EventCounts& counts) {
    std::vector<ibv_wc> found;
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    // The fd is O_NONBLOCK, so if the event is gone after all, this returns
    // -1 with EAGAIN instead of blocking: back to poll().
    if (ibv_get_cq_event(channel, &ev_cq, &ev_ctx) == -1) {
        if (errno == EAGAIN) return found;
        wb::fail("ibv_get_cq_event(channel, &ev_cq, &ev_ctx) failed: " + wb::errno_str(errno));
    }
    if (ev_cq != cq) wb::fail("ibv_get_cq_event returned an event for a CQ this program did not bind");
    ++counts.events;
    // Every event returned must be acknowledged once; batching saves the mutex.
    if (++counts.unacked == kAckBatch) {
        ibv_ack_cq_events(cq, counts.unacked);
        counts.unacked = 0;
    }
    // Re-arm first (0: any completion, not only those of "solicited" SENDs) ...
    CHECK_RC(ibv_req_notify_cq(cq, 0));
    // ... then drain until ibv_poll_cq finds nothing.
    for (;;) {
        ibv_wc wc[kPollBatch];
        const int n = CHECK_POLL(ibv_poll_cq(cq, kPollBatch, wc));
        if (n == 0) break;
        found.insert(found.end(), wc, wc + n);
    }
    counts.completions += found.size();
    if (found.empty()) ++counts.empty_events;
    return found;
}

// "server: event 3: 3 completions (2 x IBV_WC_RECV, 1 x IBV_WC_SEND)"
void narrate(const char* side, const EventCounts& counts, const std::vector<ibv_wc>& wcs) {
    int recvs = 0, sends = 0, failed = 0;
    for (const ibv_wc& wc : wcs) {
        if (wc.status != IBV_WC_SUCCESS) ++failed;
        else if (wc.wr_id & kSendTag) ++sends;
        else ++recvs;
    }
    std::string what;
    if (recvs) what += std::to_string(recvs) + " x IBV_WC_RECV";
    if (sends) what += (what.empty() ? "" : ", ") + std::to_string(sends) + " x IBV_WC_SEND";
    if (failed) what += (what.empty() ? "" : ", ") + std::to_string(failed) + " failed";
    if (what.empty()) what = "an empty event: the previous drain took them";
    std::printf("%s: event %lu: %zu completion%s (%s)\n", side, counts.events, wcs.size(),
                wcs.size() == 1 ? "" : "s", what.c_str());
}

// Post one receive into slot `i` of `mr` (lesson 4, one per slot).
void post_receive(ibv_qp* qp, const ibv_mr* mr, uint32_t i) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr) + i * kSlotBytes,
        .length = kSlotBytes,
        .lkey = mr->lkey,
    };
    ibv_recv_wr wr = {.wr_id = i, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

// Post one signaled SEND of `length` bytes from slot `i` of `mr` (lesson 4).
void post_send(ibv_qp* qp, const ibv_mr* mr, uint32_t i, uint32_t length) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr) + i * kSlotBytes,
        .length = length,
        .lkey = mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = kSendTag | i,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,  // a completion, so an event, for every SEND
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

}  // namespace

int main(int argc, char** argv) {
    std::string count_text;
    const wb::ExtraOption extra[] = {
        {'n', "count", "COUNT", "client: send COUNT requests at once, 1..64 (default: 1)", &count_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]                     server: add the numbers each request carries\n"
                    "  lesson8 [options] [-n COUNT] HOST A B   client: send A and B COUNT times, print the sum",
        .summary = "lesson 4's sum service, event-driven: a completion channel and poll(), no busy polling",
        .notes = "A and B are signed 64-bit integers; a sum that overflows is an error on both sides (exit 1).",
        .numbers_after_host = true,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    // No host: server. HOST A B: client (common/sum_protocol.cpp checks them).
    const wb::SumArgs sum_args = wb::parse_sum_args(opt);
    const bool is_server = sum_args.is_server;
    if (is_server && opt.given('n')) wb::usage_error("-n is a client option");
    const int64_t a = sum_args.a, b = sum_args.b;
    const auto count = static_cast<uint32_t>(opt.given('n') ? wb::parse_range(count_text, "-n", 1, kMaxRequests) : 1);
    const char* const side = is_server ? "server" : "client";

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);

    // 2. The objects, in creation order (reverse destruction: lesson 2).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};

    // Memory as in lesson 4, one slot per request: receive slots our NIC
    // writes (LOCAL_WRITE), send slots it only reads (no flag). No REMOTE_*
    // flag: a SEND never names our memory.
    constexpr size_t kBytes = size_t{kMaxRequests} * kSlotBytes;
    wb::Buffer recv_buf = wb::alloc_buffer(kBytes);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), kBytes, IBV_ACCESS_LOCAL_WRITE),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};
    wb::Buffer send_buf = wb::alloc_buffer(kBytes);
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), kBytes, 0),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 3. New: the completion channel, a file descriptor the CQ raises events
    //    on. Non-blocking, so that ibv_get_cq_event can never block: we wait
    //    in poll(), with a timeout, instead.
    wb::CompletionChannel channel{CHECK_PTR(ibv_create_comp_channel(ctx.get()))};
    const int fd_flags = CHECK_ERRNO(fcntl(channel->fd, F_GETFL));
    CHECK_ERRNO(fcntl(channel->fd, F_SETFL, fd_flags | O_NONBLOCK));

    // 4. One CQ bound to the channel (4th argument), for sends and receives
    //    alike: room for every completion of a full run (comp_vector 0: the
    //    first interrupt vector). Armed at once, before any completion can
    //    exist, so that the first completion raises the first event.
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 2 * kMaxRequests, nullptr, channel.get(), 0))};
    CHECK_RC(ibv_req_notify_cq(cq.get(), 0));  // 0: every completion, not only solicited ones
    std::printf("%s: completion channel fd %d (O_NONBLOCK); CQ armed\n", side, channel->fd);

    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {
            .max_send_wr = kMaxRequests,  // every SEND of a run may be outstanding at once
            .max_recv_wr = kMaxRequests,  // every receive is posted up front
            .max_send_sge = 1,
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();
    wb::qp_to_init(qp.get(), addr, 0);  // the peer may do nothing to our memory

    // 5. All receives go up now, before the peer can send (lesson 4): the
    //    server's for every request a client may send, the client's for its answers.
    const uint32_t receives = is_server ? kMaxRequests : count;
    for (uint32_t i = 0; i < receives; ++i) post_receive(qp.get(), recv_mr.get(), i);
    std::printf("%s: posted %u receive%s before the exchange\n", side, receives, receives == 1 ? "" : "s");

    // 6. The TCP exchange and lesson 3's transitions, as in lesson 4.
    wb::Connection conn = wb::meet_peer(opt, is_server);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("%s: peer %s is QP 0x%x\n", side, conn.peer().c_str(), peer.qp_num);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    // RTR!: the client does not SEND before the server's QP is in RTR (lesson 4, step 8).
    if (is_server) {
        wb::send_token(conn, "RTR!");
    } else {
        wb::expect_token(conn, "RTR!", opt.timeout_s);
    }

    EventCounts counts;
    if (is_server) {
        // 7. The event loop: sleep until a CQ event or the client's "DONE";
        //    answer each request as its RECV completion is drained. The
        //    client says DONE after its last answer; we stop once every
        //    answer's SEND has completed too.
        uint32_t requests = 0, answered = 0, failures = 0;
        bool done = false;
        while (!done || answered < requests) {
            const Ready ready = wait_for_news(channel.get(), done ? -1 : conn.fd(), opt.timeout_s,
                                              done ? "the SEND completions of the answers" : "requests");
            if (ready.tcp) {
                // The client writes only "DONE"; a close before it means it failed.
                wb::expect_token(conn, "DONE", opt.timeout_s);
                done = true;
                std::printf("server: the client says DONE\n");
            }
            if (!ready.cq) continue;
            const std::vector<ibv_wc> wcs = rearm_then_drain(channel.get(), cq.get(), counts);
            narrate(side, counts, wcs);
            for (const ibv_wc& wc : wcs) {
                const bool is_send = wc.wr_id & kSendTag;
                wb::check_wc(wc, is_send ? "the SEND of an answer" : "the receive of a request");
                if (is_send) {
                    ++answered;
                    continue;
                }
                // A request in receive slot i: check it, add, answer from send slot i.
                const auto i = static_cast<uint32_t>(wc.wr_id);
                ++requests;
                // Decode exactly one request and add it (common/sum_protocol.cpp).
                const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get() + i * kSlotBytes, wc.byte_len);
                if (answer.error.empty()) {
                    std::printf("server: request %u: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", requests, answer.a,
                                answer.b, answer.sum);
                } else {
                    std::printf("server: request %u: %s\n", requests, answer.error.c_str());
                    ++failures;
                }
                std::memcpy(send_buf.get() + i * kSlotBytes, &answer.response, sizeof answer.response);
                post_send(qp.get(), send_mr.get(), i, sizeof answer.response);
            }
        }
        // 8. Every event acknowledged before the CQ is destroyed (at the end
        //    of main): ibv_destroy_cq waits until the acks match the events.
        ibv_ack_cq_events(cq.get(), counts.unacked);
        counts.unacked = 0;
        std::printf("events: %lu, completions: %lu, empty events: %lu\n", counts.events, counts.completions,
                    counts.empty_events);
        if (failures > 0)
            wb::result_error(std::to_string(failures) + " of " + std::to_string(requests) +
                         " requests failed (overflow or bad length); the client was told");
        std::printf("result: served %u request%s\n", requests, requests == 1 ? "" : "s");
        return 0;
    }

    // Client.
    // 7. SEND all COUNT requests at once, each from its own slot.
    const wb::SumRequest request = wb::make_sum_request(a, b);
    for (uint32_t i = 0; i < count; ++i) {
        std::memcpy(send_buf.get() + i * kSlotBytes, &request, sizeof request);
        post_send(qp.get(), send_mr.get(), i, sizeof request);
    }
    std::printf("client: sent %u request%s: %" PRId64 " + %" PRId64 "\n", count, count == 1 ? "" : "s", a, b);

    // 8. The event loop: sleep until a CQ event; count SEND completions and
    //    answers until all COUNT of each are in. The server writes nothing
    //    on TCP meanwhile, so the TCP fd turning readable means it went away.
    uint32_t sent = 0, answers = 0;
    int64_t sum = 0;
    std::string failure;
    int tcp_fd = conn.fd();  // -1 once the server has closed the connection
    while (sent < count || answers < count) {
        const Ready ready =
            tcp_fd >= 0 ? wait_for_news(channel.get(), tcp_fd, opt.timeout_s, "the server's answers")
                        : wait_for_news(channel.get(), -1, static_cast<int>(wb::kRetriesGiveUp.count() / 1000),
                                        "the server's answers", "the server closed the connection: see its output");
        if (ready.cq) {
            const std::vector<ibv_wc> wcs = rearm_then_drain(channel.get(), cq.get(), counts);
            narrate(side, counts, wcs);
            for (const ibv_wc& wc : wcs) {
                const bool is_send = wc.wr_id & kSendTag;
                wb::check_wc(wc, is_send ? "the SEND of a request" : "the receive of an answer");
                if (is_send) {
                    ++sent;
                    continue;
                }
                ++answers;
                const wb::SumResult r = wb::read_sum_response(recv_buf.get() + wc.wr_id * kSlotBytes, wc.byte_len, a, b);
                if (!r.error.empty()) failure = r.error;
                else sum = r.sum;
            }
        } else if (ready.tcp) {
            // The server closed TCP: it exited. A SEND of ours in flight to its
            // vanished QP still ends in IBV_WC_RETRY_EXC_ERR once our retries
            // run out (wb::kRetriesGiveUp): wait that long for it, it says more.
            std::printf("client: the server %s closed the connection; waiting %lld ms for our QP's last word\n",
                        conn.peer().c_str(), static_cast<long long>(wb::kRetriesGiveUp.count()));
            tcp_fd = -1;
        }
    }
    // 9. Tell the server we are done; acknowledge every event before the CQ
    //    is destroyed at the end of main (ibv_destroy_cq waits for them).
    wb::send_token(conn, "DONE");
    ibv_ack_cq_events(cq.get(), counts.unacked);
    counts.unacked = 0;
    std::printf("events: %lu, completions: %lu, empty events: %lu\n", counts.events, counts.completions,
                counts.empty_events);
    if (!failure.empty()) wb::result_error(failure);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", a, b, sum);
    return 0;
}
