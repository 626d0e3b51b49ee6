// lesson20.cpp - a service that lasts: RPC over RDMA with credits, a ring of response slots and a goodbye.
//
// A small in-memory key-value store (GET and PUT of short keys and values)
// for CLIENTS clients at once, over RC. Every lesson so far sent a few
// messages and ended; a service keeps a conversation going, and has to
// answer the questions every RPC system on verbs answers (NFS over RDMA,
// NVMe over Fabrics, eRPC):
//   - Requests are SENDs (inline when they fit, lesson 11) into ONE shared
//     receive queue (lesson 13), and the server re-posts each receive as soon
//     as it has read the request in it: the SRQ never runs low.
//   - Responses are RDMA WRITEs with immediate (lesson 5) into a ring of
//     slots that each client registered for them; the request names the slot,
//     and the immediate says which slot was written.
//   - Credits: a client may have as many requests outstanding as the server
//     granted, 1 until the first response says more (RPC-over-RDMA's rule),
//     then min(its ring, the server's -t). Every response carries the grant.
//     Credits are what keep the SRQ from running dry: it holds CLIENTS x -t
//     receives, the most that every client's credits together can take.
//   - Every queue is sized from those numbers, and both sides print the
//     arithmetic: send depth, receive (SRQ) depth, CQ depth, ring slots.
//     Neither side ever has more work requests in flight than its send
//     queue holds: what does not fit waits in the program, not in the NIC.
//   - The goodbye (TCP): the client says DONE once its last response is in
//     AND its last SEND is acknowledged; the server says BYE! once its last
//     WRITE to that client is acknowledged. Nothing is left in flight when
//     either side destroys its QP.
//   - A client that dies (its connection closes), stops taking responses
//     (our WRITE meets an RNR NAK: it posts no receives), sends more than its
//     credits, names a slot outside its ring or sends nothing for --timeout
//     is dropped alone; the others go on.
// With --tcp, both sides run the same service over TCP, for comparison
// (docs/lesson20-rpc.md). Each client ends with a result: line giving its
// count, requests per second and its latency percentiles.
//
// Run it on one host (rxe's loopback carries the RDMA):
//     ./lesson20 -c 2                    server: 2 clients, 16 credits each
//     ./lesson20 127.0.0.1 -n 1000       client 1 (another terminal)
//     ./lesson20 127.0.0.1 -n 1000       client 2 (a third terminal)
//     ./lesson20 --tcp -c 2, ./lesson20 --tcp 127.0.0.1 -n 1000: the same over TCP
// On two hosts: ./lesson20 on host A, ./lesson20 A on hosts B and C. Every
// side takes -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson20 -h).
//
// Verbs it introduces (none is new; what is new is how they are combined):
//     ibv_post_srq_recv of ONE receive as each request is read (lesson 13 refilled in batches)
//     IBV_WR_RDMA_WRITE_WITH_IMM into a ring, imm_data naming the slot; the ring's
//     receives with no scatter list, re-posted one for one (lesson 5)
//     ibv_qp_init_attr.cap.max_inline_data, read back after ibv_create_qp; IBV_SEND_INLINE
//     ibv_modify_qp to RTS with rnr_retry 0 (by hand: common's qp_to_rts waits for ever)
//
// Verbs from earlier lessons, called as they taught them: ibv_query_device
// (lesson 1), ibv_alloc_pd, ibv_reg_mr (lesson 2), ibv_create_cq,
// ibv_create_qp (lesson 3), ibv_post_send, ibv_post_recv, ibv_poll_cq
// (lesson 4), ibv_create_comp_channel, ibv_req_notify_cq, ibv_get_cq_event,
// ibv_ack_cq_events (lesson 8), ibv_create_srq (lesson 13), ibv_modify_qp
// to ERR (drop, lesson 10); the QP transitions to RTR through common/qp.hpp.
//
// Read more: man ibv_post_send (IBV_SEND_INLINE, imm_data), man ibv_post_srq_recv,
// man ibv_create_qp (cap), man ibv_modify_qp (rnr_retry); docs/lesson20-rpc.md
// (the protocol drawn, the queue arithmetic, the goodbye, the wire, TCP beside it).
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "check.hpp"
#include "completion.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "qp.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint16_t kLesson = 20;  // sent in the exchange: a lesson-20 client only talks to a lesson-20 server

constexpr uint32_t kMaxKey = 16;    // bytes of a key, at most
constexpr uint32_t kMaxValue = 32;  // bytes of a value, at most
// One ring slot, and one receive buffer of the SRQ: room for a request (60 B)
// or a response (40 B), so that a message of the wrong length still lands
// and byte_len can say so (lesson 4's reasoning).
constexpr uint32_t kSlotBytes = 64;
constexpr uint32_t kMaxWindow = 64;     // -t at most: ring slots, credits, send depth
constexpr size_t kMaxKeys = 1 << 16;    // keys the store holds at most; a PUT beyond is refused (kFull)
constexpr int kMaxClients = 64;
// Connections whose QP information the server reads at once, before they are clients.
constexpr size_t kMaxPending = 8;

// ---------------------------------------------------------------------------
// The wire. Multi-byte fields are big-endian, as every protocol number on
// the wire in this workbook. A request is a SEND into one SRQ receive; a
// response is an RDMA WRITE into one ring slot, the slot in the immediate.
// ---------------------------------------------------------------------------
struct Request {        // 60 bytes
    uint8_t op;         // 'G' GET or 'P' PUT
    uint8_t key_len;    // 1..kMaxKey
    uint8_t value_len;  // PUT: 1..kMaxValue; GET: 0
    uint8_t zero;       // 0
    uint16_t slot;      // the ring slot the response goes to: 0..ring slots - 1
    uint16_t zero2;     // 0
    uint32_t seq;       // the client's request number, echoed in the response
    char key[kMaxKey];
    char value[kMaxValue];
};
static_assert(sizeof(Request) == 60);

enum Status : uint8_t { kOk = 0, kNotFound = 1, kFull = 2 };

struct Response {       // 40 bytes
    uint32_t seq;       // the request's
    uint8_t status;     // kOk, kNotFound (GET of a key never PUT), kFull (PUT into a full store)
    uint8_t value_len;  // GET kOk: 1..kMaxValue; else 0
    uint16_t credits;   // THE CREDITS: requests the client may have outstanding from now on
    char value[kMaxValue];
};
static_assert(sizeof(Response) == 40);

// Over TCP (--tcp), a response is preceded by the slot, which the immediate
// carries over RDMA; kByeSlot answers the client's goodbye request (op 'B').
constexpr uint32_t kByeSlot = 0xffffffff;
constexpr size_t kTcpResponseBytes = 4 + sizeof(Response);

const char* status_str(uint8_t s) { return s == kOk ? "ok" : s == kNotFound ? "not found" : "store full"; }

// The command line, checked (misuse: one line on stderr, exit 2).
struct Args {
    wb::Options opt;
    bool is_server = true;
    int clients = 2;     // -c
    uint32_t depth = 16; // -t: server, credits per client; client, its ring and requests in flight
    uint32_t requests = 1000;  // -n
    bool events = false; // -e
    bool tcp = false;    // --tcp
};

