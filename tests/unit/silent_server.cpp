// silent_server - a server for any two-sided lesson (4, 8) that connects
// for real and then never answers: its QP reaches RTS with receives posted,
// so its NIC acknowledges every SEND, but no answer is ever sent. A client
// of it can only time out. (A fake peer that names a QP which does not
// exist tests something else: there the client's SEND itself fails once the
// retries run out.)
//
//   build/tests/silent_server -l LESSON [-p PORT] [--timeout S]
//
// It accepts one client, trades PeerInfo as LESSON's server, says "RTR!",
// prints "silent_server: QP 0x... is RTS and will not answer", then keeps
// the TCP connection open for --timeout seconds and exits 0, printing how
// many requests (receive completions) arrived meanwhile.
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "check.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

int main(int argc, char** argv) {
    std::string lesson_text;
    const wb::ExtraOption extra[] = {
        {'l', "lesson", "LESSON", "the lesson number to claim in the exchange (required)", &lesson_text},
    };
    const wb::Usage usage = {
        .synopsis = "-l LESSON [options]",
        .summary = "a server that connects for real and never answers",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    if (!opt.args.empty() || lesson_text.empty()) wb::usage_error("silent_server takes -l LESSON and no host");
    const auto lesson = static_cast<uint16_t>(wb::parse_range(lesson_text, "-l", 1, 99));
    constexpr uint32_t kSlots = 64, kSlotBytes = 64;

    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), kSlots, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = kSlots, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();
    wb::Buffer buf = wb::alloc_buffer(kSlots * kSlotBytes);
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), kSlots * kSlotBytes, IBV_ACCESS_LOCAL_WRITE))};
    wb::qp_to_init(qp.get(), addr, 0);
    // Receives for every request a client may send, so none meets an RNR NAK.
    for (uint32_t i = 0; i < kSlots; ++i) {
        ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(buf.get()) + i * kSlotBytes,
                       .length = kSlotBytes,
                       .lkey = mr->lkey};
        ibv_recv_wr wr = {.wr_id = i, .next = nullptr, .sg_list = &sge, .num_sge = 1};
        ibv_recv_wr* bad = nullptr;
        CHECK_RC(ibv_post_recv(qp.get(), &wr, &bad));
    }

    wb::Listener listener(opt.tcp_port);
    std::printf("silent_server: waiting for a client on TCP port %u\n", opt.tcp_port);
    wb::Connection conn = listener.accept(opt.timeout_s);
    const wb::PeerInfo peer = wb::exchange(conn, wb::local_info(lesson, qp.get(), psn, addr), opt.timeout_s);
    wb::qp_to_rtr(qp.get(), addr, peer);
    wb::qp_to_rts(qp.get(), psn);
    wb::send_token(conn, "RTR!");
    std::printf("silent_server: QP 0x%x is RTS and will not answer\n", qp->qp_num);

    std::this_thread::sleep_for(std::chrono::seconds(opt.timeout_s));
    ibv_wc wc[kSlots];
    const int n = CHECK_POLL(ibv_poll_cq(cq.get(), kSlots, wc));
    std::printf("silent_server: %d request(s) arrived, none answered\n", n);
    return 0;
}
