// lesson3.cpp - the queue pair state machine: RESET -> INIT -> RTR -> RTS by ibv_modify_qp, by hand.
//
// A new queue pair (QP) can do nothing. ibv_modify_qp moves it through its
// states, one transition at a time, each with its own attributes and a mask
// saying which of them are set:
//     RESET -> INIT   which port and partition, what the peer may do to our memory
//     INIT  -> RTR    "ready to receive": who the peer is (QPN, GID/LID), its first PSN, path MTU
//     RTR   -> RTS    "ready to send": our first PSN, timeouts and retry counts
// This lesson creates one CQ and two RC QPs in one process and connects them
// to each other, so no second program and no TCP exchange are needed. Every
// field is commented; after each step ibv_query_qp shows what the QP now is.
// It also shows the two mistakes everyone makes: a wrong mask (EINVAL) and an
// RTR without a valid GID/address handle. One SEND from QP A to QP B proves
// the connection; then everything is torn down by hand, in the order the
// verbs require. Later lessons call wb::qp_to_init/rtr/rts (common/
// qp.cpp), which make exactly these calls with exactly these values.
//
// Run it (one process; its SEND goes through the device's own loopback, so
// nothing appears on any wire):
//     ./lesson3                  on the first device, port 1, GID chosen by type
//     ./lesson3 -d rxe0 -g 1     that device and GID index
// On two hosts there is nothing to run twice; lesson 4 connects two processes.
//
// Verbs it introduces:
//     ibv_create_cq / ibv_destroy_cq
//     ibv_create_qp / ibv_destroy_qp (IBV_QPT_RC), ibv_modify_qp, ibv_query_qp
//     ibv_post_recv, ibv_post_send (IBV_WR_SEND), ibv_poll_cq, ibv_wc_status_str
//
// Read more: man ibv_modify_qp, man ibv_query_qp, man ibv_create_qp,
// man ibv_create_cq, man ibv_poll_cq; docs/lesson3-qp-state-machine.md
// (the state diagram with the mask of each transition, exercises, errors).
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

const char kMessage[] = "Hello from QP A";
constexpr size_t kSlot = 64;            // bytes: the message goes out of buf[0..63] and lands in buf[64..127]
constexpr int kCqEntries = 4;           // completions the CQ can hold: one SEND + one RECV, with room to spare
constexpr int kPollTimeoutSeconds = 5;  // a loopback SEND takes microseconds; 5 s is generous even in a slow VM

// ibv_query_qp: print the state, and the attributes the last transition set.
void show_qp(const char* name, ibv_qp* qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    CHECK_RC(ibv_query_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MTU |
                              IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER |
                              IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_MAX_QP_RD_ATOMIC,
                          &init));
    std::printf("  ibv_query_qp: QP %s (qp_num 0x%x) is %s", name, qp->qp_num, wb::qp_state_str(attr.qp_state));
    if (attr.qp_state >= IBV_QPS_INIT && attr.qp_state <= IBV_QPS_RTS)
        std::printf(", port_num %u, pkey_index %u, qp_access_flags 0x%x", attr.port_num, attr.pkey_index,
                    attr.qp_access_flags);
    if (attr.qp_state == IBV_QPS_RTR || attr.qp_state == IBV_QPS_RTS)
        std::printf(",\n    dest_qp_num 0x%x, rq_psn 0x%06x, path_mtu %d, max_dest_rd_atomic %u, min_rnr_timer %u",
                    attr.dest_qp_num, attr.rq_psn, wb::mtu_bytes(attr.path_mtu), attr.max_dest_rd_atomic,
                    attr.min_rnr_timer);
    if (attr.qp_state == IBV_QPS_RTS)
        std::printf(",\n    sq_psn 0x%06x, timeout %u, retry_cnt %u, rnr_retry %u, max_rd_atomic %u", attr.sq_psn,
                    attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.max_rd_atomic);
    std::printf("\n");
}

// Call ibv_modify_qp where it must fail, and show how it failed.
void expect_refused(int rc, const char* what) {
    if (rc == 0) wb::fail(std::string(what) + " was accepted, but it should have been refused");
    std::printf("  %s\n    -> ibv_modify_qp refused it: %s\n", what, wb::errno_str(rc > 0 ? rc : errno).c_str());
}

