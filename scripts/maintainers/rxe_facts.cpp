// rxe_facts - one-process probes that settle what the docs say rxe does
// (issue 25). Not a lesson: two or more QPs of this process play the peers,
// as in lesson 3, and each probe prints what the device answered.
//
//   build/maintainers/rxe_facts gid [--dgid GID]          RTR with an empty sgid_index, one past
//                                                         gid_tbl_len, and (--dgid) a remote GID
//   build/maintainers/rxe_facts access write|read         the responder's qp_access_flags lack the right
//   build/maintainers/rxe_facts rnr [--clients C] [--srq] [--recvs R] [--burst B]
//                                   [--retry-cnt N] [--rnr-retry N] [--wait S]
//   build/maintainers/rxe_facts retry7 [--targets 1|3] [--wait S]
//   build/maintainers/rxe_facts window      READ and WRITE across a type 2 window's end and before
//                                           its start; SEND_WITH_INV's wc_flags at the receiver
//   build/maintainers/rxe_facts srq-limit   the SRQ limit event against the completion it describes
//   build/maintainers/rxe_facts mcast-attach  a UD datagram to a group joined by ibv_attach_mcast alone
//
// Build (not part of `make`; it serves the docs, not a lesson):
//   make build/maintainers/rxe_facts      (scripts/maintainers/rxe_facts.sh does)
// Run in the lab: scripts/lab.sh run -- build/maintainers/rxe_facts rnr --srq --burst 10
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Env {
    wb::Context ctx;
    wb::PortAddress addr;
    std::string dev;
};

long counter(const Env& e, const char* name) {
    std::ifstream f("/sys/class/infiniband/" + e.dev + "/ports/1/hw_counters/" + name);
    long v = -1;
    f >> v;
    return v;
}

const char* kCounters[] = {"rcvd_rnr_err",       "send_rnr_err",       "completer_retry_err",
                           "retry_exceeded_err", "rnr_nak_retry_err", "send_err"};
