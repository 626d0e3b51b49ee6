// ex9_1.cpp - exercise 9.1: the sum in the connection's private data, no SEND at all.
//
// Lesson 9 without its data path. rdma_connect and rdma_accept can carry a
// few bytes of ours, "private data", inside the CM messages themselves: the
// client's ConnectRequest and the server's ConnectReply. That is room enough
// for lesson 4's 16-byte request and 16-byte response (common/sum_protocol.hpp):
//     client: rdma_connect with A and B  -> server: CONNECT_REQUEST event, adds
//     server: rdma_accept with the sum    -> client: ESTABLISHED event, prints it
// The QP is still created (an RC connection needs one) but never carries a
// message. The task is in README.md beside this file; `make grade EX=9.1`
// checks it, and the port counters that say whether a SEND happened.
//
// Run it (the lab: rxe0 on dummy0 = 192.0.2.1; never 127.0.0.1):
//     ex9_1 --timeout 10 &  ex9_1 192.0.2.1 2 3
//
// Calls it uses (lesson 9): rdma_create_event_channel, rdma_create_id,
// rdma_bind_addr, rdma_listen, rdma_resolve_addr, rdma_resolve_route,
// rdma_create_qp, rdma_connect and rdma_accept with rdma_conn_param's
// private_data and private_data_len, rdma_get_cm_event (the event's
// param.conn.private_data, private_data_len), rdma_ack_cm_event, rdma_disconnect.
// Read more: man rdma_connect, man rdma_accept, man rdma_get_cm_event;
// docs/lesson9-rdma-cm.md (rdma_conn_param, field by field).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <fcntl.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "check.hpp"
#include "cm.hpp"
#include "completion.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "sum_protocol.hpp"

namespace {

// How long one address or one route resolution may take, in milliseconds (lesson 9).
constexpr int kResolveTimeoutMs = 2000;

// The most private data either side keeps from an event: more than any CM
// message carries (a ConnectReply has room for 196 bytes).
constexpr uint32_t kMaxPrivateData = 256;

// Each CM event is waited for with wb::next_cm_event (lesson 9: bounded,
// and checked). The caller reads what it needs from the event, then
// acknowledges it: the ack frees the event, its private data with it.

}  // namespace

