// lesson13.cpp - one shared receive queue (SRQ) for many clients, and asynchronous events.
//
// Lesson 4's sum service, for CLIENTS clients at once. Each client has its
// own RC queue pair at the server (an RC QP connects exactly two endpoints,
// as in lesson 7), but the server posts its receives to ONE shared receive
// queue that all those QPs take from, and all of them complete into ONE CQ.
// A request is told apart by wc.qp_num, the number of the QP it arrived on,
// and the answer goes back on that QP.
//
// The server does not re-post a receive per request. It arms the SRQ's
// limit (ibv_modify_srq, srq_limit L): when fewer than L receives are left,
// the device raises IBV_EVENT_SRQ_LIMIT_REACHED, an ASYNCHRONOUS event read
// from the device context's own fd with ibv_get_async_event. The server then
// arms the limit again, refills the SRQ, and acknowledges the event
// (ibv_ack_async_event): the event fires once per arming. While the SRQ is empty, a
// client's SEND is answered with an RNR NAK and resent (lesson 4's RNR): a
// wait, not an error. Each client sends its N requests in one burst, so the
// SRQ does run low; docs/lesson13-srq.md measures the RNR NAKs.
//
// The client is lesson 4's, in common/sum_burst.cpp: its request k (k = 1..N)
// asks for k + 100k, and it checks every sum (common/sum_protocol.hpp).
//
// Run it on one host (rxe's loopback carries the RDMA):
//     ./lesson13 -c 2                 server: 2 clients, one SRQ of 8 receives, limit 2
//     ./lesson13 127.0.0.1 -n 10      client 1 (another terminal)
//     ./lesson13 127.0.0.1 -n 10      client 2 (a third terminal, within --timeout
//                                     of client 1, which waits for the server's GO)
// On two hosts: ./lesson13 on host A, ./lesson13 A on hosts B and C. Every
// side takes -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson13 -h).
//
// Verbs it introduces:
//     ibv_create_srq (ibv_srq_init_attr), ibv_qp_init_attr.srq, ibv_post_srq_recv
//     ibv_modify_srq with IBV_SRQ_LIMIT (srq_limit: the one-shot low-water mark)
//     ibv_get_async_event, ibv_ack_async_event, ibv_event_type_str; ctx->async_fd
//     wc.qp_num: which QP a completion belongs to, on a CQ that many QPs share
//
// Read more: man ibv_create_srq, man ibv_modify_srq, man ibv_post_srq_recv,
// man ibv_get_async_event; docs/lesson13-srq.md (diagram, the receive-memory
// arithmetic, the async event loop, RNR on an empty SRQ, the wire, exercises).
#include <infiniband/verbs.h>

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "sum_burst.hpp"
#include "sum_protocol.hpp"

namespace {

constexpr uint16_t kLesson = 13;  // sent in the exchange: a lesson-13 client only talks to a lesson-13 server

// Each receive buffer is larger than a request, as in lesson 4, so that a
// message of the wrong length still lands and byte_len can say so.
constexpr uint32_t kRecvBufferBytes = 64;
// Answers the server may have in flight on one QP (its max_send_wr). More
// wait in a queue in this program until a SEND completion frees a slot.
constexpr uint32_t kSendDepth = 16;
// A real client has at most its burst of requests unanswered; a client with
// more answers waiting than that takes none of them (no receives posted), and
// is dropped before its queue eats the server's memory.
constexpr size_t kMaxWaiting = wb::kBurstMaxRequests;
// The server's wr_id of a SEND: this bit set, the client's index below it.
// A receive's wr_id is the index of its buffer.
constexpr uint64_t kSendTag = 1ull << 32;
// How long the server sleeps in poll() when its CQ is empty: short, because
// the CQ itself is busy-polled (lesson 8 shows how to sleep on a CQ too).
constexpr int kIdleMs = 1;

// Post `slots` (indexes of receive buffers) on the SRQ as ONE list of work
// requests chained through `next`: one call, however many buffers.
void post_srq_receives(ibv_srq* srq, const ibv_mr* mr, const std::vector<uint32_t>& slots) {
    if (slots.empty()) return;
    std::vector<ibv_sge> sges(slots.size());
    std::vector<ibv_recv_wr> wrs(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
        sges[i] = {.addr = reinterpret_cast<uintptr_t>(mr->addr) + slots[i] * kRecvBufferBytes,
                   .length = kRecvBufferBytes, .lkey = mr->lkey};
        wrs[i] = {.wr_id = slots[i], .next = i + 1 < slots.size() ? &wrs[i + 1] : nullptr, .sg_list = &sges[i],
                  .num_sge = 1};
    }
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_srq_recv(srq, wrs.data(), &bad), "ENOMEM: more receives than the SRQ's max_wr?");
}

