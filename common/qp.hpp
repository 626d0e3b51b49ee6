// qp.hpp - bring an RC QP to RTS against a peer, the way lesson 3 does by hand.
//
// Lesson 3 drives RESET -> INIT -> RTR -> RTS with ibv_modify_qp and explains
// every field. Later lessons call these helpers, which make exactly the same
// calls with the same values, so that their main() can show the operation the
// lesson is about.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>

#include "device.hpp"
#include "exchange.hpp"

namespace wb {

// A random 24-bit starting PSN (PSNs are 24 bits in the BTH).
uint32_t random_psn();

// What we tell the peer about our side: QP number, PSN, LID/GID, path MTU.
// The caller fills addr/length/rkey when it offers a buffer.
PeerInfo local_info(uint16_t lesson, const ibv_qp* qp, uint32_t psn, const PortAddress& a);

// RESET -> INIT: bind the QP to `port` and say what the PEER may do to our
// memory through it (remote_access: 0, IBV_ACCESS_REMOTE_WRITE, _READ, _ATOMIC).
void qp_to_init(ibv_qp* qp, const PortAddress& a, unsigned remote_access);

// INIT -> RTR: where the peer is (its QPN, PSN, GID or LID) and the path MTU,
// the smaller of both sides' active MTUs. `rd_atomic` is how many RDMA READ or
// atomic requests the peer may have outstanding at us (max_dest_rd_atomic).
void qp_to_rtr(ibv_qp* qp, const PortAddress& a, const PeerInfo& peer, uint8_t rd_atomic = 1);

// RTR -> RTS: our own starting PSN, retry counts, and how many READ/atomic
// requests we may have outstanding at the peer (max_rd_atomic).
void qp_to_rts(ibv_qp* qp, uint32_t psn, uint8_t rd_atomic = 1);

// How long to wait, once the peer is known gone (its TCP connection closed),
// for our QP's own word on a request in flight: an RC QP with qp_to_rts's
// values resends an unacknowledged request 7 times (retry_cnt 6) x 67 ms
// (timeout 14) = 0.47 s before its completion says IBV_WC_RETRY_EXC_ERR;
// measured 0.48 s on an idle rxe, 1.5 s in the lab on a loaded two-core host
// and 4.2 s on a slower one (2026-12-04). 10 s holds on a host twice as slow
// again, and costs nothing when the retries run out: the status ends the wait.
inline constexpr std::chrono::milliseconds kRetriesGiveUp{10000};

// The QP's current state, as ibv_query_qp reports it (exercise 3.1 watches
// it change).
ibv_qp_state query_state(ibv_qp* qp);

// Bring `qp` back to RTS after an error moved it to ERR (lesson 10's recover
// scenario takes these steps by hand): ERR -> RESET, which empties its
// queues, then qp_to_init / qp_to_rtr / qp_to_rts with a FRESH PSN exchanged
// over `conn` as the first time, and the server's "RTR!" (lesson 4, step 8).
// Both sides call it at the same point. Returns our new PSN.
uint32_t reconnect(ibv_qp* qp, const PortAddress& a, Connection& conn, uint16_t lesson, unsigned remote_access,
                   bool is_server, int timeout_s);

// "IBV_QPS_ERR": the name of a QP state; rdma-core has no string function for it.
const char* qp_state_name(ibv_qp_state state);
// "ERR": the same without its IBV_QPS_ prefix, as lesson 3 prints it.
const char* qp_state_str(ibv_qp_state state);

}  // namespace wb
