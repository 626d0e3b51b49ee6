// lock_holder - a lesson-7 client that takes the server's lock and never
// gives it back, as a client that died while holding it would. The lesson's
// clients hold the lock for 50 ms, too short to catch from a test; with this
// one the test knows who holds the lock and for how long.
// tests/lesson7_atomics.bats runs it next to a real client.
//
//   build/tests/lock_holder [-p PORT] [--timeout S] [-n ID] HOST
//
// It connects, trades PeerInfo as a lesson-7 client (lessons/07_atomics/
// lesson7.cpp, steps 3 to 5), waits for the server's GO, swaps the lock word
// 0 -> ID (default 99) with one COMPARE_AND_SWAP, prints
// "lock_holder: took the lock as id ID" (or what it found there, exit 1),
// then holds it for --timeout seconds, says DONE and exits, leaving the
// lock taken.
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

int main(int argc, char** argv) {
    std::string id_text;
    const wb::ExtraOption extra[] = {
        {'n', "id", "ID", "the id to write into the lock word, 1..1000000 (default: 99)", &id_text},
    };
    const wb::Usage usage = {
        .synopsis = "[-n ID] [options] HOST",
        .summary = "a lesson-7 client that takes the lock and keeps it",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    if (opt.args.size() != 1) wb::usage_error("lock_holder needs exactly one HOST");
    const uint64_t id = id_text.empty() ? 99 : static_cast<uint64_t>(wb::parse_range(id_text, "-n", 1, 1000000));

    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();
    wb::Buffer result = wb::alloc_buffer(sizeof(uint64_t));
    wb::MemoryRegion result_mr{
        CHECK_PTR(ibv_reg_mr(pd.get(), result.get(), sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE))};

    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(7, qp.get(), psn, addr), opt.timeout_s);
    if (peer.length < 16 || peer.addr % 8 != 0) wb::fail("the server offers no 8-byte aligned counter and lock word");
    const uint64_t lock_addr = peer.addr + 8;  // lesson 7's SharedWords: counter at 0, lock at 8
    wb::qp_to_init(qp.get(), addr, 0);
    wb::qp_to_rtr(qp.get(), addr, peer, 1);
    wb::qp_to_rts(qp.get(), psn, 1);
    wb::expect_token(conn, "GO!!", opt.timeout_s);

    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(result.get()), .length = sizeof(uint64_t), .lkey = result_mr->lkey};
    ibv_send_wr wr = {
        .wr_id = 1,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
        .send_flags = IBV_SEND_SIGNALED,
        .wr = {.atomic = {.remote_addr = lock_addr, .compare_add = 0, .swap = id, .rkey = peer.rkey}},
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp.get(), &wr, &bad));
    wb::poll_success(cq.get(), opt.timeout_s, "the COMPARE_AND_SWAP", conn);
    uint64_t old = 0;
    std::memcpy(&old, result.get(), sizeof old);
    if (old != 0) wb::fail("the lock was already held by id " + std::to_string(old));
    std::printf("lock_holder: took the lock as id %llu\n", static_cast<unsigned long long>(id));
    std::this_thread::sleep_for(std::chrono::seconds(opt.timeout_s));
    wb::send_token(conn, "DONE");
    std::printf("lock_holder: done, the lock still taken\n");
    return 0;
}
