// lesson11.cpp - how fast, and why not faster: latency and bandwidth measured
// the way perftest measures them, and the levers that move them.
//
// The client and the server build the same RC connection as lessons 4 to 6,
// then the client times one of two loops:
//   --test lat   a ping-pong: one message out, one back, again and again.
//                Each round trip is timed with clock_gettime(CLOCK_MONOTONIC_RAW);
//                SEND and WRITE report half of it (one way), READ all of it
//                (a READ is a request and a response: its round trip IS its
//                latency). We print the median ("typical"), p99, p99.9, min, max.
//   --test bw    a stream: -n messages, up to --depth of them in flight, timed
//                from the first ibv_post_send to the last completion:
//                bytes x iterations / seconds, in MiB/s.
// perftest (ib_send_lat, ib_write_bw ...) does exactly this; scripts/bench.sh
// runs both side by side. The levers, one option each: message size (-s, -a)
// against the path MTU, IBV_SEND_INLINE (--inline), selective signaling
// (--signal), post lists (--batch), queue depth (--depth), busy polling
// against completion events (--events), and READ's round trip against
// WRITE's one way (--op).
//
// Both sides take the same options: the client sends the ones in force after
// the QP exchange, and either side refuses to measure when they differ.
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
//     ibv_query_device: max_qp_wr, max_qp_rd_atom
//
// Read more: man ibv_post_send (IBV_SEND_INLINE, IBV_SEND_SIGNALED), man
// ibv_create_qp (max_inline_data), man clock_gettime; perftest's
// src/perftest_resources.c and perftest_parameters.c (print_report_lat,
// print_report_bw); docs/lesson11-performance.md (the method, the plots,
// what each curve says, exercises).
#include <infiniband/verbs.h>

#include <poll.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench.hpp"
#include "check.hpp"
#include "connect.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr uint16_t kLesson = 11;  // sent in the exchange: a lesson-11 client only talks to a lesson-11 server

enum class Test : uint8_t { lat = 1, bw = 2 };
enum class Op : uint8_t { send = 1, write = 2, read = 3 };
const char* test_name(Test t) { return t == Test::lat ? "lat" : "bw"; }
const char* op_name(Op o) { return o == Op::send ? "send" : o == Op::write ? "write" : "read"; }

// -a sweeps 2 B .. 1 MiB in powers of two, as perftest's -a does (it goes on to 8 MiB).
constexpr uint32_t kSweepFirst = 2;
constexpr uint32_t kSweepLast = 1u << 20;
constexpr uint32_t kMaxSize = 1u << 23;  // -s at most 8 MiB: two buffers of it per side
constexpr int64_t kMaxIters = 10'000'000;
// Receives kept posted during a latency test (one is consumed per round trip
// and posted again at once), and the send queue of a latency test.
constexpr uint32_t kLatQueue = 16;
// Outstanding RDMA READs one side may have at the other (max_rd_atomic): the
// RC protocol limits them separately from the send queue. perftest's default
// is 16 too, or the device's maximum when that is smaller.
constexpr uint8_t kReadsInFlight = 16;
// Completions taken per ibv_poll_cq call.
constexpr int kPollBatch = 16;

// The measurement options: both sides must run the same ones. Each sends
// them to the other after the QP exchange, as one line (agree_on_spec).
struct Spec {
    Test test = Test::lat;
    Op op = Op::send;
    uint32_t size = 0;       // -s, or the last size of the sweep with -a
    bool all = false;        // -a
    uint32_t iters = 0;      // -n
    bool inl = false;        // --inline
    uint32_t signal = 1;     // --signal: every Nth WR asks for a completion
    uint32_t batch = 1;      // --batch: WRs per ibv_post_send call
    uint32_t depth = 0;      // --depth: WRs in flight (bw)
    bool events = false;     // --events
};

// The plumbing, after main(): the options as one line of text, which both
// sides compare (agree_on_spec); the latency statistics; the CSV row for
// scripts/bench/; the server's sign that requests came (expected_psn).
std::string spec_text(const Spec& s);
void agree_on_spec(wb::Connection& conn, const Spec& mine, bool is_server, int timeout_s);
struct LatStats {
    double min, typical, p99, p999, max;  // in us
};
LatStats lat_stats(std::vector<int64_t>& ns, double divide);
std::string csv_row(const Spec& s, uint32_t size, int mtu, const char* values);
extern const char* const kCsvHeader;
uint32_t expected_psn(ibv_qp* qp);
// The command line, checked (parse_command_line).
struct CommandLine {
    wb::Options opt;
    Spec spec;
    std::string csv_path;  // -C: the client's CSV file, or empty
};
CommandLine parse_command_line(int argc, char** argv);