Args parse_args(int argc, char** argv) {
    std::string clients_arg, depth_arg, requests_arg, events_arg, tcp_arg;
    const wb::ExtraOption extra[] = {
        {'c', "clients", "CLIENTS", "server: how many clients to serve (default: 2)", &clients_arg},
        {'t', "depth", "N",
         "requests in flight, 1..64: the server's credits per client, the client's ring\n"
         "                        slots and window (default: 16)",
         &depth_arg},
        {'n', "requests", "N", "client: how many GETs and PUTs to send, 1..1000000 (default: 1000)", &requests_arg},
        {'e', "events", nullptr, "sleep on a completion channel instead of busy polling (lesson 8)", &events_arg},
        {0, "tcp", nullptr, "the same service over TCP instead of RDMA, for comparison (both sides)", &tcp_arg},
    };
    const wb::Usage usage = {
        .synopsis = "[options] [-c CLIENTS] [-t N]      server: a key-value store for CLIENTS clients\n"
                    "  lesson20 [options] HOST [-n N] [-t N]      client: GETs and PUTs, -t N of them in flight",
        .summary = "RPC over RDMA: requests by SEND into one SRQ, responses by WRITE with immediate into\n"
                   "each client's ring, credits, a goodbye; --tcp runs the same service over TCP",
        .server_scope = "The server listens on every address of this host (IPv4 and IPv6, port -p) and serves\n"
                        "CLIENTS clients, each as it comes. A client that breaks the protocol, dies, stops\n"
                        "taking responses or says nothing for --timeout is dropped alone (its QP to ERR, its\n"
                        "connection closed) and the others are served to the end; then it exits 1.",
    };
    Args r{.opt = wb::parse_options(argc, argv, usage, extra)};
    const wb::Options& opt = r.opt;
    r.is_server = opt.args.empty();
    if (opt.args.size() > 1)
        wb::usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (r.is_server && opt.given('n')) wb::usage_error("-n is a client option (./lesson20 HOST -n N)");
    if (!r.is_server && opt.given('c')) wb::usage_error("-c is a server option (./lesson20 -c CLIENTS)");
    if (opt.given('c')) r.clients = static_cast<int>(wb::parse_range(clients_arg, "-c", 1, kMaxClients));
    if (opt.given('t')) r.depth = static_cast<uint32_t>(wb::parse_range(depth_arg, "-t", 1, kMaxWindow));
    if (opt.given('n')) r.requests = static_cast<uint32_t>(wb::parse_range(requests_arg, "-n", 1, 1'000'000));
    r.events = opt.given('e');
    r.tcp = opt.given("tcp");
    if (r.tcp && r.events) wb::usage_error("-e is for RDMA completions; --tcp always sleeps in poll()");
    return r;
}

// ---------------------------------------------------------------------------
// The store, and the one function that reads a request: every byte the peer
// sent is checked before it is used, and a request that breaks a rule is the
// end of that client, never of the server.
// ---------------------------------------------------------------------------
struct Store {
    std::unordered_map<std::string, std::string> map;
    uint64_t gets = 0, puts = 0;
};

// The parts of a request the server acts on, once checked.
struct Parsed {
    std::string why;  // "" when the request is sound, else why the client is dropped
    uint16_t slot = 0;
    Response response{};
    std::string words;  // "GET 'k' -> not found", for the narration
};

Parsed serve_request(Store& store, const char* bytes, uint32_t byte_len, uint32_t ring_slots, uint16_t credits) {
    Parsed p;
    if (byte_len != sizeof(Request)) {
        p.why = "sent a request of " + std::to_string(byte_len) + " bytes (a request is " +
                std::to_string(sizeof(Request)) + ")";
        return p;
    }
    Request q;
    std::memcpy(&q, bytes, sizeof q);  // one copy, then only the copy is read
    p.slot = ntohs(q.slot);
    if (q.op != 'G' && q.op != 'P') p.why = "sent an unknown operation (byte " + std::to_string(q.op) + ")";
    else if (q.key_len < 1 || q.key_len > kMaxKey) p.why = "sent a key of " + std::to_string(q.key_len) + " bytes";
    else if (q.op == 'P' ? q.value_len < 1 || q.value_len > kMaxValue : q.value_len != 0)
        p.why = "sent a value of " + std::to_string(q.value_len) + " bytes with " + (q.op == 'P' ? "PUT" : "GET");
    else if (p.slot >= ring_slots)
        p.why = "named ring slot " + std::to_string(p.slot) + " of its " + std::to_string(ring_slots);
    if (!p.why.empty()) return p;
    const std::string key(q.key, q.key_len);
    p.response = {.seq = q.seq, .status = kOk, .value_len = 0, .credits = htons(credits), .value = {}};
    if (q.op == 'P') {
        ++store.puts;
        auto it = store.map.find(key);
        if (it == store.map.end() && store.map.size() >= kMaxKeys) p.response.status = kFull;
        else store.map[key].assign(q.value, q.value_len);
        p.words = "PUT '" + wb::printable(key.data(), key.size()) + "' = '" + wb::printable(q.value, q.value_len) +
                  "' -> " + status_str(p.response.status);
    } else {
        ++store.gets;
        auto it = store.map.find(key);
        if (it == store.map.end()) p.response.status = kNotFound;
        else {
            p.response.value_len = static_cast<uint8_t>(it->second.size());
            std::memcpy(p.response.value, it->second.data(), it->second.size());
        }
        p.words = "GET '" + wb::printable(key.data(), key.size()) + "' -> " + status_str(p.response.status);
    }
    return p;
}

// ---------------------------------------------------------------------------
// The client's side of the protocol, the same over RDMA and TCP: what to
// ask next, what the answer must be, and the window of credits and slots.
// ---------------------------------------------------------------------------
constexpr uint32_t kKeys = 100;  // keys per client

struct Expect {
    uint32_t seq = 0;
    char op = 0;
    uint8_t status = kOk;
    std::string value;  // what a GET must return
    Clock::time_point sent;
};

struct Workload {
    std::string tag;                  // 8 hex digits: this client's keys are its own in the shared store
    std::vector<std::string> mirror;  // what the store holds for each of our keys ("": never PUT)
    uint64_t gets = 0, puts = 0;

    Workload() : mirror(kKeys) {
        char t[9];
        std::snprintf(t, sizeof t, "%08x", std::random_device{}());
        tag = t;
    }
    // Request `seq` (1..N): every third a PUT, the rest GETs, over kKeys keys.
    // The store applies one client's requests in order (they arrive in order
    // on its QP), so what a GET must return is known when it is sent.
    Expect make(uint32_t seq, uint16_t slot, Request& q) {
        const uint32_t k = (seq * 7) % kKeys;
        const std::string key = tag + "/" + std::to_string(k);
        const bool put = seq % 3 == 0;
        q = {.op = static_cast<uint8_t>(put ? 'P' : 'G'), .key_len = static_cast<uint8_t>(key.size()),
             .value_len = 0, .zero = 0, .slot = htons(slot), .zero2 = 0, .seq = htonl(seq), .key = {}, .value = {}};
        std::memcpy(q.key, key.data(), key.size());
        Expect e{.seq = seq, .op = put ? 'P' : 'G', .status = kOk, .value = {}, .sent = Clock::now()};
        if (put) {
            mirror[k] = "v" + std::to_string(seq) + "." + tag;
            q.value_len = static_cast<uint8_t>(mirror[k].size());
            std::memcpy(q.value, mirror[k].data(), mirror[k].size());
            ++puts;
        } else {
            e.value = mirror[k];
            e.status = e.value.empty() ? kNotFound : kOk;
            ++gets;
        }
        return e;
    }
};

// A response checked against what was asked: "" or what is wrong.
std::string check_response(const Response& r, const Expect& e) {
    if (ntohl(r.seq) != e.seq)
        return "the response in the slot of request " + std::to_string(e.seq) + " answers request " +
               std::to_string(ntohl(r.seq));
    if (r.status != e.status)
        return "request " + std::to_string(e.seq) + ": status " + std::to_string(r.status) + ", expected " +
               std::to_string(e.status);
    if (e.op == 'G' && e.status == kOk &&
        (r.value_len > kMaxValue || std::string(r.value, r.value_len) != e.value))
        return "request " + std::to_string(e.seq) + ": GET returned '" +
               wb::printable(r.value, std::min<size_t>(r.value_len, kMaxValue)) + "', expected '" + e.value + "'";
    return "";
}

