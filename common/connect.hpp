// connect.hpp - bring an RC QP to RTS against a peer, the way lesson 3 does by hand.
//
// Lesson 3 drives RESET -> INIT -> RTR -> RTS with ibv_modify_qp and explains
// every field. Lessons 4 to 8 call these helpers, which make exactly the same
// calls with the same values, so that their main() can show the operation the
// lesson is about.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

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

// How long an RC QP with qp_to_rts's values keeps resending an unacknowledged
// request before its completion says IBV_WC_RETRY_EXC_ERR: 7 tries (retry_cnt
// 6) x 67 ms (timeout 14) = 0.47 s, measured 0.48 s on an idle rxe and up to
// 1.5 s in the lab on a loaded two-core host; 3 s leaves room for both.
inline constexpr std::chrono::milliseconds kRetriesGiveUp{3000};

// The QP's current state, as ibv_query_qp reports it (exercise 3.1 watches
// it change).
ibv_qp_state query_state(ibv_qp* qp);

// Busy-poll `cq` for one completion, at most timeout_s seconds (lesson 3
// writes this loop out). Exits 1 when nothing arrives in time or the
// completion failed (with ibv_wc_status_str and what to check).
ibv_wc poll_one(ibv_cq* cq, int timeout_s, const char* waiting_for);

// The same, while also watching the peer's TCP side channel: when the peer
// closes it (it exited, failed, or refused to go on), exit 1 at once saying so,
// instead of waiting out the timeout. A completion that arrives within
// kRetriesGiveUp of the close still counts, so that a request sent to a peer
// that died reports its own status (IBV_WC_RETRY_EXC_ERR) rather than "closed". Data waiting on the
// connection is left there for the caller.
ibv_wc poll_one(ibv_cq* cq, int timeout_s, const char* waiting_for, const Connection& peer);

// Lesson 3's bounded polling loop again, for lessons where a failed
// completion is an outcome to show (10, 14) or no completion a normal one:
// the completion, whatever its status, or nothing when none came within
// timeout_s seconds. With `waiting_for`, no completion exits 1 instead.
std::optional<ibv_wc> poll_any(ibv_cq* cq, double timeout_s);
ibv_wc poll_any(ibv_cq* cq, int timeout_s, const char* waiting_for);

// Bring `qp` back to RTS after an error moved it to ERR (lesson 10's recover
// scenario takes these steps by hand): ERR -> RESET, which empties its
// queues, then qp_to_init / qp_to_rtr / qp_to_rts with a FRESH PSN exchanged
// over `conn` as the first time, and the server's "RTR!" (lesson 4, step 8).
// Both sides call it at the same point. Returns our new PSN.
uint32_t reconnect(ibv_qp* qp, const PortAddress& a, Connection& conn, uint16_t lesson, unsigned remote_access,
                   bool is_server, int timeout_s);

// "IBV_WC_RNR_RETRY_EXC_ERR (13)": the enum's name and number, which a learner can grep for.
std::string wc_status_text(ibv_wc_status status);

// Exit 1 unless wc.status is IBV_WC_SUCCESS; the message names `what`, the
// status string, the vendor syndrome and the usual causes of that status,
// or `likely_cause` instead of them when the caller knows better.
void check_wc(const ibv_wc& wc, const char* what, const char* likely_cause = nullptr);

// "IBV_WC_RECV", "IBV_WC_RDMA_WRITE" ...: rdma-core has no string function for opcodes.
const char* wc_opcode_str(ibv_wc_opcode op);

// "IBV_WC_RNR_RETRY_EXC_ERR": the enum's own name, which a learner can grep
// for (ibv_wc_status_str gives the prose, "RNR retry counter exceeded").
const char* wc_status_name(ibv_wc_status status);

// "IBV_QPS_ERR": the name of a QP state; rdma-core has no string function for it.
const char* qp_state_name(ibv_qp_state state);
// "ERR": the same without its IBV_QPS_ prefix, as lesson 3 prints it.
const char* qp_state_str(ibv_qp_state state);

// rdma_cm (lesson 9; lesson 12's multicast join), where the connection
// manager does the exchange and the transitions above.

// Exit 1 unless `ev` is the `expected` event. The message names both events
// (rdma_event_str), the event's status (for REJECTED the IB CM's reject
// reason, for the error events a negative errno) and the usual causes: the
// rdma_cm counterpart of check_wc.
void check_cm_event(const rdma_cm_event* ev, rdma_cm_event_type expected);

// Wait for the next CM event on `ec`, as lesson 9 teaches it: poll() on the
// channel's fd for at most timeout_s seconds (-1: no limit), then
// rdma_get_cm_event (which cannot block once poll() says the fd is
// readable), then print "cm event: NAME". Exits 1, saying what to check,
// when none comes in time (`waiting_for` names the event expected). The
// caller reads what it needs from the event, then MUST acknowledge it with
// rdma_ack_cm_event (checked): rdma_destroy_id waits until every event of
// its id is acknowledged, for ever if one is not.
rdma_cm_event* take_cm_event(rdma_event_channel* ec, rdma_cm_event_type waiting_for, int timeout_s);
// take_cm_event, then exit 1 unless it is the `expected` event (check_cm_event).
rdma_cm_event* next_cm_event(rdma_event_channel* ec, rdma_cm_event_type expected, int timeout_s);

// "192.0.2.1", "fe80::1%dummy0" and a port as the sockaddr rdma_cm takes. A
// numeric address only: misuse (exit 2) names `what` ("HOST", "-b").
sockaddr_storage ip_address(const std::string& host, uint16_t port, const char* what);
// The address part of `sa` as text: "192.0.2.1", "fe80::1%dummy0".
std::string address_str(const sockaddr* sa);

}  // namespace wb
