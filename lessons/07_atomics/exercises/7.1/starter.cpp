// ex7_1.cpp - exercise 7.1: a COMPARE_AND_SWAP spinlock guarding a two-word record.
//
// Lesson 7's server exposes a counter and a lock word; this one adds a
// record of two 8-byte words, a and b, that no single atomic can update
// together. Each client takes an id with one FETCH_AND_ADD on the counter,
// then N times: READ the record, add 1 to both words with its CPU, WRITE it
// back. Two clients doing that at once lose updates (both READ 7, both
// WRITE 8). The lock word prevents it: take it with COMPARE_AND_SWAP
// (0 -> id) before the READ, release it (id -> 0) after the WRITE. The
// server prints the record once every client is done: (CLIENTS*N, CLIENTS*N).
//
// Run it on one host (rxe's loopback carries the RDMA):
//     ./ex7_1 -c 2                  server: waits for 2 clients
//     ./ex7_1 127.0.0.1 -n 500      client 1 (another terminal)
//     ./ex7_1 127.0.0.1 -n 500      client 2 (a third terminal, within --timeout of client 1)
// Every side takes -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./ex7_1 -h).
//
// Verbs involved:
//     ibv_post_send with IBV_WR_ATOMIC_FETCH_AND_ADD and IBV_WR_ATOMIC_CMP_AND_SWP (lesson 7),
//     IBV_WR_RDMA_READ (lesson 6) and IBV_WR_RDMA_WRITE (lesson 5) on one QP
//     IBV_ACCESS_REMOTE_ATOMIC | REMOTE_READ | REMOTE_WRITE on the server's MR and QPs
//
// The task is in README.md beside this file; `make grade EX=7.1` checks it.
// Read more: docs/lesson7-atomics.md ("Why no increment is ever lost"), man ibv_post_send.
#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