std::map<std::string, long> counters(const Env& e) {
    std::map<std::string, long> m;
    for (const char* c : kCounters) m[c] = counter(e, c);
    return m;
}
void print_delta(const std::map<std::string, long>& a, const std::map<std::string, long>& b) {
    std::printf("  counters:");
    for (const auto& [k, v] : b) std::printf(" %s %+ld", k.c_str(), v - a.at(k));
    std::printf("\n");
}

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* cq, ibv_srq* srq) {
    ibv_qp_init_attr init = {
        .send_cq = cq,
        .recv_cq = cq,
        .srq = srq,
        .cap = {.max_send_wr = 32, .max_recv_wr = srq ? 0u : 32u, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    return CHECK_PTR(ibv_create_qp(pd, &init));
}

void to_init(ibv_qp* qp, const Env& e, unsigned access) {
    ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .qp_access_flags = access, .pkey_index = 0,
                     .port_num = static_cast<uint8_t>(e.addr.port)};
    CHECK_RC(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

// Returns ibv_modify_qp's result (an errno value) rather than dying: some probes want the refusal.
int to_rtr(ibv_qp* qp, const Env& e, uint32_t dqpn, const ibv_gid& dgid, int sgid_index, uint8_t min_rnr_timer = 12) {
    ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = IBV_MTU_1024,
        .rq_psn = 0,
        .dest_qp_num = dqpn,
        .ah_attr = {.grh = {.dgid = dgid, .sgid_index = static_cast<uint8_t>(sgid_index), .hop_limit = 64},
                    .is_global = 1, .port_num = static_cast<uint8_t>(e.addr.port)},
        .max_dest_rd_atomic = 1,
        .min_rnr_timer = min_rnr_timer,  // 12 = 0.64 ms, the lessons' value
    };
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

void to_rts(ibv_qp* qp, uint8_t retry_cnt, uint8_t rnr_retry) {
    ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .sq_psn = 0, .max_rd_atomic = 1,
                     .timeout = 14,  // 4.096 us * 2^14 = 67 ms, the lessons' value
                     .retry_cnt = retry_cnt, .rnr_retry = rnr_retry};
    CHECK_RC(ibv_modify_qp(qp, &a,
                           IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_MAX_QP_RD_ATOMIC));
}

void connect_pair(ibv_qp* a, ibv_qp* b, const Env& e, uint8_t retry_cnt = 6, uint8_t rnr_retry = 7) {
    CHECK_RC(to_rtr(a, e, b->qp_num, e.addr.gid, e.addr.gid_index));
    CHECK_RC(to_rtr(b, e, a->qp_num, e.addr.gid, e.addr.gid_index));
    to_rts(a, retry_cnt, rnr_retry);
    to_rts(b, retry_cnt, rnr_retry);
}

std::string err(int rc) { return rc == 0 ? "accepted" : std::string(strerrorname_np(rc)) + " (" + std::strerror(rc) + ")"; }

std::string arg(int argc, char** argv, const char* name, const char* dflt) {
    for (int i = 2; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
    return dflt;
}
bool flag(int argc, char** argv, const char* name) {
    for (int i = 2; i < argc; ++i)
        if (std::strcmp(argv[i], name) == 0) return true;
    return false;
}

int probe_gid(Env& e, int argc, char** argv) {
    ibv_port_attr port{};
    CHECK_RC(ibv_query_port(e.ctx.get(), e.addr.port, &port));
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(e.ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 8, nullptr, nullptr, 0))};
    wb::QueuePair qp{make_qp(pd.get(), cq.get(), nullptr)};
    to_init(qp.get(), e, 0);
    std::printf("gid: %s port %d, gid_tbl_len %d, our GID index %d\n", e.dev.c_str(), e.addr.port,
                port.gid_tbl_len, e.addr.gid_index);
    ibv_gid_entry probe{};
    const int r255 = ibv_query_gid_ex(e.ctx.get(), e.addr.port, 255, &probe, 0);
    std::printf("  ibv_query_gid_ex(index 255): %s\n", err(r255).c_str());
    std::printf("  RTR with sgid_index 255 (an empty slot): %s\n",
                err(to_rtr(qp.get(), e, qp->qp_num, e.addr.gid, 255)).c_str());
    if (port.gid_tbl_len <= 255)
        std::printf("  RTR with sgid_index %d (= gid_tbl_len, past the table): %s\n", port.gid_tbl_len,
                    err(to_rtr(qp.get(), e, qp->qp_num, e.addr.gid, port.gid_tbl_len)).c_str());
    else
        std::printf("  sgid_index is 8 bits (0..255) and gid_tbl_len is %d: no index past the table can be named\n",
                    port.gid_tbl_len);
    const std::string dgid = arg(argc, argv, "--dgid", "");
    if (!dgid.empty()) {
        ibv_gid g{};
        if (inet_pton(AF_INET6, dgid.c_str(), g.raw) != 1) wb::usage_error("--dgid '" + dgid + "' is not a GID");
        const auto t0 = Clock::now();
        const int rc = to_rtr(qp.get(), e, 0x11, g, e.addr.gid_index);
        std::printf("  RTR to dgid %s: %s after %.2f s\n", dgid.c_str(), err(rc).c_str(), since(t0));
    }
    return 0;
}

int probe_access(Env& e, int argc, char** argv) {
    const bool write = argc > 2 && std::strcmp(argv[2], "write") == 0;
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(e.ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 8, nullptr, nullptr, 0))};
    static char target[64], local[64];
    // The responder's MR allows everything remote; its QP allows nothing remote.
    wb::MemoryRegion tmr{CHECK_PTR(ibv_reg_mr(pd.get(), target, sizeof target,
                                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                                  IBV_ACCESS_REMOTE_READ))};
    wb::MemoryRegion lmr{CHECK_PTR(ibv_reg_mr(pd.get(), local, sizeof local, IBV_ACCESS_LOCAL_WRITE))};
    wb::QueuePair req{make_qp(pd.get(), cq.get(), nullptr)};
    wb::QueuePair resp{make_qp(pd.get(), cq.get(), nullptr)};
    to_init(req.get(), e, 0);
    to_init(resp.get(), e, 0);  // qp_access_flags 0: no REMOTE_WRITE, no REMOTE_READ
    connect_pair(req.get(), resp.get(), e);
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(local), .length = 16, .lkey = lmr->lkey};
    ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
                      .send_flags = IBV_SEND_SIGNALED,
                      .wr = {.rdma = {.remote_addr = reinterpret_cast<uintptr_t>(target), .rkey = tmr->rkey}}};
    ibv_send_wr* bad = nullptr;
    const auto t0 = Clock::now();
    CHECK_RC(ibv_post_send(req.get(), &wr, &bad));
    ibv_wc wc{};
    int n = 0;
    while ((n = ibv_poll_cq(cq.get(), 1, &wc)) == 0 && since(t0) < 5) {
    }
    if (n < 0) wb::fail("ibv_poll_cq failed");
    if (n == 0) {
        std::printf("access %s: no completion in 5 s\n", write ? "write" : "read");
        return 1;
    }
    ibv_qp_attr qa{};
    ibv_qp_init_attr qi{};
    CHECK_RC(ibv_query_qp(resp.get(), &qa, IBV_QP_STATE, &qi));
    std::printf("access %s: requester's completion %s (%d) after %.3f s; responder's QP state %d (%s)\n",
                write ? "write" : "read", ibv_wc_status_str(wc.status), wc.status, since(t0), qa.qp_state,
                qa.qp_state == IBV_QPS_ERR ? "ERR" : qa.qp_state == IBV_QPS_RTS ? "RTS" : "other");
    return 0;
}

