// enum_names - the names common/qp.hpp gives the enums rdma-core only
// describes in prose: every ibv_wc_status and ibv_qp_state, as written in
// <infiniband/verbs.h>. Prints one "ok -" line per check.
#include <string>

#include "completion.hpp"
#include "qp.hpp"
#include "unit_check.hpp"

namespace {

void check_status(ibv_wc_status s, const char* name) {
    const std::string got = wb::wc_status_name(s);
    CHECK(got == name, "wc_status_name(" + std::to_string(s) + ") is " + name + " (got " + got + ")");
}

}  // namespace

int main() {
    // Every status, at its number: a name in the wrong place would mislead a learner.
    check_status(IBV_WC_SUCCESS, "IBV_WC_SUCCESS");
    check_status(IBV_WC_LOC_LEN_ERR, "IBV_WC_LOC_LEN_ERR");
    check_status(IBV_WC_LOC_QP_OP_ERR, "IBV_WC_LOC_QP_OP_ERR");
    check_status(IBV_WC_LOC_PROT_ERR, "IBV_WC_LOC_PROT_ERR");
    check_status(IBV_WC_WR_FLUSH_ERR, "IBV_WC_WR_FLUSH_ERR");
    check_status(IBV_WC_REM_INV_REQ_ERR, "IBV_WC_REM_INV_REQ_ERR");
    check_status(IBV_WC_REM_ACCESS_ERR, "IBV_WC_REM_ACCESS_ERR");
    check_status(IBV_WC_REM_OP_ERR, "IBV_WC_REM_OP_ERR");
    check_status(IBV_WC_RETRY_EXC_ERR, "IBV_WC_RETRY_EXC_ERR");
    check_status(IBV_WC_RNR_RETRY_EXC_ERR, "IBV_WC_RNR_RETRY_EXC_ERR");
    check_status(IBV_WC_TM_RNDV_INCOMPLETE, "IBV_WC_TM_RNDV_INCOMPLETE");
    CHECK(IBV_WC_RETRY_EXC_ERR == 12 && IBV_WC_RNR_RETRY_EXC_ERR == 13 && IBV_WC_REM_ACCESS_ERR == 10,
          "the numbers the lessons quote: 12, 13 and 10");
    CHECK(std::string(wb::wc_status_name(static_cast<ibv_wc_status>(999))) == "IBV_WC_(unknown)",
          "an unknown status is IBV_WC_(unknown)");
    CHECK(wb::wc_status_text(IBV_WC_RNR_RETRY_EXC_ERR) == "IBV_WC_RNR_RETRY_EXC_ERR (13)",
          "wc_status_text(13) is the name and the number");
    CHECK(std::string(wb::qp_state_name(IBV_QPS_RESET)) == "IBV_QPS_RESET", "qp_state_name(IBV_QPS_RESET)");
    CHECK(std::string(wb::qp_state_name(IBV_QPS_RTS)) == "IBV_QPS_RTS", "qp_state_name(IBV_QPS_RTS)");
    CHECK(std::string(wb::qp_state_name(IBV_QPS_ERR)) == "IBV_QPS_ERR", "qp_state_name(IBV_QPS_ERR)");
    return unit::finish("enum_names");
}
