# Grader of exercise 20.2: responses by SEND. Two clients of N requests,
# every response checked; rxe counts both ends on one device, so the
# requests and the responses are now 4N SENDs and 4N receives, and no
# WRITE with immediate is left (it counted as a receive, not as a SEND).
# shellcheck disable=SC2034 # HINT is read by ex_fail (scripts/exercises/grade_lib.bash)
HINT="server: .opcode = IBV_WR_SEND, no imm_data or wr.rdma; client: each receive scatters into a ring slot (wr_id = kRingReceiveTag | slot), a response completes as IBV_WC_RECV, find the open request by its seq"

# shellcheck source=lessons/20_rpc/exercises/two_clients.bash
source "$(dirname "${BASH_SOURCE[0]}")/../two_clients.bash"

grade() {
  local n=200 got sends recvs
  sends=$(ex_counter rdma_sends) recvs=$(ex_counter rdma_recvs)
  two_clients "$1" "$n" 4 || return
  # rdma_sends counts SENDs only; rdma_recvs every receive consumed, by a
  # SEND or by a WRITE with immediate. Lesson 20 makes 2N and 4N here.
  local dsends=$(($(ex_counter rdma_sends) - sends)) drecvs=$(($(ex_counter rdma_recvs) - recvs))
  ((dsends == 4 * n && drecvs == 4 * n)) ||
    ex_fail "rdma_sends and rdma_recvs up by $((4 * n)) each ($((2 * n)) requests and $((2 * n)) responses, all SENDs)" \
      "rdma_sends +$dsends, rdma_recvs +$drecvs$( ((dsends == 2 * n)) && echo ": the responses are not SENDs")"
}