// The window: slots free and in flight, credits, latencies.
struct Window {
    uint32_t slots;           // the ring's slots (-t)
    uint32_t credits = 1;     // 1 until the first response brings the server's grant
    uint32_t outstanding = 0; // requests sent whose response has not come
    std::vector<uint16_t> free_slots;
    std::vector<std::optional<Expect>> open;  // by slot
    std::vector<double> latencies_us;
    uint32_t sent = 0, answered = 0;

    explicit Window(uint32_t w) : slots(w), open(w) {
        for (uint32_t s = w; s-- > 0;) free_slots.push_back(static_cast<uint16_t>(s));
    }
    bool may_send(uint32_t total) const { return sent < total && outstanding < credits; }
    uint16_t take_slot() {
        const uint16_t s = free_slots.back();
        free_slots.pop_back();
        ++outstanding;
        ++sent;
        return s;
    }
    // The response in `slot` came: check it, free the slot, take the credits
    // (never more than our ring: the server's word is not trusted beyond it).
    // Exits 1 (result: error) when anything is wrong.
    void take(uint32_t slot, const Response& r, bool narrate) {
        if (slot >= slots || !open[slot])
            wb::result_error("the server answered slot " + std::to_string(slot) + ", which no request of ours holds");
        const Expect& e = *open[slot];
        if (const std::string bad = check_response(r, e); !bad.empty()) wb::result_error(bad);
        latencies_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - e.sent).count());
        const uint32_t grant = ntohs(r.credits);
        if (grant == 0) wb::result_error("the server granted 0 credits: no request could ever be sent again");
        if (narrate)
            std::printf("client: response %u in slot %u: %s %s, credits %u%s\n", e.seq, slot,
                        e.op == 'P' ? "PUT" : "GET", status_str(r.status), grant,
                        grant > slots ? " (more than our ring: we keep to our ring)" : "");
        credits = std::min(grant, slots);
        open[slot].reset();
        free_slots.push_back(static_cast<uint16_t>(slot));
        --outstanding;
        ++answered;
    }
};

// "result: 1000 requests answered (333 PUTs, 667 GETs), every response checked;
//  1151 requests/s, p50 8085 us, p99 162257 us, over RDMA" (one line)
void print_result(const Window& w, const Workload& load, double seconds, const char* how) {
    std::vector<double> l = w.latencies_us;
    std::sort(l.begin(), l.end());
    auto pct = [&](double p) { return l.empty() ? 0.0 : l[std::min(l.size() - 1, static_cast<size_t>(p * l.size()))]; };
    std::printf("result: %u requests answered (%" PRIu64 " PUTs, %" PRIu64 " GETs), every response checked; "
                "%.0f requests/s, p50 %.0f us, p99 %.0f us, %s\n",
                w.answered, load.puts, load.gets, w.answered / seconds, pct(0.50), pct(0.99), how);
}

// ---------------------------------------------------------------------------
// Waiting when the CQ is empty, for both sides: busy polling (the default)
// looks at the CQ again at once and at the sockets every millisecond;
// events (-e, lesson 8) arm the CQ, look at it once more (the race lesson 8
// explains), and only then sleep in poll() on the channel's fd and the
// sockets together.
// ---------------------------------------------------------------------------
struct Waiter {
    ibv_cq* cq;
    ibv_comp_channel* channel;  // nullptr: busy polling
    bool armed = false;
    unsigned unacked = 0;
    Clock::time_point last_look{};

    // Called after each poll of the CQ. Returns true when it looked at `fds`
    // (their revents are set), false when the caller should poll the CQ again.
    bool look(std::vector<pollfd>& fds, bool cq_empty, int sleep_ms) {
        const auto since = Clock::now() - last_look;
        const bool sleep = cq_empty && channel != nullptr;
        if (!sleep && since < (cq_empty ? std::chrono::milliseconds(1) : std::chrono::milliseconds(10))) {
            if (cq_empty) sched_yield();  // busy, but let rxe's work and the other pollers run on a small machine
            return false;
        }
        if (sleep && !armed) {
            CHECK_RC(ibv_req_notify_cq(cq, 0));  // 0: any completion
            armed = true;
            return false;  // poll once more before sleeping
        }
        if (sleep) fds.push_back({.fd = channel->fd, .events = POLLIN, .revents = 0});
        const int ready = poll(fds.data(), fds.size(), sleep ? sleep_ms : 0);
        if (ready == -1 && errno != EINTR) CHECK_ERRNO(ready);
        if (ready == -1) for (pollfd& f : fds) f.revents = 0;
        last_look = Clock::now();
        if (!sleep) return true;
        const bool woke = fds.back().revents != 0;
        fds.pop_back();
        if (woke) {
            ibv_cq* ev_cq = nullptr;
            void* ev_ctx = nullptr;
            if (ibv_get_cq_event(channel, &ev_cq, &ev_ctx) == 0) {  // the fd is O_NONBLOCK: EAGAIN if gone
                armed = false;
                if (++unacked == 64) {  // acknowledged in batches (lesson 8), all of them before the CQ goes
                    ibv_ack_cq_events(cq, unacked);
                    unacked = 0;
                }
            } else if (errno != EAGAIN) {
                wb::fail("ibv_get_cq_event(channel, &ev_cq, &ev_ctx) failed: " + wb::errno_str(errno));
            }
        }
        return true;
    }
    ~Waiter() {
        if (unacked) ibv_ack_cq_events(cq, unacked);
    }
};

// The completion channel for -e, non-blocking (lesson 8), or none.
wb::CompletionChannel make_channel(ibv_context* ctx, bool events) {
    if (!events) return wb::CompletionChannel{};
    wb::CompletionChannel ch{CHECK_PTR(ibv_create_comp_channel(ctx))};
    const int flags = CHECK_ERRNO(fcntl(ch->fd, F_GETFL));
    CHECK_ERRNO(fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK));
    return ch;
}

// Create an RC QP asking for `inline_bytes` of inline data; a device that
// refuses any inline (EINVAL) gets a QP without. ibv_create_qp writes back
// into attr.cap what the device gave (rxe: at least what was asked), which
// the caller reads to decide IBV_SEND_INLINE.
wb::QueuePair create_qp(ibv_pd* pd, ibv_qp_init_attr& attr, uint32_t inline_bytes) {
    attr.cap.max_inline_data = inline_bytes;
    ibv_qp* qp = ibv_create_qp(pd, &attr);
    if (qp == nullptr && errno == EINVAL) {
        attr.cap.max_inline_data = 0;
        qp = ibv_create_qp(pd, &attr);
    }
    return wb::QueuePair{CHECK_PTR(qp, "are -t and -c within the device's max_qp_wr and max_cqe?")};
}