int probe_rnr(Env& e, int argc, char** argv) {
    const int clients = std::atoi(arg(argc, argv, "--clients", "1").c_str());
    const bool use_srq = flag(argc, argv, "--srq");
    const int recvs = std::atoi(arg(argc, argv, "--recvs", "0").c_str());
    const int burst = std::atoi(arg(argc, argv, "--burst", "1").c_str());
    const int retry_cnt = std::atoi(arg(argc, argv, "--retry-cnt", "6").c_str());
    const int rnr_retry = std::atoi(arg(argc, argv, "--rnr-retry", "7").c_str());
    const double wait = std::atof(arg(argc, argv, "--wait", "8").c_str());
    std::printf("rnr: %d client(s), %s, %d receive(s) posted, burst %d, retry_cnt %d, rnr_retry %d, wait %.0f s\n",
                clients, use_srq ? "one SRQ" : "a receive queue each", recvs, burst, retry_cnt, rnr_retry, wait);
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(e.ctx.get()))};
    wb::CompletionQueue scq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 256, nullptr, nullptr, 0))};
    wb::CompletionQueue rcq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 256, nullptr, nullptr, 0))};
    static char buf[4096];
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE))};
    wb::SharedReceiveQueue srq;
    if (use_srq) {
        ibv_srq_init_attr sa = {.attr = {.max_wr = 64, .max_sge = 1}};
        srq.reset(CHECK_PTR(ibv_create_srq(pd.get(), &sa)));
    }
    std::vector<wb::QueuePair> req, resp;
    for (int c = 0; c < clients; ++c) {
        req.emplace_back(make_qp(pd.get(), scq.get(), nullptr));
        resp.emplace_back(make_qp(pd.get(), rcq.get(), srq.get()));
        to_init(req.back().get(), e, 0);
        to_init(resp.back().get(), e, 0);
        connect_pair(req.back().get(), resp.back().get(), e, retry_cnt, rnr_retry);
    }
    ibv_sge rsge = {.addr = reinterpret_cast<uintptr_t>(buf), .length = 64, .lkey = mr->lkey};
    ibv_recv_wr rwr = {.sg_list = &rsge, .num_sge = 1};
    ibv_recv_wr* rbad = nullptr;
    for (int k = 0; k < recvs; ++k) {
        if (use_srq)
            CHECK_RC(ibv_post_srq_recv(srq.get(), &rwr, &rbad));
        else
            for (auto& q : resp) CHECK_RC(ibv_post_recv(q.get(), &rwr, &rbad));
    }
    const auto before = counters(e);
    const auto t0 = Clock::now();
    ibv_sge ssge = {.addr = reinterpret_cast<uintptr_t>(buf) + 2048, .length = 16, .lkey = mr->lkey};
    for (auto& q : req) {
        std::vector<ibv_send_wr> wrs(burst);
        for (int k = 0; k < burst; ++k)
            wrs[k] = {.wr_id = static_cast<uint64_t>(k), .next = k + 1 < burst ? &wrs[k + 1] : nullptr,
                      .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(q.get(), wrs.data(), &bad));
    }
    std::map<uint32_t, int> ok;
    std::map<uint32_t, std::string> first_error;
    while (since(t0) < wait) {
        ibv_wc wc{};
        const int n = ibv_poll_cq(scq.get(), 1, &wc);
        if (n < 0) wb::fail("ibv_poll_cq failed");
        if (n == 0) {
            ibv_wc rw{};
            while (ibv_poll_cq(rcq.get(), 1, &rw) > 0) {
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            continue;
        }
        if (wc.status == IBV_WC_SUCCESS)
            ++ok[wc.qp_num];
        else if (!first_error.count(wc.qp_num)) {
            char line[160];
            std::snprintf(line, sizeof line, "%s (%d) at %.3f s", ibv_wc_status_str(wc.status), wc.status,
                          since(t0));
            first_error[wc.qp_num] = line;
        }
    }
    for (auto& q : req)
        std::printf("  client QP 0x%x: %d of %d SENDs succeeded; %s\n", q->qp_num, ok[q->qp_num], burst,
                    first_error.count(q->qp_num) ? ("first error " + first_error[q->qp_num]).c_str()
                                                 : "no error within the wait");
    print_delta(before, counters(e));
    return 0;
}