// Nanoseconds since an arbitrary start, from the clock NTP never slews
// (CLOCK_MONOTONIC may be sped up or slowed down; _RAW is the bare counter).
// In Linux this is a vDSO call, no system call: about 20 ns.
inline int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Waiting for completions, by busy polling (the default) or, with --events,
// by sleeping on a completion channel (lesson 8 explains arm, wait, ack).
// Either way the wait is bounded: a peer that died gives an error, not a hang.
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
            pollfd pfd = {.fd = channel->fd, .events = POLLIN, .revents = 0};
            if (past_deadline()) timed_out(waiting_for);
            const int64_t left_ms = (deadline - now_ns()) / 1'000'000;
            if (left_ms <= 0) timed_out(waiting_for);
            const int ready = poll(&pfd, 1, static_cast<int>(left_ms));
            if (ready == -1 && errno == EINTR) continue;
            CHECK_ERRNO(ready);
            if (ready == 0) timed_out(waiting_for);
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
    void ack_all() {
        if (unacked) ibv_ack_cq_events(cq, unacked);  // every event, before the CQ is destroyed
        unacked = 0;
    }
    [[noreturn]] void timed_out(const char* waiting_for) const {
        wb::fail("no completion within " + std::to_string(timeout_s) + " s while waiting for " + waiting_for,
                 "is the peer still running? raise --timeout on a slow machine");
    }
};

// Post `count` receives of the whole target buffer in one call (a receive
// post list). Every receive lands in the same bytes: we measure, we do not
// keep the data.
void post_receives(ibv_qp* qp, const ibv_mr* mr, uint32_t length, uint32_t count) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = length, .lkey = mr->lkey};
    std::vector<ibv_recv_wr> wrs(count);
    for (uint32_t i = 0; i < count; ++i)
        wrs[i] = {.wr_id = 0, .next = i + 1 < count ? &wrs[i + 1] : nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, wrs.data(), &bad));
}

// What the peer offers us for WRITE and READ: its target buffer.
struct Remote {
    uint64_t addr = 0;
    uint32_t rkey = 0;
};

// The send side of either loop: builds `count` WRs of `size` bytes as one post
// list and posts them with ONE ibv_post_send, which on rxe is one write() to
// the kernel (the doorbell). WR number `seq` (counted from 1) asks for a
// completion when seq is a multiple of `signal`, or the last one: an RC
// completion also says that every earlier WR of the queue is done.
struct Poster {
    ibv_qp* qp;
    const ibv_mr* local;
    Op op;
    bool inl;
    Remote remote;
    uint32_t signal = 1;
    uint64_t last = 0;          // the seq of the final WR: always signaled
    unsigned long calls = 0;    // ibv_post_send calls: doorbells
    std::vector<ibv_send_wr> wrs;
    std::vector<ibv_sge> sges;

    void post(uint64_t first_seq, uint32_t count, uint32_t size) {
        wrs.resize(count);
        sges.resize(count);
        for (uint32_t i = 0; i < count; ++i) {
            const uint64_t seq = first_seq + i;
            sges[i] = {.addr = reinterpret_cast<uintptr_t>(local->addr), .length = size, .lkey = local->lkey};
            unsigned flags = 0;
            if (seq % signal == 0 || seq == last) flags |= IBV_SEND_SIGNALED;
            // INLINE: the CPU copies the bytes into the WQE at post time, so
            // the NIC need not fetch them with a DMA read (one PCIe round trip
            // saved on a real NIC). The lkey is not even checked.
            if (inl) flags |= IBV_SEND_INLINE;
            wrs[i] = {
                .wr_id = seq,  // comes back in the completion: "everything up to seq is done"
                .next = i + 1 < count ? &wrs[i + 1] : nullptr,
                .sg_list = &sges[i],
                .num_sge = 1,
                .opcode = op == Op::send ? IBV_WR_SEND : op == Op::write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
                .send_flags = flags,
            };
            if (op != Op::send) wrs[i].wr.rdma = {.remote_addr = remote.addr, .rkey = remote.rkey};
        }
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(qp, wrs.data(), &bad));
        ++calls;
    }
};

