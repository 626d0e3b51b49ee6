// completion.hpp - wait for a work completion, bounded, and name what it says.
//
// Lesson 3 writes the polling loop out (ibv_poll_cq until a deadline). The
// three waits below are that loop; their names say what they do when it
// goes wrong:
//     poll_success     a successful completion, or exit 1 (none in time, a
//                      failed status, or the peer closed its TCP connection)
//     poll_completion  a completion of any status, or exit 1 when none came:
//                      for lessons where a failed completion is the outcome
//     try_poll         a completion of any status, or nothing when none came
#pragma once

#include <infiniband/verbs.h>

#include <optional>
#include <string>

#include "exchange.hpp"

namespace wb {

// Busy-poll `cq` for one completion, at most timeout_s seconds. Exits 1 when
// nothing arrives in time or the completion failed (with ibv_wc_status_str
// and what to check).
ibv_wc poll_success(ibv_cq* cq, int timeout_s, const char* waiting_for);

// The same, while also watching the peer's TCP side channel: when the peer
// closes it (it exited, failed, or refused to go on), exit 1 at once saying so,
// instead of waiting out the timeout. A completion that arrives within
// kRetriesGiveUp (qp.hpp) of the close still counts, so that a request sent to
// a peer that died reports its own status (IBV_WC_RETRY_EXC_ERR) rather than
// "closed". Data waiting on the connection is left there for the caller.
ibv_wc poll_success(ibv_cq* cq, int timeout_s, const char* waiting_for, const Connection& peer);

// True when the peer has closed (or reset) its TCP connection: what
// poll_success watches. Data that is waiting is only peeked at, never consumed.
bool peer_closed(const Connection& c);

// A completion whatever its status (the caller checks wc.status), or exit 1
// when none came within timeout_s seconds (`waiting_for` names it).
ibv_wc poll_completion(ibv_cq* cq, int timeout_s, const char* waiting_for);

// A completion whatever its status, or nothing when none came within
// timeout_s seconds: for waits where no completion is a normal outcome.
std::optional<ibv_wc> try_poll(ibv_cq* cq, double timeout_s);

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

}  // namespace wb
