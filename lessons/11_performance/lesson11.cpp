// lesson11.cpp - how fast, and why not faster: latency and bandwidth measured
// the way perftest measures them, and the levers that move them.
//
// The client and the server build the same RC connection as lessons 4 to 6,
// then the client times one of two loops:
//   --test lat   a ping-pong: one message out, one back, again and again.
//                Each round trip is timed (clock_gettime, CLOCK_MONOTONIC_RAW); SEND
//                and WRITE report half of it (one way), READ all of it (a request
//                and its response ARE its latency): median ("typical"), p99, p99.9, min, max.
//   --test bw    a stream: -n messages, up to --depth of them in flight, timed
//                from the first ibv_post_send to the last completion:
//                bytes x iterations / seconds, in MiB/s.
// perftest (ib_send_lat, ib_write_bw ...) does exactly this; scripts/bench/run.sh
// runs both side by side. The levers, one option each: message size (-s, -a)
// against the path MTU, IBV_SEND_INLINE (--inline), selective signaling
// (--signal), post lists (--batch), queue depth (--depth), busy polling
// against completion events (--events), and READ's round trip against
// WRITE's one way (--op).
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson11                            server: send latency, 2 B
//     ./lesson11 127.0.0.1                  client: prints "result: send lat 2 B: typical ..."
//     ./lesson11 --test bw --op write       server, then the client:
//     ./lesson11 --test bw --op write 127.0.0.1
// On two hosts: ./lesson11 [options] on host A, ./lesson11 [options] A on host B.
// Both sides take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson11 -h).
//
// Verbs it introduces:
//     IBV_SEND_INLINE and ibv_qp_init_attr.cap.max_inline_data
//     unsignaled work requests (send_flags without IBV_SEND_SIGNALED)
//     a post list: ibv_send_wr.next chains several WRs into one ibv_post_send
//     ibv_query_device: max_qp_wr, max_qp_rd_atom, max_qp_init_rd_atom
//     (inline_bytes creates and destroys trial QPs to learn max_inline_data;
//     the server's ibv_query_qp with IBV_QP_RQ_PSN checks that every message
//     arrived, expected_psn)
//
// Read more: man ibv_post_send (IBV_SEND_INLINE, IBV_SEND_SIGNALED), man ibv_create_qp (max_inline_data),
// man clock_gettime; perftest's src/perftest_resources.c and perftest_parameters.c (print_report_lat,
// print_report_bw); docs/lesson11-performance.md (the method, the plots, what each curve says, exercises).
#include <infiniband/verbs.h>

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench.hpp"  // this folder: the command line, the clock, statistics, CSV, the MORE heartbeat
#include "check.hpp"
#include "completion.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "qp.hpp"

