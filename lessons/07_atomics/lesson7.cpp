// lesson7.cpp - atomics: FETCH_AND_ADD on a shared counter and a COMPARE_AND_SWAP lock.
//
// The server checks that its device can do atomics (ibv_query_device,
// atomic_cap), registers two 8-byte words with IBV_ACCESS_REMOTE_ATOMIC (a
// counter and a lock word) and gives each of CLIENTS clients its own QP to
// them. Once all are connected it sends each client GO, so that their atomics
// run at the same time. Every client adds 1 to the counter N times with
// IBV_WR_ATOMIC_FETCH_AND_ADD, printing the value it found there each time,
// then takes a lock with IBV_WR_ATOMIC_CMP_AND_SWP (0 -> its id) and releases
// it (its id -> 0). The server's NIC executes every atomic; its CPU only waits
// for each client's DONE and then prints the counter: CLIENTS * N, because
// the NIC performs each read-add-write as one indivisible step, so two
// clients' increments can never overwrite each other.
//
// Run it on one host (rxe's loopback carries the RDMA):
//     ./lesson7 -c 2                  server: waits for 2 clients
//     ./lesson7 127.0.0.1 -n 5        client 1 (another terminal)
//     ./lesson7 127.0.0.1 -n 5        client 2 (a third terminal, within --timeout
//                                     of client 1, which waits for the server's GO)
// On two hosts: ./lesson7 on host A, ./lesson7 A on host B (and C...). Every
// side takes -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson7 -h).
//
// Verbs it introduces:
//     ibv_query_device (atomic_cap, max_qp_rd_atom, max_qp_init_rd_atom)
//     ibv_post_send with IBV_WR_ATOMIC_FETCH_AND_ADD and IBV_WR_ATOMIC_CMP_AND_SWP
//     (wr.atomic.remote_addr / compare_add / swap / rkey)
//     IBV_ACCESS_REMOTE_ATOMIC on an MR and on the QP (qp_access_flags)
//
// Read more: man ibv_query_device, man ibv_post_send, man ibv_reg_mr,
// man ibv_modify_qp; docs/lesson7-atomics.md (diagram, the wire, exercises).
#include <infiniband/verbs.h>

#include <chrono>
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

constexpr uint16_t kLesson = 7;  // sent in the exchange: a lesson-7 client only talks to a lesson-7 server
constexpr int kDefaultClients = 1;
constexpr int kDefaultAdds = 5;
// Atomics one side may have outstanding at the other. Each client waits for
// one atomic's completion before posting the next, so 1 is enough: a
// client's max_rd_atomic (RTS) must not exceed the server's
// max_dest_rd_atomic (RTR) on that connection.
constexpr uint8_t kAtomicsInFlight = 1;

// What the server exposes: two 64-bit words. The IB spec requires the
// target of an atomic to be 8-byte aligned (a misaligned address fails with
// IBV_WC_REM_INV_REQ_ERR); the server's buffer is page-aligned, and each word
// sits at a multiple of 8 from it.
struct SharedWords {
    uint64_t counter;  // offset 0: FETCH_AND_ADD target
    uint64_t lock;     // offset 8: 0 = free, else the id of the client holding it
};
static_assert(sizeof(SharedWords) == 16 && offsetof(SharedWords, lock) == 8);

const char* atomic_cap_str(ibv_atomic_cap cap) {
    switch (cap) {
    case IBV_ATOMIC_NONE: return "IBV_ATOMIC_NONE (no atomics)";
    case IBV_ATOMIC_HCA: return "IBV_ATOMIC_HCA (atomic among this device's own atomics)";
    case IBV_ATOMIC_GLOB: return "IBV_ATOMIC_GLOB (atomic also against the CPU and other devices)";
    }
    return "unknown";
}

