// ud.hpp - lesson 12's UD steps, for a program that uses UD without teaching it.
//
// lessons/12_ud_multicast/lesson12.cpp writes each of these out and explains
// every field: the UD transitions (a Q_Key, no remote fields), a receive with
// room for the 40-byte GRH, a datagram's three wr.ud fields, the message's
// length after the GRH. lesson12_mcast.cpp, whose lesson is the group, calls
// them: they make exactly the same calls with the same values.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "device.hpp"

namespace wb {

// Every UD receive starts with the 40-byte Global Route Header of its packet
// (IBV_WC_GRH); on RoCE v2 over IPv4 its last 20 bytes are the IPv4 header.
inline constexpr uint32_t kGrhBytes = 40;

// The multicast QP number: the IBTA's 24-bit "all ones", every QP attached to the group.
inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;

// RESET -> INIT (port, P_Key index 0, `qkey`) -> RTR -> RTS (`psn`), no remote fields.
void ud_qp_to_rts(ibv_qp* qp, const PortAddress& a, uint32_t psn, uint32_t qkey);

// One receive of `length` bytes at `addr` inside `mr` (the GRH's 40 bytes included).
void post_ud_receive(ibv_qp* qp, const ibv_mr* mr, char* addr, uint32_t length, uint64_t wr_id);

// One signaled datagram of `length` bytes from the start of `mr` to QP
// `remote_qpn` (kMulticastQpn: the group's) with Q_Key `remote_qkey` at `ah`.
void post_datagram(ibv_qp* qp, const ibv_mr* mr, uint32_t length, ibv_ah* ah, uint32_t remote_qpn,
                   uint32_t remote_qkey, uint64_t wr_id);

// The message's length in a UD receive: byte_len less the GRH; exits 1
// without IBV_WC_GRH or under 40 bytes.
uint32_t ud_message_length(const ibv_wc& wc);

// Poll `cq` for at most `wait` (try_poll): the completion, checked (check_wc
// names `what`), or nothing, which for a datagram that was lost is a normal
// outcome. A `wait` of 0 or less polls once.
std::optional<ibv_wc> poll_datagram(ibv_cq* cq, std::chrono::milliseconds wait, const char* what);

// The source IPv4 address in a UD receive buffer's GRH area (RoCE v2 over
// IPv4: the IPv4 header's saddr), "a.b.c.d".
std::string grh_source_ipv4(const char* buf);

}  // namespace wb
