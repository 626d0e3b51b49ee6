// hostile_peer - a peer that breaks the rules on purpose, for the tests of
// lessons 11, 13 and 14 (what each one must refuse or survive; lesson 12's
// stray datagrams come from tests/helpers/ud_stray.cpp). Each mode
// plays one peer, made of the lessons' own steps (common/), until the moment
// it misbehaves:
//
//   hostile_peer lesson14-overrun HOST PORT
//       a lesson-14 client that claims its first READ went well, then WRITEs
//       'A' from the window's start to the end of the server's pool (rxe
//       does not enforce a window's end), so that no NUL is left in the slot
//       the server prints, nor after it.
//   hostile_peer lesson14-mr-rkey HOST PORT RKEY
//       a lesson-14 client that READs slot 5 through the window, then again
//       with RKEY, the server's MR's own rkey (the server prints it).
//   hostile_peer lesson11-more HOST PORT COUNT
//       a lesson-11 client that takes the server's options as its own, and
//       after GO says MORE COUNT times (0: for ever), then DONE, without
//       sending one request.
//   hostile_peer lesson13-oversized HOST PORT
//       a lesson-13 client that sends, after GO, one SEND of 128 bytes: twice
//       the server's receive buffers.
//   hostile_peer lesson20-stall HOST PORT
//       a lesson-20 client that registers a ring of 4 slots but posts no
//       receive for the responses' immediates, then sends one GET: it
//       stops taking responses from the first.
//   hostile_peer lesson20-bad-slot HOST PORT
//       a lesson-20 client with a ring of 4 slots whose one GET names slot 99.
//   hostile_peer lesson20-greedy HOST PORT
//       a lesson-20 client with a ring of 4 slots (so 4 credits at most, and
//       1 before its first response) that sends 16 GETs in one post list.
//
// The lesson-11, lesson-13 and lesson-20 clients then keep their TCP connection open until the server
// closes it (at most 30 s), so that the server alone decides what happens;
// the lesson-14 clients close theirs after their last step.
// Each mode prints "hostile_peer: ..." lines on stdout, one per step.
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <endian.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
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

constexpr int kTimeout = 30;

// An RC QP on one CQ, the way the lessons create theirs.
wb::QueuePair rc_qp(ibv_pd* pd, ibv_cq* cq) {
    ibv_qp_init_attr attr = {
        .send_cq = cq,
        .recv_cq = cq,
        .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    return wb::QueuePair{CHECK_PTR(ibv_create_qp(pd, &attr))};
}

// Connect, exchange as lesson `lesson`, and bring `qp` to RTS.
wb::Connection connect_rc(const std::string& host, uint16_t port, uint16_t lesson, ibv_qp* qp,
                          const wb::PortAddress& addr) {
    wb::qp_to_init(qp, addr, 0);
    wb::Connection conn = wb::connect_to(host, port, kTimeout);
    const uint32_t psn = wb::random_psn();
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(lesson, qp, psn, addr), kTimeout);
    wb::qp_to_rtr(qp, addr, peer);
    wb::qp_to_rts(qp, psn);
    std::printf("hostile_peer: connected as a lesson-%u client: QP 0x%x <-> 0x%x\n", lesson, qp->qp_num, peer.qp_num);
    return conn;
}

// Hold the connection until the peer closes it (or 30 s pass).
void hold(wb::Connection& conn) {
    char sink[256];
    for (;;) {
        pollfd p{.fd = conn.fd(), .events = POLLIN, .revents = 0};
        if (poll(&p, 1, kTimeout * 1000) <= 0) break;
        if (recv(conn.fd(), sink, sizeof sink, 0) <= 0) break;
    }
    std::printf("hostile_peer: the server closed the connection\n");
}

// One signaled work request on `qp`, and its completion (whatever its status).
ibv_wc post_and_wait(ibv_qp* qp, ibv_cq* cq, ibv_send_wr& wr) {
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeout);
    ibv_wc wc{};
    while (ibv_poll_cq(cq, 1, &wc) == 0)
        if (std::chrono::steady_clock::now() > deadline) wb::fail("no completion within 30 s");
    std::printf("hostile_peer: completion %s\n", wb::wc_status_name(wc.status));
    return wc;
}