// Spin on the last byte of `buf` until the peer's RDMA WRITE puts `mark`
// there: the WRITE raises no completion at the target, so a latency test
// watches memory, as perftest's ib_write_lat does. (The byte is written last
// on rxe and in practice on real NICs; nothing in the RC spec promises the
// order of a WRITE's bytes, which is why a real protocol uses WRITE with
// immediate or a following SEND as the "it is there" signal.)
void wait_for_byte(const volatile uint8_t* last, uint8_t mark, int timeout_s) {
    const int64_t deadline = now_ns() + int64_t{timeout_s} * 1'000'000'000;
    for (unsigned spins = 1; *last != mark; ++spins)
        if ((spins & 4095) == 0 && now_ns() > deadline)
            wb::fail("the peer's RDMA WRITE did not arrive within " + std::to_string(timeout_s) + " s",
                     "is the peer still running?");
}

}  // namespace

int main(int argc, char** argv) {
    const CommandLine cl = parse_command_line(argc, argv);
    const wb::Options& opt = cl.opt;
    const Spec& spec = cl.spec;
    const std::string& csv_path = cl.csv_path;
    const bool is_server = opt.args.empty();
    const char* me = is_server ? "server" : "client";
    const bool lat = spec.test == Test::lat;
    wb::warn_if_coarse_clock();  // a latency below the clock's tick reads as 0 or one tick

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    // The device's limits that bound the levers: send queue depth, READs in flight.
    ibv_device_attr dev_attr;
    CHECK_RC(ibv_query_device(ctx.get(), &dev_attr));
    if (spec.depth > static_cast<uint32_t>(dev_attr.max_qp_wr))
        wb::usage_error("--depth " + std::to_string(spec.depth) + " is more than " +
                        ibv_get_device_name(ctx->device) + "'s max_qp_wr " + std::to_string(dev_attr.max_qp_wr) +
                        " (ibv_query_device)");
    const uint8_t reads_in_flight =
        static_cast<uint8_t>(std::min<int>({kReadsInFlight, dev_attr.max_qp_rd_atom, dev_attr.max_qp_init_rd_atom}));

    // 2. PD, one CQ (for sends and receives: one place to wait), and the QP.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionChannel channel{spec.events ? CHECK_PTR(ibv_create_comp_channel(ctx.get())) : nullptr};
    const uint32_t send_queue = lat ? kLatQueue : spec.depth;
    // Receives: a ping-pong needs one at a time; a stream as many as the
    // sender may have in flight, twice over, so that the sender never finds
    // the receiver out of receives (RNR) while it re-posts them.
    const uint32_t recv_queue =
        spec.op != Op::send ? 1 : lat ? kLatQueue : std::min<uint32_t>(2 * spec.depth, dev_attr.max_qp_wr);
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), static_cast<int>(send_queue + recv_queue), nullptr,
                                                   channel.get(), 0))};
    const uint32_t sizes_last = spec.size;  // the largest size measured
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {
            .max_send_wr = send_queue,
            .max_recv_wr = recv_queue,
            .max_send_sge = 1,
            .max_recv_sge = 1,
            // The bytes one WR may carry inside the WQE itself. The provider
            // may give more than asked; asking too much makes ibv_create_qp fail.
            .max_inline_data = spec.inl ? (spec.all ? 0 : sizes_last) : 0,
        },
        .qp_type = IBV_QPT_RC,
    };
    uint32_t inline_max = 0;  // with -a --inline: the largest power of two the QP takes inline
    if (spec.inl && spec.all) {
        // Ask for less and less until the device agrees; the sweep stops there.
        for (uint32_t ask = kSweepLast; ask >= kSweepFirst && inline_max == 0; ask /= 2) {
            ibv_qp_init_attr probe = qp_attr;
            probe.cap.max_inline_data = ask;
            if (ibv_qp* q = ibv_create_qp(pd.get(), &probe)) {
                inline_max = ask;
                CHECK_RC(ibv_destroy_qp(q));
            }
        }
        if (inline_max == 0) wb::usage_error("--inline: this device takes no inline data at all");
        qp_attr.cap.max_inline_data = inline_max;
    }
    ibv_qp* raw_qp = ibv_create_qp(pd.get(), &qp_attr);
    if (raw_qp == nullptr && spec.inl && errno == EINVAL)
        wb::usage_error("--inline -s " + std::to_string(sizes_last) + ": " + ibv_get_device_name(ctx->device) +
                        " refused a QP with max_inline_data " + std::to_string(sizes_last) +
                        " (EINVAL): too big to post inline; -a --inline sweeps up to the largest it takes");
    wb::QueuePair qp{CHECK_PTR(raw_qp)};
    if (spec.inl)
        std::printf("%s: the QP takes up to %u bytes inline (max_inline_data)\n", me, qp_attr.cap.max_inline_data);
    const uint32_t psn = wb::random_psn();

    // The sizes to measure.
    std::vector<uint32_t> sizes;
    if (spec.all) {
        const uint32_t top = spec.inl ? inline_max : kSweepLast;
        for (uint32_t s = kSweepFirst; s <= top; s *= 2) sizes.push_back(s);
    } else {
        sizes.push_back(spec.size);
    }
    const uint32_t buf_bytes = sizes.back();

    // 3. Memory, two buffers. `local`: what we SEND or WRITE from (the NIC only
    //    reads it: no flag) or, for READ, where the response lands (the NIC
    //    writes it: LOCAL_WRITE). `target`: what the peer reaches. Receives
    //    land there (LOCAL_WRITE), the peer WRITEs into it (REMOTE_WRITE, which
    //    needs LOCAL_WRITE too) or READs from it (REMOTE_READ). Only the side
    //    that is reached registers one, with exactly that access.
    wb::Buffer local_buf = wb::alloc_buffer(buf_bytes);
    wb::MemoryRegion local_mr{CHECK_PTR(
        ibv_reg_mr(pd.get(), local_buf.get(), buf_bytes, spec.op == Op::read ? IBV_ACCESS_LOCAL_WRITE : 0),
        "ulimit -l: is locked memory limited?")};
    const bool reached = is_server || spec.op == Op::send || (spec.op == Op::write && lat);
    const unsigned target_access = spec.op == Op::send    ? IBV_ACCESS_LOCAL_WRITE
                                   : spec.op == Op::write ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
                                                          : IBV_ACCESS_REMOTE_READ;
    wb::Buffer target_buf = wb::alloc_buffer(buf_bytes);
    wb::MemoryRegion target_mr;
    if (reached)
        target_mr.reset(CHECK_PTR(ibv_reg_mr(pd.get(), target_buf.get(), buf_bytes, target_access),
                                  "ulimit -l: is locked memory limited?"));

    // 4. RESET -> INIT, saying what the peer may do through the QP; post the
    //    receives before the exchange (lesson 4).
    wb::qp_to_init(qp.get(), addr,
                   spec.op == Op::write ? IBV_ACCESS_REMOTE_WRITE : spec.op == Op::read ? IBV_ACCESS_REMOTE_READ : 0);
    if (spec.op == Op::send) post_receives(qp.get(), target_mr.get(), buf_bytes, recv_queue);

    // 5. Out-of-band exchange: QP number, PSN, GID, and the target buffer.
    wb::Connection conn = wb::meet_peer(opt, is_server);
    wb::PeerInfo mine = wb::local_info(kLesson, qp.get(), psn, addr);
    if (target_mr) {
        mine.addr = reinterpret_cast<uintptr_t>(target_buf.get());
        mine.length = buf_bytes;
        mine.rkey = target_mr->rkey;
    }
    const wb::PeerInfo peer = wb::exchange(conn, mine, opt.timeout_s);
    // 6. The measurement options, which must be the same on both sides.
    agree_on_spec(conn, spec, is_server, opt.timeout_s);
    const bool peer_reached = !is_server || spec.op == Op::send || (spec.op == Op::write && lat);
    if (spec.op != Op::send && peer_reached && peer.length < buf_bytes)  // never trust a length we did not check
        wb::fail("the peer offers " + std::to_string(peer.length) + " bytes, less than the " +
                 std::to_string(buf_bytes) + " we would WRITE or READ");
    const int path_mtu = wb::mtu_bytes(static_cast<ibv_mtu>(std::min<uint32_t>(peer.mtu, addr.attr.active_mtu)));
    std::printf("%s: peer %s is QP 0x%x; path MTU %d bytes; %s %s, %zu size(s), n=%u\n", me, conn.peer().c_str(),
                peer.qp_num, path_mtu, op_name(spec.op), test_name(spec.test), sizes.size(), spec.iters);

    // 7. INIT -> RTR -> RTS (lesson 3), with room for READs in flight.
    wb::qp_to_rtr(qp.get(), addr, peer, reads_in_flight);
    wb::qp_to_rts(qp.get(), psn, reads_in_flight);

    CqWaiter waiter{.cq = cq.get(), .channel = channel.get(), .timeout_s = opt.timeout_s};
    wb::Heartbeat heartbeat{.conn = conn};  // "MORE" while we measure (common/bench.hpp)
    Poster poster{.qp = qp.get(),
                  .local = local_mr.get(),
                  .op = spec.op,
                  .inl = spec.inl,
                  .remote = {.addr = peer.addr, .rkey = peer.rkey}};
    ibv_wc wc[kPollBatch];
    uint64_t posted = 0, completed = 0;  // WRs over the whole run: wr_id counts on across sizes
    // Wait until every WR up to `seq` is complete; receives re-posted as they
    // are used. Returns the RECV completions seen (and their bytes, in *bytes).
    auto reap = [&](uint64_t seq_done, uint32_t recvs_wanted, uint64_t* bytes, const char* what) {
        uint32_t recvs = 0;
        while (completed < seq_done || recvs < recvs_wanted) {
            const int n = waiter.wait(wc, kPollBatch, what);
            for (int i = 0; i < n; ++i) {
                wb::check_wc(wc[i], what);
                if (wc[i].opcode == IBV_WC_RECV) {
                    ++recvs;
                    if (bytes) *bytes += wc[i].byte_len;
                } else {
                    completed = std::max(completed, wc[i].wr_id);
                }
            }
        }
        return recvs;
    };

    for (const uint32_t size : sizes) {
        // 8. Start each size together: the server says "GO!!" when it is ready.
        std::memset(target_buf.get(), 0, buf_bytes);
        volatile uint8_t* mark = reinterpret_cast<volatile uint8_t*>(target_buf.get()) + size - 1;
        uint8_t* out_mark = reinterpret_cast<uint8_t*>(local_buf.get()) + size - 1;
        const uint32_t psn_at_go = is_server ? expected_psn(qp.get()) : 0;
        if (is_server)
            wb::send_token(conn, "GO!!");
        else
            wb::expect_token(conn, "GO!!", opt.timeout_s);
        poster.signal = 1;
        const uint32_t n = spec.iters;

        if (lat && is_server) {
            // 9s. The server's half of the ping-pong: answer each message as
            //     it arrives. A READ needs no answer: the server's CPU is idle.
            for (uint32_t i = 0; i < n && spec.op != Op::read; ++i) {
                if (spec.op == Op::send) {
                    reap(completed, 1, nullptr, "the client's SEND");
                    post_receives(qp.get(), target_mr.get(), buf_bytes, 1);
                } else {
                    wait_for_byte(mark, static_cast<uint8_t>(i % 255 + 1), opt.timeout_s);
                    *out_mark = static_cast<uint8_t>(i % 255 + 1);
                }
                poster.last = posted + 1;
                poster.post(posted + 1, 1, size);
                ++posted;
                // Take the completions of our answers as they come, without
                // waiting; wait only when the send queue is nearly full.
                if (posted - completed >= kLatQueue - 1) reap(posted, 0, nullptr, "our answer's completion");
            }
            reap(posted, 0, nullptr, "our last answer's completion");
        } else if (lat) {
            // 9c. The client's half: stamp, send, wait for the answer; the
            //     time between two stamps is one round trip. A READ's round
            //     trip is its request and its response.
            std::vector<int64_t> stamps(n + 1);
            for (uint32_t i = 0; i < n; ++i) {
                *out_mark = static_cast<uint8_t>(i % 255 + 1);
                stamps[i] = now_ns();
                heartbeat.beat(stamps[i]);
                poster.last = posted + 1;
                poster.post(posted + 1, 1, size);
                ++posted;
                if (spec.op == Op::send) {
                    reap(completed, 1, nullptr, "the server's answer (RECV)");
                    post_receives(qp.get(), target_mr.get(), buf_bytes, 1);
                } else if (spec.op == Op::write) {
                    wait_for_byte(mark, static_cast<uint8_t>(i % 255 + 1), opt.timeout_s);
                } else {
                    reap(posted, 0, nullptr, "the READ's response");
                }
                if (posted - completed >= kLatQueue - 1) reap(posted, 0, nullptr, "our SEND's completion");
            }
            stamps[n] = now_ns();
            reap(posted, 0, nullptr, "our last completion");
            std::vector<int64_t> rtt(n);
            for (uint32_t i = 0; i < n; ++i) rtt[i] = stamps[i + 1] - stamps[i];
            // Half a round trip for SEND and WRITE (one way); READ's whole.
            const LatStats st = lat_stats(rtt, spec.op == Op::read ? 1.0 : 2.0);
            std::printf("client: %u B: min %.2f us, typical %.2f us, p99 %.2f us, p99.9 %.2f us, max %.2f us%s\n",
                        size, st.min, st.typical, st.p99, st.p999, st.max,
                        spec.op == Op::read ? " (round trips)" : " (half round trips)");
            char row[200];
            std::snprintf(row, sizeof row, "%.3f,%.3f,%.3f,%.3f,%.3f,,", st.min, st.typical, st.p99, st.p999, st.max);
            wb::append_csv(csv_path, kCsvHeader, csv_row(spec, size, path_mtu, row));
            std::printf("result: %s lat %u B: typical %.2f us, p99 %.2f us, p99.9 %.2f us (n=%u)\n",
                        op_name(spec.op), size, st.typical, st.p99, st.p999, n);
        } else if (is_server) {
            // 9s. Stream: a SEND stream needs our receives, re-posted as they
            //     are used; WRITE and READ streams need nothing of our CPU.
            if (spec.op == Op::send) {
                uint64_t bytes = 0;
                for (uint32_t got = 0; got < n;) {
                    const uint32_t k = reap(completed, 1, &bytes, "the client's SENDs");
                    post_receives(qp.get(), target_mr.get(), buf_bytes, k);
                    got += k;
                }
                std::printf("server: %u B: received %u messages, %" PRIu64 " bytes\n", size, n, bytes);
            }
        } else {
            // 9c. Stream: keep up to --depth WRs in flight, --batch per post
            //     call, a completion every --signal WRs. The clock runs from
            //     the first post to the last completion.
            poster.signal = spec.signal;
            poster.last = posted + n;
            const unsigned long calls_before = poster.calls;
            const int64_t t0 = now_ns();
            while (completed < poster.last) {
                while (posted < poster.last) {
                    const uint32_t k = static_cast<uint32_t>(std::min<uint64_t>(spec.batch, poster.last - posted));
                    if (posted + k - completed > spec.depth) break;  // the send queue is full enough
                    poster.post(posted + 1, k, size);
                    posted += k;
                }
                reap(completed + 1, 0, nullptr, "the stream's completions");
                heartbeat.beat(now_ns());
            }
            const int64_t t1 = now_ns();
            const double seconds = static_cast<double>(t1 - t0) / 1e9;
            const uint64_t bytes = uint64_t{size} * n;
            const double mib_s = static_cast<double>(bytes) / seconds / (1024.0 * 1024.0);
            const unsigned long calls = poster.calls - calls_before;
            std::printf("client: %u B: %" PRIu64 " bytes in %.6f s, %.0f messages/s; %lu ibv_post_send calls for %u "
                        "WRs\n",
                        size, bytes, seconds, n / seconds, calls, n);
            char row[200];
            std::snprintf(row, sizeof row, ",,,,,%.2f,%lu", mib_s, calls);
            wb::append_csv(csv_path, kCsvHeader, csv_row(spec, size, path_mtu, row));
            std::printf("result: %s bw %u B: %.2f MiB/s (n=%u)\n", op_name(spec.op), size, mib_s, n);
        }

        // 10. End each size together: the client says "DONE" when it has
        //     its number; the server waits for it (for WRITE and READ, the
        //     server has no other way to know), with "MORE" on the way.
        //     A DONE with no request behind it measured nothing: an error.
        if (is_server) {
            wb::wait_for_done(conn, opt.timeout_s);
            if (expected_psn(qp.get()) == psn_at_go)
                wb::fail("the client said DONE for " + std::to_string(size) +
                             " B, but none of its requests reached our QP (its rq_psn did not move): nothing was "
                             "measured",
                         "is the client a lesson-11 client of this workbook?");
        } else {
            wb::send_token(conn, "DONE");
        }
    }
    waiter.ack_all();
    if (is_server)
        std::printf("result: served %s %s, %zu size(s), n=%u\n", op_name(spec.op), test_name(spec.test),
                    sizes.size(), spec.iters);
    return 0;
}

