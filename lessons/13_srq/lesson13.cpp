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
// from the device context's own fd with ibv_get_async_event and acknowledged
// at once (ibv_ack_async_event). Once the completions of the receives it
// announced are in, the server arms the limit again and refills the SRQ:
// the event fires once per arming. While the SRQ is empty, a
// client's SEND is answered with an RNR NAK and resent (lesson 4's RNR): a
// wait, not an error. Each client sends its N requests in one burst, so the
// SRQ does run low; docs/lesson13-srq.md measures the RNR NAKs.
//
// The client, ask() below, is lesson 4's with its N requests in one post
// list (lesson 11): request k (k = 1..N) asks for k + 100k, and it checks
// every sum (common/sum_protocol.hpp).
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
// Verbs from earlier lessons, called here as they taught them: ibv_query_device
// (lesson 1), ibv_alloc_pd, ibv_create_cq, ibv_reg_mr (lesson 2), ibv_create_qp
// (lesson 3), ibv_post_recv, ibv_post_send, ibv_poll_cq (lesson 4), post lists
// (lesson 11), ibv_modify_qp to ERR (drop, lesson 10); the QP transitions
// through common/qp.hpp (lesson 3's, by hand). The client waits for its
// completions with wb::poll_success (common/completion.hpp: lesson 3's
// ibv_poll_cq loop); the server polls its shared CQ itself (step 7a).
//
// Read more: man ibv_create_srq, man ibv_modify_srq, man ibv_post_srq_recv,
// man ibv_get_async_event; docs/lesson13-srq.md (diagram, the receive-memory
// arithmetic, the async event loop, RNR on an empty SRQ, the wire, exercises).
#include <infiniband/verbs.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "check.hpp"
#include "completion.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "qp.hpp"
#include "sum_protocol.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint16_t kLesson = 13;  // sent in the exchange: a lesson-13 client only talks to a lesson-13 server

// A client's burst at most: its send and receive queues hold N each.
constexpr int kMaxRequests = 1000;
// Each receive buffer is larger than a request, as in lesson 4, so that a
// message of the wrong length still lands and byte_len can say so.
constexpr uint32_t kRecvBufferBytes = 64;
// Answers the server may have in flight on one QP (its max_send_wr). More
// wait in a queue in this program until a SEND completion frees a slot.
constexpr uint32_t kSendDepth = 16;
// A real client has at most its burst of requests unanswered; a client with
// more answers waiting than that takes none of them (no receives posted), and
// is dropped before its queue eats the server's memory.
constexpr size_t kMaxWaiting = kMaxRequests;
// The server's wr_id of a SEND: this bit set, the client's index below it.
// A receive's wr_id is the index of its buffer.
constexpr uint64_t kSendTag = 1ull << 32;
// How long the server sleeps in poll() when its CQ is empty: short, because
// the CQ itself is busy-polled (lesson 8 shows how to sleep on a CQ too).
constexpr int kIdleMs = 1;
// Connections whose QP information the server reads at once, before they
// are clients; more wait in the listen backlog.
constexpr size_t kMaxPending = 8;

// The command line, checked (misuse: one line on stderr, exit 2).
struct Args {
    wb::Options opt;
    bool is_server = true;
    int clients = 2;        // -c
    uint32_t srq_size = 8;  // -r, --srq-size
    uint32_t limit = 2;     // --limit
    int requests = 10;      // -n
};