// Send a PeerInfo or a token now, or say the peer is gone: never wait for a
// peer (a 54-byte or 4-byte message fits an idle socket's buffer).
bool send_now(wb::Connection& c, const void* bytes, size_t length) {
    return send(c.fd(), bytes, length, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(length);
}

// ===========================================================================
// The server over RDMA: serve() at the end of this part; its steps before.
// ===========================================================================

// The server's wr_id of a WRITE: this bit set, the client's index below it.
// A receive's wr_id is the index of its buffer.
constexpr uint64_t kWriteTag = 1ull << 32;

// What the server keeps per client.
struct Client {
    int number = 0;  // 1..CLIENTS, in the order they connected
    wb::Connection conn;
    wb::QueuePair qp;
    uint64_t ring_addr = 0;  // its ring, as it told us: we write nowhere else
    uint32_t ring_rkey = 0;
    uint32_t ring_slots = 0;
    struct Answer {
        uint16_t slot;
        Response response;
    };
    std::deque<Answer> waiting;  // responses its send queue had no room for yet
    uint64_t received = 0, posted = 0;  // requests in, responses posted (WRITEs)
    uint32_t in_flight = 0;             // WRITEs posted and not yet completed
    std::string token;                  // DONE's bytes so far
    bool done = false;                  // said DONE
    bool finished = false;              // we said BYE!
    bool dropped = false;
    Clock::time_point last_news = Clock::now();
    bool busy() const { return !dropped && !finished; }
};

// Drop one client, and only that one: its QP to ERR (our WRITEs in flight to
// it are flushed; the SRQ's receives stay for the others), its connection
// closed. One line on stderr says who and why.
void drop(Client& c, const std::string& why) {
    ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    CHECK_RC(ibv_modify_qp(c.qp.get(), &attr, IBV_QP_STATE));
    std::fprintf(stderr, "%s: client %d (%s) %s; dropped it: QP 0x%x to IBV_QPS_ERR, connection closed\n",
                 wb::program_name(), c.number, c.conn.peer().c_str(), why.c_str(), c.qp->qp_num);
    c.conn = wb::Connection();
    c.waiting.clear();
    c.dropped = true;
}

// RTR -> RTS as common's qp_to_rts (lesson 3), except rnr_retry: 0, not 7.
// An honest client re-posts a ring receive before it sends the request that
// will consume it, so our WRITE with immediate never finds none; a client
// that stops taking responses does, and the first RNR NAK then fails our
// WRITE at once (IBV_WC_RNR_RETRY_EXC_ERR) instead of waiting for ever.
void to_rts_no_rnr_wait(ibv_qp* qp, uint32_t psn) {
    ibv_qp_attr attr = {
        .qp_state = IBV_QPS_RTS,
        .sq_psn = psn,
        .max_rd_atomic = 1,
        .timeout = 14,    // ACK timeout 4.096 us * 2^14 = 67 ms (lesson 3)
        .retry_cnt = 6,   // 7 tries, then IBV_WC_RETRY_EXC_ERR: a client that died
        .rnr_retry = 0,   // no retry after an RNR NAK: a client with no receive posted is broken
    };
    CHECK_RC(ibv_modify_qp(qp, &attr,
                           IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT |
                               IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY));
}

// The server's shared parts, made once in serve().
struct Server {
    const Args& args;
    const wb::PortAddress& addr;
    ibv_pd* pd;
    ibv_cq* cq;
    ibv_srq* srq;
    const ibv_mr* recv_mr;   // the SRQ's buffers, kSlotBytes each
    const ibv_mr* resp_mr;   // responses in flight, depth per client
    uint32_t inline_cap = 0; // what the client QPs' max_inline_data came out as
    Store store;
    std::vector<Client> cs;
    uint64_t reposted = 0;
};

// 4. Post ONE receive of the SRQ's buffer `slot`: at the start for every
//    buffer, then for each one as soon as the request in it is copied out.
void post_srq_receive(Server& s, uint32_t slot) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(s.recv_mr->addr) + slot * kSlotBytes,
                   .length = kSlotBytes, .lkey = s.recv_mr->lkey};
    ibv_recv_wr wr = {.wr_id = slot, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_srq_recv(s.srq, &wr, &bad), "ENOMEM: more receives than the SRQ's max_wr?");
}

// 5a. A connection accepted, not yet a client: its PeerInfo as it comes
//     (lesson 13's step 5a: nobody's silence holds up anybody else).
struct Pending {
    wb::Connection conn;
    std::array<uint8_t, wb::kPeerInfoWireSize> info{};
    size_t got = 0;
    Clock::time_point since = Clock::now();
};

std::string read_peer_info(Pending& p, bool readable, int timeout_s) {
    if (readable) {
        const ssize_t n = recv(p.conn.fd(), p.info.data() + p.got, p.info.size() - p.got, MSG_DONTWAIT);
        if (n == 0) return "closed after " + std::to_string(p.got) + " bytes of its QP information";
        if (n < 0 && errno != EAGAIN && errno != EINTR) return "lost its connection: " + wb::errno_str(errno);
        if (n > 0) p.got += static_cast<size_t>(n);
    }
    if (p.got < p.info.size() && Clock::now() - p.since > std::chrono::seconds(timeout_s))
        return "sent " + std::to_string(p.got) + " of " + std::to_string(p.info.size()) +
               " bytes of its QP information and then nothing for " + std::to_string(timeout_s) + " s";
    return "";
}