int probe_retry7(Env& e, int argc, char** argv) {
    const int targets = std::atoi(arg(argc, argv, "--targets", "1").c_str());
    const double wait = std::atof(arg(argc, argv, "--wait", "15").c_str());
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(e.ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 64, nullptr, nullptr, 0))};
    static char buf[64];
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE))};
    // Three silent targets: a QPN nobody has, a QP left in INIT, a QP destroyed after we reach RTS.
    wb::QueuePair in_init{make_qp(pd.get(), cq.get(), nullptr)};
    to_init(in_init.get(), e, 0);
    ibv_qp* doomed = make_qp(pd.get(), cq.get(), nullptr);
    const uint32_t dqpn[3] = {0xfffff0, in_init->qp_num, doomed->qp_num};
    const char* what[3] = {"a QPN nobody has", "a QP left in INIT", "a destroyed QP"};
    std::vector<wb::QueuePair> req;
    for (int t = 0; t < targets; ++t) {
        req.emplace_back(make_qp(pd.get(), cq.get(), nullptr));
        to_init(req.back().get(), e, 0);
        CHECK_RC(to_rtr(req.back().get(), e, dqpn[t], e.addr.gid, e.addr.gid_index));
        to_rts(req.back().get(), 7, 7);
    }
    CHECK_RC(ibv_destroy_qp(doomed));
    const auto before = counters(e);
    const auto t0 = Clock::now();
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(buf), .length = 16, .lkey = mr->lkey};
    for (int t = 0; t < targets; ++t) {
        ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(req[t].get(), &wr, &bad));
        std::printf("retry7: a SEND with retry_cnt 7 to %s\n", what[t]);
    }
    int done = 0;
    while (since(t0) < wait) {
        ibv_wc wc{};
        const int n = ibv_poll_cq(cq.get(), 1, &wc);
        if (n < 0) wb::fail("ibv_poll_cq failed");
        if (n > 0) {
            ++done;
            std::printf("  completion %s (%d) at %.2f s\n", ibv_wc_status_str(wc.status), wc.status, since(t0));
        } else
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::printf("  %d of %d SENDs completed in %.0f s\n", done, targets, wait);
    print_delta(before, counters(e));
    return 0;
}


// One completion from cq within `secs`, or none.
std::optional<ibv_wc> poll_success(ibv_cq* cq, double secs) {
    const auto t0 = Clock::now();
    ibv_wc wc{};
    do {
        const int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) wb::fail("ibv_poll_cq failed");
        if (n == 1) return wc;
    } while (since(t0) < secs);
    return std::nullopt;
}

std::string wc_text(const std::optional<ibv_wc>& wc) {
    if (!wc) return "no completion in 2 s";
    return std::string(ibv_wc_status_str(wc->status)) + " (" + std::to_string(wc->status) + ")";
}

