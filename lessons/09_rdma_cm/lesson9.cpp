// lesson9.cpp - rdma_cm: lesson 4's sum service, connected by librdmacm
// instead of a TCP side channel and hand-made QP transitions.
//
// The RDMA connection manager (librdmacm) does what lessons 3 and 4 did by
// hand. It turns an IP address into a device, port and GID (address
// resolution), finds the path (route resolution), trades QP numbers, PSNs and
// the MTU with the peer in CM messages (ConnectRequest, ConnectReply,
// ReadyToUse: MADs sent to QP1) and moves the QP through INIT, RTR and RTS
// itself. Each step is asynchronous: we start it, then wait for the event
// that says how it went (poll() on the event channel's fd, bounded), check
// that it is the event we expected, and acknowledge it. The ConnectRequest
// carries a few bytes of private data (which lesson, which version) that the
// server checks before it accepts. The data path is lesson 4's, unchanged:
// ibv_post_recv, ibv_post_send, ibv_poll_cq. Diff the two files.
//
// Run it on one host (two terminals). HOST is an IP address on the server's
// RDMA netdev: rdma_cm maps it to the device, so 127.0.0.1 does not work.
//     ./lesson9                        server: waits for one client
//     ./lesson9 192.0.2.1 2 3          client: prints "result: 2 + 3 = 5"
//     ./lesson9 192.0.2.1 -- -7 3      negative numbers go after --
// On two hosts: ./lesson9 on host A, ./lesson9 IP-OF-A 2 3 on host B.
// In the lab (rxe0 on dummy0 = 192.0.2.1):
//     scripts/lab.sh run -- bash -c './lesson9 --timeout 20 & sleep 1; ./lesson9 192.0.2.1 2 3; wait'
// -p is the RDMA CM port here (default 18515), not a TCP port; -b ADDR makes
// the server listen on one address only (default: all).
//
// Verbs it introduces (librdmacm):
//     rdma_create_event_channel, rdma_create_id (RDMA_PS_TCP)
//     server: rdma_bind_addr, rdma_listen, rdma_accept, rdma_reject
//     client: rdma_resolve_addr, rdma_resolve_route, rdma_connect
//     both:   rdma_create_qp, rdma_get_cm_event, rdma_ack_cm_event, rdma_event_str,
//             rdma_disconnect, rdma_destroy_qp, rdma_destroy_id, rdma_destroy_event_channel
//
// Read more: man rdma_cm (the call order on each side), man rdma_get_cm_event
// (every event and its status), man rdma_connect, man rdma_accept,
// man rdma_create_qp; docs/lesson9-rdma-cm.md (the CM's packets on the wire,
// REJECTED and ADDR_ERROR, exercises).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <endian.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "check.hpp"
#include "connect.hpp"
#include "handles.hpp"
#include "options.hpp"
#include "sum_protocol.hpp"