// Arm the limit: "raise IBV_EVENT_SRQ_LIMIT_REACHED once, when fewer than
// `limit` receives are left". The device disarms it (srq_limit 0) as it
// raises the event, so every event must be followed by another arming.
void arm_srq_limit(ibv_srq* srq, uint32_t limit) {
    ibv_srq_attr attr = {.max_wr = 0, .max_sge = 0, .srq_limit = limit};  // only srq_limit is read (the mask)
    CHECK_RC(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), "EINVAL: is the limit larger than the SRQ?");
}

// Post one signaled SEND of `length` bytes at `addr` inside `mr`.
void post_send(ibv_qp* qp, const ibv_mr* mr, const void* addr, uint32_t length, uint64_t wr_id) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(addr), .length = length, .lkey = mr->lkey};
    ibv_send_wr wr = {.wr_id = wr_id, .next = nullptr, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                      .send_flags = IBV_SEND_SIGNALED};  // the completion frees the answer's buffer slot
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

// What the server keeps per client.
struct Client {
    wb::Connection conn;
    wb::QueuePair qp;
    std::deque<wb::SumResponse> waiting;  // answers not yet posted: the send queue was full
    uint64_t answers_posted = 0;          // also picks the slot of the next answer's buffer
    uint32_t sends_in_flight = 0;
    int served = 0;
    std::string token;                    // DONE's bytes so far: TCP may deliver them in pieces
    bool done = false;                    // said DONE on the TCP connection
    bool dropped = false;                 // broke the protocol: its QP is in ERR, its connection closed
    std::chrono::steady_clock::time_point last_news{};  // its last request, answer or TCP byte
};

// Drop a client that broke the protocol, and only that one: its QP to ERR
// (the SENDs it has in flight are flushed; the receives on the SRQ stay
// posted for the others), its TCP connection closed, its waiting answers
// forgotten. One line on stderr says who and why.
void drop(Client& c, int index, const std::string& why) {
    ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    CHECK_RC(ibv_modify_qp(c.qp.get(), &attr, IBV_QP_STATE));
    std::fprintf(stderr, "%s: client %d (%s) %s; dropped it: QP 0x%x to IBV_QPS_ERR, connection closed\n",
                 wb::program_name(), index + 1, c.conn.peer().c_str(), why.c_str(), c.qp->qp_num);
    c.conn = wb::Connection();
    c.waiting.clear();
    c.dropped = true;
}

// The server's receive pool and limit, and what the events did to it.
struct Srq {
    ibv_srq* srq;
    const ibv_mr* mr;
    uint32_t limit;
    std::vector<uint32_t> free_slots;  // receive buffers not posted: consumed, and their request read
    uint64_t posted = 0;               // receives ever posted to the SRQ
    uint64_t completed = 0;            // receive completions ever polled from the CQ
    bool refill_due = false;           // the limit event came; refill once `completed` reaches refill_at
    uint64_t refill_at = 0;
    int limit_events = 0;
};

// Arm the limit again, then post every free buffer on the SRQ as one list.
// Arm FIRST. Posted first, the receives could all be taken before the arm
// (a burst of resent SENDs, this process descheduled): an SRQ that is
// already empty when armed raises no event, since nothing more is taken
// from it, and nothing would ever refill it. Armed first, while the SRQ is
// still low, a receive taken before the post raises one spare event, which
// costs one more refill and nothing else.
void refill(Srq& pool) {
    const size_t n = pool.free_slots.size();
    arm_srq_limit(pool.srq, pool.limit);
    post_srq_receives(pool.srq, pool.mr, pool.free_slots);
    pool.posted += n;
    pool.free_slots.clear();
    pool.refill_due = false;
    std::printf("server: refilled %zu receives; limit re-armed at %u\n", n, pool.limit);
}