// window: a pool of three 64-byte slots in one MR; a type 2 window on the
// middle one, bound through the responder's QP (a fresh pair for each
// operation, since an error moves both QPs to ERR).
int probe_window(Env& e, int, char**) {
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(e.ctx.get()))};
    static char pool[192], local[64];
    wb::MemoryRegion pmr{CHECK_PTR(ibv_reg_mr(pd.get(), pool, sizeof pool,
                                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND))};
    wb::MemoryRegion lmr{CHECK_PTR(ibv_reg_mr(pd.get(), local, sizeof local, IBV_ACCESS_LOCAL_WRITE))};
    const uintptr_t start = reinterpret_cast<uintptr_t>(pool) + 64;
    std::printf("window: a type 2 window on bytes 64..127 of a 192-byte MR (the MR itself grants no remote access)\n");
    struct Op {
        const char* what;
        ibv_wr_opcode opcode;
        uintptr_t addr;
    } ops[] = {{"READ of 16 bytes across the window's end (8 inside, 8 past)", IBV_WR_RDMA_READ, start + 56},
               {"WRITE of 16 bytes across the window's end (8 inside, 8 past)", IBV_WR_RDMA_WRITE, start + 56},
               {"READ of 16 bytes before the window's start (8 before, 8 inside)", IBV_WR_RDMA_READ, start - 8},
               {"READ of 16 bytes inside the window", IBV_WR_RDMA_READ, start + 8},
               {"SEND_WITH_INV of the window's rkey", IBV_WR_SEND_WITH_INV, 0}};
    for (const Op& op : ops) {
        wb::CompletionQueue rcq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 8, nullptr, nullptr, 0))};
        wb::CompletionQueue scq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 8, nullptr, nullptr, 0))};
        wb::QueuePair req{make_qp(pd.get(), rcq.get(), nullptr)};
        wb::QueuePair resp{make_qp(pd.get(), scq.get(), nullptr)};
        to_init(req.get(), e, 0);
        to_init(resp.get(), e, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
        connect_pair(req.get(), resp.get(), e, 6, 7);
        ibv_mw* mw = CHECK_PTR(ibv_alloc_mw(pd.get(), IBV_MW_TYPE_2));
        const uint32_t rkey = ibv_inc_rkey(mw->rkey);
        ibv_send_wr bind = {.wr_id = 100, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
        bind.bind_mw = {.mw = mw, .rkey = rkey,
                        .bind_info = {.mr = pmr.get(), .addr = start, .length = 64,
                                      .mw_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE}};
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(resp.get(), &bind, &bad));
        const std::optional<ibv_wc> b = poll_success(scq.get(), 2);
        if (!b || b->status != IBV_WC_SUCCESS) wb::fail("binding the window: " + wc_text(b));
        ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(local), .length = 16, .lkey = lmr->lkey};
        if (op.opcode == IBV_WR_SEND_WITH_INV) {
            ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1};
            ibv_recv_wr* rbad = nullptr;
            CHECK_RC(ibv_post_recv(resp.get(), &rwr, &rbad));
        }
        ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op.opcode,
                          .send_flags = IBV_SEND_SIGNALED};
        if (op.opcode == IBV_WR_SEND_WITH_INV)
            wr.invalidate_rkey = rkey;
        else
            wr.wr.rdma = {.remote_addr = op.addr, .rkey = rkey};
        CHECK_RC(ibv_post_send(req.get(), &wr, &bad));
        const std::optional<ibv_wc> wc = poll_success(rcq.get(), 2);
        std::printf("  %s: %s\n", op.what, wc_text(wc).c_str());
        if (op.opcode == IBV_WR_SEND_WITH_INV) {
            const std::optional<ibv_wc> r = poll_success(scq.get(), 2);
            if (r)
                std::printf("  the receiver's completion: %s, wc_flags 0x%x, IBV_WC_WITH_INV (0x%x) %s, "
                            "invalidated_rkey %s\n",
                            wc_text(r).c_str(), r->wc_flags, IBV_WC_WITH_INV,
                            (r->wc_flags & IBV_WC_WITH_INV) ? "set" : "not set",
                            r->invalidated_rkey == rkey ? "the window's" : "another");
            else
                std::printf("  the receiver's completion: none in 2 s\n");
        }
        req.reset();
        resp.reset();
        CHECK_RC(ibv_dealloc_mw(mw));
    }
    return 0;
}

