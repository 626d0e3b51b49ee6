// cm.cpp - see cm.hpp.
#include "cm.hpp"

#include <netdb.h>
#include <poll.h>

#include <cstdio>
#include <cstring>

#include "check.hpp"
#include "options.hpp"

namespace wb {

// The status of RDMA_CM_EVENT_REJECTED on InfiniBand and RoCE is the IB CM's
// reject reason (IBTA, "REJ reason" table); librdmacm has no string for it.
constexpr int kRejectNoListener = 8;  // "invalid service ID": nothing listens on that port
constexpr int kRejectConsumer = 28;   // "consumer defined": the peer's program called rdma_reject

void check_cm_event(const rdma_cm_event* ev, rdma_cm_event_type expected) {
    if (ev->event == expected) return;
    std::string status = "status " + std::to_string(ev->status);
    if (ev->event == RDMA_CM_EVENT_REJECTED)
        status = "reject reason " + std::to_string(ev->status) +
                 (ev->status == kRejectNoListener ? ": invalid service ID, nothing listens on that port"
                  : ev->status == kRejectConsumer ? ": consumer defined, the server's program rejected us"
                                                  : "");
    else if (ev->status < 0)
        status += ", " + errno_str(-ev->status);
    const char* hint = "see the peer's output";
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_ERROR:
        hint = "is HOST an IP address reachable through an RDMA netdev (rdma link show; ip route get HOST)? "
               "in a container or network namespace rdma_cm may not see the device (scripts/doctor.sh --peer HOST checks this)";
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR: hint = "is there a route to HOST over the RDMA netdev? (ip route get HOST)"; break;
    case RDMA_CM_EVENT_UNREACHABLE:
        hint = "the server's CM never answered: is it running there? is UDP 4791 open? is HOST right? (scripts/doctor.sh --peer HOST checks this)";
        break;
    case RDMA_CM_EVENT_REJECTED:
        hint = ev->status == kRejectNoListener
                   ? "is the server running there, listening (its \"listening\" line) on the same -p?"
                   : "see the server's output";
        break;
    case RDMA_CM_EVENT_CONNECT_ERROR: hint = "the connection failed after the reply: see the peer's output"; break;
    default: break;
    }
    fail(std::string("expected ") + rdma_event_str(expected) + ", got " + rdma_event_str(ev->event) + " (" +
             status + ")",
         hint);
}

rdma_cm_event* take_cm_event(rdma_event_channel* ec, rdma_cm_event_type waiting_for, int timeout_s) {
    pollfd p{.fd = ec->fd, .events = POLLIN, .revents = 0};
    if (CHECK_ERRNO(poll(&p, 1, timeout_s < 0 ? -1 : timeout_s * 1000)) == 0)
        fail("no rdma_cm event within " + std::to_string(timeout_s) + " s while waiting for " +
                 rdma_event_str(waiting_for),
             waiting_for == RDMA_CM_EVENT_MULTICAST_JOIN  // answered by this host's rdma_cm, not by a peer
                 ? "is the RDMA netdev up? (rdma link show)"
                 : "is the peer still running and reachable? raise --timeout if the machine is slow");
    rdma_cm_event* ev = nullptr;
    CHECK_ERRNO(rdma_get_cm_event(ec, &ev));
    std::printf("cm event: %s\n", rdma_event_str(ev->event));
    return ev;
}

rdma_cm_event* next_cm_event(rdma_event_channel* ec, rdma_cm_event_type expected, int timeout_s) {
    rdma_cm_event* ev = take_cm_event(ec, expected, timeout_s);
    check_cm_event(ev, expected);
    return ev;
}

sockaddr_storage ip_address(const std::string& host, uint16_t port, const char* what) {
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;  // rdma_cm needs an address, not a name
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0)
        usage_error(std::string(what) + ": '" + host + "' is not an IPv4 or IPv6 address");
    sockaddr_storage ss{};
    std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return ss;
}

std::string address_str(const sockaddr* sa) {
    char host[NI_MAXHOST] = "?";
    getnameinfo(sa, sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in), host, sizeof host,
                nullptr, 0, NI_NUMERICHOST);
    return host;
}

}  // namespace wb