Args parse_args(int argc, char** argv) {
    std::string clients_arg, srq_size_arg, limit_arg, requests_arg;
    const wb::ExtraOption extra[] = {
        {'c', "clients", "CLIENTS", "server: how many clients to serve at once (default: 2)", &clients_arg},
        {'r', "srq-size", "N", "server: receives in the shared receive queue (default: 8)", &srq_size_arg},
        {0, "limit", "L", "server: refill when fewer than L receives are left (default: 2)", &limit_arg},
        {'n', "requests", "N", "client: how many sum requests to send, in one burst (default: 10)", &requests_arg},
    };
    const wb::Usage usage = {
        .synopsis = "[options] [-c CLIENTS] [-r N] [--limit L]   server: one SRQ for every client\n"
                    "  lesson13 [options] HOST [-n N]                       client: N sum requests k + 100k",
        .summary = "one shared receive queue (SRQ) serves many RC clients; the SRQ limit as an async event",
        .notes = "The SRQ needs at least one receive per client (-r >= -c), and 1 <= L < N.",
        .server_scope = "The server listens on every address of this host (IPv4 and IPv6, port -p) and serves\n"
                        "CLIENTS clients. A connection that sends no sound QP information within --timeout is\n"
                        "closed, and the server waits for another in its place.\n"
                        "A client that breaks the protocol is dropped (its QP to ERR, its connection closed)\n"
                        "and the others are served to the end; then it exits 1.",
    };
    Args r{.opt = wb::parse_options(argc, argv, usage, extra)};
    const wb::Options& opt = r.opt;
    r.is_server = opt.args.empty();
    if (opt.args.size() > 1)
        wb::usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (r.is_server && opt.given('n')) wb::usage_error("-n is a client option (./lesson13 HOST -n N)");
    if (!r.is_server && (opt.given('c') || opt.given('r') || opt.given("limit")))
        wb::usage_error("-c, -r and --limit are server options (./lesson13 -c CLIENTS)");
    if (opt.given('c')) r.clients = static_cast<int>(wb::parse_range(clients_arg, "-c", 1, 100));
    if (opt.given('r')) r.srq_size = static_cast<uint32_t>(wb::parse_range(srq_size_arg, "--srq-size", 2, 65536));
    if (opt.given("limit")) r.limit = static_cast<uint32_t>(wb::parse_range(limit_arg, "--limit", 1, r.srq_size - 1));
    // Too many clients for the SRQ: with fewer receives than clients, some
    // client always finds none when they all send at once.
    if (r.is_server && r.srq_size < static_cast<uint32_t>(r.clients))
        wb::usage_error("an SRQ of " + std::to_string(r.srq_size) + " receives is too small for " +
                        std::to_string(r.clients) + " clients: give it at least one receive per client (--srq-size " +
                        std::to_string(r.clients) + " or more)");
    if (r.is_server && r.limit >= r.srq_size) wb::usage_error("--limit must be below --srq-size");
    if (opt.given('n')) r.requests = static_cast<int>(wb::parse_range(requests_arg, "-n", 1, kMaxRequests));
    return r;
}

// ===========================================================================
// The server: serve() at the end of this part; the steps it takes before.
// ===========================================================================

// 4. Post `slots` (indexes of receive buffers) on the SRQ as ONE list of work
//    requests chained through `next`: one call, however many buffers.
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

// 4. Arm the limit: "raise IBV_EVENT_SRQ_LIMIT_REACHED once, when fewer than
//    `limit` receives are left". The device disarms it (srq_limit 0) as it
//    raises the event, so every event must be followed by another arming.
void arm_srq_limit(ibv_srq* srq, uint32_t limit) {
    ibv_srq_attr attr = {.max_wr = 0, .max_sge = 0, .srq_limit = limit};  // only srq_limit is read (the mask)
    CHECK_RC(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), "EINVAL: is the limit larger than the SRQ?");
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

// What the server keeps per client.
struct Client {
    int number = 0;                       // 1..CLIENTS, as the messages count them
    wb::Connection conn;
    wb::QueuePair qp;
    std::deque<wb::SumResponse> waiting;  // answers not yet posted: the send queue was full
    uint64_t answers_posted = 0;          // also picks the slot of the next answer's buffer
    uint32_t sends_in_flight = 0;
    int served = 0;
    std::string token;                    // DONE's bytes so far: TCP may deliver them in pieces
    bool done = false;                    // said DONE on the TCP connection
    bool dropped = false;                 // broke the protocol: its QP is in ERR, its connection closed
    Clock::time_point last_news{};        // its last request, answer or TCP byte
    // Still to be served: not dropped, and no DONE yet or an answer still in flight.
    bool busy() const { return !dropped && (!done || sends_in_flight > 0); }
};