// srq-limit: an SRQ of 4 receives armed at limit 2; SENDs one at a time,
// twice: once polling the CQ before the async fd in each turn of the wait,
// once the async fd first. What is seen first in both rounds was there
// first; what each round sees in its own order came within one turn.
void srq_limit_round(Env& e, bool event_first) {
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(e.ctx.get()))};
    wb::CompletionQueue scq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 16, nullptr, nullptr, 0))};
    wb::CompletionQueue rcq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 16, nullptr, nullptr, 0))};
    static char buf[1024];
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE))};
    ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
    wb::SharedReceiveQueue srq{CHECK_PTR(ibv_create_srq(pd.get(), &sa))};
    wb::QueuePair req{make_qp(pd.get(), scq.get(), nullptr)};
    wb::QueuePair resp{make_qp(pd.get(), rcq.get(), srq.get())};
    to_init(req.get(), e, 0);
    to_init(resp.get(), e, 0);
    connect_pair(req.get(), resp.get(), e, 6, 0);  // rnr_retry 0: a SEND to an empty SRQ fails at once
    ibv_sge rsge = {.addr = reinterpret_cast<uintptr_t>(buf), .length = 64, .lkey = mr->lkey};
    for (int k = 0; k < 4; ++k) {
        ibv_recv_wr rwr = {.wr_id = static_cast<uint64_t>(k + 1), .sg_list = &rsge, .num_sge = 1};
        ibv_recv_wr* rbad = nullptr;
        CHECK_RC(ibv_post_srq_recv(srq.get(), &rwr, &rbad));
    }
    ibv_srq_attr limit = {.srq_limit = 2};
    CHECK_RC(ibv_modify_srq(srq.get(), &limit, IBV_SRQ_LIMIT));
    std::printf(" %s first in each turn:\n", event_first ? "the async fd" : "the CQ");
    ibv_sge ssge = {.addr = reinterpret_cast<uintptr_t>(buf) + 512, .length = 16, .lkey = mr->lkey};
    for (int k = 1; k <= 5; ++k) {
        ibv_send_wr wr = {.wr_id = static_cast<uint64_t>(k), .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND,
                          .send_flags = IBV_SEND_SIGNALED};
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(req.get(), &wr, &bad));
        std::string seen;
        auto add = [&](const std::string& what) { seen += (seen.empty() ? "" : ", then ") + what; };
        auto check_event = [&] {
            ibv_async_event ev{};
            if (ibv_get_async_event(e.ctx.get(), &ev) == 0) {
                add(ibv_event_type_str(ev.event_type));
                ibv_ack_async_event(&ev);
            }
        };
        const auto t0 = Clock::now();
        while (since(t0) < 0.3) {
            if (event_first) check_event();
            ibv_wc wc{};
            const int n = ibv_poll_cq(rcq.get(), 1, &wc);
            if (n < 0) wb::fail("ibv_poll_cq failed");
            if (n == 1) add("receive completion " + wc_text(wc));
            if (!event_first) check_event();
            while (ibv_poll_cq(scq.get(), 1, &wc) == 1)
                if (wc.status != IBV_WC_SUCCESS) add("the SEND's own completion " + wc_text(wc));
        }
        ibv_srq_attr now{};
        CHECK_RC(ibv_query_srq(srq.get(), &now));
        std::printf("  SEND %d (%d receive(s) left before it): %s; srq_limit now %u\n", k, std::max(0, 5 - k),
                    seen.empty() ? "nothing in 0.3 s" : seen.c_str(), now.srq_limit);
    }
}

int probe_srq_limit(Env& e, int, char**) {
    const int fl = fcntl(e.ctx->async_fd, F_GETFL);
    if (fl < 0 || fcntl(e.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) != 0) wb::fail("fcntl(async_fd) failed");
    std::printf("srq-limit: an SRQ with 4 receives, limit 2; five SENDs one at a time (rnr_retry 0), in two rounds\n");
    srq_limit_round(e, false);
    srq_limit_round(e, true);
    return 0;
}