// Both sides need atomics: the requester's NIC builds the atomic packets, the
// responder's NIC executes them.
void check_atomic_support(ibv_context* ctx) {
    ibv_device_attr dev{};
    CHECK_RC(ibv_query_device(ctx, &dev));
    std::printf("device: atomic_cap %s; up to %d atomics/READs in flight per QP as responder, %d as requester\n",
                atomic_cap_str(dev.atomic_cap), dev.max_qp_rd_atom, dev.max_qp_init_rd_atom);
    if (dev.atomic_cap == IBV_ATOMIC_NONE)
        wb::fail(std::string("device ") + ibv_get_device_name(ctx->device) +
                     " does not support atomic operations (atomic_cap is IBV_ATOMIC_NONE)",
                 "use a device whose ibv_devinfo -v shows atomic_cap ATOMIC_HCA or ATOMIC_GLOB (rxe has it)");
    if (dev.max_qp_rd_atom < kAtomicsInFlight || dev.max_qp_init_rd_atom < kAtomicsInFlight)
        wb::fail("device allows no atomic in flight per QP (max_qp_rd_atom " + std::to_string(dev.max_qp_rd_atom) +
                 ", max_qp_init_rd_atom " + std::to_string(dev.max_qp_init_rd_atom) + ")");
}

// Post one atomic and wait for its completion; returns the 64-bit value the
// remote word held just before the operation.
//   FETCH_AND_ADD: word += compare_add          (swap unused)
//   CMP_AND_SWP:   if (word == compare_add) word = swap
// The old value comes back into our 8-byte result buffer. Operands and
// result are in OUR host byte order: the verbs carry them big-endian on the
// wire and the responder's NIC works on its word in ITS host order.
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
        .send_flags = IBV_SEND_SIGNALED,  // we need the completion: it means the old value has arrived
        .wr = {.atomic = {.remote_addr = remote_addr, .compare_add = compare_add, .swap = swap, .rkey = rkey}},
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad), "EINVAL: is the remote address 8-byte aligned?");
    wb::poll_success(cq, timeout_s, opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? "the FETCH_AND_ADD" : "the COMPARE_AND_SWAP",
                 server);  // also watches the TCP connection: a server that dies is noticed at once
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
            .max_send_wr = kAtomicsInFlight,  // one atomic at a time
            .max_recv_wr = 1,                 // we post no receive (nobody SENDs here); 1 suits every provider
            .max_send_sge = 1,                // the 8-byte result buffer
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,                // atomics exist only on reliable connections
    };
    return CHECK_PTR(ibv_create_qp(pd, &attr));
}

}  // namespace