// Drop a client that broke the protocol, and only that one: its QP to ERR
// (the SENDs it has in flight are flushed; the receives on the SRQ stay
// posted for the others), its TCP connection closed, its waiting answers
// forgotten. One line on stderr says who and why.
void drop(Client& c, const std::string& why) {
    ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    CHECK_RC(ibv_modify_qp(c.qp.get(), &attr, IBV_QP_STATE));
    std::fprintf(stderr, "%s: client %d (%s) %s; dropped it: QP 0x%x to IBV_QPS_ERR, connection closed\n",
                 wb::program_name(), c.number, c.conn.peer().c_str(), why.c_str(), c.qp->qp_num);
    c.conn = wb::Connection();
    c.waiting.clear();
    c.dropped = true;
}

// Send a PeerInfo or a token now, or say that the peer is gone: never wait
// for a peer, never exit because of one. Such a message (54 bytes or 4) fits
// in an idle socket's send buffer, so it goes out whole or not at all.
bool send_now(wb::Connection& c, const void* bytes, size_t length) {
    return send(c.fd(), bytes, length, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(length);
}

// 5a. A connection accepted, not yet a client: its PeerInfo as it comes.
struct Pending {
    wb::Connection conn;
    std::array<uint8_t, wb::kPeerInfoWireSize> info{};
    size_t got = 0;                  // bytes of `info` received so far
    Clock::time_point since = Clock::now();
};

// 5a. Take what has come of a pending connection's PeerInfo, without
//     waiting. Returns "" while all is well, else why to drop the connection.
std::string read_peer_info(Pending& p, bool readable, int timeout_s) {
    if (readable) {
        const ssize_t n = recv(p.conn.fd(), p.info.data() + p.got, p.info.size() - p.got, MSG_DONTWAIT);
        if (n == 0)
            return "closed after " + std::to_string(p.got) + " of " + std::to_string(p.info.size()) +
                   " bytes of its QP information";
        if (n < 0 && errno != EAGAIN && errno != EINTR) return "lost its connection: " + wb::errno_str(errno);
        if (n > 0) p.got += static_cast<size_t>(n);
    }
    if (p.got < p.info.size() && Clock::now() - p.since > std::chrono::seconds(timeout_s))
        return "sent " + std::to_string(p.got) + " of " + std::to_string(p.info.size()) +
               " bytes of its QP information and then nothing for " + std::to_string(timeout_s) + " s";
    return "";
}

// 5b. A whole PeerInfo arrived: if it is a lesson-13 client's, the connection
//     becomes client `number`, with a QP of its own on the SRQ and the CQ.
//     Returns "" then, else why to drop the connection.
std::string admit(Pending& p, int number, ibv_pd* pd, ibv_cq* cq, ibv_srq* srq, const wb::PortAddress& addr,
                  std::vector<Client>& cs) {
    wb::PeerInfo peer;
    if (const std::string why = wb::decode(p.info, peer); !why.empty())
        return "sent a malformed exchange message: " + why;
    if (peer.lesson != kLesson)
        return "runs lesson " + std::to_string(peer.lesson) + ", this is lesson " + std::to_string(kLesson);
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq,
        .recv_cq = cq,  // receives taken from the SRQ complete on the QP's recv_cq
        .srq = srq,     // THE change: this QP has no receive queue of its own
        .cap = {.max_send_wr = kSendDepth, .max_recv_wr = 0, .max_send_sge = 1, .max_recv_sge = 0},
        .qp_type = IBV_QPT_RC,  // (max_recv_wr, max_recv_sge: ignored with an SRQ)
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd, &qp_attr))};
    const uint32_t psn = wb::random_psn();
    uint8_t mine[wb::kPeerInfoWireSize];
    wb::encode(wb::local_info(kLesson, qp.get(), psn, addr), mine);
    if (!send_now(p.conn, mine, sizeof mine)) return "closed before it took our QP information";
    wb::qp_to_init(qp.get(), addr, 0);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    std::printf("server: client %d (%s) is connected: QP 0x%x <-> 0x%x, on the SRQ\n", number,
                p.conn.peer().c_str(), qp->qp_num, peer.qp_num);
    cs.push_back({.number = number, .conn = std::move(p.conn), .qp = std::move(qp)});
    return "";
}

