// ud_stray - a third UD QP on the fabric, for the tests of lesson 12: it
// knows a lesson-12 QP's number and the Q_Key every lesson-12 QP uses (both
// travel in clear), and sends that QP datagrams nobody asked it for.
//
//   ud_stray QPN|@FILE IPV4 [PAYLOAD [COUNT]]
//
// sends COUNT datagrams (default 1), 250 ms apart, with Q_Key 0x01234567 to
// QP QPN at GID ::ffff:IPV4 (0xffffff and a group such as 239.1.2.3: every
// QP attached to that group). PAYLOAD is a number of bytes (default 16: a
// lesson-12 sum answer saying 1337, padded with 'X' beyond 16 bytes), or a
// text sent as it is ("datagram 3 of 3": a forged multicast datagram). With
// @FILE, QPN is read from a lesson-12 program's output in FILE: the first
// "UD QP 0x..." once the line saying its receives are posted is there.
//
// It prints "ud_stray: UD QP 0x... ready" once it can send, one line per
// datagram and its send completion's status, and exits 0 (1 when a send
// fails to complete).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>  // RDMA_UDP_QKEY

#include <arpa/inet.h>
#include <endian.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "check.hpp"
#include "completion.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "sum_protocol.hpp"

namespace {

constexpr int kTimeout = 30;
constexpr uint32_t kMaxBytes = 4096;  // what rxe's largest MTU would carry
constexpr std::chrono::milliseconds kEvery{250};

// The QP number in a lesson-12 program's output FILE, once it says its receives are posted.
uint32_t qpn_from_output(const std::string& file) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeout);
    for (;;) {
        std::string text;
        if (FILE* f = std::fopen(file.c_str(), "r")) {
            char chunk[4096];
            size_t n;
            while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) text.append(chunk, n);
            std::fclose(f);
        }
        const size_t at = text.find("UD QP 0x");
        if (at != std::string::npos && text.find("posted", at) != std::string::npos)
            return static_cast<uint32_t>(std::strtoul(text.c_str() + at + 6, nullptr, 0));
        if (std::chrono::steady_clock::now() > deadline) wb::fail("no UD QP in " + file + " within 30 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

// The datagram: PAYLOAD bytes of a sum answer saying 1337 ('X' after its 16), or PAYLOAD's text.
std::string payload_of(const std::string& payload) {
    const bool is_number = !payload.empty() && payload.find_first_not_of("0123456789") == std::string::npos;
    if (!is_number) return payload;
    const unsigned long bytes = std::strtoul(payload.c_str(), nullptr, 10);
    if (bytes > kMaxBytes) wb::usage_error("at most 4096 bytes, not " + payload);
    const wb::SumResponse lie = {.status = htobe32(wb::kSumOk), .reserved = 0, .sum = htobe64(1337)};
    std::string data(bytes, 'X');
    std::memcpy(data.data(), &lie, std::min<size_t>(bytes, sizeof lie));
    return data;
}

}  // namespace

int main(int argc, char** argv) {
    wb::set_program_name(argv[0]);
    if (argc < 3 || argc > 5) {
        std::fprintf(stderr, "usage: ud_stray QPN|@FILE IPV4 [PAYLOAD [COUNT]]\n");
        return 2;
    }
    const std::string target = argv[1], ipv4 = argv[2];
    const std::string data = payload_of(argc > 3 ? argv[3] : "16");
    const int count = argc > 4 ? std::atoi(argv[4]) : 1;

    wb::Context ctx = wb::open_device("");
    const wb::PortAddress addr = wb::choose_address(ctx.get(), 1, -1);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 2, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_UD,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    // Lesson 12's ud_qp_to_rts, with the Q_Key every lesson-12 QP has.
    ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .qkey = RDMA_UDP_QKEY, .pkey_index = 0, .port_num = addr.port};
    CHECK_RC(ibv_modify_qp(qp.get(), &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
    ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR};
    CHECK_RC(ibv_modify_qp(qp.get(), &rtr, IBV_QP_STATE));
    ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS, .sq_psn = 0};
    CHECK_RC(ibv_modify_qp(qp.get(), &rts, IBV_QP_STATE | IBV_QP_SQ_PSN));

    ibv_ah_attr ah_attr = {.is_global = 1, .port_num = addr.port};
    std::memset(ah_attr.grh.dgid.raw + 10, 0xff, 2);  // ::ffff:a.b.c.d
    if (inet_pton(AF_INET, ipv4.c_str(), ah_attr.grh.dgid.raw + 12) != 1) wb::usage_error("not an IPv4 address: " + ipv4);
    ah_attr.grh.sgid_index = static_cast<uint8_t>(addr.gid_index);
    ah_attr.grh.hop_limit = 1;  // this link only
    wb::AddressHandle ah{CHECK_PTR(ibv_create_ah(pd.get(), &ah_attr))};

    wb::Buffer buf = wb::alloc_buffer(std::max<size_t>(data.size(), 1));
    std::memcpy(buf.get(), data.data(), data.size());
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), std::max<size_t>(data.size(), 1), 0))};
    // Everything is ready before we read the target's QP from its output,
    // so that the first datagram leaves the moment it is there.
    std::printf("ud_stray: UD QP 0x%x ready\n", qp->qp_num);
    std::fflush(stdout);
    const uint32_t qpn = target[0] == '@' ? qpn_from_output(target.substr(1))
                                          : static_cast<uint32_t>(std::strtoul(target.c_str(), nullptr, 0));
    for (int i = 1; i <= count; ++i) {
        ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(buf.get()),
                       .length = static_cast<uint32_t>(data.size()),
                       .lkey = mr->lkey};
        ibv_send_wr wr = {
            .wr_id = static_cast<uint64_t>(i),
            .sg_list = &sge,
            .num_sge = 1,
            .opcode = IBV_WR_SEND,
            .send_flags = IBV_SEND_SIGNALED,
            .wr = {.ud = {.ah = ah.get(), .remote_qpn = qpn, .remote_qkey = RDMA_UDP_QKEY}},
        };
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(qp.get(), &wr, &bad));
        const ibv_wc wc = wb::poll_completion(cq.get(), kTimeout, "the stray's SEND");
        std::printf("ud_stray: datagram %d of %d, %zu bytes, to QP 0x%x at ::ffff:%s: completion %s\n", i, count,
                    data.size(), qpn, ipv4.c_str(), wb::wc_status_name(wc.status));
        std::fflush(stdout);
        if (wc.status != IBV_WC_SUCCESS) return 1;
        if (i < count) std::this_thread::sleep_for(kEvery);
    }
    return 0;
}
