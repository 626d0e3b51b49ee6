// ud.cpp - see ud.hpp. The values and their meaning are explained field by
// field in lessons/12_ud_multicast/lesson12.cpp.
#include "ud.hpp"

#include <arpa/inet.h>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"

namespace wb {

namespace {
constexpr uint32_t kIpv4HeaderOffset = 20;  // where the IPv4 header starts in the GRH's 40 bytes
constexpr uint32_t kIpv4SourceOffset = 12;  // iphdr.saddr
}  // namespace

void ud_qp_to_rts(ibv_qp* qp, const PortAddress& a, uint32_t psn, uint32_t qkey) {
    ibv_qp_attr init = {
        .qp_state = IBV_QPS_INIT,
        .qkey = qkey,      // incoming datagrams must carry this Q_Key
        .pkey_index = 0,   // the default partition
        .port_num = a.port,
    };
    CHECK_RC(ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
    ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR};
    CHECK_RC(ibv_modify_qp(qp, &rtr, IBV_QP_STATE));
    ibv_qp_attr rts = {
        .qp_state = IBV_QPS_RTS,
        .sq_psn = psn,     // 24-bit PSN of our first datagram; nobody checks UD's PSNs
    };
    CHECK_RC(ibv_modify_qp(qp, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

void post_ud_receive(ibv_qp* qp, const ibv_mr* mr, char* addr, uint32_t length, uint64_t wr_id) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(addr), .length = length, .lkey = mr->lkey};
    ibv_recv_wr wr = {.wr_id = wr_id, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

void post_datagram(ibv_qp* qp, const ibv_mr* mr, uint32_t length, ibv_ah* ah, uint32_t remote_qpn,
                   uint32_t remote_qkey, uint64_t wr_id) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = length, .lkey = mr->lkey};
    ibv_send_wr wr = {
        .wr_id = wr_id,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
        .wr = {.ud = {.ah = ah, .remote_qpn = remote_qpn, .remote_qkey = remote_qkey}},
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

uint32_t ud_message_length(const ibv_wc& wc) {
    if (!(wc.wc_flags & IBV_WC_GRH) || wc.byte_len < kGrhBytes)
        fail("a UD receive without its 40-byte GRH (" + std::to_string(wc.byte_len) + " bytes)");
    return wc.byte_len - kGrhBytes;
}

std::optional<ibv_wc> poll_datagram(ibv_cq* cq, std::chrono::milliseconds wait, const char* what) {
    const std::optional<ibv_wc> wc = try_poll(cq, std::chrono::duration<double>(wait).count());
    if (wc) check_wc(*wc, what);
    return wc;
}

std::string grh_source_ipv4(const char* buf) {
    char text[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, buf + kIpv4HeaderOffset + kIpv4SourceOffset, text, sizeof text);
    return text;
}

}  // namespace wb
