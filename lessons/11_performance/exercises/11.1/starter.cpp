// ex11_1.cpp - exercise 11.1: post lists, and the doorbells they save.
//
// A WRITE stream as lesson 11's --test bw --op write, cut down: the server
// offers a buffer and waits for "DONE"; the client streams -n RDMA WRITEs of
// -s bytes into it, at most kDepth in flight, a completion every kSignal WRs,
// and prints how many ibv_post_send calls it made. On rxe every call is one
// write() system call into the kernel: the doorbell.
//
// The exercise: -l N posts N WRs per ibv_post_send call, chained by
// ibv_send_wr.next (a post list). docs/lesson11-performance.md, "Post lists".
//
//     ./ex11_1 [-s BYTES] [-n WRS] [-l N]           server
//     ./ex11_1 [-s BYTES] [-n WRS] [-l N] HOST      client
#include <infiniband/verbs.h>

#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr uint16_t kLesson = 11;       // sent in the exchange: both sides run this exercise
constexpr uint32_t kDepth = 64;       // WRs in flight, and the send queue's size
constexpr uint32_t kSignal = 16;      // a completion every kSignal WRs (and for the last)
constexpr uint32_t kMaxBytes = 65536;

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

int main(int argc, char** argv) {
    std::string size_text, iters_text, batch_text;
    const wb::ExtraOption extra[] = {
        {'s', "size", "BYTES", "bytes per WRITE, 1..65536 (default: 64)", &size_text},
        {'n', "iters", "WRS", "WRITEs to stream, 1..1000000 (default: 2000)", &iters_text},
        {'l', "batch", "N", "WRs per ibv_post_send call, 1..64 (default: 1)", &batch_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]        server\n  ex11_1 [options] HOST   client: stream WRITEs, count the post calls",
        .summary = "exercise 11.1: a WRITE stream, and the ibv_post_send calls (doorbells) it takes",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    if (opt.args.size() > 1) wb::usage_error("too many arguments: the client takes one HOST");
    const bool is_server = opt.args.empty();
    const uint32_t size = opt.given('s') ? static_cast<uint32_t>(wb::parse_range(size_text, "-s", 1, kMaxBytes)) : 64;
    const uint32_t n = opt.given('n') ? static_cast<uint32_t>(wb::parse_range(iters_text, "-n", 1, 1'000'000)) : 2000;
    const uint32_t batch = opt.given('l') ? static_cast<uint32_t>(wb::parse_range(batch_text, "-l", 1, kDepth)) : 1;

    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), kDepth, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {.send_cq = cq.get(), .recv_cq = cq.get(), .qp_type = IBV_QPT_RC};
    qp_attr.cap = {.max_send_wr = kDepth, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1};
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();
    // The server's buffer is WRITTEN by the client (REMOTE_WRITE, with the
    // LOCAL_WRITE it requires); the client's is only read by its own NIC.
    wb::Buffer buf = wb::alloc_buffer(kMaxBytes);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), kMaxBytes,
                                             is_server ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0))};
    wb::qp_to_init(qp.get(), addr, IBV_ACCESS_REMOTE_WRITE);

    wb::Connection conn = wb::meet_peer(opt, is_server);
    wb::PeerInfo mine = wb::local_info(kLesson, qp.get(), psn, addr);
    if (is_server) mine.addr = reinterpret_cast<uintptr_t>(buf.get()), mine.length = kMaxBytes, mine.rkey = mr->rkey;
    const wb::PeerInfo peer = wb::exchange(conn, mine, opt.timeout_s);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    if (is_server) {
        wb::send_token(conn, "RTR!");
        wb::expect_token(conn, "DONE", opt.timeout_s);
        std::printf("result: served a WRITE stream\n");
        return 0;
    }
    wb::expect_token(conn, "RTR!", opt.timeout_s);
    if (peer.length < size) wb::fail("the server offers fewer bytes than -s");

    // The stream. wr_id is the WR's number from 1; a completion for number k
    // says that WRs 1..k are done (an RC send queue completes in order).
    std::vector<ibv_send_wr> wrs(batch);
    std::vector<ibv_sge> sges(batch);
    uint64_t posted = 0, completed = 0;
    unsigned long calls = 0;
    const int64_t t0 = now_ns();
    const int64_t deadline = t0 + int64_t{opt.timeout_s} * 1'000'000'000;
    while (completed < n) {
        // TODO(11.1): post up to `batch` WRs per ibv_post_send call instead
        // of one: build k = min(batch, n - posted) WRs (only when k more
        // still fit in kDepth), chain them with wrs[i].next = &wrs[i + 1]
        // (the last one's next stays nullptr), and post them with ONE call.
        while (posted < n && posted + 1 - completed <= kDepth) {
            const uint64_t seq = posted + 1;
            sges[0] = {.addr = reinterpret_cast<uintptr_t>(buf.get()), .length = size, .lkey = mr->lkey};
            wrs[0] = {
                .wr_id = seq,
                .next = nullptr,
                .sg_list = &sges[0],
                .num_sge = 1,
                .opcode = IBV_WR_RDMA_WRITE,
                .send_flags = (seq % kSignal == 0 || seq == n) ? unsigned{IBV_SEND_SIGNALED} : 0u,
            };
            wrs[0].wr.rdma = {.remote_addr = peer.addr, .rkey = peer.rkey};
            ibv_send_wr* bad = nullptr;
            CHECK_RC(ibv_post_send(qp.get(), wrs.data(), &bad));
            ++calls;
            ++posted;
        }
        ibv_wc wc[16];
        const int got = CHECK_POLL(ibv_poll_cq(cq.get(), 16, wc));
        for (int i = 0; i < got; ++i) {
            wb::check_wc(wc[i], "a WRITE of the stream");
            completed = std::max(completed, wc[i].wr_id);
        }
        if (got == 0 && now_ns() > deadline) wb::fail("the stream did not complete within --timeout");
    }
    const double seconds = static_cast<double>(now_ns() - t0) / 1e9;
    wb::send_token(conn, "DONE");
    std::printf("client: %lu ibv_post_send calls for %u WRs\n", calls, n);
    std::printf("result: write bw %u B: %.2f MiB/s (n=%u)\n", size,
                static_cast<double>(size) * n / seconds / (1024.0 * 1024.0), n);
    return 0;
}