namespace {

constexpr uint16_t kLesson = 7;  // sent in the exchange: both sides run this lesson's protocol
constexpr int kDefaultClients = 1;
constexpr int kDefaultRounds = 5;
constexpr uint8_t kAtomicsInFlight = 1;  // one atomic or READ at a time (lesson 7)

// What the server exposes: four 64-bit words, each at a multiple of 8 from
// a page-aligned buffer (atomics need 8-byte alignment).
struct SharedWords {
    uint64_t counter;   // offset 0: FETCH_AND_ADD target, hands out client ids
    uint64_t lock;      // offset 8: 0 = free, else the id of the client holding it
    uint64_t record[2]; // offset 16: a and b, READ and WRITTEN together, under the lock
};
static_assert(sizeof(SharedWords) == 32 && offsetof(SharedWords, lock) == 8 && offsetof(SharedWords, record) == 16);
constexpr uint32_t kRecordBytes = sizeof(SharedWords::record);

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

// Post one RDMA READ or WRITE of all of `mr` (lessons 5 and 6) and wait for its completion.
void post_rdma(ibv_qp* qp, ibv_cq* cq, ibv_mr* mr, ibv_wr_opcode opcode, uint64_t remote_addr, uint32_t rkey,
               int timeout_s, const wb::Connection& server) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr),
        .length = static_cast<uint32_t>(mr->length),
        .lkey = mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = 2,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = opcode,
        .send_flags = IBV_SEND_SIGNALED,  // READ: the bytes have landed; WRITE: the server's NIC has them
        .wr = {.rdma = {.remote_addr = remote_addr, .rkey = rkey}},
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
    wb::poll_success(cq, timeout_s, opcode == IBV_WR_RDMA_READ ? "the RDMA READ" : "the RDMA WRITE", server);
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
    std::string clients_arg, rounds_arg;
    const wb::ExtraOption extra[] = {
        {'c', "clients", "CLIENTS", "server: how many clients to serve at once (default: 1)", &clients_arg},
        {'n', "rounds", "N", "client: how many times to add 1 to both words of the record (default: 5)", &rounds_arg},
    };
    const wb::Usage usage = {
        .synopsis = "[options] [-c CLIENTS]   server: a counter, a lock word and a two-word record\n"
                    "  ex7_1 [options] HOST [-n N]    client: N locked read-modify-writes of the record",
        .summary = "exercise 7.1: a COMPARE_AND_SWAP spinlock guarding a two-word record",
        .server_scope = "The server listens on every address of this host (IPv4 and IPv6, port -p) and serves\n"
                        "CLIENTS clients together: the first connection that goes wrong ends it for all\n"
                        "(exit 1). Run it where you trust whoever can reach that port.",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 1) wb::usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (is_server && opt.given('n')) wb::usage_error("-n is a client option (./ex7_1 HOST -n N)");
    if (!is_server && opt.given('c')) wb::usage_error("-c is a server option (./ex7_1 -c CLIENTS)");
    const int clients = opt.given('c') ? static_cast<int>(wb::parse_range(clients_arg, "-c", 1, 100)) : kDefaultClients;
    const int rounds = opt.given('n') ? static_cast<int>(wb::parse_range(rounds_arg, "-n", 1, 1000000)) : kDefaultRounds;

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
        // 3. The shared words. REMOTE_ATOMIC for the counter and the lock,
        //    REMOTE_READ and REMOTE_WRITE for the record; LOCAL_WRITE because
        //    ibv_reg_mr(3) demands it with REMOTE_WRITE and REMOTE_ATOMIC.
        wb::Buffer buf = wb::alloc_buffer(sizeof(SharedWords));  // page-aligned, zeroed
        auto* words = reinterpret_cast<SharedWords*>(buf.get());
        wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), words, sizeof(SharedWords),
                                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                                                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE),
                                      "EINVAL: REMOTE_ATOMIC or REMOTE_WRITE without LOCAL_WRITE; ENOMEM: ulimit -l")};
        std::printf("server: counter at 0x%llx, lock word at +8, record at +16, rkey 0x%x\n",
                    static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(words)), mr->rkey);

        // 4. One QP per client, each allowing atomics, READ and WRITE.
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
            mine.addr = reinterpret_cast<uintptr_t>(words);
            mine.length = sizeof(SharedWords);
            mine.rkey = mr->rkey;
            const wb::PeerInfo peer = wb::exchange(conns.back(), mine, opt.timeout_s);
            wb::qp_to_init(qp, addr, IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
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

        // 6. Nobody touches the words now: read them with the CPU.
        const volatile SharedWords* w = words;
        std::printf("server: lock word = %llu (%s), counter = %llu\n", static_cast<unsigned long long>(w->lock),
                    w->lock == 0 ? "free" : "still held", static_cast<unsigned long long>(w->counter));
        std::printf("result: record = (%llu, %llu)\n", static_cast<unsigned long long>(w->record[0]),
                    static_cast<unsigned long long>(w->record[1]));
        return 0;
    }

    // Client.
    wb::QueuePair qp{create_rc_qp(pd.get(), cq.get())};
    const uint32_t psn = wb::random_psn();
    // 3. Where each atomic's old value lands (8 bytes), and our copy of the
    //    record (16 bytes): the READ lands there, the WRITE goes out from
    //    there. LOCAL_WRITE on both: our NIC writes into them.
    wb::Buffer result = wb::alloc_buffer(sizeof(uint64_t));
    wb::MemoryRegion result_mr{CHECK_PTR(ibv_reg_mr(pd.get(), result.get(), sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE),
                                         "ulimit -l: is locked memory limited? (make doctor checks this)")};
    wb::Buffer record = wb::alloc_buffer(kRecordBytes);
    wb::MemoryRegion record_mr{CHECK_PTR(ibv_reg_mr(pd.get(), record.get(), kRecordBytes, IBV_ACCESS_LOCAL_WRITE),
                                         "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. Out-of-band exchange: the server's QP, and where its words are.
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    std::printf("client: connected to %s\n", conn.peer().c_str());
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    // Never trust what the peer advertises: all four words must lie inside what it offers, 8-byte aligned.
    if (peer.length < sizeof(SharedWords) || peer.addr % 8 != 0)
        wb::fail("the server offers " + std::to_string(peer.length) + " bytes at an address " +
                     (peer.addr % 8 ? "not " : "") + "8-byte aligned; this client needs " +
                     std::to_string(sizeof(SharedWords)) + ", aligned",
                 "is the server an ex7_1 server?");
    const uint64_t counter_addr = peer.addr + offsetof(SharedWords, counter);
    [[maybe_unused]] const uint64_t lock_addr = peer.addr + offsetof(SharedWords, lock);
    const uint64_t record_addr = peer.addr + offsetof(SharedWords, record);

    // 5. Lesson 3's transitions; the server may do nothing to our memory.
    wb::qp_to_init(qp.get(), addr, 0);
    wb::qp_to_rtr(qp.get(), addr, peer, kAtomicsInFlight);
    wb::qp_to_rts(qp.get(), psn, kAtomicsInFlight);
    std::printf("client: waiting for the server's GO (it starts all its clients together)\n");
    wb::expect_token(conn, "GO!!", opt.timeout_s);

    // 6. Our id: 1 + a ticket from the counter, unique and non-zero (lesson 7).
    const uint64_t my_id = 1 + post_atomic(qp.get(), cq.get(), result_mr.get(), IBV_WR_ATOMIC_FETCH_AND_ADD,
                                           counter_addr, peer.rkey, 1, 0, opt.timeout_s, conn);
    std::printf("client: id %llu; %d rounds of READ, +1 to both words, WRITE\n",
                static_cast<unsigned long long>(my_id), rounds);

    // 7. N rounds. Between our READ and our WRITE nobody else may READ the
    //    record: the lock makes the three steps one, for every client that
    //    takes it.
    [[maybe_unused]] const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.timeout_s);
    long busy = 0;  // how often we found the lock held by someone else
    uint64_t words[2] = {0, 0};
    for (int round = 1; round <= rounds; ++round) {
        // TODO(7.1): take the lock: COMPARE_AND_SWAP on lock_addr, 0 -> my_id
        // (post_atomic returns the old value: 0 means it is yours now). While
        // someone else holds it, count ++busy, back off a little and try again,
        // but not past `deadline`.

        post_rdma(qp.get(), cq.get(), record_mr.get(), IBV_WR_RDMA_READ, record_addr, peer.rkey, opt.timeout_s, conn);
        std::memcpy(words, record.get(), sizeof words);
        words[0] += 1;
        words[1] += 1;
        std::memcpy(record.get(), words, sizeof words);
        post_rdma(qp.get(), cq.get(), record_mr.get(), IBV_WR_RDMA_WRITE, record_addr, peer.rkey, opt.timeout_s, conn);

        // TODO(7.1): release the lock: COMPARE_AND_SWAP my_id -> 0; the old
        // value must be my_id (anything else: wb::fail, the protocol broke).
    }

    // 8. Tell the server we are done.
    wb::send_token(conn, "DONE");
    std::printf("client: last record written: (%llu, %llu)\n", static_cast<unsigned long long>(words[0]),
                static_cast<unsigned long long>(words[1]));
    std::printf("result: id %llu did %d rounds; the lock was busy %ld times\n", static_cast<unsigned long long>(my_id),
                rounds, busy);
    return 0;
}