// mcast-attach: a UD receiver attached to ::ffff:239.1.2.9 with
// ibv_attach_mcast and nothing else (no rdma_join_multicast, so no IGMP join
// and no multicast MAC on the netdev); a second UD QP sends it two datagrams.
int probe_mcast_attach(Env& e, int, char**) {
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(e.ctx.get()))};
    wb::CompletionQueue scq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 8, nullptr, nullptr, 0))};
    wb::CompletionQueue rcq{CHECK_PTR(ibv_create_cq(e.ctx.get(), 8, nullptr, nullptr, 0))};
    static char buf[4096];
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE))};
    constexpr uint32_t kQkey = 0x11111111;
    auto ud = [&](ibv_cq* cq) {
        ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq,
                                 .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
                                 .qp_type = IBV_QPT_UD};
        ibv_qp* qp = CHECK_PTR(ibv_create_qp(pd.get(), &init));
        ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .qkey = kQkey, .pkey_index = 0,
                         .port_num = static_cast<uint8_t>(e.addr.port)};
        CHECK_RC(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
        a = {.qp_state = IBV_QPS_RTR};
        CHECK_RC(ibv_modify_qp(qp, &a, IBV_QP_STATE));
        a = {.qp_state = IBV_QPS_RTS, .sq_psn = 0};
        CHECK_RC(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
        return qp;
    };
    wb::QueuePair rx{ud(rcq.get())};
    wb::QueuePair tx{ud(scq.get())};
    ibv_gid group{};
    if (inet_pton(AF_INET6, "::ffff:239.1.2.9", group.raw) != 1) wb::fail("inet_pton failed");
    const int rc = ibv_attach_mcast(rx.get(), &group, 0);
    std::printf("mcast-attach: ibv_attach_mcast(::ffff:239.1.2.9): %s\n", err(rc).c_str());
    if (rc != 0) return 0;
    for (int k = 0; k < 2; ++k) {
        ibv_sge rsge = {.addr = reinterpret_cast<uintptr_t>(buf) + 1024 * k, .length = 1024, .lkey = mr->lkey};
        ibv_recv_wr rwr = {.wr_id = static_cast<uint64_t>(k), .sg_list = &rsge, .num_sge = 1};
        ibv_recv_wr* rbad = nullptr;
        CHECK_RC(ibv_post_recv(rx.get(), &rwr, &rbad));
    }
    ibv_ah_attr aa = {.grh = {.dgid = group, .sgid_index = static_cast<uint8_t>(e.addr.gid_index), .hop_limit = 1},
                      .is_global = 1, .port_num = static_cast<uint8_t>(e.addr.port)};
    wb::AddressHandle ah{CHECK_PTR(ibv_create_ah(pd.get(), &aa))};
    int sent = 0;
    for (int k = 0; k < 2; ++k) {
        ibv_sge ssge = {.addr = reinterpret_cast<uintptr_t>(buf) + 3072, .length = 32, .lkey = mr->lkey};
        ibv_send_wr wr = {.wr_id = 10, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND,
                          .send_flags = IBV_SEND_SIGNALED};
        wr.wr.ud = {.ah = ah.get(), .remote_qpn = 0xffffff, .remote_qkey = kQkey};
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(tx.get(), &wr, &bad));
        const std::optional<ibv_wc> wc = poll_success(scq.get(), 2);
        if (wc && wc->status == IBV_WC_SUCCESS) ++sent;
    }
    int got = 0;
    while (poll_success(rcq.get(), 1)) ++got;
    std::printf("  2 datagrams sent to the group (%d completed IBV_WC_SUCCESS); the attached QP received %d\n", sent,
                got);
    CHECK_RC(ibv_detach_mcast(rx.get(), &group, 0));
    return 0;
}
}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) wb::usage_error("usage: rxe_facts gid|access|rnr|retry7|window|srq-limit|mcast-attach [options] (see the file's header)");
    Env e{wb::open_device(""), {}, {}};
    e.dev = ibv_get_device_name(e.ctx->device);
    e.addr = wb::choose_address(e.ctx.get(), 1, -1);
    const std::string p = argv[1];
    if (p == "gid") return probe_gid(e, argc, argv);
    if (p == "access") return probe_access(e, argc, argv);
    if (p == "rnr") return probe_rnr(e, argc, argv);
    if (p == "retry7") return probe_retry7(e, argc, argv);
    if (p == "window") return probe_window(e, argc, argv);
    if (p == "srq-limit") return probe_srq_limit(e, argc, argv);
    if (p == "mcast-attach") return probe_mcast_attach(e, argc, argv);
    wb::usage_error("unknown probe '" + p + "'");
}