// The RTR attributes for `qp` to receive from the QP `peer_qpn` whose first
// PSN is `peer_psn`, at the address `a` (both QPs share this port).
ibv_qp_attr rtr_attr(const wb::PortAddress& a, uint32_t peer_qpn, uint32_t peer_psn) {
    ibv_qp_attr attr = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = a.attr.active_mtu,  // largest payload per packet (enum ibv_mtu: 3 = 1024 bytes); both
                                        // sides must agree, so a real peer uses the smaller of the two
        .rq_psn = peer_psn,             // 24-bit PSN of the first packet we expect: the peer's sq_psn
        .dest_qp_num = peer_qpn,        // 24-bit QP number of the peer's QP: where our packets go
        .ah_attr = {                    // the address handle: how to reach the peer
            .dlid = a.attr.lid,         // the peer's LID: InfiniBand routes on it; 0 (unused) on RoCE
            .sl = 0,                    // service level 0..15 (a QoS class); 0 is the default
            .src_path_bits = 0,         // low LID bits for LMC multipathing; none
            .is_global = 0,             // 1 = a GRH (global route header) follows; set below when a GID is used
            .port_num = a.port,         // our port that sends to the peer
        },
        .max_dest_rd_atomic = 1,        // RDMA READ/atomic requests the peer may have in flight at us (lesson 6)
        .min_rnr_timer = 12,            // RNR NAK timer code 12 = 0.64 ms: how long the peer waits before
                                        // resending when we had no receive posted (codes: ibv_modify_qp(3))
    };
    if (a.gid_index >= 0) {  // RoCE always (its packets are UDP/IP: the GRH holds the addresses)
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh = {
            .dgid = a.gid,              // the peer's GID (here our own: both QPs are on this port)
            .flow_label = 0,            // 20-bit IPv6 flow label; 0 = none
            .sgid_index = static_cast<uint8_t>(a.gid_index),  // OUR GID, by index in our GID table
            .hop_limit = 64,            // IP TTL on RoCE v2: routers it may cross; 64 is ample
            .traffic_class = 0,         // IP DSCP/ECN byte; 0 = best effort
        };
    }
    return attr;
}
// The mask says which fields of the struct ibv_modify_qp reads: for INIT -> RTR
// on an RC QP, exactly these are required (ibv_modify_qp(3) lists them).
constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

}  // namespace