int main(int argc, char** argv) {
    std::string bind_text;
    const wb::ExtraOption extra[] = {
        {'b', "bind", "ADDR", "server: the IP address to listen on (default: all, ::)", &bind_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]              server: add the two numbers a client's ConnectRequest carries\n"
                    "  ex9_1 [options] HOST A B       client: A and B in the ConnectRequest, the sum in the reply",
        .summary = "exercise 9.1: lesson 9's sum service in rdma_cm's private data, no SEND",
        .notes = "HOST is an IP address on the server's RDMA netdev (lesson 9), never 127.0.0.1.",
        .port_help = "RDMA CM port the server listens on, the client connects to",
        .timeout_help = "every wait on the peer and on rdma_cm's events",
        .numbers_after_host = true,
        .port_and_gid = false,
        .no_address_options = "rdma_cm picks the port and GID from the IP address",
        .server_scope = "The server listens on every address of this host (or only -b's), RDMA CM port -p,\n"
                        "and serves one client: the first connection that goes wrong ends it (exit 1).\n"
                        "Run it where you trust whoever can reach that port.",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const wb::SumArgs sum_args = wb::parse_sum_args(opt);
    const bool is_server = sum_args.is_server;
    if (!is_server && opt.given('b')) wb::usage_error("-b is a server option");
    const int64_t a = sum_args.a, b = sum_args.b;

    // 1. The event channel (O_NONBLOCK) and an id; the server listens and
    //    takes a CONNECT_REQUEST, the client resolves address and route (lesson 9).
    wb::EventChannel ec{CHECK_PTR(rdma_create_event_channel())};
    const int fd_flags = CHECK_ERRNO(fcntl(ec->fd, F_GETFL));
    CHECK_ERRNO(fcntl(ec->fd, F_SETFL, fd_flags | O_NONBLOCK));
    sockaddr_storage ip = is_server ? wb::ip_address(opt.given('b') ? bind_text : "::", opt.tcp_port, "-b")
                                    : wb::ip_address(opt.args[0], opt.tcp_port, "HOST");
    sockaddr* const ip_addr = reinterpret_cast<sockaddr*>(&ip);
    rdma_cm_id* raw = nullptr;
    CHECK_ERRNO(rdma_create_id(ec.get(), &raw, nullptr, RDMA_PS_TCP));  // RDMA_PS_TCP: RC QPs, TCP-like ports
    wb::CmId listen_id, id;
    // What the peer's CM message carried, copied out of its event (the ack frees it).
    char peer_data[kMaxPrivateData] = {};
    uint32_t peer_data_len = 0;
    if (is_server) {
        listen_id.reset(raw);
        CHECK_ERRNO(rdma_bind_addr(listen_id.get(), ip_addr),
                    "is another server on that port (-p)? is -b an address of this host?");
        CHECK_ERRNO(rdma_listen(listen_id.get(), 1));  // backlog: 1 connect request may wait for us
        std::printf("server: listening on %s, RDMA CM port %u\n", wb::address_str(ip_addr).c_str(), opt.tcp_port);
        rdma_cm_event* ev = wb::next_cm_event(ec.get(), RDMA_CM_EVENT_CONNECT_REQUEST, opt.accept_timeout_s());
        id.reset(ev->id);
        // TODO(9.1): copy the ConnectRequest's private data out of the event
        // (ev->param.conn.private_data, private_data_len) into peer_data and
        // peer_data_len, never more than fits, and print
        // "server: the ConnectRequest carried N bytes of private data".
        CHECK_ERRNO(rdma_ack_cm_event(ev));
    } else {
        id.reset(raw);
        CHECK_ERRNO(rdma_resolve_addr(id.get(), nullptr, ip_addr, kResolveTimeoutMs),
                    "is HOST reachable through an RDMA netdev? (ip route get HOST; rdma link show) (scripts/doctor.sh --peer HOST checks this)");
        CHECK_ERRNO(rdma_ack_cm_event(wb::next_cm_event(ec.get(), RDMA_CM_EVENT_ADDR_RESOLVED, opt.timeout_s)));
        CHECK_ERRNO(rdma_resolve_route(id.get(), kResolveTimeoutMs),
                    "HOST must be an address on the peer's RDMA netdev; loopback (127.0.0.1) is not one (scripts/doctor.sh --peer HOST checks this)");
        CHECK_ERRNO(rdma_ack_cm_event(wb::next_cm_event(ec.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, opt.timeout_s)));
    }
    std::printf("%s: rdma_cm chose %s port %u, to reach %s\n", is_server ? "server" : "client",
                ibv_get_device_name(id->verbs->device), id->port_num,
                wb::address_str(rdma_get_peer_addr(id.get())).c_str());

    // 2. The objects of an RC connection: PD, one CQ, the QP on the id. The
    //    QP never carries a message here, but rdma_cm connects a QP.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(id->verbs))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(id->verbs, 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    CHECK_ERRNO(rdma_create_qp(id.get(), pd.get(), &qp_attr));
    wb::CmQueuePair qp{id->qp, {id.get()}};  // released by rdma_destroy_qp(id)

    // 3. The server adds what the ConnectRequest carried (common/sum_protocol.cpp:
    //    exactly one 16-byte request, never a byte beyond the length it is given).
    wb::SumAnswer answer;
    if (is_server) {
        answer = wb::answer_sum_request(peer_data, peer_data_len);
        if (answer.error.empty()) std::printf("server: request %" PRId64 " + %" PRId64 "\n", answer.a, answer.b);
    }
    [[maybe_unused]] const wb::SumRequest request = wb::make_sum_request(a, b);  // the client's, for its ConnectRequest

    // 4. The exchange (lesson 9's step 6), now with private data.
    rdma_conn_param param = {
        .private_data = nullptr,
        .private_data_len = 0,
        .responder_resources = 0,  // no RDMA READ/atomic at us
        .initiator_depth = 0,      // none from us
        .retry_count = 6,          // 7 tries, then status 12 (lesson 3)
        .rnr_retry_count = 7,      // retry for ever on RNR NAK
    };
    if (is_server) {
        // TODO(9.1): the response (answer.response, errors included) as the
        // ConnectReply's private data.
        CHECK_ERRNO(rdma_accept(id.get(), &param));
        CHECK_ERRNO(rdma_ack_cm_event(wb::next_cm_event(ec.get(), RDMA_CM_EVENT_ESTABLISHED, opt.timeout_s)));
    } else {
        // TODO(9.1): the request as the ConnectRequest's private data.
        CHECK_ERRNO(rdma_connect(id.get(), &param));
        rdma_cm_event* ev = wb::next_cm_event(ec.get(), RDMA_CM_EVENT_ESTABLISHED, opt.timeout_s);
        // TODO(9.1): copy the ConnectReply's private data out of the event into
        // peer_data and peer_data_len, never more than fits, and print
        // "client: the ConnectReply carried N bytes of private data".
        CHECK_ERRNO(rdma_ack_cm_event(ev));
    }
    std::printf("%s: connected; QP 0x%x carried no message\n", is_server ? "server" : "client", qp->qp_num);

    // 5. Disconnect (lesson 9's step 11): the client asks, the server answers.
    if (is_server) {
        CHECK_ERRNO(rdma_ack_cm_event(wb::next_cm_event(ec.get(), RDMA_CM_EVENT_DISCONNECTED, opt.timeout_s)));
        CHECK_ERRNO(rdma_disconnect(id.get()));
        if (!answer.error.empty()) wb::result_error(answer.error);
        std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answer.a, answer.b, answer.sum);
        return 0;
    }
    CHECK_ERRNO(rdma_disconnect(id.get()));
    CHECK_ERRNO(rdma_ack_cm_event(wb::next_cm_event(ec.get(), RDMA_CM_EVENT_DISCONNECTED, opt.timeout_s)));
    const wb::SumResult r = wb::read_sum_response(peer_data, peer_data_len, a, b);
    if (!r.error.empty()) wb::result_error(r.error);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", a, b, r.sum);
    return 0;
}