int main(int argc, char** argv) {
    std::string clients_arg, adds_arg;
    const wb::ExtraOption extra[] = {
        {'c', "clients", "CLIENTS", "server: how many clients to serve at once (default: 1)", &clients_arg},
        {'n', "adds", "N", "client: how many FETCH_AND_ADDs to do (default: 5)", &adds_arg},
    };
    const wb::Usage usage = {
        .synopsis = "[options] [-c CLIENTS]   server: a shared counter and lock word\n"
                    "  lesson7 [options] HOST [-n N]    client: N FETCH_AND_ADDs, then take and release the lock",
        .summary = "atomics: FETCH_AND_ADD on a shared counter, COMPARE_AND_SWAP as a lock",
        .server_scope = "The server listens on every address of this host (IPv4 and IPv6, port -p) and serves\n"
                        "CLIENTS clients together: the first connection that goes wrong ends it for all\n"
                        "(exit 1). Run it where you trust whoever can reach that port.",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 1) wb::usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (is_server && opt.given('n')) wb::usage_error("-n is a client option (./lesson7 HOST -n N)");
    if (!is_server && opt.given('c')) wb::usage_error("-c is a server option (./lesson7 -c CLIENTS)");
    const int clients = opt.given('c') ? static_cast<int>(wb::parse_range(clients_arg, "-c", 1, 100)) : kDefaultClients;
    const int adds = opt.given('n') ? static_cast<int>(wb::parse_range(adds_arg, "-n", 1, 1000000)) : kDefaultAdds;

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp),
    //    and the question this lesson adds: can this device do atomics at all?
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    check_atomic_support(ctx.get());

    // 2. In creation order (reverse destruction: lesson 2).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    // The server's CQ stays empty: atomics raise no completion at the
    // responder. A client's CQ gets one completion per atomic.
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1 + kAtomicsInFlight, nullptr, nullptr, 0))};

    if (is_server) {
        // 3. The shared words. REMOTE_ATOMIC lets the clients' NICs run
        //    atomics on them; LOCAL_WRITE: required with REMOTE_ATOMIC (lesson 2).
        //    No REMOTE_READ or REMOTE_WRITE: clients may not read or overwrite
        //    the words except through an atomic.
        wb::Buffer buf = wb::alloc_buffer(sizeof(SharedWords));  // page-aligned, zeroed: counter 0, lock free
        auto* words = reinterpret_cast<SharedWords*>(buf.get());
        wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), words, sizeof(SharedWords),
                                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC),
                                      "EINVAL: REMOTE_ATOMIC without LOCAL_WRITE; ENOMEM: ulimit -l")};
        std::printf("server: counter at 0x%llx, lock word at 0x%llx, rkey 0x%x (IBV_ACCESS_REMOTE_ATOMIC)\n",
                    static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&words->counter)),
                    static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&words->lock)), mr->rkey);

        // 4. One QP per client: an RC QP connects exactly two endpoints. All
        //    QPs share the PD (so the one MR serves them all) and the CQ.
        wb::Listener listener(opt.tcp_port);
        std::vector<wb::QueuePair> qps;       // destroyed before cq, mr and pd (declared after them)
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
            // Lesson 3's transitions. The QP must allow atomics too
            // (qp_access_flags), and max_dest_rd_atomic = how many atomics
            // this client may have outstanding at us.
            wb::qp_to_init(qp, addr, IBV_ACCESS_REMOTE_ATOMIC);
            wb::qp_to_rtr(qp, addr, peer, kAtomicsInFlight);
            wb::qp_to_rts(qp, psn, kAtomicsInFlight);
            std::printf("server: client %d (%s) is connected: QP 0x%x <-> 0x%x, RTS\n", i,
                        conns.back().peer().c_str(), qp->qp_num, peer.qp_num);
        }

        // 5. Start them all at once, so that their atomics really do run at the
        //    same time. GO also tells each client that our QP is past RTR
        //    (lesson 4's "RTR!", step 8).
        //    Then wait for every client's DONE. A client that
        //    finishes early just leaves its DONE in the socket until we get to it.
        std::printf("server: %d of %d clients connected; sending GO: their atomics run now, "
                    "executed by this NIC with no help from this CPU\n", clients, clients);
        for (wb::Connection& c : conns) wb::send_token(c, "GO!!");
        for (int i = 1; i <= clients; ++i) {
            wb::expect_token(conns[i - 1], "DONE", opt.timeout_s);
            std::printf("server: client %d is done\n", i);
        }

        // 6. Now nobody touches the words: read them with the CPU. The NIC
        //    stored them in this host's byte order. (With IBV_ATOMIC_HCA the CPU
        //    must not touch them while clients still run atomics.)
        const uint64_t counter = *reinterpret_cast<volatile uint64_t*>(&words->counter);
        const uint64_t lock = *reinterpret_cast<volatile uint64_t*>(&words->lock);
        std::printf("server: lock word = %llu (%s)\n", static_cast<unsigned long long>(lock),
                    lock == 0 ? "free" : "still held");
        std::printf("result: counter = %llu\n", static_cast<unsigned long long>(counter));
        return 0;
    }

    // Client.
    wb::QueuePair qp{create_rc_qp(pd.get(), cq.get())};
    const uint32_t psn = wb::random_psn();
    // 3. Where each atomic's old value lands: 8 bytes, 8-byte aligned.
    //    LOCAL_WRITE only: our own NIC writes the result into it; the server
    //    may do nothing to our memory, so no REMOTE_* flag.
    wb::Buffer result = wb::alloc_buffer(sizeof(uint64_t));
    wb::MemoryRegion result_mr{CHECK_PTR(ibv_reg_mr(pd.get(), result.get(), sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE),
                                         "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. Out-of-band exchange: the server's QP, and where its words are.
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    std::printf("client: connected to %s\n", conn.peer().c_str());
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    // Never trust what the peer advertises: we will aim atomics at the two
    // words, so they must lie inside what it offers and be 8-byte aligned.
    if (peer.length < sizeof(SharedWords))
        wb::fail("the server offers " + std::to_string(peer.length) + " bytes; the counter and lock word need " +
                     std::to_string(sizeof(SharedWords)),
                 "is the server a lesson-7 server of this workbook?");
    if (peer.addr % 8 != 0)
        wb::fail("the server's words are not 8-byte aligned; atomics need 8-byte alignment",
                 "is the server a lesson-7 server of this workbook?");
    const uint64_t counter_addr = peer.addr + offsetof(SharedWords, counter);
    const uint64_t lock_addr = peer.addr + offsetof(SharedWords, lock);
    std::printf("client: server QP 0x%x; counter at 0x%llx, lock word at 0x%llx, rkey 0x%x\n", peer.qp_num,
                static_cast<unsigned long long>(counter_addr), static_cast<unsigned long long>(lock_addr), peer.rkey);

    // 5. Lesson 3's transitions. We allow the server nothing (remote access
    //    0). max_rd_atomic = how many atomics we may have outstanding at the
    //    server: atomics and READs share this budget, because each occupies
    //    a responder resource at the server until its response is sent.
    wb::qp_to_init(qp.get(), addr, 0);
    wb::qp_to_rtr(qp.get(), addr, peer, kAtomicsInFlight);
    wb::qp_to_rts(qp.get(), psn, kAtomicsInFlight);
    // The server starts every client at the same moment, once all are connected.
    std::printf("client: waiting for the server's GO (it starts all its clients together)\n");
    wb::expect_token(conn, "GO!!", opt.timeout_s);

    // 6. N FETCH_AND_ADDs of 1. Each returns the counter as it was just
    //    before OUR add; no other client can ever see the same value, because
    //    the server's NIC reads, adds and writes each one as a single step.
    const uint64_t add = 1;  // what each FETCH_AND_ADD adds to the counter
    std::string olds;
    uint64_t first_old = 0;
    for (int i = 1; i <= adds; ++i) {
        const uint64_t old = post_atomic(qp.get(), cq.get(), result_mr.get(), IBV_WR_ATOMIC_FETCH_AND_ADD,
                                         counter_addr, peer.rkey, add, 0, opt.timeout_s, conn);
        std::printf("client: fetch_and_add #%d: +%llu, old value %llu\n", i, static_cast<unsigned long long>(add),
                    static_cast<unsigned long long>(old));
        if (i == 1) first_old = old;
        olds += (i == 1 ? "" : " ") + std::to_string(old);
    }

    // 7. A lock from COMPARE_AND_SWAP. Our id must be non-zero and differ from
    //    every other client's: 1 + the first counter value we fetched is both.
    //    Take: swap 0 -> id; the old value 0 means it was free and is now ours,
    //    anything else is the id of the holder, so we try again (bounded).
    const uint64_t my_id = first_old + 1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.timeout_s);
    int attempts = 0;
    for (;;) {
        ++attempts;
        const uint64_t old = post_atomic(qp.get(), cq.get(), result_mr.get(), IBV_WR_ATOMIC_CMP_AND_SWP, lock_addr,
                                         peer.rkey, 0, my_id, opt.timeout_s, conn);
        if (old == 0) {
            std::printf("client: compare_and_swap lock 0 -> %llu: old value 0, lock taken (attempt %d)\n",
                        static_cast<unsigned long long>(my_id), attempts);
            break;
        }
        if (attempts == 1)
            std::printf("client: compare_and_swap lock 0 -> %llu: old value %llu, held by client id %llu; retrying\n",
                        static_cast<unsigned long long>(my_id), static_cast<unsigned long long>(old),
                        static_cast<unsigned long long>(old));
        if (std::chrono::steady_clock::now() >= deadline)
            wb::fail("the lock stayed held by client id " + std::to_string(old) + " for " +
                         std::to_string(opt.timeout_s) + " s",
                     "did that client die while holding it? restart the server; raise --timeout if the machine is slow");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // back off instead of flooding the server
    }
    // The critical section: only the holder runs here. Held briefly so that a
    // second client started at the same time can be seen waiting.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // Release: swap id -> 0. The old value must be our id; anything else
    // means someone broke the lock protocol.
    const uint64_t released = post_atomic(qp.get(), cq.get(), result_mr.get(), IBV_WR_ATOMIC_CMP_AND_SWP, lock_addr,
                                          peer.rkey, my_id, 0, opt.timeout_s, conn);
    if (released != my_id)
        wb::fail("releasing the lock found " + std::to_string(released) + " in the lock word, not our id " +
                 std::to_string(my_id) + ": it was not ours to release");
    std::printf("client: compare_and_swap lock %llu -> 0: old value %llu, lock released\n",
                static_cast<unsigned long long>(my_id), static_cast<unsigned long long>(released));

    // 8. Tell the server we are done.
    wb::send_token(conn, "DONE");
    std::printf("result: fetch_and_add old values: %s; lock taken and released as id %llu\n", olds.c_str(),
                static_cast<unsigned long long>(my_id));
    return 0;
}
