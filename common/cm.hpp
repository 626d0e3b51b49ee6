// cm.hpp - rdma_cm's events checked and waited for, and the addresses it takes
// (lesson 9 writes the wait out; lesson 12's multicast program uses these).
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace wb {

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
