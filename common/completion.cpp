// completion.cpp - see completion.hpp. Lesson 3 writes this polling loop out.
#include "completion.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "check.hpp"
#include "qp.hpp"

namespace wb {

const char* wc_opcode_str(ibv_wc_opcode op) {
    switch (op) {
    case IBV_WC_SEND: return "IBV_WC_SEND";
    case IBV_WC_RDMA_WRITE: return "IBV_WC_RDMA_WRITE";
    case IBV_WC_RDMA_READ: return "IBV_WC_RDMA_READ";
    case IBV_WC_COMP_SWAP: return "IBV_WC_COMP_SWAP";
    case IBV_WC_FETCH_ADD: return "IBV_WC_FETCH_ADD";
    case IBV_WC_BIND_MW: return "IBV_WC_BIND_MW";
    case IBV_WC_RECV: return "IBV_WC_RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "IBV_WC_RECV_RDMA_WITH_IMM";
    default: return "other";
    }
}

const char* wc_status_name(ibv_wc_status status) {
    switch (status) {
    case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR: return "IBV_WC_LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR: return "IBV_WC_MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR: return "IBV_WC_BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR: return "IBV_WC_LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR";
    case IBV_WC_LOC_RDD_VIOL_ERR: return "IBV_WC_LOC_RDD_VIOL_ERR";
    case IBV_WC_REM_INV_RD_REQ_ERR: return "IBV_WC_REM_INV_RD_REQ_ERR";
    case IBV_WC_REM_ABORT_ERR: return "IBV_WC_REM_ABORT_ERR";
    case IBV_WC_INV_EECN_ERR: return "IBV_WC_INV_EECN_ERR";
    case IBV_WC_INV_EEC_STATE_ERR: return "IBV_WC_INV_EEC_STATE_ERR";
    case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR: return "IBV_WC_RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR: return "IBV_WC_GENERAL_ERR";
    case IBV_WC_TM_ERR: return "IBV_WC_TM_ERR";
    case IBV_WC_TM_RNDV_INCOMPLETE: return "IBV_WC_TM_RNDV_INCOMPLETE";
    }
    return "IBV_WC_(unknown)";
}

void check_wc(const ibv_wc& wc, const char* what, const char* likely_cause) {
    if (wc.status == IBV_WC_SUCCESS) return;
    const char* hint = "";
    switch (wc.status) {
    case IBV_WC_RETRY_EXC_ERR:
        hint = "the peer never acknowledged (7 tries in 0.5 s): the peer exited, or a wrong GID index or "
               "address, a path MTU the peers disagree on, UDP 4791 blocked; or, on rxe, the peer had no "
               "receive posted for more than 0.6 s (RNR: docs/lesson4-send-recv.md)";
        break;
    case IBV_WC_RNR_RETRY_EXC_ERR: hint = "the peer had no receive posted (post receives before RTR)"; break;
    case IBV_WC_REM_ACCESS_ERR:
        hint = "the peer refused: wrong rkey, an address outside its MR, or an MR without that access";
        break;
    case IBV_WC_LOC_PROT_ERR: hint = "a local SGE is outside its MR or uses the wrong lkey"; break;
    case IBV_WC_LOC_LEN_ERR: hint = "the incoming message is larger than the posted receive buffer"; break;
    case IBV_WC_LOC_QP_OP_ERR:
        hint = "our QP could not carry out the request; Soft-RoCE (rxe) reports an incoming SEND larger "
               "than the posted receive buffer this way";
        break;
    case IBV_WC_REM_OP_ERR:
        hint = "the peer's NIC could not complete our request, e.g. a SEND larger than the receive buffer "
               "the peer posted: see the peer's output";
        break;
    case IBV_WC_REM_INV_REQ_ERR: hint = "the peer's QP does not allow this operation (qp_access_flags)"; break;
    case IBV_WC_WR_FLUSH_ERR: hint = "the QP was already in the error state: the first failure is the cause"; break;
    default: break;
    }
    if (likely_cause) hint = likely_cause;
    // "status transport retry counter exceeded (12, IBV_WC_RETRY_EXC_ERR, vendor_err 0)": the
    // library's words, then the number and the enum's name, which a learner can grep for.
    fail(std::string(what) + " completed with status " + ibv_wc_status_str(wc.status) + " (" +
             std::to_string(wc.status) + ", " + wc_status_name(wc.status) + ", vendor_err " +
             std::to_string(wc.vendor_err) + ")",
         hint);
}

bool peer_closed(const Connection& c) {
    pollfd p{.fd = c.fd(), .events = POLLIN | POLLRDHUP, .revents = 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    char byte;
    ssize_t n = ::recv(c.fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

namespace {

ibv_wc poll_until(ibv_cq* cq, int timeout_s, const char* waiting_for, const Connection* peer) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    auto next_look = Clock::now();  // when to look at the peer's connection next
    ibv_wc wc{};
    for (;;) {
        int n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc));
        if (n == 1) break;
        const auto now = Clock::now();
        if (now >= deadline)
            fail(std::string("no completion for ") + waiting_for + " within " + std::to_string(timeout_s) + " s",
                 "is the peer still running? raise --timeout if the machine is slow");
        if (peer && now >= next_look) {
            next_look = now + std::chrono::milliseconds(10);  // a syscall every 10 ms, not every spin
            if (peer_closed(*peer)) {
                // The peer is gone, but our QP may not know yet: a request in
                // flight to its vanished QP ends in IBV_WC_RETRY_EXC_ERR once
                // our retries run out, which says more than "closed". Keep
                // polling for as long as those retries take.
                const auto give_up = Clock::now() + kRetriesGiveUp;
                while ((n = CHECK_POLL(ibv_poll_cq(cq, 1, &wc))) == 0 && Clock::now() < give_up)
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                if (n == 1) {
                    if (wc.status == IBV_WC_RETRY_EXC_ERR)
                        check_wc(wc, waiting_for,
                                 ("the peer " + peer->peer() + " closed its TCP connection too: it exited, and its "
                                  "QP went with it")
                                     .c_str());
                    break;
                }
                fail("the peer " + peer->peer() + " closed the connection while we waited for " + waiting_for,
                     "see the peer's output: it exited, failed, or refused to go on");
            }
        }
        std::this_thread::yield();  // let the peer run on a busy machine
    }
    check_wc(wc, waiting_for);
    return wc;
}

}  // namespace

ibv_wc poll_success(ibv_cq* cq, int timeout_s, const char* waiting_for) {
    return poll_until(cq, timeout_s, waiting_for, nullptr);
}

std::optional<ibv_wc> try_poll(ibv_cq* cq, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    ibv_wc wc{};
    for (;;) {
        if (CHECK_POLL(ibv_poll_cq(cq, 1, &wc)) == 1) return wc;
        if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
        std::this_thread::yield();  // let the peer run on a busy machine
    }
}

ibv_wc poll_completion(ibv_cq* cq, int timeout_s, const char* waiting_for) {
    const std::optional<ibv_wc> wc = try_poll(cq, static_cast<double>(timeout_s));
    if (!wc)
        fail(std::string("no completion for ") + waiting_for + " within " + std::to_string(timeout_s) + " s",
             "is the peer still running? raise --timeout if the machine is slow");
    return *wc;
}

std::string wc_status_text(ibv_wc_status status) {
    return std::string(wc_status_name(status)) + " (" + std::to_string(status) + ")";
}

ibv_wc poll_success(ibv_cq* cq, int timeout_s, const char* waiting_for, const Connection& peer) {
    return poll_until(cq, timeout_s, waiting_for, &peer);
}

}  // namespace wb