namespace {

using bench::now_ns;
using bench::Op;
using bench::Spec;
using bench::Test;

constexpr uint16_t kLesson = 11;  // sent in the exchange: a lesson-11 client only talks to a lesson-11 server
// A ping-pong's queues: each side keeps this many receives posted (one used
// per round trip, posted again once our answer is out), and as many sends
// whose completions we have not taken yet (we take them when the queue is full).
constexpr uint32_t kLatQueue = 16;
// Outstanding RDMA READs one side may have at the other (max_rd_atomic): the
// RC protocol limits them separately from the send queue. perftest's default
// is 16 too, or the device's maximum when that is smaller.
constexpr uint8_t kReadsInFlight = 16;
constexpr int kPollBatch = 16;  // completions taken per ibv_poll_cq call

// The queue sizes, chosen in one place.
struct QueueSizes {
    uint32_t send;
    uint32_t recv;
};
QueueSizes queue_sizes(const Spec& spec, const ibv_device_attr& dev) {
    // WRITE and READ post no receive at all; one slot is the smallest queue.
    const bool receives = spec.op == Op::send;
    // A ping-pong has one message in flight each way: kLatQueue of each.
    if (spec.test == Test::lat) return {.send = kLatQueue, .recv = receives ? kLatQueue : 1};
    // A stream keeps --depth WRs in flight. Its receiver keeps twice as many
    // receives posted, so that the sender never finds it out of receives
    // (RNR) while it posts again the ones just used.
    const uint32_t recv = std::min<uint32_t>(2 * spec.depth, dev.max_qp_wr);
    return {.send = spec.depth, .recv = receives ? recv : 1};
}

// --inline: how many bytes one WR may carry inside its WQE (the NIC's own
// copy of a posted WR), asked for in cap.max_inline_data. The provider may
// give more than asked, and refuses (EINVAL) more than it can. -s SIZE asks
// for SIZE, a usage error when refused; -a asks for less and less from 1 MiB
// until the device agrees, and the sweep stops there. Each trial QP is
// destroyed at once; main creates the one it uses with the answer.
uint32_t inline_bytes(ibv_pd* pd, ibv_qp_init_attr attr, const Spec& spec, const char* device) {
    if (!spec.inl) return 0;
    const uint32_t first = spec.all ? bench::kSweepLast : spec.size;
    const uint32_t last = spec.all ? bench::kSweepFirst : spec.size;
    for (uint32_t ask = first; ask >= last; ask /= 2) {
        attr.cap.max_inline_data = ask;
        if (ibv_qp* trial = ibv_create_qp(pd, &attr)) {
            CHECK_RC(ibv_destroy_qp(trial));
            return ask;
        }
        if (errno != EINVAL)
            wb::fail("ibv_create_qp(pd, &attr) with max_inline_data " + std::to_string(ask) +
                     " failed: " + wb::errno_str(errno));
    }
    if (spec.all) wb::usage_error("--inline: this device takes no inline data at all");
    wb::usage_error("--inline -s " + std::to_string(spec.size) + ": " + device + " refused a QP with max_inline_data " +
                    std::to_string(spec.size) +
                    " (EINVAL): too big to post inline; -a --inline sweeps up to the largest it takes");
}

// Who touches which buffer, and the access that asks for, chosen in one
// place. Each side has two buffers. `local`: what we SEND or WRITE from (the
// NIC only reads it: no flag) or, for READ, where the response lands (the
// NIC writes it: LOCAL_WRITE). `target`: what the peer's operation reaches.
// Receives land there (LOCAL_WRITE), the peer WRITEs into it (REMOTE_WRITE,
// which needs LOCAL_WRITE too) or READs from it (REMOTE_READ). Only the side
// that is reached registers it, with exactly that access, and the QP lets
// the peer do that one thing.
struct Access {
    unsigned local_mr;
    unsigned target_mr;
    unsigned qp;          // what the peer may do through our QP (qp_to_init)
    bool we_are_reached;  // we register `target` and offer it in the exchange
    bool we_reach;        // we WRITE or READ the peer's `target`
};
Access access_for(const Spec& spec, bool is_server) {
    // A WRITE ping-pong WRITEs both ways; a WRITE stream and READs go from
    // the client to the server's buffer.
    const bool both_ways = spec.test == Test::lat;
    switch (spec.op) {
        case Op::send:
            return {.local_mr = 0, .target_mr = IBV_ACCESS_LOCAL_WRITE, .qp = 0, .we_are_reached = true,
                    .we_reach = false};
        case Op::write:
            return {.local_mr = 0, .target_mr = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                    .qp = IBV_ACCESS_REMOTE_WRITE, .we_are_reached = is_server || both_ways,
                    .we_reach = !is_server || both_ways};
        case Op::read:
            return {.local_mr = IBV_ACCESS_LOCAL_WRITE, .target_mr = IBV_ACCESS_REMOTE_READ,
                    .qp = IBV_ACCESS_REMOTE_READ, .we_are_reached = is_server, .we_reach = !is_server};
    }
    return {};
}

// Waiting for completions on one CQ, by busy polling (the default) or, with
// --events, by sleeping on its completion channel (lesson 8 explains arm,
// wait, ack). Either way the wait is bounded: a peer that died gives an
// error, not a hang.
struct CqWaiter {
    ibv_cq* cq;
    ibv_comp_channel* channel;  // nullptr: busy polling
    int timeout_s;
    bool armed = false;
    unsigned unacked = 0;

