// ex11_2.cpp - exercise 11.2: typical, tail and one way, as perftest reports them.
//
// A SEND ping-pong as lesson 11's --test lat, cut down: the client SENDs
// -s bytes, the server SENDs them back, -n times; the client stamps each
// round trip with clock_gettime(CLOCK_MONOTONIC_RAW) and keeps every sample.
// -D FILE writes the raw round trips, in nanoseconds, one a line.
//
// The exercise: turn the samples into what perftest prints. The median
// ("typical"), p99, min and max, each HALVED: a SEND ping-pong is two one-way
// trips. docs/lesson11-performance.md, "The method".
//
//     ./ex11_2 [-s BYTES] [-n ITERS]                      server
//     ./ex11_2 [-s BYTES] [-n ITERS] [-D FILE] HOST       client
#include <infiniband/verbs.h>

#include <time.h>

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

constexpr uint16_t kLesson = 11;  // sent in the exchange: both sides run this exercise
constexpr uint32_t kMaxBytes = 4096;
constexpr uint32_t kRecvs = 8;    // receives kept posted; one is re-posted per message

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void post_receive(ibv_qp* qp, const ibv_mr* mr) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = kMaxBytes, .lkey = mr->lkey};
    ibv_recv_wr wr = {.wr_id = 0, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

void post_send(ibv_qp* qp, const ibv_mr* mr, uint32_t size) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = size, .lkey = mr->lkey};
    ibv_send_wr wr = {.wr_id = 1, .next = nullptr, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                      .send_flags = IBV_SEND_SIGNALED};
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

// Wait (busy, bounded) until the peer's SEND has arrived; SEND completions
// of our own are taken on the way.
void wait_for_recv(ibv_cq* cq, int timeout_s) {
    const int64_t deadline = now_ns() + int64_t{timeout_s} * 1'000'000'000;
    for (unsigned spins = 0;; ++spins) {
        ibv_wc wc;
        const int n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc));
        if (n == 1) {
            wb::check_wc(wc, "the ping-pong");
            if (wc.opcode == IBV_WC_RECV) return;
        } else if ((spins & 4095) == 0 && now_ns() > deadline) {
            wb::fail("no answer within --timeout", "is the peer still running?");
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string size_text, iters_text, dump_path;
    const wb::ExtraOption extra[] = {
        {'s', "size", "BYTES", "message size, 1..4096 (default: 2)", &size_text},
        {'n', "iters", "ITERS", "round trips, 1..100000 (default: 1000)", &iters_text},
        {'D', "dump", "FILE", "client: write every round trip (ns) to FILE", &dump_path},
    };
    const wb::Usage usage = {
        .synopsis = "[options]        server\n  ex11_2 [options] HOST   client: ping-pong, print typical and tail",
        .summary = "exercise 11.2: a SEND ping-pong, its samples turned into typical, p99, min, max",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    if (opt.args.size() > 1) wb::usage_error("too many arguments: the client takes one HOST");
    const bool is_server = opt.args.empty();
    const uint32_t size = opt.given('s') ? static_cast<uint32_t>(wb::parse_range(size_text, "-s", 1, kMaxBytes)) : 2;
    const uint32_t n = opt.given('n') ? static_cast<uint32_t>(wb::parse_range(iters_text, "-n", 1, 100'000)) : 1000;

    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 2 * kRecvs, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = kRecvs, .max_recv_wr = kRecvs, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();
    // Receives land in recv_buf (LOCAL_WRITE); send_buf is only read by our NIC.
    wb::Buffer recv_buf = wb::alloc_buffer(kMaxBytes), send_buf = wb::alloc_buffer(kMaxBytes);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), kMaxBytes, IBV_ACCESS_LOCAL_WRITE))};
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), kMaxBytes, 0))};
    wb::qp_to_init(qp.get(), addr, 0);
    for (uint32_t i = 0; i < kRecvs; ++i) post_receive(qp.get(), recv_mr.get());

    wb::Connection conn = wb::meet_peer(opt, is_server);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    if (is_server) {
        wb::send_token(conn, "RTR!");
        for (uint32_t i = 0; i < n; ++i) {
            wait_for_recv(cq.get(), opt.timeout_s);
            post_receive(qp.get(), recv_mr.get());
            post_send(qp.get(), send_mr.get(), size);
        }
        wb::expect_token(conn, "DONE", opt.timeout_s);
        std::printf("result: served %u round trips\n", n);
        return 0;
    }
    wb::expect_token(conn, "RTR!", opt.timeout_s);

    // The ping-pong: stamp, SEND, wait for the answer. Sample i is the time
    // from stamp i to stamp i + 1: one whole round trip.
    std::vector<int64_t> stamps(n + 1);
    for (uint32_t i = 0; i < n; ++i) {
        stamps[i] = now_ns();
        post_send(qp.get(), send_mr.get(), size);
        wait_for_recv(cq.get(), opt.timeout_s);
        post_receive(qp.get(), recv_mr.get());
    }
    stamps[n] = now_ns();
    wb::send_token(conn, "DONE");
    std::vector<int64_t> rtt(n);
    for (uint32_t i = 0; i < n; ++i) rtt[i] = stamps[i + 1] - stamps[i];
    if (!dump_path.empty()) {
        FILE* f = std::fopen(dump_path.c_str(), "w");
        if (f == nullptr) wb::fail("cannot write -D " + dump_path + ": " + wb::errno_str(errno));
        for (const int64_t s : rtt) std::fprintf(f, "%lld\n", static_cast<long long>(s));
        std::fclose(f);
    }

    // TODO(11.2): the average hides the tail, and a round trip is not a
    // latency. Print, instead of the line below,
    //   client: S B: min X us, typical X us, p99 X us, max X us (half round trips)
    //   result: send lat S B: typical X us (n=N)
    // where typical is the median (the mean of the two middle samples when
    // n is even), p99 the sample at position ceil(0.99 n) counted from 1 in
    // sorted order, and every number is HALF the round trip, in us, "%.2f".
    double sum = 0;
    for (const int64_t s : rtt) sum += static_cast<double>(s);
    std::printf("client: %u B: average round trip %.2f us\n", size, sum / n / 1000.0);
    return 0;
}
