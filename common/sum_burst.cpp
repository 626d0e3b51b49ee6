// sum_burst.cpp - see sum_burst.hpp. The step numbers are lesson 13's client's.
#include "sum_burst.hpp"

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "sum_protocol.hpp"

namespace wb {

BurstArgs parse_burst_args(int argc, char** argv) {
    std::string clients_arg, srq_size_arg, limit_arg, requests_arg;
    const ExtraOption extra[] = {
        {'c', "clients", "CLIENTS", "server: how many clients to serve at once (default: 2)", &clients_arg},
        {'s', "srq-size", "N", "server: receives in the shared receive queue (default: 8)", &srq_size_arg},
        {'l', "limit", "L", "server: refill when fewer than L receives are left (default: 2)", &limit_arg},
        {'n', "requests", "N", "client: how many sum requests to send, in one burst (default: 10)", &requests_arg},
    };
    const Usage usage = {
        .synopsis = "[options] [-c CLIENTS] [--srq-size N] [--limit L]   server: one SRQ for every client\n"
                    "  lesson13 [options] HOST [-n N]                          client: N sum requests k + 100k",
        .summary = "one shared receive queue (SRQ) serves many RC clients; the SRQ limit as an async event",
        .notes = "The SRQ needs at least one receive per client (--srq-size >= -c), and 1 <= L < N.",
        .server_scope = "The server listens on every address of this host (IPv4 and IPv6, port -p) and serves\n"
                        "CLIENTS clients. A client that breaks the protocol is dropped (its QP to ERR, its\n"
                        "connection closed) and the others are served to the end; then it exits 1.",
    };
    BurstArgs r{.opt = parse_options(argc, argv, usage, extra)};
    const Options& opt = r.opt;
    const bool is_server = r.is_server = opt.args.empty();
    if (opt.args.size() > 1) usage_error("expected at most one argument (HOST), got " + std::to_string(opt.args.size()));
    if (is_server && opt.given('n')) usage_error("-n is a client option (./lesson13 HOST -n N)");
    for (const char letter : {'c', 's', 'l'})
        if (!is_server && opt.given(letter))
            usage_error("-c, --srq-size and --limit are server options (./lesson13 -c CLIENTS)");
    const int clients = r.clients = opt.given('c') ? static_cast<int>(parse_range(clients_arg, "-c", 1, 100)) : 2;
    const uint32_t srq_size = r.srq_size =
        static_cast<uint32_t>(opt.given('s') ? parse_range(srq_size_arg, "--srq-size", 2, 65536) : 8);
    r.limit = static_cast<uint32_t>(opt.given('l') ? parse_range(limit_arg, "--limit", 1, srq_size - 1) : 2);
    // Too many clients for the SRQ: with fewer receives than clients, some
    // client always finds none when they all send at once.
    if (is_server && srq_size < static_cast<uint32_t>(clients))
        usage_error("an SRQ of " + std::to_string(srq_size) + " receives is too small for " +
                    std::to_string(clients) + " clients: give it at least one receive per client (--srq-size " +
                    std::to_string(clients) + " or more)");
    if (is_server && r.limit >= srq_size) usage_error("--limit must be below --srq-size");
    r.requests = opt.given('n') ? static_cast<int>(parse_range(requests_arg, "-n", 1, kBurstMaxRequests)) : 10;
    return r;
}

void print_srq_result(int total, int clients, int dropped, uint32_t srq_size, int limit_events) {
    if (dropped > 0)
        result_error("served " + std::to_string(total) + (total == 1 ? " request" : " requests") + "; dropped " +
                     std::to_string(dropped) + " of " + std::to_string(clients) + " client" +
                     (clients == 1 ? "" : "s") + " that broke the protocol (stderr says why)");
    std::printf("result: served %d requests from %d client%s with one SRQ of %u receives; limit reached %d time%s\n",
                total, clients, clients == 1 ? "" : "s", srq_size, limit_events, limit_events == 1 ? "" : "s");
}

int sum_burst_client(const Options& opt, ibv_context* ctx, const PortAddress& addr, uint16_t lesson, int requests) {
    const auto n = static_cast<uint32_t>(requests);
    // 2. An ordinary RC client, as in lesson 4: its own receive queue, N
    //    deep, because it posts a receive for every answer before it sends.
    ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx))};
    CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx, 2 * requests, nullptr, nullptr, 0))};  // N SENDs + N RECVs
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = n, .max_recv_wr = n, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = random_psn();

    // 3. Memory: N requests (no flag: only read by our NIC), N answers
    //    (LOCAL_WRITE: our NIC writes them).
    Buffer req_buf = alloc_buffer(n * sizeof(SumRequest));
    MemoryRegion req_mr{CHECK_PTR(ibv_reg_mr(pd.get(), req_buf.get(), n * sizeof(SumRequest), 0),
                                  "ulimit -l: is locked memory limited?")};
    Buffer ans_buf = alloc_buffer(n * sizeof(SumResponse));
    MemoryRegion ans_mr{CHECK_PTR(ibv_reg_mr(pd.get(), ans_buf.get(), n * sizeof(SumResponse), IBV_ACCESS_LOCAL_WRITE),
                                  "ulimit -l: is locked memory limited?")};

    // 4. INIT, then a receive for every answer, as one list (lesson 4: before the exchange).
    qp_to_init(qp.get(), addr, 0);
    std::vector<ibv_sge> sges(n);
    std::vector<ibv_recv_wr> rwrs(n);
    for (uint32_t k = 0; k < n; ++k) {
        sges[k] = {.addr = reinterpret_cast<uintptr_t>(ans_buf.get()) + k * sizeof(SumResponse),
                   .length = sizeof(SumResponse), .lkey = ans_mr->lkey};
        rwrs[k] = {.wr_id = k, .next = k + 1 < n ? &rwrs[k + 1] : nullptr, .sg_list = &sges[k], .num_sge = 1};
    }
    ibv_recv_wr* bad_recv = nullptr;
    CHECK_RC(ibv_post_recv(qp.get(), rwrs.data(), &bad_recv));
    std::printf("client: posted %u receives before the exchange\n", n);

    // 5. Exchange, RTR, RTS, and wait for GO: the server starts all its clients together.
    Connection conn = connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    const PeerInfo peer = exchange(conn, local_info(lesson, qp.get(), psn, addr), opt.timeout_s);
    std::printf("client: peer %s is QP 0x%x; ours is 0x%x\n", conn.peer().c_str(), peer.qp_num, qp->qp_num);
    qp_to_rtr(qp.get(), addr, peer);
    qp_to_rts(qp.get(), psn);
    std::printf("client: waiting for the server's GO (it starts all its clients together)\n");
    expect_token(conn, "GO!!", opt.timeout_s);

    // 6. The burst: N SENDs in one ibv_post_send, chained through `next`.
    //    If the SRQ runs out, the server's NIC answers with an RNR NAK and
    //    ours resends after min_rnr_timer (rnr_retry 7: for ever): slower,
    //    never an error, and no completion says it happened.
    std::vector<ibv_sge> ssges(n);
    std::vector<ibv_send_wr> swrs(n);
    auto* reqs = reinterpret_cast<SumRequest*>(req_buf.get());
    for (uint32_t k = 0; k < n; ++k) {
        reqs[k] = make_sum_request(k + 1, 100 * (k + 1));  // request k+1 asks for (k+1) + 100(k+1)
        ssges[k] = {.addr = reinterpret_cast<uintptr_t>(&reqs[k]), .length = sizeof(SumRequest),
                    .lkey = req_mr->lkey};
        swrs[k] = {.wr_id = k, .next = k + 1 < n ? &swrs[k + 1] : nullptr, .sg_list = &ssges[k], .num_sge = 1,
                   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    }
    ibv_send_wr* bad_send = nullptr;
    CHECK_RC(ibv_post_send(qp.get(), swrs.data(), &bad_send));
    std::printf("client: sent %u requests in one burst\n", n);

    // 7. 2N completions, in any order between SENDs and RECVs. Answers come
    //    in request order: one QP's messages are delivered in order, into
    //    our receives in the order we posted them.
    uint32_t answers = 0;
    for (uint32_t i = 0; i < 2 * n; ++i) {
        const ibv_wc wc = poll_success(cq.get(), opt.timeout_s, "a request's SEND or an answer's RECV", conn);
        if (wc.opcode != IBV_WC_RECV) continue;
        const int64_t a = answers + 1, b = 100 * a;
        const SumResult r = read_sum_response(ans_buf.get() + wc.wr_id * sizeof(SumResponse), wc.byte_len, a, b);
        if (!r.error.empty()) result_error(r.error);
        if (r.sum != a + b)
            result_error("answer " + std::to_string(a) + " says " + std::to_string(r.sum) + ", not " +
                         std::to_string(a + b));
        ++answers;
        std::printf("client: answer %u: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answers, a, b, r.sum);
    }
    send_token(conn, "DONE");
    std::printf("result: %u requests answered on QP 0x%x, every sum right\n", answers, qp->qp_num);
    return 0;
}

}  // namespace wb