int main(int argc, char** argv) {
    wb::Usage usage{
        .synopsis = "[-d DEV] [-i PORT] [-g INDEX]",
        .summary = "connect two RC QPs of one process by hand (RESET, INIT, RTR, RTS) and send one message",
        .network = false,
    };
    wb::Options opt = wb::parse_options(argc, argv, usage);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "': lesson 3 takes no host");

    // This lesson keeps raw pointers and frees everything by hand at the end
    // (step 11), to show the order. If a check fails on the way, the process
    // exits and the kernel releases what it held.
    //
    // 1. Device and address (lessons 1 and 2): wb::open_device walks the
    //    device list; wb::choose_address picks the GID by type (or -g).
    ibv_context* ctx = wb::open_device(opt.device).release();
    const wb::PortAddress a = wb::choose_address(ctx, opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), a);

    // 2. A PD, a buffer and its MR. LOCAL_WRITE because the RECV writes into
    //    it (the SEND only reads, which needs no flag); no remote access:
    //    a SEND never names the receiver's memory.
    ibv_pd* pd = CHECK_PTR(ibv_alloc_pd(ctx));
    char* buf = wb::alloc_buffer(2 * kSlot).release();  // freed by hand after ibv_dereg_mr
    ibv_mr* mr = CHECK_PTR(ibv_reg_mr(pd, buf, 2 * kSlot, IBV_ACCESS_LOCAL_WRITE));

    // 3. One completion queue for both QPs' send and receive completions;
    //    wc.qp_num tells them apart.
    ibv_cq* cq = CHECK_PTR(ibv_create_cq(ctx, kCqEntries, nullptr, nullptr, 0));

    // 4. Two RC (reliable connected) QPs. A new QP is in RESET.
    ibv_qp_init_attr qp_init = {
        .send_cq = cq,
        .recv_cq = cq,
        .cap = {
            .max_send_wr = 1,   // send work requests outstanding at once: we post one SEND
            .max_recv_wr = 1,   // receive work requests outstanding at once: we post one RECV
            .max_send_sge = 1,  // scatter/gather entries per send WR: one buffer
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,        // a completion only for sends posted with IBV_SEND_SIGNALED
    };
    ibv_qp* qa = CHECK_PTR(ibv_create_qp(pd, &qp_init));
    ibv_qp* qb = CHECK_PTR(ibv_create_qp(pd, &qp_init));
    const uint32_t qpn_a = qa->qp_num, qpn_b = qb->qp_num;  // 24-bit QP numbers, for the result line
    std::printf("step 4: ibv_create_qp, two RC QPs sharing one CQ\n");
    show_qp("A", qa);
    show_qp("B", qb);

    // 5. RESET -> INIT: bind the QP to a port and partition, and say what a
    //    peer's requests may do to our memory.
    std::printf("step 5: RESET -> INIT\n");
    ibv_qp_attr init_attr = {
        .qp_state = IBV_QPS_INIT,
        .qp_access_flags = 0,     // what the PEER may do here: nothing remote (SEND/RECV needs none;
                                  // lessons 5-7 add IBV_ACCESS_REMOTE_WRITE, _READ, _ATOMIC)
        .pkey_index = 0,          // index in the port's partition key table; 0 = the default partition
        .port_num = a.port,       // the port this QP sends and receives on (from 1)
    };
    // A wrong mask first: without IBV_QP_PORT the port_num above is not read,
    // and RESET -> INIT requires it. Nothing changes; the QP stays in RESET.
    expect_refused(ibv_modify_qp(qa, &init_attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS),
                   "wrong mask: RESET -> INIT without IBV_QP_PORT");
    show_qp("A", qa);
    const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    CHECK_RC(ibv_modify_qp(qa, &init_attr, init_mask));
    CHECK_RC(ibv_modify_qp(qb, &init_attr, init_mask));
    show_qp("A", qa);
    show_qp("B", qb);

    // 6. Post B's receive now, in INIT, before it can receive anything: a
    //    SEND that finds no receive posted is refused (RNR NAK) and retried.
    char* send_buf = buf;           // buf[0..63]
    char* recv_buf = buf + kSlot;   // buf[64..127]
    ibv_sge recv_sge = {.addr = reinterpret_cast<uintptr_t>(recv_buf), .length = kSlot, .lkey = mr->lkey};
    ibv_recv_wr recv_wr = {.wr_id = 2, .next = nullptr, .sg_list = &recv_sge, .num_sge = 1};
    ibv_recv_wr* bad_recv = nullptr;
    CHECK_RC(ibv_post_recv(qb, &recv_wr, &bad_recv));
    std::printf("step 6: ibv_post_recv on B (in INIT, before RTR): %zu bytes at buf+%zu\n", kSlot, kSlot);

    // 7. INIT -> RTR: tell each QP who its peer is. A's peer is B and B's is A.
    //    Each side picks a random 24-bit starting PSN (packet sequence number).
    std::printf("step 7: INIT -> RTR\n");
    const uint32_t psn_a = wb::random_psn(), psn_b = wb::random_psn();
    ibv_qp_attr bad = rtr_attr(a, qb->qp_num, psn_b);
    if (a.roce) {
        // RoCE has no LIDs: without a GRH (is_global = 0) there is no address at all.
        bad.ah_attr.is_global = 0;
        expect_refused(ibv_modify_qp(qa, &bad, kRtrMask), "RTR on RoCE without a GID (is_global = 0, no GRH)");
    }
    // A GRH whose source GID index is an empty slot of the GID table.
    const int empty_index = std::min(a.attr.gid_tbl_len, 256) - 1;
    ibv_gid_entry probe{};
    if (empty_index > a.gid_index && ibv_query_gid_ex(ctx, a.port, empty_index, &probe, 0) == ENODATA) {
        bad = rtr_attr(a, qb->qp_num, psn_b);
        bad.ah_attr.is_global = 1;
        bad.ah_attr.grh.dgid = a.gid;
        bad.ah_attr.grh.sgid_index = static_cast<uint8_t>(empty_index);
        std::string what = "RTR with sgid_index " + std::to_string(empty_index) + ", an empty GID slot";
        expect_refused(ibv_modify_qp(qa, &bad, kRtrMask), what.c_str());
    }
    // A wrong mask again: the attributes are right, but IBV_QP_DEST_QPN is
    // missing, so ibv_modify_qp would not know where to send.
    ibv_qp_attr rtr_a = rtr_attr(a, qb->qp_num, psn_b);
    expect_refused(ibv_modify_qp(qa, &rtr_a, kRtrMask & ~IBV_QP_DEST_QPN), "wrong mask: RTR without IBV_QP_DEST_QPN");
    show_qp("A", qa);  // still INIT: a refused transition changes nothing
    CHECK_RC(ibv_modify_qp(qa, &rtr_a, kRtrMask));
    ibv_qp_attr rtr_b = rtr_attr(a, qa->qp_num, psn_a);
    CHECK_RC(ibv_modify_qp(qb, &rtr_b, kRtrMask));
    show_qp("A", qa);
    show_qp("B", qb);

    // 8. RTR -> RTS: our own first PSN, and how hard to try before giving up.
    std::printf("step 8: RTR -> RTS\n");
    auto rts_attr = [](uint32_t my_psn) {
        return ibv_qp_attr{
            .qp_state = IBV_QPS_RTS,
            .sq_psn = my_psn,       // 24-bit PSN of our first packet: what the peer set as its rq_psn
            .max_rd_atomic = 1,     // READ/atomic requests we may have in flight at the peer
            .timeout = 14,          // ACK timeout code: 4.096 us * 2^14 = 67 ms before resending (0 = wait forever)
            .retry_cnt = 6,         // resend 6 times without an ACK (7 tries, ~0.5 s), then IBV_WC_RETRY_EXC_ERR;
                                    // 3 bits, 0..7, but 7 never gives up on rxe (below)
            .rnr_retry = 7,         // 7 = retry forever on RNR NAK (0..6 = that many times); our CQ wait is bounded.
                                    // rxe: its ACK timer still spends retry_cnt meanwhile (docs/lesson4)
        };
    };
    const int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT |
                         IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
    // retry_cnt is a 3-bit field in the InfiniBand spec (0..7), and the spec
    // gives up after retry_cnt resends, 7 included. Two devices' truths:
    // rxe keeps the whole byte and never counts 7 down (rxe_comp.c:
    // "if (qp->comp.retry_cnt != 7) qp->comp.retry_cnt--"), so 7 resends for
    // ever; mlx5 stores only the low 3 bits (8 becomes 0). Hence 6 above. A
    // spare QP C shows what THIS device does with 8: refused, or kept as what?
    ibv_qp* qc = CHECK_PTR(ibv_create_qp(pd, &qp_init));
    CHECK_RC(ibv_modify_qp(qc, &init_attr, init_mask));
    ibv_qp_attr rtr_c = rtr_attr(a, qb->qp_num, psn_b);
    CHECK_RC(ibv_modify_qp(qc, &rtr_c, kRtrMask));
    ibv_qp_attr rts_c = rts_attr(wb::random_psn());
    rts_c.retry_cnt = 8;  // one past 3 bits
    std::printf("  retry_cnt 8 on a spare QP C, one past the spec's 3 bits (0..7)\n");
    if (const int rc = ibv_modify_qp(qc, &rts_c, rts_mask); rc != 0) {
        std::printf("    -> ibv_modify_qp refused it: %s\n", wb::errno_str(rc).c_str());
    } else {
        ibv_qp_attr back{};
        ibv_qp_init_attr init_back{};
        CHECK_RC(ibv_query_qp(qc, &back, IBV_QP_RETRY_CNT, &init_back));
        std::printf("    -> accepted, and ibv_query_qp reads back retry_cnt %u: this device does not check the range\n",
                    back.retry_cnt);
    }
    CHECK_RC(ibv_destroy_qp(qc));
    ibv_qp_attr rts_a = rts_attr(psn_a), rts_b = rts_attr(psn_b);
    CHECK_RC(ibv_modify_qp(qa, &rts_a, rts_mask));
    CHECK_RC(ibv_modify_qp(qb, &rts_b, rts_mask));
    show_qp("A", qa);
    show_qp("B", qb);

    // 9. Prove it: A SENDs the message; B's posted receive takes it.
    std::printf("step 9: ibv_post_send on A: SEND \"%s\" (%zu bytes) to B\n", kMessage, sizeof kMessage);
    std::memcpy(send_buf, kMessage, sizeof kMessage);
    ibv_sge send_sge = {.addr = reinterpret_cast<uintptr_t>(send_buf), .length = sizeof kMessage, .lkey = mr->lkey};
    ibv_send_wr send_wr = {
        .wr_id = 1,
        .next = nullptr,
        .sg_list = &send_sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,  // we want a completion for it (sq_sig_all is 0)
    };
    ibv_send_wr* bad_send = nullptr;
    CHECK_RC(ibv_post_send(qa, &send_wr, &bad_send));

    // 10. Poll the CQ by hand until both completions arrive: A's SEND (the
    //     peer acknowledged it) and B's RECV (the data is in recv_buf). Never
    //     wait forever: give up after kPollTimeoutSeconds.
    std::printf("step 10: ibv_poll_cq until both completions arrive (at most %d s)\n", kPollTimeoutSeconds);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kPollTimeoutSeconds);
    int completions = 0;
    uint32_t received = 0;
    while (completions < 2) {
        ibv_wc wc[2];
        int n = CHECK_POLL(ibv_poll_cq(cq, 2, wc));  // returns how many it filled (0: none yet), or < 0 on error
        for (int i = 0; i < n; ++i) {
            wb::check_wc(wc[i], wc[i].wr_id == 1 ? "the SEND on QP A" : "the RECV on QP B");  // status first
            std::printf("  completion: %s on qp_num 0x%x, wr_id %llu, status %s", wb::wc_opcode_str(wc[i].opcode),
                        wc[i].qp_num, static_cast<unsigned long long>(wc[i].wr_id), ibv_wc_status_str(wc[i].status));
            if (wc[i].opcode == IBV_WC_RECV) {  // byte_len is meaningful for receives only
                received = wc[i].byte_len;
                std::printf(", byte_len %u", received);
            }
            std::printf("\n");
            ++completions;
        }
        if (n == 0 && std::chrono::steady_clock::now() >= deadline)
            wb::fail("only " + std::to_string(completions) + " of 2 completions within " +
                         std::to_string(kPollTimeoutSeconds) + " s",
                     "is the port ACTIVE? a wrong GID would show as IBV_WC_RETRY_EXC_ERR after about 0.5 s (timeout 14 = 67 ms, retry_cnt 6)");
        if (n == 0) std::this_thread::yield();  // let the device (a kernel thread on rxe) work
    }
    if (received != sizeof kMessage || std::memcmp(recv_buf, kMessage, sizeof kMessage) != 0)
        wb::fail("B received " + std::to_string(received) + " bytes that are not the message A sent");
    std::printf("  B's buffer now holds \"%s\"\n", recv_buf);

    // 11. Teardown, by hand, in the order the verbs require: an object cannot
    //     go while another object uses it (the kernel says EBUSY).
    std::printf("step 11: teardown\n");
    int rc = ibv_destroy_cq(cq);  // the QPs still use it: must fail
    if (rc == 0) wb::fail("ibv_destroy_cq succeeded while two QPs use the CQ");
    std::printf("  ibv_destroy_cq while the QPs use it -> refused: %s\n", wb::errno_str(rc).c_str());
    CHECK_RC(ibv_destroy_qp(qa));   // QPs first: they use the CQ, the PD and (through WRs) the MR
    CHECK_RC(ibv_destroy_qp(qb));
    std::printf("  ibv_destroy_qp A, B: first, they use the CQ and the PD\n");
    CHECK_RC(ibv_destroy_cq(cq));   // no QP uses it now
    std::printf("  ibv_destroy_cq: no QP uses it now\n");
    CHECK_RC(ibv_dereg_mr(mr));     // before the PD it belongs to, and before freeing its memory
    std::printf("  ibv_dereg_mr: before its PD, and before its memory is freed\n");
    std::free(buf);                 // only now: until ibv_dereg_mr the NIC could still write into it
    std::printf("  free(buf): the NIC can no longer touch it\n");
    CHECK_RC(ibv_dealloc_pd(pd));   // empty now: no QP, no MR
    std::printf("  ibv_dealloc_pd: nothing is left in it\n");
    CHECK_RC(ibv_close_device(ctx));  // last: every object above belonged to this context
    std::printf("  ibv_close_device: last, every object belonged to it\n");

    std::printf("result: QP 0x%x -> QP 0x%x connected by hand (RESET, INIT, RTR, RTS); SEND of %u bytes "
                "received intact; torn down in order\n",
                qpn_a, qpn_b, received);
    return 0;
}
