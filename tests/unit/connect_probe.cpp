// connect_probe - bring an RC QP to RTS with common/qp.cpp's helpers (the
// calls lessons 4 to 8 make), then print what ibv_query_qp says about it, in
// lesson 3's own words, so tests/lesson3_qp_state_machine.bats can check at
// run time that the helpers and lesson 3 set the same values.
//
//   build/tests/connect_probe [-d DEV]     needs an RDMA device (the lab's rxe0)
//
// Two QPs of this process play the two peers, as in lesson 3: A's peer is B.
// The lines after "connect_probe: QP A" have the form of lesson 3's
// show_qp(); a last line gives the GRH's hop_limit and sgid_index.
#include <infiniband/verbs.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "check.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "handles.hpp"

int main(int argc, char** argv) {
    const std::string device = (argc == 3 && std::strcmp(argv[1], "-d") == 0) ? argv[2] : "";
    wb::Context ctx = wb::open_device(device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), 1, -1);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 2, nullptr, nullptr, 0))};
    ibv_qp_init_attr init = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair a{CHECK_PTR(ibv_create_qp(pd.get(), &init))};
    wb::QueuePair b{CHECK_PTR(ibv_create_qp(pd.get(), &init))};
    const uint32_t psn_a = wb::random_psn(), psn_b = wb::random_psn();

    // Exactly the calls a lesson makes, with B's PeerInfo as the peer's.
    wb::qp_to_init(a.get(), addr, 0);
    wb::qp_to_rtr(a.get(), addr, wb::local_info(0, b.get(), psn_b, addr));
    wb::qp_to_rts(a.get(), psn_a);

    ibv_qp_attr attr{};
    ibv_qp_init_attr got{};
    CHECK_RC(ibv_query_qp(a.get(), &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MTU |
                              IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER |
                              IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_AV,
                          &got));
    std::printf("connect_probe: QP A (qp_num 0x%x) is %s, port_num %u, pkey_index %u, qp_access_flags 0x%x,\n",
                a->qp_num, attr.qp_state == IBV_QPS_RTS ? "RTS" : "not RTS", attr.port_num, attr.pkey_index,
                attr.qp_access_flags);
    std::printf("    dest_qp_num 0x%x, rq_psn 0x%06x, path_mtu %d, max_dest_rd_atomic %u, min_rnr_timer %u,\n",
                attr.dest_qp_num, attr.rq_psn, wb::mtu_bytes(attr.path_mtu), attr.max_dest_rd_atomic,
                attr.min_rnr_timer);
    std::printf("    sq_psn 0x%06x, timeout %u, retry_cnt %u, rnr_retry %u, max_rd_atomic %u\n", attr.sq_psn,
                attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.max_rd_atomic);
    std::printf("    hop_limit %u, sgid_index %u (is_global %u)\n", attr.ah_attr.grh.hop_limit,
                attr.ah_attr.grh.sgid_index, attr.ah_attr.is_global);
    std::printf("connect_probe: B is qp_num 0x%x, A's sq_psn was set to 0x%06x, B's to 0x%06x\n", b->qp_num, psn_a,
                psn_b);
    return 0;
}