// 5. Accept connections until `clients` of them are clients (lesson 7's
//    accept loop), reading every pending connection's PeerInfo at once in
//    one poll(): a connection that says nothing, sends garbage or closes is
//    dropped alone (within --timeout) and holds up no one. The server gives
//    up when no connection at all comes for --timeout (for the first
//    client: without limit unless --timeout is given).
std::vector<Client> accept_clients(const wb::Options& opt, int clients, ibv_pd* pd, ibv_cq* cq, ibv_srq* srq,
                                   const wb::PortAddress& addr) {
    wb::Listener listener(opt.tcp_port);  // closed on return: one more client is refused
    std::vector<Client> cs;
    std::vector<Pending> pending;
    Clock::time_point news = Clock::now();  // the last connection accepted, dropped or admitted
    std::printf("server: waiting for client 1 of %d on TCP port %u\n", clients, opt.tcp_port);
    while (static_cast<int>(cs.size()) < clients) {
        const int listen_fd = pending.size() < kMaxPending ? listener.fd() : -1;  // -1: left out
        std::vector<pollfd> fds{{.fd = listen_fd, .events = POLLIN, .revents = 0}};
        for (const Pending& p : pending) fds.push_back({.fd = p.conn.fd(), .events = POLLIN, .revents = 0});
        const int ready = poll(fds.data(), fds.size(), 100);  // 100 ms: the clocks below are read that often
        if (ready == -1 && errno == EINTR) continue;
        CHECK_ERRNO(ready);
        for (size_t i = 0; i < pending.size() && static_cast<int>(cs.size()) < clients; ++i) {
            Pending& p = pending[i];
            std::string why = read_peer_info(p, fds[i + 1].revents != 0, opt.timeout_s);
            if (why.empty() && p.got < p.info.size()) continue;  // more to come
            const int number = static_cast<int>(cs.size()) + 1;
            if (why.empty()) why = admit(p, number, pd, cq, srq, addr, cs);
            if (!why.empty())
                std::fprintf(stderr, "%s: a connection from %s %s; dropped it\n", wb::program_name(),
                             p.conn.peer().c_str(), why.c_str());
            else if (number < clients)
                std::printf("server: waiting for client %d of %d on TCP port %u\n", number + 1, clients, opt.tcp_port);
            p.conn = wb::Connection();  // admitted (moved) or dropped (closed)
            news = Clock::now();
        }
        std::erase_if(pending, [](const Pending& p) { return p.conn.fd() < 0; });
        if (fds[0].revents & POLLIN) {
            pending.push_back({.conn = listener.accept(0)});  // poll() said one is there: no wait
            news = Clock::now();
        }
        const int limit_s = cs.empty() ? opt.accept_timeout_s() : opt.timeout_s;
        if (pending.empty() && limit_s >= 0 && Clock::now() - news > std::chrono::seconds(limit_s))
            wb::fail("no client connected to TCP port " + std::to_string(opt.tcp_port) + " within " +
                         std::to_string(limit_s) + " s (" + std::to_string(cs.size()) + " of " +
                         std::to_string(clients) + " connected)",
                     "start every client within --timeout, with this host's address and the same -p");
    }
    return cs;  // connections still pending are closed with `pending`
}

// The client whose QP is `qp_num`: OUR QP number, which no client can forge.
Client& client_of(std::vector<Client>& cs, uint32_t qp_num) {
    for (Client& c : cs)
        if (c.qp->qp_num == qp_num) return c;
    wb::fail("a completion or event for QP " + std::to_string(qp_num) + ", not one of ours");
}

// 7a. A request's receive completed. Answer it (the answer waits in
//     c.waiting for 7c), or drop the client whose request its receive
//     could not take. Either way the buffer is read: free for the refill.
void take_request(Client& c, const ibv_wc& wc, Srq& pool, const char* recv_buf) {
    const uint32_t slot = static_cast<uint32_t>(wc.wr_id);
    if (!c.dropped && wc.status != IBV_WC_SUCCESS)  // rxe: IBV_WC_LOC_QP_OP_ERR for a SEND longer than the buffer
        drop(c, std::string("sent a request its receive could not take (") + wb::wc_status_name(wc.status) + ")");
    if (!c.dropped) {
        const wb::SumAnswer answer = wb::answer_sum_request(recv_buf + slot * kRecvBufferBytes, wc.byte_len);
        ++c.served;
        if (answer.error.empty())
            std::printf("server: QP 0x%x (client %d) request %d: %" PRId64 " + %" PRId64 " = %" PRId64 "\n",
                        wc.qp_num, c.number, c.served, answer.a, answer.b, answer.sum);
        else
            std::printf("server: QP 0x%x (client %d) request %d refused: %s\n", wc.qp_num, c.number, c.served,
                        answer.error.c_str());
        c.waiting.push_back(answer.response);
        c.last_news = Clock::now();
        if (c.waiting.size() > kMaxWaiting)
            drop(c, "has more than " + std::to_string(kMaxWaiting) + " answers waiting and takes none");
    }
    pool.free_slots.push_back(slot);
    ++pool.completed;
}