// 5b. A whole PeerInfo: if it is a lesson-20 client's with a sound ring, the
//     connection becomes a client with a QP of its own on the SRQ and the CQ,
//     brought to RTS BEFORE we answer, so that its first request finds us
//     ready. Returns "" then, else why to refuse the connection.
std::string admit(Server& s, Pending& p) {
    wb::PeerInfo peer;
    if (const std::string why = wb::decode(p.info, peer); !why.empty())
        return "sent a malformed exchange message: " + why;
    if (peer.lesson != kLesson)
        return "runs lesson " + std::to_string(peer.lesson) + ", this is lesson " + std::to_string(kLesson);
    // Its ring: whole slots, 1..kMaxWindow of them. Nothing beyond is ever written.
    if (peer.rkey == 0 || peer.length == 0 || peer.length % kSlotBytes != 0 || peer.length / kSlotBytes > kMaxWindow)
        return "offered a ring of " + std::to_string(peer.length) + " bytes (1 to " + std::to_string(kMaxWindow) +
               " slots of " + std::to_string(kSlotBytes) + " B)";
    const uint32_t depth = s.args.depth;
    ibv_qp_init_attr qp_attr = {
        .send_cq = s.cq,
        .recv_cq = s.cq,
        .srq = s.srq,  // requests land in the one SRQ (lesson 13)
        .cap = {.max_send_wr = depth, .max_recv_wr = 0, .max_send_sge = 1, .max_recv_sge = 0},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp = create_qp(s.pd, qp_attr, sizeof(Response));
    s.inline_cap = qp_attr.cap.max_inline_data;
    const uint32_t psn = wb::random_psn();
    wb::qp_to_init(qp.get(), s.addr, 0);  // the client may not touch our memory: it only SENDs
    wb::qp_to_rtr(qp.get(), s.addr, peer);
    to_rts_no_rnr_wait(qp.get(), psn);
    uint8_t mine[wb::kPeerInfoWireSize];
    wb::encode(wb::local_info(kLesson, qp.get(), psn, s.addr), mine);
    if (!send_now(p.conn, mine, sizeof mine)) return "closed before it took our QP information";
    Client c{.number = static_cast<int>(s.cs.size()) + 1, .conn = std::move(p.conn), .qp = std::move(qp)};
    c.ring_addr = peer.addr;
    c.ring_rkey = peer.rkey;
    c.ring_slots = peer.length / kSlotBytes;
    std::printf("server: client %d (%s) is connected: QP 0x%x <-> 0x%x; its ring: %u slots at 0x%" PRIx64
                ", rkey 0x%x; credits %u\n",
                c.number, c.conn.peer().c_str(), c.qp->qp_num, peer.qp_num, c.ring_slots, c.ring_addr, c.ring_rkey,
                std::min(c.ring_slots, depth));
    s.cs.push_back(std::move(c));
    return "";
}

// 6a. A request's receive completed: copy it out, re-post the receive at
//     once, then check and answer it (the answer waits in c.waiting for 6b).
//     Credits are checked here: a client with more requests outstanding
//     than it was granted is eating the other clients' receives.
void take_request(Server& s, Client& c, const ibv_wc& wc) {
    const auto slot = static_cast<uint32_t>(wc.wr_id);
    char bytes[kSlotBytes];
    std::memcpy(bytes, static_cast<const char*>(s.recv_mr->addr) + slot * kSlotBytes, sizeof bytes);
    post_srq_receive(s, slot);
    ++s.reposted;
    if (c.dropped) return;
    if (wc.status != IBV_WC_SUCCESS)  // rxe: IBV_WC_LOC_QP_OP_ERR for a SEND longer than the buffer
        return drop(c, std::string("sent a request its receive could not take (") + wb::wc_status_name(wc.status) +
                           ")");
    ++c.received;
    c.last_news = Clock::now();
    const uint64_t credits = c.posted > 0 ? std::min(c.ring_slots, s.args.depth) : 1;
    if (c.received - c.posted > credits)
        return drop(c, "had " + std::to_string(c.received - c.posted) + " requests outstanding with " +
                           std::to_string(credits) + (credits == 1 ? " credit" : " credits"));
    const auto grant = static_cast<uint16_t>(std::min(c.ring_slots, s.args.depth));
    Parsed p = serve_request(s.store, bytes, wc.byte_len, c.ring_slots, grant);
    if (!p.why.empty()) return drop(c, p.why);
    if (c.received <= 2)
        std::printf("server: client %d request %" PRIu64 ": %s; WRITE with immediate %u into its slot %u, credits %u\n",
                    c.number, c.received, p.words.c_str(), p.slot, p.slot, grant);
    c.waiting.push_back({.slot = p.slot, .response = p.response});
}

// 6a. A WRITE completed: acknowledged by the client's NIC, its slot in our
//     send queue is free. Failed: the client is gone or stopped taking responses.
void write_done(Client& c, const ibv_wc& wc) {
    --c.in_flight;
    if (c.dropped) return;  // flushed (IBV_WC_WR_FLUSH_ERR) by the drop
    if (wc.status == IBV_WC_RNR_RETRY_EXC_ERR)
        return drop(c, "stopped taking responses: our WRITE with immediate found no receive posted "
                       "(IBV_WC_RNR_RETRY_EXC_ERR)");
    if (wc.status != IBV_WC_SUCCESS)
        return drop(c, std::string("took no response: the WRITE failed with ") + wb::wc_status_name(wc.status));
    c.last_news = Clock::now();
}

// 6a. Poll the one CQ: wc.qp_num is OUR QP a request arrived on, the one
//     number that says which client sent it; a WRITE's wr_id says it.
int poll_cq(Server& s) {
    ibv_wc wcs[32];
    const int n = CHECK_POLL(ibv_poll_cq(s.cq, 32, wcs));
    for (const ibv_wc& wc : std::span(wcs, static_cast<size_t>(n))) {
        if (wc.wr_id & kWriteTag) {
            write_done(s.cs[wc.wr_id & ~kWriteTag], wc);
            continue;
        }
        auto it = std::ranges::find_if(s.cs, [&](const Client& c) { return c.qp->qp_num == wc.qp_num; });
        if (it == s.cs.end()) wb::fail("a completion for QP " + std::to_string(wc.qp_num) + ", not one of ours");
        take_request(s, *it, wc);
    }
    return n;
}

// 6b. Post the waiting responses, as far as the send queue allows: never more
//     WRITEs in flight than its depth. A response's bytes sit in our buffer
//     `posted % depth` until its completion (inline: copied at once); WRs
//     complete in order on one QP, so that buffer's last user is done.
void post_responses(Server& s, Client& c, size_t index) {
    const uint32_t depth = s.args.depth;
    ibv_sge sges[kMaxWindow];
    ibv_send_wr wrs[kMaxWindow];
    uint32_t k = 0;
    while (!c.waiting.empty() && c.in_flight + k < depth) {
        const Client::Answer a = c.waiting.front();
        c.waiting.pop_front();
        auto* buf = reinterpret_cast<Response*>(s.resp_mr->addr) + index * depth + (c.posted + k) % depth;
        *buf = a.response;
        sges[k] = {.addr = reinterpret_cast<uintptr_t>(buf), .length = sizeof *buf, .lkey = s.resp_mr->lkey};
        wrs[k] = {
            .wr_id = kWriteTag | index,
            .next = nullptr,
            .sg_list = &sges[k],
            .num_sge = 1,
            .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
            // Signaled: its completion frees the send-queue slot we count.
            .send_flags = IBV_SEND_SIGNALED | (s.inline_cap >= sizeof *buf ? unsigned{IBV_SEND_INLINE} : 0u),
            .imm_data = htonl(a.slot),  // which slot was written; big-endian on the wire (lesson 5)
            .wr = {.rdma = {.remote_addr = c.ring_addr + uint64_t{a.slot} * kSlotBytes, .rkey = c.ring_rkey}},
        };
        if (k > 0) wrs[k - 1].next = &wrs[k];
        ++k;
    }
    if (k == 0) return;
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(c.qp.get(), wrs, &bad));  // ONE post list per client (lesson 11): one doorbell
    c.posted += k;
    c.in_flight += k;
}

// 6c. The goodbye: DONE came, and every WRITE to this client is acknowledged.
//     Only now BYE!: the client destroys its QP after reading it, and nothing
//     of ours is left for its NIC to acknowledge.
void say_goodbye(Client& c) {
    if (c.dropped || c.finished || !c.done || !c.waiting.empty() || c.in_flight > 0) return;
    if (!send_now(c.conn, "BYE!", 4)) return drop(c, "closed its connection before our BYE!");
    c.finished = true;
    c.conn = wb::Connection();
    std::printf("server: client %d said DONE after %" PRIu64 " requests; its last WRITE is acknowledged; BYE! sent\n",
                c.number, c.received);
}

// 6d. A client's TCP connection is readable: DONE's bytes, or its end.
void read_done(Client& c) {
    const size_t had = c.token.size();
    if (const std::string lost = wb::take_token_bytes(c.conn, c.token, "DONE"); !lost.empty())
        return drop(c, lost + " (after " + std::to_string(c.received) + " requests)");
    if (c.token.size() > had) c.last_news = Clock::now();
    if (c.token.size() < 4) return;
    if (c.token != "DONE")
        return drop(c, "sent \"" + wb::printable(c.token.data(), c.token.size()) + "\" instead of DONE");
    c.done = true;
}

// The server's result line, from its clients' counts (RDMA or TCP, OVER
// says which): every client said goodbye, or how many were dropped (exit 1).
int served_result(const auto& cs, size_t clients, const char* over) {
    uint64_t total = 0;
    int dropped = 0;
    for (const auto& c : cs) {
        total += c.received;
        dropped += c.dropped ? 1 : 0;
    }
    if (dropped > 0)
        wb::result_error("served " + std::to_string(total) + (total == 1 ? " request" : " requests") + "; dropped " +
                         std::to_string(dropped) + " of " + std::to_string(clients) +
                         (clients == 1 ? " client" : " clients") + " (stderr says why)");
    std::printf("result: served %" PRIu64 " requests from %zu client%s%s, each said goodbye\n", total, clients,
                clients == 1 ? "" : "s", over);
    return 0;
}