    // Take up to `max` completions, waiting until there is at least one.
    int wait(ibv_wc* wc, int max, const char* waiting_for) {
        // The deadline starts at the first look at the clock, not on entry:
        // a clock read is part of every round trip we time (about 200 ns in
        // the lab's guest, where perftest's raw cycle counter costs 25 ns).
        int64_t deadline = 0;
        auto past_deadline = [&] {
            const int64_t now = now_ns();
            if (deadline == 0) deadline = now + int64_t{timeout_s} * 1'000'000'000;
            return now > deadline;
        };
        for (unsigned spins = 1;; ++spins) {
            const int n = CHECK_POLL(ibv_poll_cq(cq, max, wc));
            if (n > 0) return n;
            if (channel == nullptr) {
                // Reading the clock on every empty poll would slow the spin
                // that we are measuring; every 4096th is enough.
                if ((spins & 4095) == 0 && past_deadline()) timed_out(waiting_for);
                continue;
            }
            // Events: arm first, then poll once more, and only then sleep: a
            // completion that arrived between the empty poll and the arm is
            // found by that poll (lesson 8's race).
            if (!armed) {
                CHECK_RC(ibv_req_notify_cq(cq, 0));
                armed = true;
                continue;
            }
            if (past_deadline()) timed_out(waiting_for);
            const int64_t left_ms = (deadline - now_ns()) / 1'000'000;
            pollfd pfd = {.fd = channel->fd, .events = POLLIN, .revents = 0};
            const int ready = left_ms > 0 ? poll(&pfd, 1, static_cast<int>(left_ms)) : 0;
            if (ready == -1 && errno == EINTR) continue;
            if (CHECK_ERRNO(ready) == 0) timed_out(waiting_for);
            ibv_cq* ev_cq;
            void* ev_ctx;
            CHECK_ERRNO(ibv_get_cq_event(channel, &ev_cq, &ev_ctx));
            armed = false;
            if (++unacked == 64) {  // ibv_ack_cq_events takes a mutex: acknowledge in batches
                ibv_ack_cq_events(cq, unacked);
                unacked = 0;
            }
        }
    }
    // Every event acknowledged before the CQ is destroyed (the waiter is declared after it).
    ~CqWaiter() {
        if (unacked) ibv_ack_cq_events(cq, unacked);
    }
    [[noreturn]] void timed_out(const char* waiting_for) const {
        wb::fail("no completion within " + std::to_string(timeout_s) + " s while waiting for " + waiting_for,
                 "is the peer still running? raise --timeout on a slow machine");
    }
};

// The send WR's opcode for each operation measured.
ibv_wr_opcode opcode_of(Op op) {
    switch (op) {
        case Op::send: return IBV_WR_SEND;
        case Op::write: return IBV_WR_RDMA_WRITE;
        case Op::read: return IBV_WR_RDMA_READ;
    }
    return IBV_WR_SEND;
}

// Our send queue: posts WRs and takes their completions from the send CQ.
// post() builds `count` WRs of `size` bytes as one post list and posts them
// with ONE ibv_post_send, which on rxe is one write() to the kernel (the
// doorbell). WRs are numbered from 1 over the whole run (wr_id); number seq
// asks for a completion when seq is a multiple of `signal`, or is `last`: an
// RC completion also says that every earlier WR of the queue is done.
struct SendQueue {
    ibv_qp* qp;
    const ibv_mr* local;
    ibv_wr_opcode opcode;
    unsigned inline_flag;  // IBV_SEND_INLINE or 0
    uint64_t remote_addr;  // WRITE and READ: the peer's target buffer
    uint32_t rkey;
    CqWaiter cq;
    uint32_t signal = 1;
    uint64_t last = 0;  // the final WR of a stream: always signaled
    uint64_t posted = 0, completed = 0;
    unsigned long calls = 0;  // ibv_post_send calls: doorbells
    std::vector<ibv_send_wr> wrs;
    std::vector<ibv_sge> sges;
    ibv_wc wc[kPollBatch];

