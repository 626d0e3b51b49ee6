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
// perftest (ib_send_lat, ib_write_bw ...) does exactly this; scripts/bench.sh
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
//     ibv_query_device: max_qp_wr, max_qp_rd_atom
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
#include <utility>
#include <vector>

#include "bench.hpp"
#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr uint16_t kLesson = 11;  // sent in the exchange: a lesson-11 client only talks to a lesson-11 server

// Op, Test, their names, the sweep's sizes, the clock now_ns() (clock_gettime(CLOCK_MONOTONIC_RAW):
// the bare counter NTP never slews; a vDSO call, no system call) and what `make bench` needs around
// the timed loops below (the command line, both sides' options compared, statistics): common/bench.hpp.
using namespace wb::bench;
// Receives kept posted during a latency test (one used per round trip, posted again once our answer is out), and its send queue.
constexpr uint32_t kLatQueue = 16;
// Outstanding RDMA READs one side may have at the other (max_rd_atomic): the
// RC protocol limits them separately from the send queue. perftest's default
// is 16 too, or the device's maximum when that is smaller.
constexpr uint8_t kReadsInFlight = 16;
constexpr int kPollBatch = 16;  // completions taken per ibv_poll_cq call

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
    ~CqWaiter() { if (unacked) ibv_ack_cq_events(cq, unacked); }
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
    uint64_t remote_addr;       // WRITE and READ: the peer's target buffer
    uint32_t rkey;
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
            if (op != Op::send) wrs[i].wr.rdma = {.remote_addr = remote_addr, .rkey = rkey};
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
    const auto [opt, spec, csv_path] = wb::bench::parse_command_line(argc, argv);  // checked: common/bench.cpp
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
    wb::bench::check_depth(spec.depth, ibv_get_device_name(ctx->device), dev_attr);  // at most max_qp_wr
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
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(), .recv_cq = cq.get(),
        .cap = {
            .max_send_wr = send_queue, .max_recv_wr = recv_queue, .max_send_sge = 1, .max_recv_sge = 1,
            // The bytes one WR may carry inside the WQE itself. The provider
            // may give more than asked; asking too much makes ibv_create_qp fail.
            .max_inline_data = spec.inl && !spec.all ? spec.size : 0,
        },
        .qp_type = IBV_QPT_RC,
    };
    // -a --inline: the largest power of two the QP takes inline, found by
    // asking for less and less until ibv_create_qp agrees; the sweep stops there.
    const uint32_t inline_max = spec.inl && spec.all ? wb::bench::largest_inline(pd.get(), qp_attr) : 0;
    if (inline_max > 0) qp_attr.cap.max_inline_data = inline_max;
    ibv_qp* raw_qp = ibv_create_qp(pd.get(), &qp_attr);
    if (raw_qp == nullptr && spec.inl && errno == EINVAL)  // a usage error: -s too big to post inline here
        wb::bench::inline_refused(spec.size, ibv_get_device_name(ctx->device));
    wb::QueuePair qp{CHECK_PTR(raw_qp)};
    if (spec.inl)
        std::printf("%s: the QP takes up to %u bytes inline (max_inline_data)\n", me, qp_attr.cap.max_inline_data);
    const uint32_t psn = wb::random_psn();

    // The sizes to measure: -s, or the sweep of -a.
    std::vector<uint32_t> sizes;
    for (uint32_t s = kSweepFirst; spec.all && s <= (spec.inl ? inline_max : kSweepLast); s *= 2) sizes.push_back(s);
    if (!spec.all) sizes.push_back(spec.size);
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
    wb::MemoryRegion target_mr{reached ? CHECK_PTR(ibv_reg_mr(pd.get(), target_buf.get(), buf_bytes, target_access),
                                                   "ulimit -l: is locked memory limited?") : nullptr};

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
    wb::bench::agree_on_spec(conn, spec, is_server, opt.timeout_s);
    const bool peer_reached = !is_server || (spec.op == Op::write && lat);  // we WRITE or READ its buffer
    if (spec.op != Op::send && peer_reached && peer.length < buf_bytes)     // never trust a length we did not check
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
    Poster poster{.qp = qp.get(), .local = local_mr.get(), .op = spec.op, .inl = spec.inl,
                  .remote_addr = peer.addr, .rkey = peer.rkey};
    ibv_wc wc[kPollBatch];
    uint64_t posted = 0, completed = 0;  // WRs over the whole run: wr_id counts on across sizes
    // Wait until every WR up to `seq_done` is complete and `recvs_wanted` RECVs came; return the
    // RECVs taken (bytes added to *bytes). A RECV that comes while we want none (the peer's next
    // message, as we wait for our own completions) is kept for the next call, or both sides wait.
    uint32_t early_recvs = 0;
    auto reap = [&](uint64_t seq_done, uint32_t recvs_wanted, uint64_t* bytes, const char* what) {
        uint32_t recvs = recvs_wanted > 0 ? std::exchange(early_recvs, 0) : 0;
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
        if (recvs_wanted == 0) early_recvs += recvs;
        return recvs;
    };

    for (const uint32_t size : sizes) {
        // 8. Start each size together: the server says "GO!!" when it is ready.
        std::memset(target_buf.get(), 0, buf_bytes);
        volatile uint8_t* mark = reinterpret_cast<volatile uint8_t*>(target_buf.get()) + size - 1;
        uint8_t* out_mark = reinterpret_cast<uint8_t*>(local_buf.get()) + size - 1;
        const uint32_t psn_at_go = is_server ? wb::bench::expected_psn(qp.get()) : 0;
        is_server ? wb::send_token(conn, "GO!!") : wb::expect_token(conn, "GO!!", opt.timeout_s);
        poster.signal = 1;
        const uint32_t n = spec.iters;

        if (lat && is_server) {
            // 9s. The server's half of the ping-pong: answer each message as
            //     it arrives, answer first, then re-post (both sides). A READ needs no answer.
            for (uint32_t i = 0; i < n && spec.op != Op::read; ++i) {
                if (spec.op == Op::send) {
                    reap(completed, 1, nullptr, "the client's SEND");
                } else {
                    wait_for_byte(mark, static_cast<uint8_t>(i % 255 + 1), opt.timeout_s);
                    *out_mark = static_cast<uint8_t>(i % 255 + 1);
                }
                poster.last = ++posted;
                poster.post(posted, 1, size);
                if (spec.op == Op::send) post_receives(qp.get(), target_mr.get(), buf_bytes, 1);
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
                poster.last = ++posted;
                poster.post(posted, 1, size);
                if (spec.op == Op::send) {
                    if (i > 0) post_receives(qp.get(), target_mr.get(), buf_bytes, 1);
                    reap(completed, 1, nullptr, "the server's answer (RECV)");
                } else if (spec.op == Op::write) {
                    wait_for_byte(mark, static_cast<uint8_t>(i % 255 + 1), opt.timeout_s);
                } else {
                    reap(posted, 0, nullptr, "the READ's response");
                }
                if (posted - completed >= kLatQueue - 1) reap(posted, 0, nullptr, "our SEND's completion");
            }
            stamps[n] = now_ns();
            if (spec.op == Op::send) post_receives(qp.get(), target_mr.get(), buf_bytes, 1);  // the last answer's
            reap(posted, 0, nullptr, "our last completion");
            std::vector<int64_t> rtt(n);
            for (uint32_t i = 0; i < n; ++i) rtt[i] = stamps[i + 1] - stamps[i];
            // Half a round trip for SEND and WRITE (one way); READ's whole.
            // The median ("typical"), p99, p99.9, min and max (common/bench.cpp).
            wb::bench::report_latency(spec, size, path_mtu, rtt, spec.op == Op::read ? 1.0 : 2.0, csv_path);
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
            const double seconds = static_cast<double>(now_ns() - t0) / 1e9;
            // size x n bytes / seconds, in MiB/s (common/bench.cpp prints it).
            wb::bench::report_bandwidth(spec, size, path_mtu, seconds, poster.calls - calls_before, csv_path);
        }

        // 10. End each size together: the client says "DONE" when it has
        //     its number; the server waits for it (for WRITE and READ, the
        //     server has no other way to know), with "MORE" on the way.
        //     A DONE with no request behind it measured nothing: an error.
        if (is_server) {
            wb::wait_for_done(conn, opt.timeout_s);
            wb::bench::check_requests_came(qp.get(), psn_at_go, size);  // rq_psn moved (ibv_query_qp)
        } else {
            wb::send_token(conn, "DONE");
        }
    }
    if (is_server)
        std::printf("result: served %s %s, %zu size(s), n=%u\n", op_name(spec.op), test_name(spec.test),
                    sizes.size(), spec.iters);
    return 0;
}