int serve(const Args& args, ibv_context* ctx, const wb::PortAddress& addr) {
    const wb::Options& opt = args.opt;
    const auto clients = static_cast<uint32_t>(args.clients);
    const uint32_t depth = args.depth;

    // 2. The queue arithmetic. Every client may have `depth` requests
    //    outstanding (its credits), so the SRQ needs clients x depth receives
    //    never to run dry; each client's send queue holds depth WRITEs; the
    //    one CQ takes every receive and every WRITE of every client at once.
    const uint32_t srq_size = clients * depth;
    const uint32_t cq_size = srq_size + clients * depth;
    ibv_device_attr dev{};
    CHECK_RC(ibv_query_device(ctx, &dev));
    if (srq_size > static_cast<uint32_t>(dev.max_srq_wr) || cq_size > static_cast<uint32_t>(dev.max_cqe))
        wb::fail("-c " + std::to_string(clients) + " x -t " + std::to_string(depth) + " needs an SRQ of " +
                     std::to_string(srq_size) + " and a CQ of " + std::to_string(cq_size) + "; this device allows " +
                     std::to_string(dev.max_srq_wr) + " and " + std::to_string(dev.max_cqe),
                 "lower -c or -t");
    std::printf("server: credits per client: %u (-t); a client's ring may hold fewer, then it gets fewer\n", depth);
    std::printf("server: SRQ depth: %u clients x %u credits = %u receives of %u B: every credit can be in flight "
                "at once\n", clients, depth, srq_size, kSlotBytes);
    std::printf("server: send depth per client QP: %u WRITEs with immediate (more responses wait in the program)\n",
                depth);
    std::printf("server: CQ depth: %u receives + %u clients x %u WRITEs = %u\n", srq_size, clients, depth, cq_size);

    // 3. In creation order (reverse destruction: lesson 2): PD, channel, CQ,
    //    SRQ, memory. Receive buffers: LOCAL_WRITE (our NIC writes requests
    //    there); response buffers: no flag (our NIC only reads them).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx))};
    wb::CompletionChannel channel = make_channel(ctx, args.events);
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx, static_cast<int>(cq_size), nullptr, channel.get(), 0))};
    ibv_srq_init_attr srq_attr = {.attr = {.max_wr = srq_size, .max_sge = 1, .srq_limit = 0}};
    wb::SharedReceiveQueue srq{CHECK_PTR(ibv_create_srq(pd.get(), &srq_attr))};
    wb::Buffer recv_buf = wb::alloc_buffer(srq_size * kSlotBytes);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), srq_size * kSlotBytes,
                                                  IBV_ACCESS_LOCAL_WRITE), "ulimit -l: is locked memory limited?")};
    const size_t resp_bytes = size_t{clients} * depth * sizeof(Response);
    wb::Buffer resp_buf = wb::alloc_buffer(resp_bytes);
    wb::MemoryRegion resp_mr{CHECK_PTR(ibv_reg_mr(pd.get(), resp_buf.get(), resp_bytes, 0),
                                       "ulimit -l: is locked memory limited?")};
    Server s{.args = args, .addr = addr, .pd = pd.get(), .cq = cq.get(), .srq = srq.get(), .recv_mr = recv_mr.get(),
             .resp_mr = resp_mr.get(), .store = {}, .cs = {}};
    s.cs.reserve(clients);

    // 4. Every receive posted before any client can send.
    for (uint32_t i = 0; i < srq_size; ++i) post_srq_receive(s, i);
    std::printf("server: %u receives posted to the SRQ; each is re-posted as soon as its request is read\n", srq_size);

    // 5.-6. One loop: admit clients as they come (5), serve the CQ (6).
    //    It ends when CLIENTS clients came and each said goodbye or was dropped.
    std::optional<wb::Listener> listener{std::in_place, opt.tcp_port};
    std::vector<Pending> pending;
    Clock::time_point news = Clock::now();  // the last connection accepted or admitted
    std::printf("server: waiting for %u client%s on TCP port %u\n", clients, clients == 1 ? "" : "s", opt.tcp_port);
    Waiter waiter{.cq = cq.get(), .channel = channel.get()};
    bool printed_inline = false;
    while (listener || std::ranges::any_of(s.cs, &Client::busy)) {
        const int n = poll_cq(s);                                      // 6a
        for (size_t i = 0; i < s.cs.size(); ++i) {
            post_responses(s, s.cs[i], i);                             // 6b
            say_goodbye(s.cs[i]);                                      // 6c
        }
        // The sockets: the listener, the connections not yet clients, the clients'.
        std::vector<pollfd> fds{{.fd = listener && pending.size() < kMaxPending ? listener->fd() : -1,
                                 .events = POLLIN, .revents = 0}};
        for (const Pending& p : pending) fds.push_back({.fd = p.conn.fd(), .events = POLLIN, .revents = 0});
        for (const Client& c : s.cs)
            fds.push_back({.fd = c.busy() && !c.done ? c.conn.fd() : -1, .events = POLLIN, .revents = 0});
        if (!waiter.look(fds, n == 0, 100)) continue;
        for (size_t i = 0; i < s.cs.size(); ++i) {
            Client& c = s.cs[i];
            if (fds[1 + pending.size() + i].revents) read_done(c);     // 6d
            if (c.busy() && Clock::now() - c.last_news > std::chrono::seconds(opt.timeout_s))  // 6e: its own clock
                drop(c, "sent nothing and took nothing for " + std::to_string(opt.timeout_s) + " s (" +
                            std::to_string(c.received) + " requests served)");
        }
        for (size_t i = 0; i < pending.size(); ++i) {                  // 5a, 5b
            Pending& p = pending[i];
            std::string why = read_peer_info(p, fds[1 + i].revents != 0, opt.timeout_s);
            if (why.empty() && p.got < p.info.size()) continue;
            if (why.empty())
                why = s.cs.size() < clients ? admit(s, p) : "came after all " + std::to_string(clients) + " clients";
            if (!why.empty())
                std::fprintf(stderr, "%s: a connection from %s %s; dropped it\n", wb::program_name(),
                             p.conn.peer().c_str(), why.c_str());
            p.conn = wb::Connection();
            news = Clock::now();
        }
        std::erase_if(pending, [](const Pending& p) { return p.conn.fd() < 0; });
        if (!printed_inline && !s.cs.empty()) {
            std::printf("server: responses go inline: %s (max_inline_data %u, a response is %zu B)\n",
                        s.inline_cap >= sizeof(Response) ? "yes" : "no", s.inline_cap, sizeof(Response));
            printed_inline = true;
        }
        if (listener && fds[0].revents & POLLIN) {
            pending.push_back({.conn = listener->accept(0)});
            news = Clock::now();
        }
        if (listener && s.cs.size() == clients) listener.reset();  // closed: one more client is refused
        const int limit_s = s.cs.empty() ? opt.accept_timeout_s() : opt.timeout_s;
        if (listener && pending.empty() && !std::ranges::any_of(s.cs, &Client::busy) && limit_s >= 0 &&
            Clock::now() - news > std::chrono::seconds(limit_s))
            wb::fail("no client connected to TCP port " + std::to_string(opt.tcp_port) + " within " +
                         std::to_string(limit_s) + " s (" + std::to_string(s.cs.size()) + " of " +
                         std::to_string(clients) + " came)",
                     "start every client within --timeout, with this host's address and the same -p");
    }

    // 7. The result: the count the test compares with the clients' own.
    std::printf("server: %" PRIu64 " GETs, %" PRIu64 " PUTs; %zu keys stored; %" PRIu64 " receives re-posted\n",
                s.store.gets, s.store.puts, s.store.map.size(), s.reposted);
    return served_result(s.cs, clients, "");
}

// ===========================================================================
// The client over RDMA.
// ===========================================================================

// The client's wr_id of a ring receive: this bit set. A SEND's wr_id is its
// request's slot. A failed completion says which it was only by wr_id: its
// opcode is undefined (ibv_poll_cq(3)).
constexpr uint64_t kRingReceiveTag = 1ull << 32;