// 7a. An answer's SEND completed (or was flushed): its slot is free.
void answer_sent(Client& c, const ibv_wc& wc) {
    --c.sends_in_flight;
    if (c.dropped) return;
    if (wc.status != IBV_WC_SUCCESS)
        return drop(c, std::string("took no answer: the SEND failed with ") + wb::wc_status_name(wc.status));
    c.last_news = Clock::now();
}

// 7a. Poll the one CQ that every client's QP completes into. wc.qp_num is
//     OUR QP that a request arrived on: the one number that says which
//     client sent it (also in a failed completion). A SEND's wr_id says it.
int poll_cq(ibv_cq* cq, std::vector<Client>& cs, Srq& pool, const char* recv_buf) {
    ibv_wc wcs[16];
    const int n = CHECK_POLL(ibv_poll_cq(cq, 16, wcs));
    for (const ibv_wc& wc : std::span(wcs, static_cast<size_t>(n))) {
        if (wc.wr_id & kSendTag) answer_sent(cs[wc.wr_id & ~kSendTag], wc);
        else take_request(client_of(cs, wc.qp_num), wc, pool, recv_buf);
    }
    return n;
}

// 7b. Refill once the limit event came and the CQ has delivered the
//     completions of the receives it counts (the event's case below says
//     why both): arm the limit again, then post every free buffer as one
//     list. Arm FIRST. Posted first, the receives could all be taken
//     before the arm (a burst of resent SENDs, this process descheduled):
//     an SRQ that is already empty when armed raises no event, since nothing
//     more is taken from it, and nothing would ever refill it. Armed first,
//     while the SRQ is still low, a receive taken before the post raises one
//     spare event, which costs one more refill and nothing else.
void refill_if_due(Srq& pool) {
    if (!pool.refill_due || pool.completed < pool.refill_at) return;
    const size_t n = pool.free_slots.size();
    arm_srq_limit(pool.srq, pool.limit);
    post_srq_receives(pool.srq, pool.mr, pool.free_slots);
    pool.posted += n;
    pool.free_slots.clear();
    pool.refill_due = false;
    std::printf("server: refilled %zu receives; limit re-armed at %u\n", n, pool.limit);
}

// 7c. Answer on the QP each request came from, as far as its send queue
//     allows (kSendDepth SENDs in flight); the rest wait for a completion.
void post_answers(Client& c, char* answer_buf, const ibv_mr* answer_mr) {
    const auto index = static_cast<uint64_t>(c.number - 1);
    while (!c.waiting.empty() && c.sends_in_flight < kSendDepth) {
        auto* slot = reinterpret_cast<wb::SumResponse*>(answer_buf) + index * kSendDepth + c.answers_posted % kSendDepth;
        *slot = c.waiting.front();
        c.waiting.pop_front();
        ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(slot), .length = sizeof *slot, .lkey = answer_mr->lkey};
        ibv_send_wr wr = {.wr_id = kSendTag | index, .next = nullptr, .sg_list = &sge, .num_sge = 1,
                          .opcode = IBV_WR_SEND,
                          .send_flags = IBV_SEND_SIGNALED};  // the completion frees the answer's buffer slot
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(c.qp.get(), &wr, &bad));
        ++c.answers_posted;
        ++c.sends_in_flight;
    }
}

