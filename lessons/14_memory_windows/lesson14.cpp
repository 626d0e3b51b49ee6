// lesson14.cpp - memory windows: grant a peer one buffer of a pool, for a while, and take it back.
//
// An MR's rkey is all or nothing for as long as the MR lives: whoever holds it
// may touch every byte of the MR until ibv_dereg_mr. A MEMORY WINDOW (MW) is a
// second key onto a sub-range of an MR, with its own access rights, that the
// owner binds and revokes at will, without registering anything again.
//
// The server registers a pool of 16 slots of 256 bytes ONCE, with
// IBV_ACCESS_MW_BIND and no remote access of its own: the MR's rkey opens
// nothing. It binds one window over slot 5 and sends the client the window's
// address, length and rkey. The client then tries, step by step, and prints
// what its completion says:
//     READ and WRITE inside the window             success
//     READ across the window's end                 IBV_WC_REM_ACCESS_ERR on a conforming device;
//                                                  rxe on Linux 6.1 lets it through (see the docs)
//     READ with the rkey after the server revoked  IBV_WC_REM_ACCESS_ERR
//     READ with the new rkey after a re-bind       success; only the key byte changed
//     (type 2) SEND_WITH_INV of the rkey, then     the client returns the grant itself:
//     READ with it                                 IBV_WC_REM_ACCESS_ERR
// An access error moves BOTH QPs to the error state, so after each one the
// two sides bring their QPs back: ERR -> RESET -> INIT -> RTR -> RTS with
// fresh PSNs exchanged over TCP (wb::reconnect; lesson 10 takes those steps by hand).
//
// Run it on one host (two terminals; rxe's loopback carries the RDMA):
//     ./lesson14                    server: type 2 windows, bound by a work request
//     ./lesson14 -w 1               server: type 1 windows, bound by ibv_bind_mw
//     ./lesson14 127.0.0.1          client: runs the steps, "result: ..." lists each outcome
// On two hosts: ./lesson14 on host A, ./lesson14 A on host B. Both sides take
// -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson14 -h).
//
// Verbs it introduces:
//     device_cap_flags: IBV_DEVICE_MEM_WINDOW, _TYPE_2A, _TYPE_2B (ibv_query_device)
//     ibv_reg_mr with IBV_ACCESS_MW_BIND; ibv_alloc_mw, ibv_dealloc_mw
//     type 1: ibv_bind_mw (ibv_mw_bind); unbinding with a zero length
//     type 2: ibv_post_send with IBV_WR_BIND_MW and ibv_inc_rkey,
//             IBV_WR_LOCAL_INV (the owner revokes), IBV_WR_SEND_WITH_INV (the peer gives it back)
//     IBV_WC_REM_ACCESS_ERR; wc_flags IBV_WC_WITH_INV and wc.invalidated_rkey
//
// Read more: man ibv_alloc_mw, man ibv_bind_mw, man ibv_inc_rkey, man ibv_post_send;
// docs/lesson14-memory-windows.md (why windows, diagram, what rxe does, the NAK on the wire, exercises).
#include <infiniband/verbs.h>

#include <endian.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr uint16_t kLesson = 14;  // sent in the exchange: a lesson-14 client only talks to a lesson-14 server

// The server's pool: 16 slots of 256 bytes, registered once. The window covers one slot.
constexpr uint32_t kSlots = 16;
constexpr uint32_t kSlotBytes = 256;
constexpr uint32_t kWindowSlot = 5;
// What the window lets the peer do. The MR itself grants no remote access at all.
constexpr unsigned kWindowAccess = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
// The client's buffer: one slot to READ into, one to WRITE from.
constexpr uint32_t kClientBytes = 2 * kSlotBytes;
// The READ across the window's end: this many bytes, half of them past it.
constexpr uint32_t kStraddleBytes = 16;
const char* const kWritten = "written by the client through the window";

// wr_id: our own labels, handed back in the completions.
constexpr uint64_t kBindId = 1, kInvalidateId = 2, kReadId = 3, kWriteId = 4, kSendId = 5, kRecvId = 6;

// The window as the server announces it on TCP: a fixed 16-byte message,
// big-endian. addr is the server's virtual address of the slot (windows on
// rxe are never zero-based), length its size, rkey the window's key.
struct WindowMsg {
    uint64_t addr;
    uint32_t length;
    uint32_t rkey;
};
static_assert(sizeof(WindowMsg) == 16);