int ask(const Args& args, ibv_context* ctx, const wb::PortAddress& addr) {
    const wb::Options& opt = args.opt;
    const uint32_t w = args.depth;

    // 2. The queue arithmetic: W requests in flight at most (the ring's
    //    slots). A request's SEND may complete after its response came (the
    //    server's ACK can lag), so the send queue is counted on its own, W deep;
    //    each response's WRITE with immediate takes one receive: W receives;
    //    the CQ holds W SENDs and W receives.
    std::printf("client: ring: %u slots of %u B; window: %u requests in flight at most (-t), 1 until the "
                "server grants more\n", w, kSlotBytes, w);
    std::printf("client: send depth %u, receive depth %u, CQ depth %u\n", w, w, 2 * w);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx))};
    wb::CompletionChannel channel = make_channel(ctx, args.events);
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx, static_cast<int>(2 * w), nullptr, channel.get(), 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = w, .max_recv_wr = w, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp = create_qp(pd.get(), qp_attr, sizeof(Request));
    const bool inline_requests = qp_attr.cap.max_inline_data >= sizeof(Request);
    std::printf("client: requests go inline: %s (max_inline_data %u, a request is %zu B)\n",
                inline_requests ? "yes" : "no", qp_attr.cap.max_inline_data, sizeof(Request));

    // 3. Memory: the ring (REMOTE_WRITE: the server's NIC writes responses
    //    there, which needs LOCAL_WRITE too), and the requests' buffers (no
    //    flag; unused when the requests go inline).
    wb::Buffer ring = wb::alloc_buffer(w * kSlotBytes);
    wb::MemoryRegion ring_mr{CHECK_PTR(ibv_reg_mr(pd.get(), ring.get(), w * kSlotBytes,
                                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
                                       "ulimit -l: is locked memory limited?")};
    wb::Buffer req_buf = wb::alloc_buffer(w * sizeof(Request));
    wb::MemoryRegion req_mr{CHECK_PTR(ibv_reg_mr(pd.get(), req_buf.get(), w * sizeof(Request), 0),
                                      "ulimit -l: is locked memory limited?")};

    // 4. INIT (the peer may WRITE), then one receive per ring slot, before
    //    the exchange: the immediate of each response consumes one (lesson 5:
    //    a receive with no scatter list, the data goes where the WRITE says).
    wb::qp_to_init(qp.get(), addr, IBV_ACCESS_REMOTE_WRITE);
    auto post_ring_receive = [&] {
        ibv_recv_wr wr = {.wr_id = kRingReceiveTag, .next = nullptr, .sg_list = nullptr, .num_sge = 0};
        ibv_recv_wr* bad = nullptr;
        CHECK_RC(ibv_post_recv(qp.get(), &wr, &bad));
    };
    for (uint32_t i = 0; i < w; ++i) post_ring_receive();

    // 5. Exchange (our ring's address, length and rkey ride in it), RTR, RTS.
    //    The server brought its QP to RTS before it answered.
    const uint32_t psn = wb::random_psn();
    wb::PeerInfo me = wb::local_info(kLesson, qp.get(), psn, addr);
    me.addr = reinterpret_cast<uintptr_t>(ring.get());
    me.length = w * kSlotBytes;
    me.rkey = ring_mr->rkey;
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    const wb::PeerInfo peer = wb::exchange(conn, me, opt.timeout_s);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    std::printf("client: connected to %s: QP 0x%x <-> 0x%x; our ring at 0x%" PRIx64 ", rkey 0x%x\n",
                conn.peer().c_str(), qp->qp_num, peer.qp_num, me.addr, me.rkey);

    // 6. The stream: send while credits and the send queue allow, take
    //    completions, check each response in its slot and re-post its
    //    receive BEFORE the freed credit sends the next request.
    Workload load;
    Window win(w);
    uint32_t sends_in_flight = 0;
    uint64_t posted = 0;
    std::vector<ibv_sge> sges(w);
    std::vector<ibv_send_wr> wrs(w);
    Waiter waiter{.cq = cq.get(), .channel = channel.get()};
    Clock::time_point last_wc = Clock::now();
    const Clock::time_point start = Clock::now();
    while (win.answered < args.requests || sends_in_flight > 0) {
        // Every request the credits and the send queue allow, as ONE post
        // list (lesson 11): one doorbell, however many. A request's bytes sit
        // in buffer `posted % w` until its SEND completes (inline: copied at once).
        uint32_t k = 0;
        while (win.may_send(args.requests) && sends_in_flight + k < w) {
            const uint16_t slot = win.take_slot();
            auto* q = reinterpret_cast<Request*>(req_buf.get()) + (posted + k) % w;
            win.open[slot] = load.make(win.sent, slot, *q);
            sges[k] = {.addr = reinterpret_cast<uintptr_t>(q), .length = sizeof *q, .lkey = req_mr->lkey};
            wrs[k] = {.wr_id = slot, .next = nullptr, .sg_list = &sges[k], .num_sge = 1, .opcode = IBV_WR_SEND,
                      .send_flags = IBV_SEND_SIGNALED | (inline_requests ? unsigned{IBV_SEND_INLINE} : 0u)};
            if (k > 0) wrs[k - 1].next = &wrs[k];
            ++k;
        }
        if (k > 0) {
            ibv_send_wr* bad = nullptr;
            CHECK_RC(ibv_post_send(qp.get(), wrs.data(), &bad));
            sends_in_flight += k;
            posted += k;
        }
        ibv_wc wcs[32];
        const int n = CHECK_POLL(ibv_poll_cq(cq.get(), 32, wcs));
        for (const ibv_wc& wc : std::span(wcs, static_cast<size_t>(n))) {
            const bool ring_receive = (wc.wr_id & kRingReceiveTag) != 0;
            wb::check_wc(wc, ring_receive ? "a response's WRITE with immediate" : "a request's SEND");
            last_wc = Clock::now();
            if (!ring_receive) {
                --sends_in_flight;
                continue;
            }
            if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM))
                wb::result_error(std::string("a receive completed with ") + wb::wc_opcode_str(wc.opcode) +
                                 ", not a WRITE with immediate");
            const uint32_t slot = ntohl(wc.imm_data);
            if (slot >= w)
                wb::result_error("the immediate names slot " + std::to_string(slot) + " of our " + std::to_string(w));
            if (wc.byte_len != sizeof(Response))  // what the WRITE carried: a response is 40 bytes
                wb::result_error("the WRITE into slot " + std::to_string(slot) + " carried " +
                                 std::to_string(wc.byte_len) + " bytes; a response is " +
                                 std::to_string(sizeof(Response)));
            Response r;
            std::memcpy(&r, ring.get() + slot * kSlotBytes, sizeof r);  // one copy, then only the copy is read
            post_ring_receive();
            win.take(slot, r, win.answered < 3);
        }
        std::vector<pollfd> fds{{.fd = conn.fd(), .events = POLLIN, .revents = 0}};
        if (!waiter.look(fds, n == 0, 100)) continue;
        if (fds[0].revents != 0)  // the server says nothing on TCP until BYE!: this is its end
            wb::fail("the server closed its connection after " + std::to_string(win.answered) + " responses",
                     "the server's stderr says why (it drops a client that breaks the protocol)");
        if (Clock::now() - last_wc > std::chrono::seconds(opt.timeout_s))
            wb::fail("no completion for " + std::to_string(opt.timeout_s) + " s with " +
                         std::to_string(win.outstanding) + " requests outstanding",
                     "is the server still running? raise --timeout on a slow machine");
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

    // 7. The goodbye: every response in, every SEND acknowledged (the loop
    //    waited for both), so DONE; then BYE! once the server's last WRITE
    //    to us is acknowledged. Only then may our QP go.
    wb::send_token(conn, "DONE");
    wb::expect_token(conn, "BYE!", opt.timeout_s);
    std::printf("client: DONE sent, BYE! received: nothing left in flight either way\n");
    print_result(win, load, seconds, "over RDMA");
    return 0;
}

// ===========================================================================
// The same service over TCP (--tcp): the requests and responses as above,
// framed on a stream (a response preceded by its slot, as the immediate
// carried it). TCP needs no queue sizes, credits or ring: the kernel's
// socket buffers and TCP's window do that work, in the kernel, with copies.
// ===========================================================================
struct TcpClient {
    int number = 0;
    wb::Connection conn;
    std::string in, out;  // bytes read and not yet a whole request; responses not yet written
    uint64_t received = 0;
    bool finished = false, dropped = false;
    Clock::time_point last_news = Clock::now();
    bool busy() const { return !finished && !dropped; }
};

void tcp_drop(TcpClient& c, const std::string& why) {
    std::fprintf(stderr, "%s: client %d (%s) %s; dropped it: connection closed\n", wb::program_name(), c.number,
                 c.conn.peer().c_str(), why.c_str());
    c.conn = wb::Connection();
    c.dropped = true;
}

void set_nodelay(int fd) {  // every request and response goes out at once (no Nagle delay)
    int one = 1;
    CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
}