    void post(uint32_t count, uint32_t size) {
        wrs.resize(count);
        sges.resize(count);
        for (uint32_t i = 0; i < count; ++i) {
            const uint64_t seq = posted + 1 + i;
            sges[i] = {.addr = reinterpret_cast<uintptr_t>(local->addr), .length = size, .lkey = local->lkey};
            // INLINE: the CPU copies the bytes into the WQE at post time, so
            // the NIC need not fetch them with a DMA read (one PCIe round trip
            // saved on a real NIC). The lkey is not even checked.
            unsigned flags = inline_flag;
            if (seq % signal == 0 || seq == last) flags |= IBV_SEND_SIGNALED;
            wrs[i] = {
                .wr_id = seq,  // comes back in the completion: "everything up to seq is done"
                .next = i + 1 < count ? &wrs[i + 1] : nullptr,
                .sg_list = &sges[i],
                .num_sge = 1,
                .opcode = opcode,
                .send_flags = flags,
            };
            if (opcode != IBV_WR_SEND) wrs[i].wr.rdma = {.remote_addr = remote_addr, .rkey = rkey};
        }
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(qp, wrs.data(), &bad));
        posted += count;
        ++calls;
    }
    // Wait until `count` more WRs fit in `depth` slots: a full queue waits for its oldest.
    void make_room(uint32_t count, uint32_t depth, const char* what) {
        if (posted + count - completed > depth) wait_until(posted + count - depth, what);
    }
    // Wait until every WR up to number `seq` is complete.
    void wait_until(uint64_t seq, const char* what) {
        while (completed < seq) {
            const int n = cq.wait(wc, kPollBatch, what);
            for (int i = 0; i < n; ++i) {
                wb::check_wc(wc[i], what);
                completed = std::max(completed, wc[i].wr_id);
            }
        }
    }
};

// Our receive queue: receives of the whole target buffer, posted as one post
// list (every receive lands in the same bytes: we measure, we do not keep
// the data), and their completions from the receive CQ.
struct RecvQueue {
    ibv_qp* qp;
    const ibv_mr* target;
    uint32_t length;
    CqWaiter cq;
    std::vector<ibv_recv_wr> wrs;
    ibv_sge sge;
    ibv_wc wc[kPollBatch];

    void post(uint32_t count) {
        sge = {.addr = reinterpret_cast<uintptr_t>(target->addr), .length = length, .lkey = target->lkey};
        wrs.resize(count);
        for (uint32_t i = 0; i < count; ++i)
            wrs[i] = {.wr_id = 0, .next = i + 1 < count ? &wrs[i + 1] : nullptr, .sg_list = &sge, .num_sge = 1};
        ibv_recv_wr* bad = nullptr;
        CHECK_RC(ibv_post_recv(qp, wrs.data(), &bad));
    }
    // Wait for the peer's SENDs: at least one, at most `max`; their bytes added to *bytes.
    uint32_t take(int max, const char* what, uint64_t* bytes = nullptr) {
        const int n = cq.wait(wc, max, what);
        for (int i = 0; i < n; ++i) {
            wb::check_wc(wc[i], what);
            if (bytes) *bytes += wc[i].byte_len;
        }
        return static_cast<uint32_t>(n);
    }
};

// A WRITE ping-pong watches memory, as perftest's ib_write_lat does: the
// WRITE raises no completion at its target. Round trip i writes the byte
// mark(i), never the 0 a buffer starts with, as the last byte of the message
// (`out`, the last byte of `local`), and waits for the peer's to arrive in
// `in`, the last byte of `target`. (The last byte is written last on rxe and
// in practice on real NICs; nothing in the RC spec promises the order of a
// WRITE's bytes, which is why a real protocol uses WRITE with immediate or a
// following SEND as the "it is there" signal.)
struct Marks {
    volatile uint8_t* in;
    uint8_t* out;
    int timeout_s;
    static uint8_t mark(uint32_t i) { return static_cast<uint8_t>(i % 255 + 1); }
    void wait_for(uint32_t i) const {
        const int64_t deadline = now_ns() + int64_t{timeout_s} * 1'000'000'000;
        for (unsigned spins = 1; *in != mark(i); ++spins)
            if ((spins & 4095) == 0 && now_ns() > deadline)
                wb::fail("the peer's RDMA WRITE did not arrive within " + std::to_string(timeout_s) + " s",
                         "is the peer still running?");
    }
};

// 9s. The server's half of the ping-pong: answer each message as it
// arrives, answer first, then post its receive again. A READ needs no
// answer: our NIC alone serves it.
void answer_pings(SendQueue& sq, RecvQueue& rq, const Marks& marks, Op op, uint32_t n, uint32_t size) {
    if (op == Op::read) return;
    for (uint32_t i = 0; i < n; ++i) {
        if (op == Op::send) {
            rq.take(1, "the client's SEND");
        } else {
            marks.wait_for(i);
            *marks.out = Marks::mark(i);
        }
        sq.make_room(1, kLatQueue, "our answer's completion");
        sq.post(1, size);
        if (op == Op::send) rq.post(1);
    }
    sq.wait_until(sq.posted, "our last answer's completion");
}