// The window's trip over TCP (after main()).
void send_window(wb::Connection& conn, uint64_t addr, uint32_t length, uint32_t rkey);
WindowMsg receive_window(wb::Connection& conn, int timeout_s);

// ---- the server's window operations, and the client's READ and WRITE, as main() calls them ----

// Type 2: the bind is a work request on the QP, and we choose the new key
// byte ourselves: ibv_inc_rkey adds one to the low 8 bits of the rkey, so
// that an rkey handed out before cannot match the new binding.
uint32_t bind_type2(ibv_qp* qp, ibv_cq* cq, ibv_mw* mw, ibv_mr* mr, uint64_t addr, unsigned access,
                    uint32_t old_rkey, int timeout_s) {
    const uint32_t new_rkey = ibv_inc_rkey(old_rkey);
    ibv_send_wr wr = {
        .wr_id = kBindId,
        .opcode = IBV_WR_BIND_MW,
        .send_flags = IBV_SEND_SIGNALED,
        .bind_mw = {
            .mw = mw,
            .rkey = new_rkey,
            .bind_info = {.mr = mr, .addr = addr, .length = kSlotBytes, .mw_access_flags = access},
        },
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
    const ibv_wc wc = wb::poll_completion(cq, timeout_s, "the IBV_WR_BIND_MW");
    wb::check_wc(wc, "the bind (IBV_WR_BIND_MW)", "the MR needs IBV_ACCESS_MW_BIND, and a type 2 window must be "
                                                  "invalidated before it is bound again");
    // The next bind names the window by its CURRENT rkey (mw->rkey), and
    // rdma-core's rxe provider does not update it after a bind work request:
    // without this line the second bind fails with IBV_WC_MW_BIND_ERR (measured).
    mw->rkey = new_rkey;
    return new_rkey;
}

// Type 1: ibv_bind_mw, a verb of its own (rdma-core posts it on the QP for
// us); the library picks the new rkey and stores it in mw->rkey. With a zero
// length it UNBINDS: that is how a type 1 window is revoked. (The man page
// allows mr = NULL then; rdma-core's rxe provider crashes on it, measured,
// so we pass the MR with length 0.)
uint32_t bind_type1(ibv_qp* qp, ibv_cq* cq, ibv_mw* mw, ibv_mr* mr, uint64_t addr, uint64_t length,
                    unsigned access, int timeout_s) {
    ibv_mw_bind bind = {
        .wr_id = kBindId,
        .send_flags = IBV_SEND_SIGNALED,
        .bind_info = {.mr = mr, .addr = addr, .length = length, .mw_access_flags = access},
    };
    CHECK_RC(ibv_bind_mw(qp, mw, &bind));
    const ibv_wc wc = wb::poll_completion(cq, timeout_s, "ibv_bind_mw");
    wb::check_wc(wc, "ibv_bind_mw", "the MR needs IBV_ACCESS_MW_BIND");
    return mw->rkey;
}

// One signaled READ or WRITE of `length` bytes between our buffer and the
// server's `remote_addr`, with `rkey`; returns its completion, error or not.
ibv_wc rdma(ibv_qp* qp, ibv_cq* cq, ibv_mr* mr, ibv_wr_opcode op, uint64_t remote_addr, uint32_t rkey,
            uint32_t length, int timeout_s) {
    const bool read = op == IBV_WR_RDMA_READ;
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr) + (read ? 0 : kSlotBytes),  // READs land in the first half
        .length = length,
        .lkey = mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = read ? kReadId : kWriteId,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = op,
        .send_flags = IBV_SEND_SIGNALED,
        .wr = {.rdma = {.remote_addr = remote_addr, .rkey = rkey}},
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
    return wb::poll_completion(cq, timeout_s, read ? "the RDMA READ" : "the RDMA WRITE");
}

// Type 2 revoked by its owner: IBV_WR_LOCAL_INV of the window's current rkey.
void invalidate_type2(ibv_qp* qp, ibv_cq* cq, uint32_t rkey, int timeout_s) {
    ibv_send_wr wr = {
        .wr_id = kInvalidateId,
        .opcode = IBV_WR_LOCAL_INV,
        .send_flags = IBV_SEND_SIGNALED,
        .invalidate_rkey = rkey,
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
    wb::check_wc(wb::poll_completion(cq, timeout_s, "the IBV_WR_LOCAL_INV"), "the IBV_WR_LOCAL_INV");
}

}  // namespace