namespace {

// The wire format of lesson 4, unchanged: SumRequest and SumResponse in
// common/sum_protocol.hpp, 16 bytes each, integers big-endian.

// The server's receive buffer is larger than a request, so that a message of
// the wrong length still lands and byte_len can tell us how long it was.
constexpr uint32_t kRecvBufferBytes = 64;

// wr_id: our own label for a work request, handed back in its completion.
constexpr uint64_t kRecvId = 1;
constexpr uint64_t kSendId = 2;

// Private data: the first bytes of the CM's ConnectRequest (and of its
// ConnectReply or Reject) are ours to fill. Ours say "a workbook lesson 9,
// protocol version 1"; the server rejects anything else before it spends a
// QP on it. The CM may deliver more bytes than we sent (zero padded).
constexpr uint8_t kLesson = 9;
constexpr uint8_t kProtocolVersion = 1;
struct Hello {
    uint8_t magic[2];  // 'W', 'B'
    uint8_t lesson;    // kLesson
    uint8_t version;   // kProtocolVersion, unless the client's -P says otherwise
};
static_assert(sizeof(Hello) == 4);

// How long one address or one route resolution may take, in milliseconds
// (the unit of rdma_resolve_addr and rdma_resolve_route): ARP on Ethernet, a
// path record query to the subnet manager on InfiniBand.
constexpr int kResolveTimeoutMs = 2000;

// The status of RDMA_CM_EVENT_REJECTED on InfiniBand and RoCE is the IB CM's
// reject reason (IBTA, "REJ reason" table); librdmacm has no string for it.
constexpr int kRejectNoListener = 8;  // "invalid service ID": nothing listens on that port (yet)
constexpr int kRejectConsumer = 28;   // "consumer defined": the server called rdma_reject

// The rdma_cm's backlog: connect requests that may wait for us to take them.
constexpr int kBacklog = 1;

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline`, at least 1 so that poll() looks once more.
int ms_left(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 1 ? static_cast<int>(left) : 1;
}

// "192.0.2.1" or "fe80::1" and a port, as the sockaddr rdma_cm wants. A
// numeric address only (misuse exits 2): rdma_cm needs an address on an RDMA
// netdev, and a name could resolve to anything.
sockaddr_storage ip_address(const std::string& host, uint16_t port, const char* what) {
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0)
        wb::usage_error(std::string(what) + ": '" + host + "' is not an IPv4 or IPv6 address");
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

// What an event's status means: for REJECTED an IB CM reject reason, for
// the error events a negative errno.
std::string status_str(const rdma_cm_event* ev) {
    if (ev->event == RDMA_CM_EVENT_REJECTED) {
        const char* why = ev->status == kRejectNoListener ? ": invalid service ID, nothing listens on that port"
                          : ev->status == kRejectConsumer ? ": consumer defined, the server rejected us"
                                                          : "";
        return "reject reason " + std::to_string(ev->status) + why;
    }
    if (ev->status < 0) return "status " + std::to_string(ev->status) + ", " + wb::errno_str(-ev->status);
    return "status " + std::to_string(ev->status);
}

// Wait for the next CM event: poll() on the channel's fd for at most
// timeout_ms (-1: no limit), then rdma_get_cm_event, which cannot block
// because the fd is O_NONBLOCK. The caller reads what it needs from the event
// and then MUST acknowledge it with rdma_ack_cm_event: rdma_destroy_id waits
// until every event of its id is acknowledged, forever if one is not.
rdma_cm_event* next_cm_event(rdma_event_channel* ec, int timeout_ms, const char* waiting_for, bool narrate = true) {
    for (;;) {
        pollfd p{.fd = ec->fd, .events = POLLIN, .revents = 0};
        const int n = poll(&p, 1, timeout_ms);
        if (n == -1 && errno == EINTR) continue;
        CHECK_ERRNO(n);
        if (n == 0)
            wb::fail(std::string("no rdma_cm event within ") + std::to_string((timeout_ms + 999) / 1000) +
                         " s while waiting for " + waiting_for,
                     "is the peer still running and reachable? raise --timeout if the machine is slow");
        rdma_cm_event* ev = nullptr;
        if (rdma_get_cm_event(ec, &ev) == -1) {
            if (errno == EAGAIN) continue;  // nothing there after all: back to poll()
            wb::fail("rdma_get_cm_event(ec, &ev) failed: " + wb::errno_str(errno));
        }
        if (narrate)
            std::printf("cm event: %s%s\n", rdma_event_str(ev->event),
                        ev->status ? (" (" + status_str(ev) + ")").c_str() : "");
        return ev;
    }
}

// Exit 1, with what to check, unless `ev` is the event we expected.
void expect_event(const rdma_cm_event* ev, rdma_cm_event_type expected) {
    if (ev->event == expected) return;
    const char* hint = "see the peer's output";
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_ERROR:
        hint = "is HOST an IP address reachable through an RDMA netdev (rdma link show; ip route get HOST)? "
               "in a container or network namespace rdma_cm may not see the device";
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR: hint = "is there a route to HOST over the RDMA netdev? (ip route get HOST)"; break;
    case RDMA_CM_EVENT_UNREACHABLE:
        hint = "the server's CM never answered: is it running there? is UDP 4791 open? is HOST right?";
        break;
    case RDMA_CM_EVENT_REJECTED: hint = "is a lesson-9 server listening there on the same -p?"; break;
    case RDMA_CM_EVENT_CONNECT_ERROR: hint = "the connection failed after the reply: see the peer's output"; break;
    default: break;
    }
    wb::fail(std::string("expected ") + rdma_event_str(expected) + ", got " + rdma_event_str(ev->event) + " (" +
                 status_str(ev) + ")",
             hint);
}

// "" when `data` holds a Hello of this lesson and version, else what it holds.
std::string check_hello(const void* data, size_t len) {
    if (data == nullptr || len < sizeof(Hello)) return "no private data";
    Hello h;
    std::memcpy(&h, data, sizeof h);
    if (h.magic[0] != 'W' || h.magic[1] != 'B') return "private data that is not a workbook lesson's";
    if (h.lesson != kLesson) return "private data of lesson " + std::to_string(h.lesson);
    if (h.version != kProtocolVersion)
        return "protocol version " + std::to_string(h.version) + " (this side speaks " +
               std::to_string(kProtocolVersion) + ")";
    return "";
}

// The QP both sides create with rdma_create_qp: lesson 4's shape.
ibv_qp_init_attr qp_shape(ibv_cq* send_cq, ibv_cq* recv_cq) {
    return ibv_qp_init_attr{
        .send_cq = send_cq,
        .recv_cq = recv_cq,
        .cap = {
            .max_send_wr = 1,   // one SEND outstanding at a time
            .max_recv_wr = 1,   // one receive posted at a time
            .max_send_sge = 1,  // each message is one contiguous buffer
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,  // RDMA_PS_TCP ids carry reliable connected QPs
    };
}

// Post one receive for a whole buffer (lesson 4).
void post_receive(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = length, .lkey = mr->lkey};
    ibv_recv_wr wr = {.wr_id = kRecvId, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

// Post one signaled SEND of `length` bytes from the start of `mr` (lesson 4).
void post_send(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(mr->addr), .length = length, .lkey = mr->lkey};
    ibv_send_wr wr = {
        .wr_id = kSendId,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

}  // namespace

int main(int argc, char** argv) {
    std::string bind_text, version_text;
    const wb::ExtraOption extra[] = {
        {'b', "bind", "ADDR", "server: the IP address to listen on (default: all, 0.0.0.0)", &bind_text},
        {'P', "pdata-version", "N",
         "client: protocol version in the private data, 0..255 (default: 1; others are rejected)", &version_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]              server: add the two numbers a client sends\n"
                    "  lesson9 [options] HOST A B     client: send A and B, print the sum",
        .summary = "lesson 4's sum service, connected with rdma_cm instead of a TCP side channel",
        .notes = "Here -p is the RDMA CM port (rdma_cm's own port space, not a TCP socket), and\n"
                 "HOST is an IP address on the server's RDMA netdev: rdma_cm picks the device,\n"
                 "port and GID from it. -d, if given, must name the device it picks.\n"
                 "A and B are signed 64-bit integers; a sum that overflows is an error on both\n"
                 "sides (exit 1).",
        .port_help = "RDMA CM port the server listens on, the client connects to",
        .numbers_after_host = true,
        .no_address_options = "rdma_cm picks the port and GID from the IP address",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    // No host: server. HOST A B: client (common/sum_protocol.cpp checks them).
    const wb::SumArgs sum_args = wb::parse_sum_args(opt);
    const bool is_server = sum_args.is_server;
    if (is_server && !version_text.empty()) wb::usage_error("-P is a client option");
    if (!is_server && !bind_text.empty()) wb::usage_error("-b is a server option");
    if (opt.gid_index >= 0) wb::usage_error("-g does not apply: rdma_cm chooses the GID from the IP address");
    if (opt.ib_port != 1) wb::usage_error("-i does not apply: rdma_cm chooses the port from the IP address");
    const int64_t a = sum_args.a, b = sum_args.b;
    const auto version = static_cast<uint8_t>(
        version_text.empty() ? kProtocolVersion : wb::parse_range(version_text, "-P", 0, 255));
    sockaddr_storage ss = is_server ? ip_address(bind_text.empty() ? "0.0.0.0" : bind_text, opt.tcp_port, "-b")
                                    : ip_address(opt.args[0], opt.tcp_port, "HOST");
    sockaddr* const address = reinterpret_cast<sockaddr*>(&ss);

    // 1. The event channel: every CM event of our ids arrives on its fd. Made
    //    non-blocking: we wait in poll(), with a timeout, never in the library.
    //    Handles are declared in creation order; C++ destroys them in reverse
    //    (MRs, CQs and PD, then the ids, then the channel). The QP is the
    //    exception: no handle covers rdma_create_qp, so we call
    //    rdma_destroy_qp ourselves, first.
    wb::EventChannel ec{CHECK_PTR(rdma_create_event_channel())};
    const int fd_flags = CHECK_ERRNO(fcntl(ec->fd, F_GETFL));
    CHECK_ERRNO(fcntl(ec->fd, F_SETFL, fd_flags | O_NONBLOCK));

    // Memory as in lesson 4: a receive buffer our NIC writes (LOCAL_WRITE),
    // a send buffer it only reads (no flag). No REMOTE_* flag: a SEND never
    // names our memory. Registered once we know the device (step 3).
    const uint32_t recv_len = is_server ? kRecvBufferBytes : sizeof(wb::SumResponse);
    const uint32_t send_len = is_server ? sizeof(wb::SumResponse) : sizeof(wb::SumRequest);
    wb::Buffer recv_buf = wb::alloc_buffer(recv_len);
    wb::Buffer send_buf = wb::alloc_buffer(send_len);

    if (is_server) {
        // 2. Listen: an id bound to an address and CM port, then rdma_listen.
        //    RDMA_PS_TCP is the port space of reliable connected QPs.
        rdma_cm_id* raw = nullptr;
        CHECK_ERRNO(rdma_create_id(ec.get(), &raw, nullptr, RDMA_PS_TCP));
        wb::CmId listen_id{raw};
        CHECK_ERRNO(rdma_bind_addr(listen_id.get(), address),
                    "is another server on that port (-p)? is -b an address of this host?");
        CHECK_ERRNO(rdma_listen(listen_id.get(), kBacklog));
        std::printf("server: listening on %s, RDMA CM port %u\n", address_str(address).c_str(), opt.tcp_port);

        // A ConnectRequest arrives with a NEW id, for this connection only.
        // It comes with the client's private data and QP number.
        const int first_wait_ms = opt.accept_timeout_s() < 0 ? -1 : opt.accept_timeout_s() * 1000;
        rdma_cm_event* ev = next_cm_event(ec.get(), first_wait_ms, "a client's RDMA_CM_EVENT_CONNECT_REQUEST");
        expect_event(ev, RDMA_CM_EVENT_CONNECT_REQUEST);
        wb::CmId id{ev->id};
        const std::string peer = address_str(rdma_get_peer_addr(id.get()));
        const std::string bad_hello = check_hello(ev->param.conn.private_data, ev->param.conn.private_data_len);
        const uint32_t peer_qpn = ev->param.conn.qp_num;
        if (!bad_hello.empty()) {
            // Refuse before spending a QP on it, and say what we speak.
            const Hello ours = {.magic = {'W', 'B'}, .lesson = kLesson, .version = kProtocolVersion};
            CHECK_ERRNO(rdma_reject(id.get(), &ours, sizeof ours));
            CHECK_ERRNO(rdma_ack_cm_event(ev));
            wb::result_error("rejected the client " + peer + ": it sent " + bad_hello);
        }
        CHECK_ERRNO(rdma_ack_cm_event(ev));
        const char* dev = ibv_get_device_name(id->verbs->device);
        std::printf("server: connect request from %s (QP 0x%x) on %s port %u\n", peer.c_str(), peer_qpn, dev,
                    id->port_num);
        if (!opt.device.empty() && opt.device != dev)
            wb::fail("the client came in through " + std::string(dev) + ", not " + opt.device,
                     "drop -d, or listen on that device's address with -b");

        // 3. Our own PD, CQs and MRs on the device the request came in on
        //    (id->verbs), and the QP, created ON THE ID: rdma_cm moves it to
        //    INIT now, and to RTR and RTS during rdma_accept.
        wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(id->verbs))};
        wb::CompletionQueue send_cq{CHECK_PTR(ibv_create_cq(id->verbs, 1, nullptr, nullptr, 0))};
        wb::CompletionQueue recv_cq{CHECK_PTR(ibv_create_cq(id->verbs, 1, nullptr, nullptr, 0))};
        wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE),
                                           "ulimit -l: is locked memory limited?")};
        wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), send_len, 0),
                                           "ulimit -l: is locked memory limited?")};
        ibv_qp_init_attr qp_attr = qp_shape(send_cq.get(), recv_cq.get());
        CHECK_ERRNO(rdma_create_qp(id.get(), pd.get(), &qp_attr));

        // 4. The receive goes up before we accept: the request may follow at once.
        post_receive(id->qp, recv_mr.get(), recv_len);
        std::printf("server: posted a %u-byte receive before accepting\n", recv_len);

        // 5. Accept, with our own private data in the ConnectReply.
        const Hello ours = {.magic = {'W', 'B'}, .lesson = kLesson, .version = kProtocolVersion};
        rdma_conn_param param = {
            .private_data = &ours,
            .private_data_len = sizeof ours,
            .responder_resources = 0,  // RDMA READ/atomic requests the client may have in flight at us: none
            .initiator_depth = 0,      // READ/atomic requests we may have in flight at the client: none
            .flow_control = 0,         // InfiniBand end-to-end flow control: only advertised, unused here
            .retry_count = 7,          // ignored by rdma_accept: the client's ConnectRequest sets it
            .rnr_retry_count = 7,      // the client's SENDs retry forever on RNR NAK (3 bits; 7 = forever)
        };
        CHECK_ERRNO(rdma_accept(id.get(), &param));
        ev = next_cm_event(ec.get(), opt.timeout_s * 1000, "RDMA_CM_EVENT_ESTABLISHED");
        expect_event(ev, RDMA_CM_EVENT_ESTABLISHED);
        CHECK_ERRNO(rdma_ack_cm_event(ev));

        // 6. Wait for the request: lesson 4's step 9, unchanged.
        std::printf("server: QP 0x%x is RTS; waiting for the client's SEND\n", id->qp->qp_num);
        const ibv_wc wc = wb::poll_one(recv_cq.get(), opt.timeout_s, "the client's request (RECV)");
        std::printf("server: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);

        // The application's part, as in lesson 4 (common/sum_protocol.cpp).
        const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get(), wc.byte_len);
        if (wc.byte_len == sizeof(wb::SumRequest))
            std::printf("server: request %" PRId64 " + %" PRId64 "\n", answer.a, answer.b);

        // 7. SEND the response, errors included (lesson 4's step 10).
        std::memcpy(send_buf.get(), &answer.response, sizeof answer.response);
        post_send(id->qp, send_mr.get(), sizeof answer.response);
        wb::poll_one(send_cq.get(), opt.timeout_s, "the SEND of the response");
        std::printf("server: response sent (status %u)\n", be32toh(answer.response.status));

        // 8. The client disconnects (a DisconnectRequest); rdma_disconnect
        //    on our side answers it (a DisconnectReply).
        ev = next_cm_event(ec.get(), opt.timeout_s * 1000, "the client's RDMA_CM_EVENT_DISCONNECTED");
        expect_event(ev, RDMA_CM_EVENT_DISCONNECTED);
        CHECK_ERRNO(rdma_ack_cm_event(ev));
        CHECK_ERRNO(rdma_disconnect(id.get()));

        // 9. Teardown: the QP by hand, before the CQs and PD it uses; the
        //    handles then release MRs, CQs, PD, the two ids and the channel.
        rdma_destroy_qp(id.get());
        if (!answer.error.empty()) wb::result_error(answer.error);
        std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answer.a, answer.b, answer.sum);
        return 0;
    }

    // Client.
    // 2. Resolve the address (which device, port and GID reach HOST), then the
    //    route (on RoCE: the peer's GID and next hop; on InfiniBand: a path
    //    record from the subnet manager), then connect. While nothing listens
    //    on the server's port its CM rejects us (reason 8): the server may be
    //    starting, so we try again, with a new id each time (a rejected id
    //    cannot connect again), until --timeout.
    const auto deadline = Clock::now() + std::chrono::seconds(opt.timeout_s);
    const Hello hello = {.magic = {'W', 'B'}, .lesson = kLesson, .version = version};
    // PD and MRs: created on the first attempt's device (id->verbs), kept
    // across attempts. CQs: new for each attempt (see step 3).
    wb::ProtectionDomain pd;
    wb::CompletionQueue send_cq, recv_cq;
    wb::MemoryRegion recv_mr, send_mr;
    wb::CmId id;
    uint32_t peer_qpn = 0;
    for (int attempt = 1;; ++attempt) {
        const bool first = attempt == 1;  // narrate the first attempt only
        rdma_cm_id* raw = nullptr;
        CHECK_ERRNO(rdma_create_id(ec.get(), &raw, nullptr, RDMA_PS_TCP));
        id.reset(raw);

        const int resolve_ms = std::min(kResolveTimeoutMs, ms_left(deadline));
        CHECK_ERRNO(rdma_resolve_addr(id.get(), nullptr, address, resolve_ms),
                    "is HOST reachable through an RDMA netdev? (ip route get HOST; rdma link show)");
        rdma_cm_event* ev = next_cm_event(ec.get(), ms_left(deadline), "RDMA_CM_EVENT_ADDR_RESOLVED", first);
        expect_event(ev, RDMA_CM_EVENT_ADDR_RESOLVED);
        CHECK_ERRNO(rdma_ack_cm_event(ev));
        const char* dev = ibv_get_device_name(id->verbs->device);
        if (first) {
            std::printf("client: %s reaches %s through %s port %u\n", address_str(rdma_get_local_addr(id.get())).c_str(),
                        opt.args[0].c_str(), dev, id->port_num);
            if (!opt.device.empty() && opt.device != dev)
                wb::fail("rdma_cm reaches " + opt.args[0] + " through " + dev + ", not " + opt.device,
                         "drop -d, or give a HOST reachable through " + opt.device);
        }

        const int route_ms = std::min(kResolveTimeoutMs, ms_left(deadline));
        CHECK_ERRNO(rdma_resolve_route(id.get(), route_ms),
                    "HOST must be an address on the peer's RDMA netdev; loopback (127.0.0.1) is not one");
        ev = next_cm_event(ec.get(), ms_left(deadline), "RDMA_CM_EVENT_ROUTE_RESOLVED", first);
        expect_event(ev, RDMA_CM_EVENT_ROUTE_RESOLVED);
        CHECK_ERRNO(rdma_ack_cm_event(ev));

        // 3. Our own PD, CQs and MRs on the device rdma_cm chose, and the QP,
        //    created ON THE ID: INIT now, RTR and RTS during rdma_connect.
        if (!pd) {
            pd.reset(CHECK_PTR(ibv_alloc_pd(id->verbs)));
            recv_mr.reset(CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE),
                                    "ulimit -l: is locked memory limited?"));
            send_mr.reset(CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), send_len, 0),
                                    "ulimit -l: is locked memory limited?"));
        } else if (pd->context != id->verbs) {
            wb::fail("rdma_cm chose another device on a retry", "is HOST reachable through more than one netdev?");
        }
        // Fresh CQs on every attempt: a rejected attempt's QP goes to the error
        // state and flushes its receive into its CQ (IBV_WC_WR_FLUSH_ERR),
        // which must not be taken for the server's answer later.
        send_cq.reset(CHECK_PTR(ibv_create_cq(id->verbs, 1, nullptr, nullptr, 0)));
        recv_cq.reset(CHECK_PTR(ibv_create_cq(id->verbs, 1, nullptr, nullptr, 0)));
        ibv_qp_init_attr qp_attr = qp_shape(send_cq.get(), recv_cq.get());
        CHECK_ERRNO(rdma_create_qp(id.get(), pd.get(), &qp_attr));

        // 4. The receive for the response goes up before we connect.
        post_receive(id->qp, recv_mr.get(), recv_len);
        if (first) std::printf("client: posted a %u-byte receive before connecting\n", recv_len);

        // 5. Connect: a ConnectRequest carrying our private data and these values.
        rdma_conn_param param = {
            .private_data = &hello,
            .private_data_len = sizeof hello,
            .responder_resources = 0,  // RDMA READ/atomic requests the server may have in flight at us: none
            .initiator_depth = 0,      // READ/atomic requests we may have in flight at the server: none
            .flow_control = 0,         // InfiniBand end-to-end flow control: only advertised, unused here
            .retry_count = 7,          // resend up to 7 times without an ACK (3 bits), then IBV_WC_RETRY_EXC_ERR
            .rnr_retry_count = 7,      // the server's SENDs retry forever on RNR NAK (3 bits; 7 = forever)
        };
        CHECK_ERRNO(rdma_connect(id.get(), &param));
        if (first) std::printf("client: connecting to %s, RDMA CM port %u\n", opt.args[0].c_str(), opt.tcp_port);
        ev = next_cm_event(ec.get(), ms_left(deadline), "RDMA_CM_EVENT_ESTABLISHED", first);
        if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
            // The ConnectReply carried the server's private data and QP number.
            const std::string bad_hello = check_hello(ev->param.conn.private_data, ev->param.conn.private_data_len);
            peer_qpn = ev->param.conn.qp_num;
            CHECK_ERRNO(rdma_ack_cm_event(ev));
            if (!bad_hello.empty())
                wb::fail("the server accepted with " + bad_hello, "run lesson 9 of this workbook on both sides");
            break;
        }
        if (ev->event == RDMA_CM_EVENT_REJECTED && ev->status == kRejectConsumer) {
            // The server refused us, and its private data says what it speaks.
            Hello theirs{};
            if (ev->param.conn.private_data && ev->param.conn.private_data_len >= sizeof theirs)
                std::memcpy(&theirs, ev->param.conn.private_data, sizeof theirs);
            CHECK_ERRNO(rdma_ack_cm_event(ev));
            wb::result_error("the server rejected the connection: we sent protocol version " + std::to_string(version) +
                         ", it speaks " + std::to_string(theirs.version));
        }
        const bool nobody_there = (ev->event == RDMA_CM_EVENT_REJECTED && ev->status == kRejectNoListener) ||
                                  ev->event == RDMA_CM_EVENT_UNREACHABLE;
        if (!nobody_there) expect_event(ev, RDMA_CM_EVENT_ESTABLISHED);  // exits, saying what to check
        if (Clock::now() + std::chrono::milliseconds(200) >= deadline)
            wb::fail("no lesson-9 server answered at " + opt.args[0] + ", RDMA CM port " +
                         std::to_string(opt.tcp_port) + ", within " + std::to_string(opt.timeout_s) + " s (" +
                         std::to_string(attempt) + " attempts, last: " + rdma_event_str(ev->event) + ", " +
                         status_str(ev) + ")",
                     "is the server running there with the same -p? is HOST its RDMA netdev's address?");
        CHECK_ERRNO(rdma_ack_cm_event(ev));
        if (first) std::printf("client: nothing listens there yet; retrying for up to %d s\n", opt.timeout_s);
        rdma_destroy_qp(id.get());  // this attempt's QP and id go; the PD and MRs stay
        id.reset();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::printf("client: QP 0x%x is RTS, connected to the server's QP 0x%x\n", id->qp->qp_num, peer_qpn);

    // 6. SEND the request: lesson 4's step 9, unchanged.
    const wb::SumRequest request = wb::make_sum_request(a, b);
    std::memcpy(send_buf.get(), &request, sizeof request);
    std::printf("client: sending %" PRId64 " and %" PRId64 " (%zu bytes)\n", a, b, sizeof request);
    post_send(id->qp, send_mr.get(), sizeof request);
    wb::poll_one(send_cq.get(), opt.timeout_s, "the SEND of the request");

    // 7. The response arrives in the receive we posted in step 4.
    const ibv_wc wc = wb::poll_one(recv_cq.get(), opt.timeout_s, "the server's response (RECV)");
    std::printf("client: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);

    // 8. Disconnect: a DisconnectRequest; the server's rdma_disconnect replies.
    CHECK_ERRNO(rdma_disconnect(id.get()));
    rdma_cm_event* ev = next_cm_event(ec.get(), opt.timeout_s * 1000, "RDMA_CM_EVENT_DISCONNECTED");
    expect_event(ev, RDMA_CM_EVENT_DISCONNECTED);
    CHECK_ERRNO(rdma_ack_cm_event(ev));

    // 9. Teardown: the QP by hand; the handles release the rest in reverse order.
    rdma_destroy_qp(id.get());

    const wb::SumResult r = wb::read_sum_response(recv_buf.get(), wc.byte_len, a, b);
    if (!r.error.empty()) wb::result_error(r.error);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", a, b, r.sum);
    return 0;
}