// 9c. The client's half: stamp, send, wait for the answer; the time between
// two stamps is one round trip. A READ's round trip is its request and its
// response. Returns the round trips, in ns.
std::vector<int64_t> ping(SendQueue& sq, RecvQueue& rq, const Marks& marks, Op op, uint32_t n, uint32_t size,
                          bench::Heartbeat& heartbeat) {
    std::vector<int64_t> stamps(n + 1);
    for (uint32_t i = 0; i < n; ++i) {
        *marks.out = Marks::mark(i);
        stamps[i] = now_ns();
        heartbeat.beat(stamps[i]);
        sq.make_room(1, kLatQueue, "our SEND's completion");
        sq.post(1, size);
        switch (op) {
            case Op::send:
                if (i > 0) rq.post(1);  // the previous answer's receive, while this SEND is on the wire
                rq.take(1, "the server's answer (RECV)");
                break;
            case Op::write:
                marks.wait_for(i);
                break;
            case Op::read:
                sq.wait_until(sq.posted, "the READ's response");
                break;
        }
    }
    stamps[n] = now_ns();
    if (op == Op::send) rq.post(1);  // the last answer's receive
    sq.wait_until(sq.posted, "our last completion");
    std::vector<int64_t> rtt(n);
    for (uint32_t i = 0; i < n; ++i) rtt[i] = stamps[i + 1] - stamps[i];
    return rtt;
}

// 9s. A SEND stream needs our receives, posted again as they are used;
// WRITE and READ streams need nothing of our CPU.
void sink_stream(RecvQueue& rq, uint32_t n, uint32_t size) {
    uint64_t bytes = 0;
    for (uint32_t got = 0; got < n;) {
        const uint32_t k = rq.take(kPollBatch, "the client's SENDs", &bytes);
        rq.post(k);
        got += k;
    }
    std::printf("server: %u B: received %u messages, %" PRIu64 " bytes\n", size, n, bytes);
}

// 9c. Stream: keep up to --depth WRs in flight, --batch per post call, a
// completion every --signal WRs. The clock runs from the first post to the
// last completion. Returns the seconds.
double stream(SendQueue& sq, const Spec& spec, uint32_t size, bench::Heartbeat& heartbeat) {
    sq.signal = spec.signal;
    sq.last = sq.posted + spec.iters;
    const int64_t t0 = now_ns();
    while (sq.completed < sq.last) {
        while (sq.posted < sq.last) {
            const uint32_t k = static_cast<uint32_t>(std::min<uint64_t>(spec.batch, sq.last - sq.posted));
            if (sq.posted + k - sq.completed > spec.depth) break;  // no room: take completions first
            sq.post(k, size);
        }
        sq.wait_until(sq.completed + 1, "the stream's completions");
        heartbeat.beat(now_ns());
    }
    return static_cast<double>(now_ns() - t0) / 1e9;
}

// The next PSN our QP expects from its peer (rq_psn, ibv_query_qp): it moves
// on with every request packet that arrives, SEND, WRITE or READ, whether or
// not our CPU sees it. For a WRITE or READ stream, the one sign on the
// server's side that the client's requests really came.
uint32_t expected_psn(ibv_qp* qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    CHECK_RC(ibv_query_qp(qp, &attr, IBV_QP_RQ_PSN, &init));
    return attr.rq_psn;
}

}  // namespace