// Read what came, answer every whole request; a goodbye request (op 'B') is
// answered with kByeSlot once everything before it is.
void tcp_read(TcpClient& c, Store& store, uint32_t depth) {
    char buf[4096];
    const ssize_t n = recv(c.conn.fd(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0)
        return tcp_drop(c, (n == 0 ? std::string("closed its connection")
                                   : "lost its connection: " + wb::errno_str(errno)) +
                               " after " + std::to_string(c.received) + " requests, before its goodbye");
    c.last_news = Clock::now();
    c.in.append(buf, static_cast<size_t>(n));
    while (c.in.size() >= sizeof(Request) && !c.finished) {
        if (c.in[0] == 'B') {  // the goodbye: every response before it is already in c.out
            const uint32_t bye = htonl(kByeSlot);
            c.out.append(reinterpret_cast<const char*>(&bye), 4).append(sizeof(Response), '\0');
            c.finished = true;
            std::printf("server: client %d said goodbye after %" PRIu64 " requests\n", c.number, c.received);
            break;
        }
        Parsed p = serve_request(store, c.in.data(), sizeof(Request), depth, static_cast<uint16_t>(depth));
        if (!p.why.empty()) return tcp_drop(c, p.why);
        ++c.received;
        const uint32_t slot = htonl(p.slot);
        c.out.append(reinterpret_cast<const char*>(&slot), 4)
            .append(reinterpret_cast<const char*>(&p.response), sizeof p.response);
        c.in.erase(0, sizeof(Request));
    }
}

int serve_tcp(const Args& args) {
    const wb::Options& opt = args.opt;
    const auto clients = static_cast<size_t>(args.clients);
    std::printf("server: over TCP: credits per client %u (-t); the kernel's socket buffers are the queues\n",
                args.depth);
    Store store;
    std::vector<TcpClient> cs;
    std::optional<wb::Listener> listener{std::in_place, opt.tcp_port};
    std::printf("server: waiting for %zu client%s on TCP port %u\n", clients, clients == 1 ? "" : "s", opt.tcp_port);
    Clock::time_point news = Clock::now();
    while (listener || std::ranges::any_of(cs, [](const TcpClient& c) { return c.busy() || !c.out.empty(); })) {
        std::vector<pollfd> fds{{.fd = listener ? listener->fd() : -1, .events = POLLIN, .revents = 0}};
        for (const TcpClient& c : cs) {
            short ev = 0;
            // A client whose responses pile up (it stopped reading) is not read
            // either: TCP's window then stops it, and its clock drops it.
            if (c.busy() && c.out.size() < args.depth * kTcpResponseBytes) ev |= POLLIN;
            if (!c.out.empty()) ev |= POLLOUT;
            fds.push_back({.fd = c.conn.fd() >= 0 && ev ? c.conn.fd() : -1, .events = ev, .revents = 0});
        }
        const int ready = poll(fds.data(), fds.size(), 100);
        if (ready == -1 && errno == EINTR) continue;
        CHECK_ERRNO(ready);
        for (size_t i = 0; i < cs.size(); ++i) {
            TcpClient& c = cs[i];
            const short rev = fds[1 + i].revents;
            if (rev & (POLLIN | POLLHUP | POLLERR)) tcp_read(c, store, args.depth);
            if (!c.dropped && (rev & POLLOUT) && !c.out.empty()) {
                const ssize_t n = send(c.conn.fd(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno != EAGAIN && errno != EINTR)
                    tcp_drop(c, "lost its connection: " + wb::errno_str(errno));
                if (n > 0) {
                    c.out.erase(0, static_cast<size_t>(n));
                    c.last_news = Clock::now();
                }
                if (c.finished && c.out.empty()) c.conn = wb::Connection();  // the goodbye is written: close
            }
            const bool owed = c.busy() || !c.out.empty();  // requests to read, or responses to write
            if (owed && !c.dropped && Clock::now() - c.last_news > std::chrono::seconds(opt.timeout_s))
                tcp_drop(c, "sent nothing and took nothing for " + std::to_string(opt.timeout_s) + " s (" +
                                std::to_string(c.received) + " requests served)");
        }
        if (listener && fds[0].revents & POLLIN) {
            TcpClient c{.number = static_cast<int>(cs.size()) + 1, .conn = listener->accept(0)};
            set_nodelay(c.conn.fd());
            std::printf("server: client %d (%s) is connected\n", c.number, c.conn.peer().c_str());
            cs.push_back(std::move(c));
            news = Clock::now();
            if (cs.size() == clients) listener.reset();
        }
        const int limit_s = cs.empty() ? opt.accept_timeout_s() : opt.timeout_s;
        if (listener && !std::ranges::any_of(cs, &TcpClient::busy) && limit_s >= 0 &&
            Clock::now() - news > std::chrono::seconds(limit_s))
            wb::fail("no client connected to TCP port " + std::to_string(opt.tcp_port) + " within " +
                     std::to_string(limit_s) + " s (" + std::to_string(cs.size()) + " of " + std::to_string(clients) +
                     " came)");
    }
    std::printf("server: %" PRIu64 " GETs, %" PRIu64 " PUTs; %zu keys stored\n", store.gets, store.puts,
                store.map.size());
    return served_result(cs, clients, " over TCP");
}

int ask_tcp(const Args& args) {
    const wb::Options& opt = args.opt;
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    set_nodelay(conn.fd());
    std::printf("client: connected to %s over TCP; window: %u requests in flight at most (-t)\n", conn.peer().c_str(),
                args.depth);
    Workload load;
    Window win(args.depth);
    std::string in;
    const Clock::time_point start = Clock::now();
    // The window's requests (at most 64 x 60 B) always fit the socket's send
    // buffer, so send_all never waits on a server that stopped reading.
    auto read_frames = [&](bool until_bye) {
        pollfd pfd = {.fd = conn.fd(), .events = POLLIN, .revents = 0};
        const int ready = poll(&pfd, 1, opt.timeout_s * 1000);
        if (ready == -1 && errno == EINTR) return false;
        if (CHECK_ERRNO(ready) == 0) wb::fail("no response for " + std::to_string(opt.timeout_s) + " s");
        char buf[4096];
        const ssize_t n = recv(conn.fd(), buf, sizeof buf, 0);
        if (n <= 0) wb::fail("the server closed its connection after " + std::to_string(win.answered) + " responses");
        in.append(buf, static_cast<size_t>(n));
        while (in.size() >= kTcpResponseBytes) {
            uint32_t slot;
            Response r;
            std::memcpy(&slot, in.data(), 4);
            std::memcpy(&r, in.data() + 4, sizeof r);
            in.erase(0, kTcpResponseBytes);
            if (ntohl(slot) == kByeSlot) {
                if (!until_bye) wb::result_error("the server said goodbye before our last response");
                return true;
            }
            win.take(ntohl(slot), r, win.answered < 3);
        }
        return false;
    };
    while (win.answered < args.requests) {
        std::string batch;
        while (win.may_send(args.requests)) {
            const uint16_t slot = win.take_slot();
            Request q;
            win.open[slot] = load.make(win.sent, slot, q);
            batch.append(reinterpret_cast<const char*>(&q), sizeof q);
        }
        if (!batch.empty()) wb::send_all(conn, std::span(reinterpret_cast<const uint8_t*>(batch.data()), batch.size()));
        read_frames(false);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    Request bye{};
    bye.op = 'B';
    wb::send_all(conn, std::span(reinterpret_cast<const uint8_t*>(&bye), sizeof bye));
    while (!read_frames(true)) {
    }
    std::printf("client: goodbye sent, the server's goodbye received\n");
    print_result(win, load, seconds, "over TCP");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Args args = parse_args(argc, argv);  // misuse: one line on stderr, exit 2
    if (args.tcp) return args.is_server ? serve_tcp(args) : ask_tcp(args);

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(args.opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), args.opt.ib_port, args.opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);

    // Steps 2 to 7 of each side.
    return args.is_server ? serve(args, ctx.get(), addr) : ask(args, ctx.get(), addr);
}