// The asynchronous event loop's body: read every event waiting on the
// context's async fd (non-blocking, so ibv_get_async_event returns -1 with
// EAGAIN when there is none left), handle it, and acknowledge it. Every event
// returned must be acknowledged exactly once, or destroying the object it
// names (the SRQ, a QP, a CQ) blocks for ever waiting for the ack. An event
// that names one client's QP adds its number to `broken_qps`: serve() drops
// that client, and serves the others.
void handle_async_events(ibv_context* ctx, Srq& pool, std::vector<uint32_t>& broken_qps) {
    for (;;) {
        ibv_async_event ev{};
        if (ibv_get_async_event(ctx, &ev) == -1) {
            if (errno == EAGAIN) return;  // no more events
            wb::fail("ibv_get_async_event(ctx, &ev) failed: " + wb::errno_str(errno));
        }
        switch (ev.event_type) {
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            // ev.element.srq says which SRQ. Fewer than `limit` receives are
            // left, so at least posted - limit + 1 have been consumed. Their
            // completions can reach our CQ AFTER this event (rxe raises it as
            // it takes the receive, and completes the receive later), so
            // refilling now would miss them, and an SRQ left empty raises no
            // further event: refill once they are all in (serve's loop).
            ++pool.limit_events;
            pool.refill_due = true;
            pool.refill_at = pool.posted - pool.limit + 1;
            std::printf("server: async event \"%s\" #%d: fewer than %u receives left\n",
                        ibv_event_type_str(ev.event_type), pool.limit_events, pool.limit);
            break;
        case IBV_EVENT_QP_FATAL:          // a QP (ev.element.qp) hit an error it cannot report in a completion
        case IBV_EVENT_QP_REQ_ERR:        // ... a peer's request broke the transport rules
        case IBV_EVENT_QP_ACCESS_ERR:     // ... a peer's request violated access rights
            std::printf("server: async event \"%s\" on QP 0x%x\n", ibv_event_type_str(ev.event_type),
                        ev.element.qp->qp_num);
            broken_qps.push_back(ev.element.qp->qp_num);
            break;
        case IBV_EVENT_SRQ_ERR:           // the SRQ itself failed: every QP on it is stuck
        case IBV_EVENT_DEVICE_FATAL:      // the device is gone: nothing on it works any more
            wb::fail(std::string("async event \"") + ibv_event_type_str(ev.event_type) + "\"",
                     "the peer or the device failed; read the kernel log (dmesg)");
        default:
            // The others are news, not failures: a port going down or up (IBV_EVENT_PORT_ERR /
            // _ACTIVE), a QP on an SRQ whose last receive is done after it entered the error
            // state (IBV_EVENT_QP_LAST_WQE_REACHED: now it may be destroyed), ...
            std::printf("server: async event \"%s\"\n", ibv_event_type_str(ev.event_type));
            break;
        }
        ibv_ack_async_event(&ev);  // returns void: nothing to check
    }
}