int main(int argc, char** argv) {
    // The options, checked before anything is opened (./bench.hpp).
    const auto [opt, spec, csv_path] = bench::parse_command_line(argc, argv);
    const bool is_server = opt.args.empty();
    const char* me = is_server ? "server" : "client";
    bench::warn_if_coarse_clock();  // a latency below the clock's tick reads as 0 or one tick
    // Busy polling on the only CPU measures the scheduler. Every side spins
    // but with --events, and but the server of READs or of a WRITE stream:
    // its NIC alone serves them, and its CPU waits for DONE on TCP.
    const bool nic_alone = spec.op == Op::read || (spec.op == Op::write && spec.test == Test::bw);
    bench::warn_if_one_cpu(!spec.events && !(is_server && nic_alone));

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp),
    //    and the device's limits that bound the levers.
    wb::Context ctx = wb::open_device(opt.device);
    const char* device = ibv_get_device_name(ctx->device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(device, addr);
    ibv_device_attr dev_attr;
    CHECK_RC(ibv_query_device(ctx.get(), &dev_attr));
    if (spec.depth > static_cast<uint32_t>(dev_attr.max_qp_wr))  // the send queue cannot be deeper
        wb::usage_error("--depth " + std::to_string(spec.depth) + " is more than " + device + "'s max_qp_wr " +
                        std::to_string(dev_attr.max_qp_wr) + " (ibv_query_device)");
    const uint8_t reads_in_flight =
        static_cast<uint8_t>(std::min<int>({kReadsInFlight, dev_attr.max_qp_rd_atom, dev_attr.max_qp_init_rd_atom}));

    // 2. PD; a CQ for the sends and one for the receives, as perftest has
    //    (each with its own completion channel for --events); and the QP.
    //    A CQ holds at most one completion per WR of its queue.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    const QueueSizes queues = queue_sizes(spec, dev_attr);
    wb::CompletionChannel send_channel{spec.events ? CHECK_PTR(ibv_create_comp_channel(ctx.get())) : nullptr};
    wb::CompletionChannel recv_channel{spec.events ? CHECK_PTR(ibv_create_comp_channel(ctx.get())) : nullptr};
    wb::CompletionQueue send_cq{
        CHECK_PTR(ibv_create_cq(ctx.get(), static_cast<int>(queues.send), nullptr, send_channel.get(), 0))};
    wb::CompletionQueue recv_cq{
        CHECK_PTR(ibv_create_cq(ctx.get(), static_cast<int>(queues.recv), nullptr, recv_channel.get(), 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = send_cq.get(),
        .recv_cq = recv_cq.get(),
        .cap = {.max_send_wr = queues.send, .max_recv_wr = queues.recv, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    qp_attr.cap.max_inline_data = inline_bytes(pd.get(), qp_attr, spec, device);
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    if (spec.inl)  // ibv_create_qp wrote back what the QP really takes
        std::printf("%s: the QP takes up to %u bytes inline (max_inline_data)\n", me, qp_attr.cap.max_inline_data);
    const uint32_t psn = wb::random_psn();

    // The sizes to measure: -s, or the sweep of -a (with --inline, up to what the QP takes inline).
    std::vector<uint32_t> sizes;
    const uint32_t sweep_last = spec.inl ? qp_attr.cap.max_inline_data : bench::kSweepLast;
    for (uint32_t s = bench::kSweepFirst; spec.all && s <= sweep_last; s *= 2) sizes.push_back(s);
    if (!spec.all) sizes.push_back(spec.size);
    const uint32_t buf_bytes = sizes.back();

    // 3. Memory: `local` and `target`, each with the access its use needs (access_for).
    const Access access = access_for(spec, is_server);
    wb::Buffer local_buf = wb::alloc_buffer(buf_bytes);
    wb::MemoryRegion local_mr{CHECK_PTR(ibv_reg_mr(pd.get(), local_buf.get(), buf_bytes, access.local_mr),
                                        "ulimit -l: is locked memory limited?")};
    wb::Buffer target_buf = wb::alloc_buffer(buf_bytes);
    wb::MemoryRegion target_mr;
    if (access.we_are_reached)
        target_mr.reset(CHECK_PTR(ibv_reg_mr(pd.get(), target_buf.get(), buf_bytes, access.target_mr),
                                  "ulimit -l: is locked memory limited?"));

    // 4. RESET -> INIT, saying what the peer may do through the QP; post the
    //    receives before the exchange (lesson 4).
    wb::qp_to_init(qp.get(), addr, access.qp);
    RecvQueue rq{.qp = qp.get(), .target = target_mr.get(), .length = buf_bytes,
                 .cq = {.cq = recv_cq.get(), .channel = recv_channel.get(), .timeout_s = opt.timeout_s}};
    if (spec.op == Op::send) rq.post(queues.recv);

    // 5. Out-of-band exchange: QP number, PSN, GID, and the target buffer.
    wb::Connection conn = wb::meet_peer(opt, is_server);
    wb::PeerInfo mine = wb::local_info(kLesson, qp.get(), psn, addr);
    if (access.we_are_reached) {
        mine.addr = reinterpret_cast<uintptr_t>(target_buf.get());
        mine.length = buf_bytes;
        mine.rkey = target_mr->rkey;
    }
    const wb::PeerInfo peer = wb::exchange(conn, mine, opt.timeout_s);
    // 6. The measurement options, which must be the same on both sides (./bench.hpp).
    bench::agree_on_spec(conn, spec, is_server, opt.timeout_s);
    if (access.we_reach && peer.length < buf_bytes)  // never trust a length we did not check
        wb::fail("the peer offers " + std::to_string(peer.length) + " bytes, less than the " +
                 std::to_string(buf_bytes) + " we would WRITE or READ");
    const int path_mtu = wb::mtu_bytes(static_cast<ibv_mtu>(std::min<uint32_t>(peer.mtu, addr.attr.active_mtu)));
    std::printf("%s: peer %s is QP 0x%x; path MTU %d bytes; %s %s, %zu size(s), n=%u\n", me, conn.peer().c_str(),
                peer.qp_num, path_mtu, bench::op_name(spec.op), bench::test_name(spec.test), sizes.size(),
                spec.iters);

    // 7. INIT -> RTR -> RTS (lesson 3), with room for READs in flight.
    wb::qp_to_rtr(qp.get(), addr, peer, reads_in_flight);
    wb::qp_to_rts(qp.get(), psn, reads_in_flight);

    SendQueue sq{.qp = qp.get(), .local = local_mr.get(), .opcode = opcode_of(spec.op),
                 .inline_flag = spec.inl ? unsigned{IBV_SEND_INLINE} : 0u, .remote_addr = peer.addr,
                 .rkey = peer.rkey, .cq = {.cq = send_cq.get(), .channel = send_channel.get(), .timeout_s = opt.timeout_s}};
    bench::Heartbeat heartbeat{.conn = conn};  // "MORE" while we measure (./bench.hpp)
    for (const uint32_t size : sizes) {
        // 8. Start each size together: the server says "GO!!" when it is ready.
        std::memset(target_buf.get(), 0, buf_bytes);
        const Marks marks{.in = reinterpret_cast<volatile uint8_t*>(target_buf.get()) + size - 1,
                          .out = reinterpret_cast<uint8_t*>(local_buf.get()) + size - 1,
                          .timeout_s = opt.timeout_s};
        const uint32_t psn_at_go = is_server ? expected_psn(qp.get()) : 0;
        if (is_server) {
            wb::send_token(conn, "GO!!");
        } else {
            wb::expect_token(conn, "GO!!", opt.timeout_s);
        }

        // 9. The measured loop: one of four.
        if (spec.test == Test::lat && is_server) {
            answer_pings(sq, rq, marks, spec.op, spec.iters, size);
        } else if (spec.test == Test::lat) {
            std::vector<int64_t> rtt = ping(sq, rq, marks, spec.op, spec.iters, size, heartbeat);
            // Half a round trip for SEND and WRITE (one way); READ's whole.
            bench::report_latency(spec, size, path_mtu, rtt, spec.op == Op::read ? 1.0 : 2.0, csv_path);
        } else if (is_server) {
            if (spec.op == Op::send) sink_stream(rq, spec.iters, size);
        } else {
            const unsigned long calls_before = sq.calls;
            const double seconds = stream(sq, spec, size, heartbeat);
            bench::report_bandwidth(spec, size, path_mtu, seconds, sq.calls - calls_before, csv_path);
        }

        // 10. End each size together: the client says "DONE" when it has
        //     its number; the server waits for it (for WRITE and READ, the
        //     server has no other way to know), with "MORE" on the way.
        //     A DONE with no request behind it measured nothing: an error.
        if (!is_server) {
            wb::send_token(conn, "DONE");
            continue;
        }
        bench::wait_for_done(conn, opt.timeout_s);
        if (expected_psn(qp.get()) == psn_at_go)
            wb::fail("the client said DONE for " + std::to_string(size) +
                         " B, but none of its requests reached our QP (its rq_psn did not move): nothing was measured",
                     "is the client a lesson-11 client of this workbook?");
    }
    if (is_server)
        std::printf("result: served %s %s, %zu size(s), n=%u\n", bench::op_name(spec.op),
                    bench::test_name(spec.test), sizes.size(), spec.iters);
    return 0;
}