int main(int argc, char** argv) {
    std::string type_text;
    const wb::ExtraOption extra[] = {
        {'w', "window-type", "TYPE",
         "server: 1 (ibv_bind_mw) or 2 (a bind work request) (default: 2)", &type_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]        server: grant one slot of a pool through a memory window\n"
                    "  lesson14 [options] HOST   client: access it inside, past its end, revoked, re-bound",
        .summary = "memory windows: grant a peer one buffer of a pool, for a while, and revoke it",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 1) wb::usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (!is_server && opt.given('w')) wb::usage_error("-w is a server option; the client uses whatever window it gets");
    const int type = opt.given('w') ? static_cast<int>(wb::parse_range(type_text, "-w", 1, 2)) : 2;
    const char* me = is_server ? "server" : "client";

    // 1. Device, port and address (lesson 1's walk), and what the device says
    //    about windows: device_cap_flags has one bit for type 1 and one for
    //    each flavour of type 2 (2A: bound to a QP number; 2B: bound to the QP
    //    and checked against it, the one rxe implements).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);
    ibv_device_attr dev{};
    CHECK_RC(ibv_query_device(ctx.get(), &dev));
    const auto yes = [&](unsigned flag) { return (dev.device_cap_flags & flag) ? "yes" : "no"; };
    std::printf("%s: memory windows: type 1 %s, type 2A %s, type 2B %s; max_mw %d\n", me,
                yes(IBV_DEVICE_MEM_WINDOW), yes(IBV_DEVICE_MEM_WINDOW_TYPE_2A), yes(IBV_DEVICE_MEM_WINDOW_TYPE_2B),
                dev.max_mw);

    // 2. The objects of an RC connection, in creation order (reverse destruction: lesson 2).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    // One CQ for everything; one completion is outstanding at a time.
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 4, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {
            .max_send_wr = 2,   // one bind, READ, WRITE or SEND at a time (2: a little slack)
            .max_recv_wr = 1,   // the server's one receive, for the client's SEND_WITH_INV
            .max_send_sge = 1,
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,  // windows, READ and WRITE need a reliable connection
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();
    // The server's QP must allow what the window allows: a window does not
    // bypass qp_access_flags. The client allows nothing.
    const unsigned qp_access = is_server ? kWindowAccess : 0;

    if (is_server) {
        // 3. The pool, registered ONCE. IBV_ACCESS_MW_BIND: windows may be bound
        //    onto it. IBV_ACCESS_LOCAL_WRITE: a window granting REMOTE_WRITE needs
        //    it (the verbs spec; the bind fails without). NO REMOTE_* flag: the MR's
        //    own rkey opens nothing. Each slot starts with its name, for the READs.
        wb::Buffer pool = wb::alloc_buffer(kSlots * kSlotBytes);
        for (uint32_t i = 0; i < kSlots; ++i)
            std::snprintf(pool.get() + i * kSlotBytes, kSlotBytes, "slot %u of the server's pool", i);
        wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), pool.get(), kSlots * kSlotBytes,
                                                 IBV_ACCESS_MW_BIND | IBV_ACCESS_LOCAL_WRITE),
                                      "ulimit -l: is locked memory limited?")};
        char* slot = pool.get() + kWindowSlot * kSlotBytes;
        const uint64_t slot_addr = reinterpret_cast<uintptr_t>(slot);
        std::printf("server: pool of %u x %u bytes, MR rkey 0x%x (IBV_ACCESS_MW_BIND | IBV_ACCESS_LOCAL_WRITE, "
                    "no remote access)\n", kSlots, kSlotBytes, mr->rkey);

        // 4. The window: allocated unbound, it grants nothing. Declared after the MR,
        //    so released before it: an MR with a window bound cannot be deregistered
        //    (rxe: ibv_dereg_mr fails with EINVAL, measured), and the PD stays busy.
        wb::MemoryWindow mw{CHECK_PTR(ibv_alloc_mw(pd.get(), type == 1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2),
                                  type == 1 ? "does the device have MEM_WINDOW? (the line above)"
                                            : "does the device have MEM_WINDOW_TYPE_2A or 2B? (the line above)")};
        std::printf("server: ibv_alloc_mw type %d: rkey 0x%x, not bound yet\n", type, mw->rkey);

        // 5. Exchange and connect (lessons 4 and 6). A bind is posted on the
        //    QP, so the window is bound only once the QP is in RTS.
        wb::Listener listener(opt.tcp_port);
        std::printf("server: waiting for a client on TCP port %u\n", opt.tcp_port);
        wb::Connection conn = listener.accept(opt.accept_timeout_s());
        const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
        std::printf("server: client %s is QP 0x%x\n", conn.peer().c_str(), peer.qp_num);
        wb::qp_to_init(qp.get(), addr, qp_access);
        wb::qp_to_rtr(qp.get(), addr, peer);
        wb::qp_to_rts(qp.get(), psn);
        wb::send_token(conn, "RTR!");

        // 6. Bind the window over slot 5 and tell the client where it is.
        uint32_t rkey = type == 1 ? bind_type1(qp.get(), cq.get(), mw.get(), mr.get(), slot_addr, kSlotBytes,
                                               kWindowAccess, opt.timeout_s)
                                  : bind_type2(qp.get(), cq.get(), mw.get(), mr.get(), slot_addr, kWindowAccess,
                                               mw->rkey, opt.timeout_s);
        std::printf("server: bound the window over slot %u (%u bytes at 0x%llx): rkey 0x%x\n", kWindowSlot, kSlotBytes,
                    static_cast<unsigned long long>(slot_addr), rkey);
        send_window(conn, slot_addr, kSlotBytes, rkey);

        // 7-9. The client READs, WRITEs, then READs across the end; after
        //    each it reports on TCP: "OK!!" or "ERR!". After an error both
        //    sides recover. Our NIC answered those requests alone.
        auto after_step = [&](const char* step) {
            const std::string report = wb::recv_token(conn, opt.timeout_s, std::string("during the ") + step);
            if (report == "OK!!") return;
            if (report != "ERR!") wb::fail("the client sent \"" + wb::printable(report.data(), 4) + "\" after its " + step);
            std::printf("server: the client's %s failed; our QP is %s\n", step, wb::qp_state_name(wb::query_state(qp.get())));
            const uint32_t fresh = wb::reconnect(qp.get(), addr, conn, kLesson, qp_access, true, opt.timeout_s);
            std::printf("server: QP 0x%x reset and back in RTS (new PSN %u)\n", qp->qp_num, fresh);
        };
        after_step("READ inside");
        after_step("WRITE inside");
        // The client wrote these bytes: nothing says they end in a NUL, nor that the
        // WRITE stayed in the window (rxe lets it run on): stop at the slot, escape them.
        std::printf("server: slot %u now holds \"%s\"\n", kWindowSlot,
                    wb::printable(slot, strnlen(slot, kSlotBytes)).c_str());
        after_step("READ across the end");

        // 10. Revoke. Type 2: IBV_WR_LOCAL_INV of the rkey. Type 1: bind it to
        //    nothing (length 0). Either way the old rkey opens nothing now.
        if (type == 2) {
            invalidate_type2(qp.get(), cq.get(), rkey, opt.timeout_s);
            std::printf("server: revoked the window: IBV_WR_LOCAL_INV of rkey 0x%x\n", rkey);
        } else {
            const uint32_t unbound = bind_type1(qp.get(), cq.get(), mw.get(), mr.get(), slot_addr, 0, 0, opt.timeout_s);
            std::printf("server: revoked the window: ibv_bind_mw with length 0; rkey 0x%x is now 0x%x\n", rkey, unbound);
        }
        wb::send_token(conn, "REVK");
        after_step("READ after the revoke");

        // 11. Bind again, over the same slot: a new rkey, only its key byte differs.
        const uint32_t old_rkey = rkey;
        rkey = type == 1 ? bind_type1(qp.get(), cq.get(), mw.get(), mr.get(), slot_addr, kSlotBytes, kWindowAccess,
                                      opt.timeout_s)
                         : bind_type2(qp.get(), cq.get(), mw.get(), mr.get(), slot_addr, kWindowAccess, old_rkey,
                                      opt.timeout_s);
        std::printf("server: bound again: rkey 0x%x -> 0x%x\n", old_rkey, rkey);
        send_window(conn, slot_addr, kSlotBytes, rkey);
        after_step("READ after the re-bind");
        // Type 2: a receive for the client's SEND_WITH_INV (step 12), posted only now:
        // one posted earlier would have been flushed by an error and lost in the
        // reset of wb::reconnect. No buffer: that SEND is empty.
        if (type == 2) {
            ibv_recv_wr wr = {.wr_id = kRecvId, .sg_list = nullptr, .num_sge = 0};
            ibv_recv_wr* bad = nullptr;
            CHECK_RC(ibv_post_recv(qp.get(), &wr, &bad));
        }
        wb::send_token(conn, type == 2 ? "INV?" : "FIN!");  // type 2: please give the window back

        // 12. Type 2: the client hands the window back with SEND_WITH_INV. Our
        //    NIC invalidates the rkey BEFORE our receive completes, and the
        //    completion says which rkey it was: no race with a late access.
        if (type == 2) {
            const ibv_wc wc = wb::poll_completion(cq.get(), opt.timeout_s, "the client's SEND_WITH_INV");
            wb::check_wc(wc, "the receive of the SEND_WITH_INV");
            // IBV_WC_WITH_INV (0x8) should say "this SEND invalidated an rkey". rxe on 6.1 sets
            // 0x4 (the kernel's value, libibverbs' IBV_WC_IP_CSUM_OK); invalidated_rkey is right.
            const bool with_inv = wc.wc_flags & IBV_WC_WITH_INV;
            std::printf("server: %s, invalidated_rkey 0x%x, IBV_WC_WITH_INV %s (wc_flags 0x%x)\n",
                        wb::wc_opcode_str(wc.opcode), wc.invalidated_rkey, with_inv ? "set" : "not set", wc.wc_flags);
            wb::send_token(conn, "INV!");
            after_step("READ after the SEND_WITH_INV");
        }
        wb::expect_token(conn, "DONE", opt.timeout_s);
        std::printf("result: granted slot %u through a type %d window, revoked and re-bound it\n", kWindowSlot, type);
        return 0;
    }

    // Client.
    // 3. One buffer: READs land in its first half (our NIC writes there:
    //    LOCAL_WRITE), WRITEs go out from its second half. No REMOTE_* flag.
    wb::Buffer buf = wb::alloc_buffer(kClientBytes);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), kClientBytes, IBV_ACCESS_LOCAL_WRITE),
                                  "ulimit -l: is locked memory limited?")};

    // 4. Exchange and connect; then the server binds its window and tells us.
    wb::Connection conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(kLesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("client: server %s is QP 0x%x\n", conn.peer().c_str(), peer.qp_num);
    wb::qp_to_init(qp.get(), addr, qp_access);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    wb::expect_token(conn, "RTR!", opt.timeout_s);
    WindowMsg w = receive_window(conn, opt.timeout_s);
    std::printf("client: the server grants %u bytes at 0x%llx, rkey 0x%x\n", w.length,
                static_cast<unsigned long long>(w.addr), w.rkey);

    // Each step: one READ or WRITE, its outcome printed and reported to the
    // server; after an error both QPs are in ERR and both sides recover.
    std::string result;
    auto step = [&](const char* name, ibv_wr_opcode op, uint64_t remote_addr, uint32_t rkey, uint32_t length) {
        const ibv_wc wc = rdma(qp.get(), cq.get(), mr.get(), op, remote_addr, rkey, length, opt.timeout_s);
        // "ok", or the status's enum name: what each step adds to the result line.
        const std::string outcome = wc.status == IBV_WC_SUCCESS ? "ok" : wb::wc_status_name(wc.status);
        std::printf("client: %s: %s (%s)\n", name, outcome.c_str(), ibv_wc_status_str(wc.status));
        result += (result.empty() ? "" : ", ") + std::string(name) + " " + outcome;
        if (wc.status == IBV_WC_SUCCESS) {
            wb::send_token(conn, "OK!!");
            return true;
        }
        std::printf("client: our QP is %s\n", wb::qp_state_name(wb::query_state(qp.get())));
        wb::send_token(conn, "ERR!");
        const uint32_t fresh = wb::reconnect(qp.get(), addr, conn, kLesson, qp_access, false, opt.timeout_s);
        std::printf("client: QP 0x%x reset and back in RTS (new PSN %u)\n", qp->qp_num, fresh);
        return false;
    };

    // 5. READ the whole window: the slot's text.
    if (step("READ inside", IBV_WR_RDMA_READ, w.addr, w.rkey, w.length))
        std::printf("client: read \"%s\"\n", wb::printable(buf.get(), strnlen(buf.get(), w.length)).c_str());
    // 6. WRITE into the window (the server prints what landed).
    std::snprintf(buf.get() + kSlotBytes, kSlotBytes, "%s", kWritten);
    step("WRITE inside", IBV_WR_RDMA_WRITE, w.addr, w.rkey, static_cast<uint32_t>(std::strlen(kWritten) + 1));
    // 7. READ 16 bytes across the window's end: 8 inside, 8 in slot 6. The window
    //    must refuse it all, though the MR behind it is larger. rxe on Linux 6.1
    //    checks only the MR's bounds: then we say so, with the bytes we got.
    if (step("READ across the end", IBV_WR_RDMA_READ, w.addr + w.length - kStraddleBytes / 2, w.rkey, kStraddleBytes))
        std::printf("client: the window's end was NOT enforced: got \"%s\", whose last %u bytes are slot %u\n",
                    wb::printable(buf.get(), kStraddleBytes).c_str(), kStraddleBytes / 2, kWindowSlot + 1);

    // 8. The server revokes the window; we try the old rkey.
    wb::expect_token(conn, "REVK", opt.timeout_s);
    std::printf("client: the server revoked the window\n");
    step("READ after revoke", IBV_WR_RDMA_READ, w.addr, w.rkey, w.length);

    // 9. The server binds the window again: a new rkey.
    const uint32_t old_rkey = w.rkey;
    w = receive_window(conn, opt.timeout_s);
    std::printf("client: the server bound the window again: rkey 0x%x -> 0x%x (key byte 0x%02x -> 0x%02x)\n",
                old_rkey, w.rkey, old_rkey & 0xff, w.rkey & 0xff);
    step("READ after re-bind", IBV_WR_RDMA_READ, w.addr, w.rkey, w.length);

    // 10. A type 2 server asks for the window back ("INV?"): an empty
    //    SEND_WITH_INV carrying the rkey; the server's NIC invalidates it on
    //    arrival. A type 1 window cannot be invalidated this way ("FIN!").
    if (wb::recv_token(conn, opt.timeout_s, "instead of sending INV? or FIN!") == "INV?") {
        // No payload (num_sge 0): the message is the invalidation.
        ibv_send_wr wr = {.wr_id = kSendId, .sg_list = nullptr, .num_sge = 0, .opcode = IBV_WR_SEND_WITH_INV,
                          .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = w.rkey};
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(qp.get(), &wr, &bad));
        wb::check_wc(wb::poll_completion(cq.get(), opt.timeout_s, "the SEND_WITH_INV"), "the SEND_WITH_INV");
        wb::expect_token(conn, "INV!", opt.timeout_s);
        std::printf("client: gave the window back with SEND_WITH_INV of rkey 0x%x\n", w.rkey);
        step("READ after SEND_WITH_INV", IBV_WR_RDMA_READ, w.addr, w.rkey, w.length);
    }
    wb::send_token(conn, "DONE");
    std::printf("result: %s\n", result.c_str());
    return 0;
}

namespace {

// ---- the window's trip over TCP ----

void send_window(wb::Connection& conn, uint64_t addr, uint32_t length, uint32_t rkey) {
    const WindowMsg m = {.addr = htobe64(addr), .length = htobe32(length), .rkey = htobe32(rkey)};
    wb::send_all(conn, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&m), sizeof m));
}

// The client takes the window's address and rkey as they come (only the
// server's NIC can judge them), but never a length beyond its own buffer.
WindowMsg receive_window(wb::Connection& conn, int timeout_s) {
    WindowMsg m{};
    if (!wb::recv_exact(conn, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&m), sizeof m), timeout_s))
        wb::fail("the server closed the connection instead of sending the window", "see the server's output");
    const WindowMsg w = {.addr = be64toh(m.addr), .length = be32toh(m.length), .rkey = be32toh(m.rkey)};
    if (w.length == 0 || w.length > kSlotBytes)
        wb::fail("the server offers a window of " + std::to_string(w.length) + " bytes; this client handles 1.." +
                     std::to_string(kSlotBytes),
                 "is the server a lesson-14 server of this workbook?");
    return w;
}

}  // namespace