int serve(const wb::Options& opt, ibv_context* ctx, const wb::PortAddress& addr, int clients, uint32_t srq_size,
          uint32_t limit) {
    // 2. How big may an SRQ be here? (0 max_srq: the device has none.)
    ibv_device_attr dev{};
    CHECK_RC(ibv_query_device(ctx, &dev));
    std::printf("device: max_srq %d, max_srq_wr %d, max_srq_sge %d\n", dev.max_srq, dev.max_srq_wr, dev.max_srq_sge);
    if (dev.max_srq == 0) wb::fail("this device has no shared receive queues (max_srq 0)");
    if (srq_size > static_cast<uint32_t>(dev.max_srq_wr))
        wb::fail("--srq-size " + std::to_string(srq_size) + " is more than this device's max_srq_wr " +
                 std::to_string(dev.max_srq_wr));

    // 3. In creation order (reverse destruction: lesson 2): PD, ONE CQ for
    //    every QP's receives and sends, the SRQ, then the memory.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx))};
    const int cq_size = static_cast<int>(srq_size) + clients * static_cast<int>(kSendDepth);  // every receive and SEND at once
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx, cq_size, nullptr, nullptr, 0))};
    ibv_srq_init_attr srq_attr = {.attr = {
        .max_wr = srq_size,  // receives it holds (the device may round up)
        .max_sge = 1,        // each receive is one buffer
        .srq_limit = 0,      // ignored by ibv_create_srq: the limit is armed with ibv_modify_srq
    }};
    wb::SharedReceiveQueue srq{CHECK_PTR(ibv_create_srq(pd.get(), &srq_attr), "is --srq-size within max_srq_wr?")};
    // Receive buffers: LOCAL_WRITE, our NIC writes the requests there;
    // answers: no flag, the NIC only reads them (lesson 4's reasoning).
    wb::Buffer recv_buf = wb::alloc_buffer(srq_size * kRecvBufferBytes);
    wb::MemoryRegion recv_mr{CHECK_PTR(
        ibv_reg_mr(pd.get(), recv_buf.get(), srq_size * kRecvBufferBytes, IBV_ACCESS_LOCAL_WRITE),
        "ulimit -l: is locked memory limited?")};
    const size_t answer_bytes = clients * kSendDepth * sizeof(wb::SumResponse);
    wb::Buffer answer_buf = wb::alloc_buffer(answer_bytes);
    wb::MemoryRegion answer_mr{CHECK_PTR(ibv_reg_mr(pd.get(), answer_buf.get(), answer_bytes, 0),
                                         "ulimit -l: is locked memory limited?")};
    std::printf("server: receive memory: a receive queue per QP needs %d clients x %u receives x %u B = %u B; "
                "one SRQ needs %u x %u B = %u B, however many clients\n",
                clients, srq_size, kRecvBufferBytes, clients * srq_size * kRecvBufferBytes, srq_size,
                kRecvBufferBytes, srq_size * kRecvBufferBytes);

    // 4. Fill the SRQ, then arm its limit. Posting goes to the SRQ, not to
    //    any QP: whichever QP's request comes first takes the next receive.
    Srq pool{.srq = srq.get(), .mr = recv_mr.get(), .limit = limit, .free_slots = {}, .posted = srq_size};
    std::vector<uint32_t> all(srq_size);
    for (uint32_t i = 0; i < srq_size; ++i) all[i] = i;
    post_srq_receives(srq.get(), recv_mr.get(), all);
    arm_srq_limit(srq.get(), limit);
    std::printf("server: SRQ of %u receives posted; limit armed at %u\n", srq_size, limit);
    // The async fd: non-blocking, so that a read with no event returns at
    // once (EAGAIN) and poll() below decides how long to wait.
    const int flags = CHECK_ERRNO(fcntl(ctx->async_fd, F_GETFL));
    CHECK_ERRNO(fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK));

    // 5. One QP per client, all on the SRQ and the CQ (lesson 7's accept loop).
    std::vector<Client> cs(clients);  // destroyed before srq, cq and pd (declared after them)
    {
        wb::Listener listener(opt.tcp_port);  // closed after the last client: one more is refused
        for (int i = 0; i < clients; ++i) {
            std::printf("server: waiting for client %d of %d on TCP port %u\n", i + 1, clients, opt.tcp_port);
            Client& c = cs[i];
            c.conn = listener.accept(i == 0 ? opt.accept_timeout_s() : opt.timeout_s);
            ibv_qp_init_attr qp_attr = {
                .send_cq = cq.get(),
                .recv_cq = cq.get(),  // receives taken from the SRQ complete on the QP's recv_cq
                .srq = srq.get(),     // THE change: this QP has no receive queue of its own
                .cap = {.max_send_wr = kSendDepth, .max_recv_wr = 0, .max_send_sge = 1, .max_recv_sge = 0},
                .qp_type = IBV_QPT_RC,  // (max_recv_wr, max_recv_sge: ignored with an SRQ)
            };
            c.qp.reset(CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr)));
            const uint32_t psn = wb::random_psn();
            const wb::PeerInfo peer = wb::exchange(c.conn, wb::local_info(kLesson, c.qp.get(), psn, addr), opt.timeout_s);
            wb::qp_to_init(c.qp.get(), addr, 0);
            wb::qp_to_rtr(c.qp.get(), addr, peer);
            wb::qp_to_rts(c.qp.get(), psn);
            std::printf("server: client %d (%s) is connected: QP 0x%x <-> 0x%x, on the SRQ\n", i + 1,
                        c.conn.peer().c_str(), c.qp->qp_num, peer.qp_num);
        }
    }

    // 6. GO to all at once (lesson 7), so that their bursts meet at the SRQ.
    //    GO also says our QPs are past RTR (lesson 4's "RTR!").
    std::printf("server: %d of %d clients connected; sending GO\n", clients, clients);
    for (Client& c : cs) wb::send_token(c.conn, "GO!!");

    // 7. Serve until every client has said DONE and every answer's SEND has
    //    completed. One loop watches three things: the CQ (busy-polled), the
    //    async fd and the clients' TCP connections (poll(), when the CQ is empty).
    //    A client that breaks the protocol is dropped, and only that one: a
    //    request its receive cannot take (a failed RECV), a failed answer,
    //    more answers waiting than it takes, anything but DONE on TCP, or
    //    nothing at all for --timeout seconds, on a clock of its own.
    using Clock = std::chrono::steady_clock;
    for (Client& c : cs) c.last_news = Clock::now();
    int total = 0;
    const auto busy = [&] {  // a client still working, or an answer still in flight
        for (const Client& c : cs) if (!c.dropped && (!c.done || c.sends_in_flight > 0)) return true;
        return false;
    };
    const auto client_of = [&](uint32_t qp_num) -> int {
        for (int who = 0; who < clients; ++who)
            if (cs[who].qp->qp_num == qp_num) return who;
        wb::fail("a completion for QP " + std::to_string(qp_num) + ", not one of ours");
    };
    std::vector<uint32_t> broken_qps;  // named by an async event
    while (busy()) {
        ibv_wc wcs[16];
        const int n = CHECK_POLL(ibv_poll_cq(cq.get(), 16, wcs));
        for (int i = 0; i < n; ++i) {
            const ibv_wc& wc = wcs[i];
            if (wc.wr_id & kSendTag) {  // an answer arrived (or was flushed); its slot is free
                const int who = static_cast<int>(wc.wr_id & ~kSendTag);
                Client& c = cs[who];
                --c.sends_in_flight;
                if (c.dropped) continue;
                if (wc.status != IBV_WC_SUCCESS)
                    drop(c, who, std::string("took no answer: the SEND failed with ") + wb::wc_status_name(wc.status));
                c.last_news = Clock::now();
                continue;
            }
            // A request. wc.qp_num is OUR QP that it arrived on: the one
            // number that says which client sent it (also in a failed completion).
            const int who = client_of(wc.qp_num);
            Client& c = cs[who];
            const uint32_t slot = static_cast<uint32_t>(wc.wr_id);
            if (wc.status != IBV_WC_SUCCESS || c.dropped) {  // rxe: IBV_WC_LOC_QP_OP_ERR for a SEND longer than the buffer
                pool.free_slots.push_back(slot);
                ++pool.completed;
                if (!c.dropped)
                    drop(c, who, std::string("sent a request its receive could not take (") +
                                     wb::wc_status_name(wc.status) + ")");
                continue;
            }
            const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get() + slot * kRecvBufferBytes, wc.byte_len);
            pool.free_slots.push_back(slot);  // read: the buffer may take the next request
            ++pool.completed;
            ++c.served;
            ++total;
            if (answer.error.empty())
                std::printf("server: QP 0x%x (client %d) request %d: %" PRId64 " + %" PRId64 " = %" PRId64 "\n",
                            wc.qp_num, who + 1, c.served, answer.a, answer.b, answer.sum);
            else
                std::printf("server: QP 0x%x (client %d) request %d refused: %s\n", wc.qp_num, who + 1, c.served,
                            answer.error.c_str());
            c.waiting.push_back(answer.response);
            c.last_news = Clock::now();
            if (c.waiting.size() > kMaxWaiting)
                drop(c, who, "has more than " + std::to_string(kMaxWaiting) + " answers waiting and takes none");
        }
        if (pool.refill_due && pool.completed >= pool.refill_at) refill(pool);
        // Answer on the QP each request came from, as its send queue allows.
        for (int i = 0; i < clients; ++i) {
            Client& c = cs[i];
            while (!c.waiting.empty() && c.sends_in_flight < kSendDepth) {
                auto* slot = reinterpret_cast<wb::SumResponse*>(answer_buf.get()) + i * kSendDepth +
                             c.answers_posted % kSendDepth;
                *slot = c.waiting.front();
                c.waiting.pop_front();
                post_send(c.qp.get(), answer_mr.get(), slot, sizeof *slot, kSendTag | static_cast<uint64_t>(i));
                ++c.answers_posted;
                ++c.sends_in_flight;
            }
            // Each client's own clock: the others' traffic does not keep it alive.
            if (!c.dropped && !(c.done && c.sends_in_flight == 0) &&
                Clock::now() - c.last_news > std::chrono::seconds(opt.timeout_s))
                drop(c, i, "sent nothing for " + std::to_string(opt.timeout_s) + " s (" + std::to_string(c.served) +
                               " served)");
        }
        if (n > 0) continue;

        // The CQ is empty: sleep at most kIdleMs on the async fd and on the
        // TCP connections of the clients still working (-1: left out).
        std::vector<pollfd> fds{{.fd = ctx->async_fd, .events = POLLIN, .revents = 0}};
        for (const Client& c : cs)
            fds.push_back({.fd = c.done || c.dropped ? -1 : c.conn.fd(), .events = POLLIN, .revents = 0});
        const int ready = poll(fds.data(), fds.size(), kIdleMs);
        if (ready == -1 && errno == EINTR) continue;  // a signal: look at the CQ again
        CHECK_ERRNO(ready);
        if (fds[0].revents & POLLIN) {
            handle_async_events(ctx, pool, broken_qps);
            for (const uint32_t qp_num : broken_qps) {
                const int who = client_of(qp_num);
                if (!cs[who].dropped) drop(cs[who], who, "broke its QP (the async event above)");
            }
            broken_qps.clear();
            if (pool.refill_due && pool.completed >= pool.refill_at) refill(pool);
        }
        for (int i = 0; i < clients; ++i) {
            Client& c = cs[i];
            if (fds[i + 1].revents == 0) continue;
            // Take what has come of DONE, and never wait for the rest: a
            // client that sends "DO" and stops must not stop the loop for
            // everyone (its clock above drops it).
            const size_t had = c.token.size();
            if (const std::string lost = wb::take_token_bytes(c.conn, c.token, "DONE"); !lost.empty()) {
                drop(c, i, lost);
                continue;
            }
            if (c.token.size() > had) c.last_news = Clock::now();
            if (c.token.size() < 4) continue;
            if (c.token != "DONE") {
                drop(c, i, "sent \"" + wb::printable(c.token.data(), c.token.size()) + "\" instead of DONE");
                continue;
            }
            c.done = true;
            std::printf("server: client %d is done after %d requests\n", i + 1, c.served);
        }
    }
    int dropped = 0;
    for (const Client& c : cs) dropped += c.dropped ? 1 : 0;
    wb::print_srq_result(total, clients, dropped, srq_size, pool.limit_events);  // exits 1 if any was dropped
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const wb::BurstArgs args = wb::parse_burst_args(argc, argv);  // checked: common/sum_burst.cpp
    const wb::Options& opt = args.opt;

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    // The client is lesson 4's, its N requests in one post list (lesson 11),
    // so that the SRQ runs low: common/sum_burst.cpp, steps 2 to 7.
    return args.is_server ? serve(opt, ctx.get(), addr, args.clients, args.srq_size, args.limit)
                          : wb::sum_burst_client(opt, ctx.get(), addr, kLesson, args.requests);
}