namespace {

// "--op write", "-s 65536": a Spec's options as one would type them, for the
// message that says how the two sides differ.
std::string spec_text(const Spec& s) {
    std::string t = std::string("--test ") + test_name(s.test) + " --op " + op_name(s.op);
    t += s.all ? " -a" : " -s " + std::to_string(s.size);
    t += " -n " + std::to_string(s.iters);
    if (s.inl) t += " --inline";
    if (s.test == Test::bw)
        t += " --signal " + std::to_string(s.signal) + " --batch " + std::to_string(s.batch) + " --depth " +
             std::to_string(s.depth);
    if (s.events) t += " --events";
    return t;
}

// Send our options as that one line of text, in a fixed field of kSpecBytes,
// receive the peer's, and stop both sides when they differ: a client
// measuring 64 KiB WRITEs against a server set up for 2-byte SENDs would
// print a wrong number, or hang, rather than an error.
constexpr size_t kSpecBytes = 128;  // the longest line, every option at its maximum, is 112
void agree_on_spec(wb::Connection& conn, const Spec& mine, bool is_server, int timeout_s) {
    const std::string text = spec_text(mine);
    std::array<uint8_t, kSpecBytes> out{}, in{};
    std::memcpy(out.data(), text.data(), std::min(text.size(), kSpecBytes - 1));  // NUL-padded
    wb::send_all(conn, out);
    if (!wb::recv_exact(conn, in, timeout_s)) wb::fail("the peer closed the connection before sending its options");
    if (in == out) return;
    const char* theirs = reinterpret_cast<const char*>(in.data());  // the peer's bytes: no NUL promised
    wb::fail(std::string("options differ: this ") + (is_server ? "server" : "client") + " runs " + text + "; the " +
                 (is_server ? "client" : "server") + " runs " + wb::printable(theirs, strnlen(theirs, kSpecBytes)),
             "start both sides with the same measurement options; only HOST differs");
}

// Typical (median), percentiles, min and max of one latency run, in us.
LatStats lat_stats(std::vector<int64_t>& ns, double divide) {
    std::sort(ns.begin(), ns.end());
    const size_t n = ns.size();
    auto us = [&](size_t i) { return static_cast<double>(ns[std::min(i, n - 1)]) / 1000.0 / divide; };
    // The median of an even count is the mean of the two middle samples (as
    // perftest's get_median); the p-th percentile is the sample at ceil(p x n).
    const double median = n % 2 ? us(n / 2) : (us(n / 2 - 1) + us(n / 2)) / 2;
    auto pct = [&](double p) { return us(static_cast<size_t>(std::ceil(p * static_cast<double>(n))) - 1); };
    return {.min = us(0), .typical = median, .p99 = pct(0.99), .p999 = pct(0.999), .max = us(n - 1)};
}

// One CSV row per size for scripts/bench/ (common/bench.hpp writes it).
const char* const kCsvHeader = "tool,test,op,bytes,iters,inline,signal,batch,depth,events,mtu,"
                                   "min_us,typical_us,p99_us,p999_us,max_us,mib_s,post_calls";
std::string csv_row(const Spec& s, uint32_t size, int mtu, const char* values) {
    char row[300];
    std::snprintf(row, sizeof row, "lesson11,%s,%s,%u,%u,%d,%u,%u,%u,%d,%d,%s", test_name(s.test), op_name(s.op), size,
                  s.iters, s.inl, s.signal, s.batch, s.depth, s.events, mtu, values);
    return row;
}

// The next PSN our QP expects from its peer (rq_psn): it moves on with every
// request packet that arrives, SEND, WRITE or READ, whether or not our CPU
// sees it. For a WRITE or READ stream, the one sign on the server's side
// that the client's requests really came.
uint32_t expected_psn(ibv_qp* qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    CHECK_RC(ibv_query_qp(qp, &attr, IBV_QP_RQ_PSN, &init));
    return attr.rq_psn;
}

// The command line: the options, checked before anything is opened (misuse:
// one line on stderr, exit 2).
CommandLine parse_command_line(int argc, char** argv) {
    std::string test_text, op_text, size_text, all_text, iters_text, inline_text, signal_text, batch_text,
        depth_text, events_text, csv_path;
    const wb::ExtraOption extra[] = {
        // The letters are perftest's where it has one (-a -n -s -I -Q -l -t -e).
        {'T', "test", "lat|bw", "latency ping-pong or bandwidth stream (default: lat)", &test_text},
        {'o', "op", "OP", "the operation measured: send, write or read (default: send)", &op_text},
        {'s', "size", "BYTES", "message size, 1..8388608 (default: 2 for lat, 65536 for bw)", &size_text},
        {'a', "all", nullptr, "sweep sizes from 2 B to 1 MiB in powers of two", &all_text},
        {'n', "iters", "N", "iterations per size (default: 1000 for lat, 5000 for bw)", &iters_text},
        {'I', "inline", nullptr, "post with IBV_SEND_INLINE (SEND and WRITE, up to max_inline_data)", &inline_text},
        {'Q', "signal", "N", "bw: ask for a completion every Nth WR (default: 1)", &signal_text},
        {'l', "batch", "N", "bw: post N WRs per ibv_post_send call (default: 1)", &batch_text},
        {'t', "depth", "N", "bw: WRs in flight, up to max_qp_wr (default: 128)", &depth_text},
        {'e', "events", nullptr, "wait on a completion channel instead of busy polling", &events_text},
        {'C', "csv", "FILE", "client: append one row per size to FILE", &csv_path},
    };
    const wb::Usage usage = {
        .synopsis = "[options]          server\n"
                    "  lesson11 [options] HOST     client: measure, print the result",
        .summary = "latency and bandwidth of SEND, WRITE and READ, measured as perftest does",
        .notes = "Both sides must be given the same measurement options (all but -C).\n"
                 "Results: \"result: send lat 2 B: typical X us, p99 X us, p99.9 X us (n=1000)\",\n"
                 "         \"result: write bw 65536 B: X MiB/s (n=5000)\"; with -a, one per size.",
    };
    CommandLine cl{.opt = wb::parse_options(argc, argv, usage, extra), .spec = {}, .csv_path = csv_path};
    const wb::Options& opt = cl.opt;
    Spec& spec = cl.spec;
    if (opt.args.size() > 1) wb::usage_error("too many arguments: the client takes one HOST");
    const bool is_server = opt.args.empty();
    if (opt.given('T') && test_text != "lat" && test_text != "bw")
        wb::usage_error("--test must be lat or bw, not '" + test_text + "'");
    spec.test = test_text == "bw" ? Test::bw : Test::lat;
    if (opt.given('o') && op_text != "send" && op_text != "write" && op_text != "read")
        wb::usage_error("--op must be send, write or read, not '" + op_text + "'");
    spec.op = op_text == "write" ? Op::write : op_text == "read" ? Op::read : Op::send;
    const bool lat = spec.test == Test::lat;
    spec.all = opt.given('a');
    if (spec.all && opt.given('s')) wb::usage_error("-a sweeps the sizes itself: give -a or -s, not both");
    // A number option: its value, in range, or the default when it was not given.
    const auto number = [&](char letter, const std::string& text, const char* name, int64_t max, uint32_t dflt) {
        return opt.given(letter) ? static_cast<uint32_t>(wb::parse_range(text, name, 1, max)) : dflt;
    };
    spec.size = number('s', size_text, "-s", kMaxSize, spec.all ? kSweepLast : lat ? 2 : 65536);
    spec.iters = number('n', iters_text, "-n", kMaxIters, lat ? 1000 : 5000);
    spec.inl = opt.given('I');
    if (spec.inl && spec.op == Op::read)
        wb::usage_error("--inline with --op read: a READ carries no data from us, so there is nothing to inline");
    for (char bw_only : {'Q', 'l', 't'})
        if (lat && opt.given(bw_only))
            wb::usage_error(std::string(bw_only == 'Q' ? "--signal" : bw_only == 'l' ? "--batch" : "--depth") +
                            " is a bandwidth option: a ping-pong has one message in flight (add --test bw)");
    spec.signal = number('Q', signal_text, "--signal", 1 << 20, 1);
    spec.batch = number('l', batch_text, "--batch", 1 << 20, 1);
    spec.depth = lat ? 1 : number('t', depth_text, "--depth", 1 << 24, 128);
    // A WR that asks for no completion keeps its send-queue slot until a later
    // signaled one completes: with fewer slots than --signal, the queue fills
    // with WRs whose completion never comes.
    if (spec.signal > spec.depth)
        wb::usage_error("--signal " + std::to_string(spec.signal) + " is more than --depth " +
                        std::to_string(spec.depth) + ": the send queue would fill before any WR asks for a completion");
    if (spec.batch > spec.depth)
        wb::usage_error("--batch " + std::to_string(spec.batch) + " is more than --depth " +
                        std::to_string(spec.depth) + ": one post list cannot exceed the send queue");
    spec.events = opt.given('e');
    if (spec.events && lat && spec.op == Op::write)
        wb::usage_error("--events with --test lat --op write: a WRITE raises no completion at its target, "
                        "which watches memory; use --op send");
    if (is_server && opt.given('C')) wb::usage_error("-C is a client option: the client writes the results");
    return cl;
}

}  // namespace