// Lesson 14's client up to the window: connected, RTR! received, and the
// window's address and rkey (its WindowMsg: addr 8, length 4, rkey 4 bytes, big-endian).
struct Lesson14 {
    wb::Context ctx;
    wb::PortAddress addr;
    wb::ProtectionDomain pd;
    wb::CompletionQueue cq;
    wb::QueuePair qp;
    wb::Buffer buf;
    wb::MemoryRegion mr;
    wb::Connection conn;
    uint64_t w_addr = 0;
    uint32_t w_rkey = 0;
};
constexpr uint32_t kPoolBytes = 16 * 256, kWindowOffset = 5 * 256;  // lesson 14's pool and slot 5

void lesson14_connect(Lesson14& c, const std::string& host, uint16_t port) {
    c.ctx = wb::open_device("");
    c.addr = wb::choose_address(c.ctx.get(), 1, -1);
    c.pd.reset(CHECK_PTR(ibv_alloc_pd(c.ctx.get())));
    c.cq.reset(CHECK_PTR(ibv_create_cq(c.ctx.get(), 8, nullptr, nullptr, 0)));
    c.qp = rc_qp(c.pd.get(), c.cq.get());
    c.buf = wb::alloc_buffer(kPoolBytes);
    std::memset(c.buf.get(), 'A', kPoolBytes);
    c.mr.reset(CHECK_PTR(ibv_reg_mr(c.pd.get(), c.buf.get(), kPoolBytes, IBV_ACCESS_LOCAL_WRITE)));
    c.conn = connect_rc(host, port, 14, c.qp.get(), c.addr);
    wb::expect_token(c.conn, "RTR!", kTimeout);
    uint8_t raw[16];
    if (!wb::recv_exact(c.conn, raw, kTimeout)) wb::fail("the server sent no window");
    std::memcpy(&c.w_addr, raw, 8);
    std::memcpy(&c.w_rkey, raw + 12, 4);
    c.w_addr = be64toh(c.w_addr);
    c.w_rkey = be32toh(c.w_rkey);
    std::printf("hostile_peer: the window is at 0x%llx, rkey 0x%x\n", static_cast<unsigned long long>(c.w_addr),
                c.w_rkey);
}

// One RDMA READ or WRITE of `bytes` between our buffer and the server's `remote`, with `rkey`.
ibv_wc lesson14_rdma(Lesson14& c, ibv_wr_opcode op, uint64_t remote, uint32_t rkey, uint32_t bytes) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(c.buf.get()), .length = bytes, .lkey = c.mr->lkey};
    ibv_send_wr wr = {
        .wr_id = 1,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = op,
        .send_flags = IBV_SEND_SIGNALED,
        .wr = {.rdma = {.remote_addr = remote, .rkey = rkey}},
    };
    std::printf("hostile_peer: %s of %u bytes at 0x%llx, rkey 0x%x\n", op == IBV_WR_RDMA_READ ? "READ" : "WRITE",
                bytes, static_cast<unsigned long long>(remote), rkey);
    return post_and_wait(c.qp.get(), c.cq.get(), wr);
}

int lesson14_overrun(const std::string& host, uint16_t port) {
    Lesson14 c;
    lesson14_connect(c, host, port);
    wb::send_token(c.conn, "OK!!");  // "READ inside": claimed, never done
    // From the window's start to the pool's end: 'A' everywhere, no NUL.
    const ibv_wc wc = lesson14_rdma(c, IBV_WR_RDMA_WRITE, c.w_addr, c.w_rkey, kPoolBytes - kWindowOffset);
    wb::send_token(c.conn, wc.status == IBV_WC_SUCCESS ? "OK!!" : "ERR!");
    return 0;  // closes the connection: the server, waiting for the next report, sees it at once
}

// READ slot 5 through the window (the control: it works), then with the
// MR's own rkey, which the server says opens nothing.
int lesson14_mr_rkey(const std::string& host, uint16_t port, uint32_t mr_rkey) {
    Lesson14 c;
    lesson14_connect(c, host, port);
    lesson14_rdma(c, IBV_WR_RDMA_READ, c.w_addr, c.w_rkey, 256);
    wb::send_token(c.conn, "OK!!");
    lesson14_rdma(c, IBV_WR_RDMA_READ, c.w_addr, mr_rkey, 256);
    return 0;
}

