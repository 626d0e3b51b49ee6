// ex7_2.cpp - exercise 7.2: FETCH_AND_ADD of +5, then of -1.
//
// Lesson 7's counter, without the lock: each client adds 5 to the server's
// counter N times with IBV_WR_ATOMIC_FETCH_AND_ADD, then adds -1 N times,
// printing each operand and the old value the server's NIC returned. The
// operand is a uint64_t: -1 is UINT64_MAX, and the 64-bit addition wraps
// round to exactly "minus one". The server prints the counter once every
// client is done: CLIENTS * 4N.
//
// Run it on one host (rxe's loopback carries the RDMA):
//     ./ex7_2                        server: one client (-c CLIENTS for more)
//     ./ex7_2 127.0.0.1 -n 5         client: 5 adds of +5, then 5 of -1
// Every side takes -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./ex7_2 -h).
//
// Verbs involved:
//     ibv_post_send with IBV_WR_ATOMIC_FETCH_AND_ADD (wr.atomic.compare_add: the value to add)
//     IBV_ACCESS_REMOTE_ATOMIC on the server's MR and QPs (lesson 7)
//
// The task is in README.md beside this file; `make grade EX=7.2` checks it.
// Read more: docs/lesson7-atomics.md (exercise 3), man ibv_post_send.
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

constexpr uint16_t kLesson = 7;  // sent in the exchange: both sides run this lesson's protocol
constexpr int kDefaultClients = 1;
constexpr int kDefaultAdds = 5;
constexpr uint8_t kAtomicsInFlight = 1;  // one atomic at a time (lesson 7)

// What the server exposes: one 64-bit word, 8-byte aligned (the buffer is page-aligned).
constexpr size_t kCounterBytes = sizeof(uint64_t);

// Post one atomic and wait for its completion; returns the 64-bit value the
// remote word held just before the operation (lesson 7's post_atomic).
uint64_t post_atomic(ibv_qp* qp, ibv_cq* cq, ibv_mr* result_mr, ibv_wr_opcode opcode, uint64_t remote_addr,
                     uint32_t rkey, uint64_t compare_add, uint64_t swap, int timeout_s, const wb::Connection& server) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(result_mr->addr),
        .length = sizeof(uint64_t),  // an atomic always returns exactly 8 bytes
        .lkey = result_mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = 1,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = opcode,
        .send_flags = IBV_SEND_SIGNALED,
        .wr = {.atomic = {.remote_addr = remote_addr, .compare_add = compare_add, .swap = swap, .rkey = rkey}},
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad), "EINVAL: is the remote address 8-byte aligned?");
    wb::poll_success(cq, timeout_s, opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? "the FETCH_AND_ADD" : "the COMPARE_AND_SWAP",
                 server);
    uint64_t old = 0;
    std::memcpy(&old, result_mr->addr, sizeof old);
    return old;
}

// One RC QP, as every two-process lesson creates it.
ibv_qp* create_rc_qp(ibv_pd* pd, ibv_cq* cq) {
    ibv_qp_init_attr attr = {
        .send_cq = cq,
        .recv_cq = cq,
        .cap = {
            .max_send_wr = 1,     // one operation at a time
            .max_recv_wr = 1,     // we post no receive; 1 suits every provider
            .max_send_sge = 1,
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,    // atomics exist only on reliable connections
    };
    return CHECK_PTR(ibv_create_qp(pd, &attr));
}

}  // namespace