// 7d. Each client's own clock: the others' traffic does not keep it alive.
void check_clock(Client& c, int timeout_s) {
    if (c.busy() && Clock::now() - c.last_news > std::chrono::seconds(timeout_s))
        drop(c, "sent nothing for " + std::to_string(timeout_s) + " s (" + std::to_string(c.served) + " served)");
}

// 7e. The CQ is empty: sleep at most kIdleMs on the async fd and on the TCP
//     connections of the clients still working. Returns what woke:
//     [0] the async fd, [1 + i] client i's connection.
std::vector<bool> wait_for_news(int async_fd, const std::vector<Client>& cs) {
    std::vector<pollfd> fds{{.fd = async_fd, .events = POLLIN, .revents = 0}};
    for (const Client& c : cs)  // -1: left out
        fds.push_back({.fd = c.done || c.dropped ? -1 : c.conn.fd(), .events = POLLIN, .revents = 0});
    std::vector<bool> woke(fds.size(), false);
    const int ready = poll(fds.data(), fds.size(), kIdleMs);
    if (ready == -1 && errno == EINTR) return woke;  // a signal: look at the CQ again
    CHECK_ERRNO(ready);
    for (size_t i = 0; i < fds.size(); ++i) woke[i] = fds[i].revents != 0;
    return woke;
}

// 7f. The asynchronous event loop's body: read every event waiting on the
//     context's async fd (non-blocking, so ibv_get_async_event returns -1
//     with EAGAIN when there is none left), handle it, and acknowledge it.
//     Every event returned must be acknowledged exactly once, or destroying
//     the object it names (the SRQ, a QP, a CQ) blocks for ever waiting for
//     the ack. An event that names one client's QP drops that client.
void handle_async_events(ibv_context* ctx, Srq& pool, std::vector<Client>& cs) {
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
            // further event: refill once they are all in (7b).
            ++pool.limit_events;
            pool.refill_due = true;
            pool.refill_at = pool.posted - pool.limit + 1;
            std::printf("server: async event \"%s\" #%d: fewer than %u receives left\n",
                        ibv_event_type_str(ev.event_type), pool.limit_events, pool.limit);
            break;
        case IBV_EVENT_QP_FATAL:          // a QP (ev.element.qp) hit an error it cannot report in a completion
        case IBV_EVENT_QP_REQ_ERR:        // ... a peer's request broke the transport rules
        case IBV_EVENT_QP_ACCESS_ERR: {   // ... a peer's request violated access rights
            std::printf("server: async event \"%s\" on QP 0x%x\n", ibv_event_type_str(ev.event_type),
                        ev.element.qp->qp_num);
            Client& c = client_of(cs, ev.element.qp->qp_num);
            if (!c.dropped) drop(c, "broke its QP (the async event above)");
            break;
        }
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

// 7g. Take what has come of a client's DONE, and never wait for the rest: a
//     client that sends "DO" and stops must not stop the loop for everyone
//     (its clock, 7d, drops it). Anything but DONE drops it at once.
void read_done(Client& c) {
    const size_t had = c.token.size();
    if (const std::string lost = wb::take_token_bytes(c.conn, c.token, "DONE"); !lost.empty()) return drop(c, lost);
    if (c.token.size() > had) c.last_news = Clock::now();
    if (c.token.size() < 4) return;
    if (c.token != "DONE")
        return drop(c, "sent \"" + wb::printable(c.token.data(), c.token.size()) + "\" instead of DONE");
    c.done = true;
    std::printf("server: client %d is done after %d requests\n", c.number, c.served);
}

int serve(const Args& args, ibv_context* ctx, const wb::PortAddress& addr) {
    const wb::Options& opt = args.opt;
    const int clients = args.clients;
    const uint32_t srq_size = args.srq_size;

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
    Srq pool{.srq = srq.get(), .mr = recv_mr.get(), .limit = args.limit, .free_slots = {}, .posted = srq_size};
    std::vector<uint32_t> all(srq_size);
    for (uint32_t i = 0; i < srq_size; ++i) all[i] = i;
    post_srq_receives(srq.get(), recv_mr.get(), all);
    arm_srq_limit(srq.get(), args.limit);
    std::printf("server: SRQ of %u receives posted; limit armed at %u\n", srq_size, args.limit);
    // The async fd: non-blocking, so that a read with no event returns at
    // once (EAGAIN) and poll() in 7e decides how long to wait.
    const int flags = CHECK_ERRNO(fcntl(ctx->async_fd, F_GETFL));
    CHECK_ERRNO(fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK));

    // 5. One QP per client, all on the SRQ and the CQ, made as each client's
    //    QP information arrives (destroyed before srq, cq and pd: declared after them).
    std::vector<Client> cs = accept_clients(opt, clients, pd.get(), cq.get(), srq.get(), addr);

    // 6. GO to all at once (lesson 7), so that their bursts meet at the SRQ.
    //    GO also says our QPs are past RTR (lesson 4's "RTR!").
    std::printf("server: %d of %d clients connected; sending GO\n", clients, clients);
    for (Client& c : cs) {
        c.last_news = Clock::now();
        if (!send_now(c.conn, "GO!!", 4)) drop(c, "closed its connection before GO");
    }

    // 7. Serve until every client has said DONE and every answer's SEND has
    //    completed, or has been dropped (each drop is one line on stderr).
    //    The CQ is busy-polled; only when it is empty does the server sleep
    //    (1 ms) on the async fd and the clients' TCP connections.
    while (std::ranges::any_of(cs, &Client::busy)) {
        const int n = poll_cq(cq.get(), cs, pool, recv_buf.get());  // 7a
        refill_if_due(pool);                                         // 7b
        for (Client& c : cs) {
            post_answers(c, answer_buf.get(), answer_mr.get());     // 7c
            check_clock(c, opt.timeout_s);                           // 7d
        }
        if (n > 0) continue;
        const std::vector<bool> woke = wait_for_news(ctx->async_fd, cs);  // 7e
        if (woke[0]) {
            handle_async_events(ctx, pool, cs);                      // 7f
            refill_if_due(pool);
        }
        for (size_t i = 0; i < cs.size(); ++i)
            if (woke[i + 1]) read_done(cs[i]);                      // 7g
    }

    // 8. The result: every request served, or how many clients were dropped (exit 1).
    int total = 0, dropped = 0;
    for (const Client& c : cs) {
        total += c.served;
        dropped += c.dropped ? 1 : 0;
    }
    if (dropped > 0)
        wb::result_error("served " + std::to_string(total) + (total == 1 ? " request" : " requests") + "; dropped " +
                         std::to_string(dropped) + " of " + std::to_string(clients) + " client" +
                         (clients == 1 ? "" : "s") + " that broke the protocol (stderr says why)");
    std::printf("result: served %d requests from %d client%s with one SRQ of %u receives; limit reached %d time%s\n",
                total, clients, clients == 1 ? "" : "s", srq_size, pool.limit_events,
                pool.limit_events == 1 ? "" : "s");
    return 0;
}