int lesson13_oversized(const std::string& host, uint16_t port) {
    constexpr uint32_t kBytes = 128;  // lesson 13's receive buffers hold 64
    wb::Context ctx = wb::open_device("");
    const wb::PortAddress addr = wb::choose_address(ctx.get(), 1, -1);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 8, nullptr, nullptr, 0))};
    wb::QueuePair qp = rc_qp(pd.get(), cq.get());
    wb::Buffer buf = wb::alloc_buffer(kBytes);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), kBytes, 0))};
    wb::Connection conn = connect_rc(host, port, 13, qp.get(), addr);
    wb::expect_token(conn, "GO!!", kTimeout);
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(buf.get()), .length = kBytes, .lkey = mr->lkey};
    ibv_send_wr wr = {
        .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    std::printf("hostile_peer: SEND of %u bytes\n", kBytes);
    post_and_wait(qp.get(), cq.get(), wr);
    hold(conn);
    return 0;
}

// Lesson 11's client up to GO (its options: the server's own, echoed),
// then "MORE" every 0.2 s, `count` times (0: for ever), then "DONE",
// without one RDMA request.
int lesson11_more(const std::string& host, uint16_t port, int count) {
    wb::Context ctx = wb::open_device("");
    const wb::PortAddress addr = wb::choose_address(ctx.get(), 1, -1);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 8, nullptr, nullptr, 0))};
    wb::QueuePair qp = rc_qp(pd.get(), cq.get());
    wb::Connection conn = wb::connect_to(host, port, kTimeout);
    wb::exchange(conn, wb::local_info(11, qp.get(), wb::random_psn(), addr), kTimeout);
    uint8_t spec[128];  // lesson 11's options, one NUL-padded line of text, echoed back as ours
    if (!wb::recv_exact(conn, spec, kTimeout)) wb::fail("the server sent no options");
    wb::send_all(conn, spec);
    wb::expect_token(conn, "GO!!", kTimeout);
    std::printf("hostile_peer: GO; saying MORE %s, measuring nothing\n",
                count == 0 ? "for ever" : (std::to_string(count) + " times, then DONE").c_str());
    std::fflush(stdout);
    for (int i = 0; count == 0 || i < count; ++i) {
        wb::send_token(conn, "MORE");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    wb::send_token(conn, "DONE");
    hold(conn);
    return 0;
}