int main(int argc, char** argv) {
    std::string clients_arg, adds_arg;
    const wb::ExtraOption extra[] = {
        {'c', "clients", "CLIENTS", "server: how many clients to serve at once (default: 1)", &clients_arg},
        {'n', "adds", "N", "client: how many adds of +5, and then of -1 (default: 5)", &adds_arg},
    };
    const wb::Usage usage = {
        .synopsis = "[options] [-c CLIENTS]   server: a shared counter\n"
                    "  ex7_2 [options] HOST [-n N]    client: N FETCH_AND_ADDs of +5, then N of -1",
        .summary = "exercise 7.2: FETCH_AND_ADD of +5, then of -1 (UINT64_MAX)",
        .server_scope = "The server listens on every address of this host (IPv4 and IPv6, port -p) and serves\n"
                        "CLIENTS clients together: the first connection that goes wrong ends it for all\n"
                        "(exit 1). Run it where you trust whoever can reach that port.",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 1) wb::usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (is_server && opt.given('n')) wb::usage_error("-n is a client option (./ex7_2 HOST -n N)");
    if (!is_server && opt.given('c')) wb::usage_error("-c is a server option (./ex7_2 -c CLIENTS)");
    const int clients = opt.given('c') ? static_cast<int>(wb::parse_range(clients_arg, "-c", 1, 100)) : kDefaultClients;
    const int adds = opt.given('n') ? static_cast<int>(wb::parse_range(adds_arg, "-n", 1, 100000)) : kDefaultAdds;

    // 1. Device, port and address; can this device do atomics? (lesson 7)
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    ibv_device_attr dev{};
    CHECK_RC(ibv_query_device(ctx.get(), &dev));
    if (dev.atomic_cap == IBV_ATOMIC_NONE)
        wb::fail(std::string("device ") + ibv_get_device_name(ctx->device) + " has no atomics (atomic_cap IBV_ATOMIC_NONE)",
                 "use a device whose ibv_devinfo -v shows atomic_cap ATOMIC_HCA or ATOMIC_GLOB (rxe has it)");

    // 2. Declared in creation order: C++ destroys them in reverse.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1 + kAtomicsInFlight, nullptr, nullptr, 0))};

    if (is_server) {
        // 3. The counter. REMOTE_ATOMIC, and LOCAL_WRITE because ibv_reg_mr(3)
        //    demands it with REMOTE_ATOMIC: our own NIC writes the sums.
        wb::Buffer buf = wb::alloc_buffer(kCounterBytes);  // page-aligned, zeroed: the counter starts at 0
        auto* counter = reinterpret_cast<uint64_t*>(buf.get());
        wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), counter, kCounterBytes,
                                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC),
                                      "EINVAL: REMOTE_ATOMIC without LOCAL_WRITE; ENOMEM: ulimit -l")};
        std::printf("server: counter at 0x%llx, rkey 0x%x (IBV_ACCESS_REMOTE_ATOMIC)\n",
                    static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(counter)), mr->rkey);

        // 4. One QP per client, each allowing atomics.
        wb::Listener listener(opt.tcp_port);
        std::vector<wb::QueuePair> qps;
        std::vector<wb::Connection> conns;
        for (int i = 1; i <= clients; ++i) {
            std::printf("server: waiting for client %d of %d on TCP port %u\n", i, clients, opt.tcp_port);
            conns.push_back(listener.accept(opt.accept_timeout_s()));
            qps.emplace_back(create_rc_qp(pd.get(), cq.get()));
            ibv_qp* qp = qps.back().get();
            const uint32_t psn = wb::random_psn();
            wb::PeerInfo mine = wb::local_info(kLesson, qp, psn, addr);
            mine.addr = reinterpret_cast<uintptr_t>(counter);
            mine.length = kCounterBytes;
            mine.rkey = mr->rkey;
            const wb::PeerInfo peer = wb::exchange(conns.back(), mine, opt.timeout_s);
            wb::qp_to_init(qp, addr, IBV_ACCESS_REMOTE_ATOMIC);
            wb::qp_to_rtr(qp, addr, peer, kAtomicsInFlight);
            wb::qp_to_rts(qp, psn, kAtomicsInFlight);
            std::printf("server: client %d (%s) is connected: QP 0x%x <-> 0x%x, RTS\n", i,
                        conns.back().peer().c_str(), qp->qp_num, peer.qp_num);
        }

        // 5. GO to all at once, then every client's DONE.
        std::printf("server: %d of %d clients connected; sending GO\n", clients, clients);
        for (wb::Connection& c : conns) wb::send_token(c, "GO!!");
        for (int i = 1; i <= clients; ++i) {
            wb::expect_token(conns[i - 1], "DONE", opt.timeout_s);
            std::printf("server: client %d is done\n", i);
        }

        // 6. Nobody touches the counter now: read it with the CPU.
        const uint64_t total = *reinterpret_cast<volatile uint64_t*>(counter);
        std::printf("result: counter = %llu\n", static_cast<unsigned long long>(total));
        return 0;
    }

    // Client.
    wb::QueuePair qp{create_rc_qp(pd.get(), cq.get())};
    const uint32_t psn = wb::random_psn();
    // 3. Where each atomic's old value lands: 8 bytes, LOCAL_WRITE (our NIC writes it).
    wb::Buffer result = wb::alloc_buffer(sizeof(uint64_t));
    wb::MemoryRegion result_mr{CHECK_PTR(ibv_reg_mr(pd.get(), result.get(), sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE),
                                         "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. Out-of-band exchange: the server's QP, and where its counter is.
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    std::printf("client: connected to %s\n", conn.peer().c_str());
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    // Never trust what the peer advertises: 8 bytes at least, 8-byte aligned.
    if (peer.length < kCounterBytes || peer.addr % 8 != 0)
        wb::fail("the server offers " + std::to_string(peer.length) + " bytes at an address " +
                     (peer.addr % 8 ? "not " : "") + "8-byte aligned; the counter needs 8, aligned",
                 "is the server an ex7_2 server?");
    const uint64_t counter_addr = peer.addr;

    // 5. Lesson 3's transitions; the server may do nothing to our memory.
    wb::qp_to_init(qp.get(), addr, 0);
    wb::qp_to_rtr(qp.get(), addr, peer, kAtomicsInFlight);
    wb::qp_to_rts(qp.get(), psn, kAtomicsInFlight);
    std::printf("client: waiting for the server's GO (it starts all its clients together)\n");
    wb::expect_token(conn, "GO!!", opt.timeout_s);

    // 6. Lesson 7's adds of 1, N times.
    // TODO(7.2): N adds of +5, then N adds of -1. compare_add is a uint64_t:
    // what do you put there to subtract 1? Each line must show the operand
    // that was added ("+5" or "-1"), numbered on from 1 to 2N, for example
    //     client: fetch_and_add #7: -1, old value 30
    std::string olds;
    for (int i = 1; i <= adds; ++i) {
        const uint64_t old = post_atomic(qp.get(), cq.get(), result_mr.get(), IBV_WR_ATOMIC_FETCH_AND_ADD,
                                         counter_addr, peer.rkey, 1, 0, opt.timeout_s, conn);
        std::printf("client: fetch_and_add #%d: +1, old value %llu\n", i, static_cast<unsigned long long>(old));
        olds += (i == 1 ? "" : " ") + std::to_string(old);
    }

    // 7. Tell the server we are done.
    wb::send_token(conn, "DONE");
    std::printf("result: fetch_and_add old values: %s\n", olds.c_str());
    return 0;
}