// ===========================================================================
// The client: lesson 4's, its N requests in one post list (lesson 11), so
// that the server's SRQ runs low. Nothing in it is new; its steps number on
// from step 1 in main, as the server's do.
// ===========================================================================
int ask(const wb::Options& opt, ibv_context* ctx, const wb::PortAddress& addr, int requests) {
    const auto n = static_cast<uint32_t>(requests);
    // 2. An ordinary RC client, as in lesson 4: its own receive queue, N
    //    deep, because it posts a receive for every answer before it sends.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx, 2 * requests, nullptr, nullptr, 0))};  // N SENDs + N RECVs
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = n, .max_recv_wr = n, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    // 3. Memory: N requests (no flag: only read by our NIC), N answers
    //    (LOCAL_WRITE: our NIC writes them).
    wb::Buffer req_buf = wb::alloc_buffer(n * sizeof(wb::SumRequest));
    wb::MemoryRegion req_mr{CHECK_PTR(ibv_reg_mr(pd.get(), req_buf.get(), n * sizeof(wb::SumRequest), 0),
                                      "ulimit -l: is locked memory limited?")};
    wb::Buffer ans_buf = wb::alloc_buffer(n * sizeof(wb::SumResponse));
    wb::MemoryRegion ans_mr{CHECK_PTR(
        ibv_reg_mr(pd.get(), ans_buf.get(), n * sizeof(wb::SumResponse), IBV_ACCESS_LOCAL_WRITE),
        "ulimit -l: is locked memory limited?")};

    // 4. INIT, then a receive for every answer, as one list (lesson 4: before the exchange).
    wb::qp_to_init(qp.get(), addr, 0);
    std::vector<ibv_sge> sges(n);
    std::vector<ibv_recv_wr> rwrs(n);
    for (uint32_t k = 0; k < n; ++k) {
        sges[k] = {.addr = reinterpret_cast<uintptr_t>(ans_buf.get()) + k * sizeof(wb::SumResponse),
                   .length = sizeof(wb::SumResponse), .lkey = ans_mr->lkey};
        rwrs[k] = {.wr_id = k, .next = k + 1 < n ? &rwrs[k + 1] : nullptr, .sg_list = &sges[k], .num_sge = 1};
    }
    ibv_recv_wr* bad_recv = nullptr;
    CHECK_RC(ibv_post_recv(qp.get(), rwrs.data(), &bad_recv));
    std::printf("client: posted %u receives before the exchange\n", n);

    // 5. Exchange, RTR, RTS, and wait for GO: the server starts all its clients together.
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("client: peer %s is QP 0x%x; ours is 0x%x\n", conn.peer().c_str(), peer.qp_num, qp->qp_num);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    std::printf("client: waiting for the server's GO (it starts all its clients together)\n");
    wb::expect_token(conn, "GO!!", opt.timeout_s);

    // 6. The burst: N SENDs in one ibv_post_send, chained through `next`.
    //    If the SRQ runs out, the server's NIC answers with an RNR NAK and
    //    ours resends after min_rnr_timer (rnr_retry 7: for ever): slower,
    //    never an error, and no completion says it happened.
    std::vector<ibv_sge> ssges(n);
    std::vector<ibv_send_wr> swrs(n);
    auto* reqs = reinterpret_cast<wb::SumRequest*>(req_buf.get());
    for (uint32_t k = 0; k < n; ++k) {
        reqs[k] = wb::make_sum_request(k + 1, 100 * (k + 1));  // request k+1 asks for (k+1) + 100(k+1)
        ssges[k] = {.addr = reinterpret_cast<uintptr_t>(&reqs[k]), .length = sizeof(wb::SumRequest),
                    .lkey = req_mr->lkey};
        swrs[k] = {.wr_id = k, .next = k + 1 < n ? &swrs[k + 1] : nullptr, .sg_list = &ssges[k], .num_sge = 1,
                   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    }
    ibv_send_wr* bad_send = nullptr;
    CHECK_RC(ibv_post_send(qp.get(), swrs.data(), &bad_send));
    std::printf("client: sent %u requests in one burst\n", n);

    // 7. 2N completions, in any order between SENDs and RECVs. Answers come
    //    in request order: one QP's messages are delivered in order, into
    //    our receives in the order we posted them.
    uint32_t answers = 0;
    for (uint32_t i = 0; i < 2 * n; ++i) {
        const ibv_wc wc = wb::poll_success(cq.get(), opt.timeout_s, "a request's SEND or an answer's RECV", conn);
        if (wc.opcode != IBV_WC_RECV) continue;
        const int64_t a = answers + 1, b = 100 * a;
        const wb::SumResult r =
            wb::read_sum_response(ans_buf.get() + wc.wr_id * sizeof(wb::SumResponse), wc.byte_len, a, b);
        if (!r.error.empty()) wb::result_error(r.error);
        if (r.sum != a + b)
            wb::result_error("answer " + std::to_string(a) + " says " + std::to_string(r.sum) + ", not " +
                             std::to_string(a + b));
        ++answers;
        std::printf("client: answer %u: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answers, a, b, r.sum);
    }
    wb::send_token(conn, "DONE");
    std::printf("result: %u requests answered on QP 0x%x, every sum right\n", answers, qp->qp_num);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Args args = parse_args(argc, argv);  // misuse: one line on stderr, exit 2

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(args.opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), args.opt.ib_port, args.opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);

    // Steps 2 to 8 of the server, 2 to 7 of the client.
    return args.is_server ? serve(args, ctx.get(), addr) : ask(args.opt, ctx.get(), addr, args.requests);
}