// Lesson 20's wire (lessons/20_rpc/lesson20.cpp): a request is 60 bytes, op,
// key_len, value_len, 0, slot (16 bits), 0 (16 bits), seq (32 bits), key[16],
// value[32], big-endian; the ring is 64-byte slots offered in the exchange.
// `receives` ring receives are posted; `count` GETs go in one post list, GET
// k (from 0) naming slot `slot` + k % 4: a ring of 4 slots gets 4 credits at
// most, and 1 before its first response.
int lesson20(const std::string& host, uint16_t port, uint32_t receives, uint32_t count, uint16_t slot) {
    constexpr uint32_t kSlots = 4, kSlotBytes = 64, kMax = 16;
    wb::Context ctx = wb::open_device("");
    const wb::PortAddress addr = wb::choose_address(ctx.get(), 1, -1);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 2 * kMax, nullptr, nullptr, 0))};
    ibv_qp_init_attr attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = kMax, .max_recv_wr = kMax, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &attr))};
    wb::Buffer ring = wb::alloc_buffer(kSlots * kSlotBytes);
    wb::MemoryRegion ring_mr{CHECK_PTR(ibv_reg_mr(pd.get(), ring.get(), kSlots * kSlotBytes,
                                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))};
    wb::Buffer req = wb::alloc_buffer(kMax * kSlotBytes);
    wb::MemoryRegion req_mr{CHECK_PTR(ibv_reg_mr(pd.get(), req.get(), kMax * kSlotBytes, 0))};
    wb::qp_to_init(qp.get(), addr, IBV_ACCESS_REMOTE_WRITE);
    for (uint32_t i = 0; i < receives; ++i) {
        ibv_recv_wr rwr = {.wr_id = 0, .next = nullptr, .sg_list = nullptr, .num_sge = 0};
        ibv_recv_wr* bad = nullptr;
        CHECK_RC(ibv_post_recv(qp.get(), &rwr, &bad));
    }
    wb::Connection conn = wb::connect_to(host, port, kTimeout);
    const uint32_t psn = wb::random_psn();
    wb::PeerInfo me = wb::local_info(20, qp.get(), psn, addr);
    me.addr = reinterpret_cast<uintptr_t>(ring.get());
    me.length = kSlots * kSlotBytes;
    me.rkey = ring_mr->rkey;
    const wb::PeerInfo peer = wb::exchange(conn, me, kTimeout);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    std::printf("hostile_peer: connected as a lesson-20 client: QP 0x%x <-> 0x%x, ring of %u slots, %u receives posted\n",
                qp->qp_num, peer.qp_num, kSlots, receives);
    ibv_sge sges[kMax];
    ibv_send_wr wrs[kMax];
    const char key[] = "hostile";
    for (uint32_t k = 0; k < count; ++k) {
        auto* q = reinterpret_cast<uint8_t*>(req.get()) + k * kSlotBytes;
        q[0] = 'G';
        q[1] = sizeof key - 1;
        const uint16_t be_slot = htons(static_cast<uint16_t>(slot + k % kSlots));
        const uint32_t be_seq = htonl(k + 1);
        std::memcpy(q + 4, &be_slot, 2);
        std::memcpy(q + 8, &be_seq, 4);
        std::memcpy(q + 12, key, sizeof key - 1);
        sges[k] = {.addr = reinterpret_cast<uintptr_t>(q), .length = 60, .lkey = req_mr->lkey};
        wrs[k] = {.wr_id = k, .next = k + 1 < count ? &wrs[k + 1] : nullptr, .sg_list = &sges[k], .num_sge = 1,
                  .opcode = IBV_WR_SEND, .send_flags = k + 1 < count ? 0u : unsigned{IBV_SEND_SIGNALED}};
    }
    std::printf("hostile_peer: %u GET%s in one post list, the first naming slot %u\n", count, count == 1 ? "" : "s", slot);
    wrs[count - 1].next = nullptr;
    post_and_wait(qp.get(), cq.get(), wrs[0]);
    hold(conn);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    wb::set_program_name(argv[0]);
    const std::string mode = argc > 1 ? argv[1] : "";
    if (argc == 4 && mode == "lesson14-overrun") return lesson14_overrun(argv[2], static_cast<uint16_t>(std::atoi(argv[3])));
    if (argc == 5 && mode == "lesson14-mr-rkey")
        return lesson14_mr_rkey(argv[2], static_cast<uint16_t>(std::atoi(argv[3])),
                                static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 0)));
    if (argc == 5 && mode == "lesson11-more")
        return lesson11_more(argv[2], static_cast<uint16_t>(std::atoi(argv[3])), std::atoi(argv[4]));
    if (argc == 4 && mode == "lesson13-oversized")
        return lesson13_oversized(argv[2], static_cast<uint16_t>(std::atoi(argv[3])));
    if (argc == 4 && mode == "lesson20-stall") return lesson20(argv[2], static_cast<uint16_t>(std::atoi(argv[3])), 0, 1, 0);
    if (argc == 4 && mode == "lesson20-bad-slot")
        return lesson20(argv[2], static_cast<uint16_t>(std::atoi(argv[3])), 1, 1, 99);
    if (argc == 4 && mode == "lesson20-greedy")
        return lesson20(argv[2], static_cast<uint16_t>(std::atoi(argv[3])), 16, 16, 0);
    std::fprintf(stderr, "usage: hostile_peer lesson14-overrun HOST PORT | "
                         "lesson14-mr-rkey HOST PORT RKEY | lesson13-oversized HOST PORT | "
                         "lesson20-stall HOST PORT | lesson20-bad-slot HOST PORT | lesson20-greedy HOST PORT | "
                         "lesson11-more HOST PORT COUNT\n");
    return 2;
}
