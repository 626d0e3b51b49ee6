// lesson9.cpp - rdma_cm: lesson 4's sum service, connected by librdmacm
// instead of a TCP side channel and hand-made QP transitions.
//
// What it teaches
//   The RDMA connection manager (librdmacm) does what lessons 3 and 4 did by
//   hand: it turns an IP address into a device, port and GID (address
//   resolution), finds the path (route resolution), trades QP numbers, PSNs
//   and MTU with the peer in CM messages (ConnectRequest / ConnectReply /
//   ReadyToUse, sent as MADs to QP1) and moves the QP through INIT, RTR and
//   RTS itself. Every step is asynchronous: we start it, then wait (bounded,
//   with poll() on the event channel's fd) for the event that says how it
//   went, check it is the one we expected, and acknowledge it. The connect
//   request carries a few bytes of private data (which lesson, which version)
//   that the server checks before it accepts. The data path is plain verbs,
//   exactly as in lesson 4: ibv_post_recv, ibv_post_send, ibv_poll_cq.
//
// How to run it (HOST is an IP address of the server's RDMA netdev, not a
// name for the TCP side channel: rdma_cm maps that address to the device)
//   one host, two terminals:  ./lesson9                ./lesson9 192.0.2.1 2 3
//   two hosts:                hostA$ ./lesson9         hostB$ ./lesson9 IP-OF-A 2 3
//   Soft-RoCE lab (rxe0 on dummy0 = 192.0.2.1; 127.0.0.1 is not on rxe0):
//     scripts/lab.sh run -- bash -c './lesson9 --timeout 20 & sleep 1; ./lesson9 192.0.2.1 2 3; wait'
//   Negative numbers follow --:  ./lesson9 192.0.2.1 -- -7 3
//
// Verbs it introduces (librdmacm)
//   rdma_create_event_channel, rdma_create_id, rdma_bind_addr, rdma_listen,
//   rdma_resolve_addr, rdma_resolve_route, rdma_create_qp, rdma_connect,
//   rdma_accept, rdma_reject, rdma_get_cm_event, rdma_ack_cm_event,
//   rdma_event_str, rdma_disconnect, rdma_destroy_qp, rdma_destroy_id,
//   rdma_destroy_event_channel
//
// Read more
//   man rdma_cm (the overview and the call order on each side),
//   man rdma_get_cm_event (every event and its status), man rdma_connect,
//   man rdma_accept, man rdma_create_qp; docs/lesson9-rdma-cm.md
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "check.hpp"
#include "connect.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

constexpr uint8_t kLesson = 9;

// Private data: the first bytes of the CM's ConnectRequest (and of its
// ConnectReply or Reject) are ours. We send "WB", the lesson and a protocol
// version; the server rejects anything else before it spends a QP on it.
constexpr uint8_t kProtocolVersion = 1;
struct Hello {
    uint8_t magic[2];  // 'W', 'B'
    uint8_t lesson;    // 9
    uint8_t version;   // kProtocolVersion unless -P says otherwise
};
static_assert(sizeof(Hello) == 4);

// How long one address or route resolution may take, in milliseconds (the
// unit rdma_resolve_addr and rdma_resolve_route use): ARP on Ethernet, a path
// record query to the subnet manager on InfiniBand. Never more than --timeout.
constexpr int kResolveTimeoutMs = 2000;

// IB CM reject reasons (IBTA table "REJ reason"), as RDMA_CM_EVENT_REJECTED's
// status on InfiniBand and RoCE. librdmacm has no string function for them.
constexpr int kRejectNoListener = 8;  // "invalid service ID": nothing listens on that port (yet)
constexpr int kRejectConsumer = 28;   // "consumer defined": the server called rdma_reject

// The sum service's messages, as in lesson 4: fixed size, big-endian.
//   request  (client -> server): int64 A, int64 B                       16 bytes
//   response (server -> client): uint32 status, 4 zero bytes, int64 SUM  16 bytes
constexpr uint32_t kRequestSize = 16;
constexpr uint32_t kResponseSize = 16;
constexpr uint32_t kStatusOk = 0;        // SUM is A + B
constexpr uint32_t kStatusOverflow = 1;  // A + B does not fit in int64; SUM is 0

void put_i64(uint8_t* p, int64_t v) {
    uint64_t be = htobe64(static_cast<uint64_t>(v));  // 64-bit conversion, not htonl
    std::memcpy(p, &be, 8);
}
int64_t get_i64(const uint8_t* p) {
    uint64_t be;
    std::memcpy(&be, p, 8);
    return static_cast<int64_t>(be64toh(be));
}
void put_u32(uint8_t* p, uint32_t v) {
    uint32_t be = htobe32(v);
    std::memcpy(p, &be, 4);
}
uint32_t get_u32(const uint8_t* p) {
    uint32_t be;
    std::memcpy(&be, p, 4);
    return be32toh(be);
}

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline` (at least 1, so poll() still looks once).
int ms_left(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 1 ? static_cast<int>(left) : 1;
}

// "192.0.2.1" or "::1" and a port, as the sockaddr rdma_cm wants. Exits 2
// (misuse) when `host` is not a numeric address: rdma_cm needs the IP of an
// RDMA netdev, and a name could resolve to anything.
sockaddr_storage ip_address(const std::string& host, uint16_t port, const char* what) {
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    hints.ai_family = AF_UNSPEC;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    if (getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0)
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

// What an event's status means: a negative errno for most events, an IB CM
// reject reason for REJECTED.
std::string status_str(const rdma_cm_event* ev) {
    if (ev->status == 0) return "status 0";
    if (ev->event == RDMA_CM_EVENT_REJECTED) {
        std::string why = ev->status == kRejectNoListener ? " (invalid service ID: no listener on that port)"
                          : ev->status == kRejectConsumer ? " (consumer defined: the server rejected us)"
                                                          : "";
        return "reject reason " + std::to_string(ev->status) + why;
    }
    return "status " + std::to_string(ev->status) + (ev->status < 0 ? " " + wb::errno_str(-ev->status) : "");
}

// Wait for the next CM event: poll() on the channel's fd for at most
// timeout_ms (-1: no limit), then rdma_get_cm_event, which the O_NONBLOCK fd
// keeps from ever blocking. The caller reads what it needs from the event and
// then MUST acknowledge it with rdma_ack_cm_event: rdma_destroy_id waits for
// every event of its id to be acknowledged, forever.
rdma_cm_event* next_cm_event(rdma_event_channel* ec, int timeout_ms, const std::string& waiting_for) {
    for (;;) {
        pollfd p{.fd = ec->fd, .events = POLLIN, .revents = 0};
        int n = poll(&p, 1, timeout_ms);
        if (n == -1 && errno == EINTR) continue;
        CHECK_ERRNO(n);
        if (n == 0)
            wb::fail("no rdma_cm event within " + std::to_string((timeout_ms + 999) / 1000) +
                         " s while waiting for " + waiting_for,
                     "is the peer running and reachable? raise --timeout if the machine is slow");
        rdma_cm_event* ev = nullptr;
        if (rdma_get_cm_event(ec, &ev) == -1 && errno == EAGAIN) continue;  // someone else took it
        CHECK_ERRNO(ev ? 0 : -1, "rdma_get_cm_event(ec, &ev)");
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
        hint = "is HOST an IP address of the server's RDMA netdev (rdma link show; ip addr)? 127.0.0.1 is "
               "not on rxe; in a container or network namespace rdma_cm may not see the device";
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR: hint = "is there a route to HOST over the RDMA netdev? (ip route get HOST)"; break;
    case RDMA_CM_EVENT_UNREACHABLE:
        hint = "the server's CM never answered: is it running? is UDP 4791 open? is HOST the right address?";
        break;
    case RDMA_CM_EVENT_REJECTED: hint = "is a lesson-9 server listening on that port (-p)?"; break;
    case RDMA_CM_EVENT_CONNECT_ERROR: hint = "the connection failed after the reply: see the peer's output"; break;
    default: break;
    }
    wb::fail(std::string("expected ") + rdma_event_str(expected) + ", got " + rdma_event_str(ev->event) + " (" +
                 status_str(ev) + ")",
             hint);
}

// Fill our private data.
Hello make_hello(uint8_t version) { return Hello{.magic = {'W', 'B'}, .lesson = kLesson, .version = version}; }

// "" if `data` is a lesson-9 Hello of our version, else what is wrong with it.
std::string check_hello(const void* data, size_t len) {
    if (data == nullptr || len < sizeof(Hello)) return "no private data";
    Hello h;
    std::memcpy(&h, data, sizeof h);
    if (h.magic[0] != 'W' || h.magic[1] != 'B') return "private data that is not from a workbook lesson";
    if (h.lesson != kLesson) return "private data from lesson " + std::to_string(h.lesson);
    if (h.version != kProtocolVersion)
        return "protocol version " + std::to_string(h.version) + " (this side speaks " +
               std::to_string(kProtocolVersion) + ")";
    return "";
}

}  // namespace

int main(int argc, char** argv) {
    std::string bind_arg, version_arg;
    const wb::ExtraOption extra[] = {
        {'b', "bind", "ADDR", "server: IP address to listen on (default: every address, 0.0.0.0)", &bind_arg},
        {'P', "pdata-version", "N",
         "client: protocol version sent in the private data, 0..255 (default: 1; any other is rejected)",
         &version_arg},
    };
    const wb::Usage usage = {
        .synopsis = "[options] [-b ADDR]          server\n"
                    "  lesson9 [options] HOST A B         client: ask HOST for A + B",
        .summary = "lesson 4's sum service, connected with rdma_cm instead of a TCP side channel",
        .notes = "Here -p is the RDMA CM port (the CM's port space, not a TCP socket), and HOST\n"
                 "is an IP address of the server's RDMA netdev: rdma_cm picks the device, port and\n"
                 "GID from it. -d, if given, must name the device rdma_cm picks; -i and -g are not used.",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_client = !opt.args.empty();
    if (is_client && opt.args.size() != 3)
        wb::usage_error("a client needs HOST A B (got " + std::to_string(opt.args.size()) + " arguments)");
    if (is_client && !bind_arg.empty()) wb::usage_error("-b is for the server (a client connects to HOST)");
    if (!is_client && !version_arg.empty()) wb::usage_error("-P is for the client (give HOST A B too)");
    if (opt.gid_index >= 0) wb::usage_error("-g does not apply: rdma_cm chooses the GID from the IP address");
    const uint8_t version =
        version_arg.empty() ? kProtocolVersion : static_cast<uint8_t>(wb::parse_range(version_arg, "-P", 0, 255));
    const int64_t a = is_client ? wb::parse_i64(opt.args[1], "A") : 0;
    const int64_t b = is_client ? wb::parse_i64(opt.args[2], "B") : 0;
    const sockaddr_storage addr = is_client ? ip_address(opt.args[0], opt.tcp_port, "HOST")
                                            : ip_address(bind_arg.empty() ? "0.0.0.0" : bind_arg, opt.tcp_port, "-b");

    // The event channel: every CM event for our ids arrives on its fd. We
    // make it non-blocking and wait in poll(), so that no wait is unbounded.
    // Handles are declared in creation order; C++ destroys them in reverse
    // (ids before the channel; MR, CQ, PD after the QP, which we destroy by
    // hand with rdma_destroy_qp: no handle covers it).
    wb::EventChannel ec{CHECK_PTR(rdma_create_event_channel())};
    const int fd_flags = CHECK_ERRNO(fcntl(ec->fd, F_GETFL));
    CHECK_ERRNO(fcntl(ec->fd, F_SETFL, fd_flags | O_NONBLOCK));

    // Both sides: one receive and one send buffer of 16 bytes each. Receives
    // are written by our NIC, so LOCAL_WRITE; the peer never touches our
    // memory directly (no REMOTE_* access).
    constexpr size_t kBufferSize = kRequestSize + kResponseSize;
    wb::Buffer buf = wb::alloc_buffer(kBufferSize);
    uint8_t* const recv_buf = reinterpret_cast<uint8_t*>(buf.get());
    uint8_t* const send_buf = recv_buf + 16;

    // The QP's shape, the same on both sides; rdma_create_qp creates it and
    // moves it to INIT, and connect/accept take it to RTR and RTS.
    auto qp_shape = [](ibv_cq* cq) {
        return ibv_qp_init_attr{
            .send_cq = cq,
            .recv_cq = cq,
            .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
            .qp_type = IBV_QPT_RC,  // RDMA_PS_TCP ids carry reliable connected QPs
        };
    };

    // Post the one receive the peer's message will land in.
    auto post_receive = [&](ibv_qp* qp, ibv_mr* mr, uint32_t length) {
        ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(recv_buf), .length = length, .lkey = mr->lkey};
        ibv_recv_wr wr = {.wr_id = 1, .next = nullptr, .sg_list = &sge, .num_sge = 1};
        ibv_recv_wr* bad = nullptr;
        CHECK_RC(ibv_post_recv(qp, &wr, &bad));
    };

    if (is_client) {
        // --- Client: resolve, connect (retrying while nothing listens), ask, disconnect. ---
        const Hello hello = make_hello(version);
        const auto deadline = Clock::now() + std::chrono::seconds(opt.timeout_s);
        // The PD, CQ and MR live on the device the first resolution finds and
        // survive a retry; each attempt needs a new id (a rejected id cannot
        // connect again) and so a new QP.
        wb::ProtectionDomain pd;
        wb::CompletionQueue cq;
        wb::MemoryRegion mr;
        wb::CmId id;
        int attempts = 0;
        uint32_t remote_qpn = 0;
        for (;;) {
            ++attempts;
            rdma_cm_id* raw_id = nullptr;
            // RDMA_PS_TCP: the port space of reliable connected QPs (like TCP's ports).
            CHECK_ERRNO(rdma_create_id(ec.get(), &raw_id, nullptr, RDMA_PS_TCP));
            id.reset(raw_id);

            // Address resolution: which local device, port and GID reach HOST.
            const int resolve_ms = std::min(kResolveTimeoutMs, ms_left(deadline));
            CHECK_ERRNO(rdma_resolve_addr(id.get(), nullptr, reinterpret_cast<sockaddr*>(const_cast<sockaddr_storage*>(&addr)),
                                          resolve_ms),
                        "is HOST an IP address of an RDMA netdev's peer? (ip route get HOST)");
            rdma_cm_event* ev = next_cm_event(ec.get(), ms_left(deadline), "RDMA_CM_EVENT_ADDR_RESOLVED");
            expect_event(ev, RDMA_CM_EVENT_ADDR_RESOLVED);
            CHECK_ERRNO(rdma_ack_cm_event(ev));
            if (attempts == 1) {
                const char* dev = ibv_get_device_name(id->verbs->device);
                if (!opt.device.empty() && opt.device != dev)
                    wb::fail("rdma_cm reaches " + opt.args[0] + " through " + dev + ", not " + opt.device,
                             "drop -d, or give the IP address of a peer reachable through " + opt.device);
                std::printf("address resolved: %s reaches %s through %s port %u\n",
                            address_str(rdma_get_local_addr(id.get())).c_str(), opt.args[0].c_str(), dev,
                            id->port_num);
            }

            // Route resolution: the path to HOST (on RoCE: the GIDs and the
            // next hop's MAC; on InfiniBand: a path record from the SM).
            CHECK_ERRNO(rdma_resolve_route(id.get(), std::min(kResolveTimeoutMs, ms_left(deadline))));
            ev = next_cm_event(ec.get(), ms_left(deadline), "RDMA_CM_EVENT_ROUTE_RESOLVED");
            expect_event(ev, RDMA_CM_EVENT_ROUTE_RESOLVED);
            CHECK_ERRNO(rdma_ack_cm_event(ev));

            // Our own PD and CQ on the device rdma_cm chose (id->verbs), once.
            if (!pd) {
                pd.reset(CHECK_PTR(ibv_alloc_pd(id->verbs)));
                cq.reset(CHECK_PTR(ibv_create_cq(id->verbs, 2, nullptr, nullptr, 0)));  // one send, one receive
                mr.reset(CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), kBufferSize, IBV_ACCESS_LOCAL_WRITE)));
            } else if (pd->context != id->verbs) {
                wb::fail("rdma_cm chose another device on a retry", "does HOST move between netdevs?");
            }
            // The QP, on the id: rdma_cm will move it to RTR and RTS for us.
            ibv_qp_init_attr qp_attr = qp_shape(cq.get());
            CHECK_ERRNO(rdma_create_qp(id.get(), pd.get(), &qp_attr));
            // The receive for the answer goes up before we connect (lesson 4).
            post_receive(id->qp, mr.get(), kResponseSize);

            rdma_conn_param param = {
                .private_data = &hello,
                .private_data_len = sizeof hello,
                .responder_resources = 0,  // RDMA READ/atomic requests the server may have in flight at us: none
                .initiator_depth = 0,      // READ/atomic requests we may have in flight at the server: none
                .flow_control = 0,         // InfiniBand end-to-end flow control: advertised only, unused here
                .retry_count = 7,          // resend up to 7 times without an ACK (3 bits), then IBV_WC_RETRY_EXC_ERR
                .rnr_retry_count = 7,      // 7 = retry forever on RNR NAK (3 bits); our waits are bounded instead
            };
            CHECK_ERRNO(rdma_connect(id.get(), &param));
            if (attempts == 1) std::printf("connecting to %s port %u\n", opt.args[0].c_str(), opt.tcp_port);
            ev = next_cm_event(ec.get(), ms_left(deadline), "RDMA_CM_EVENT_ESTABLISHED");
            if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
                // The server's reply carries its Hello: check it too.
                const std::string why = check_hello(ev->param.conn.private_data, ev->param.conn.private_data_len);
                remote_qpn = ev->param.conn.qp_num;  // the server's QP number, from its ConnectReply
                CHECK_ERRNO(rdma_ack_cm_event(ev));
                if (!why.empty())
                    wb::fail("the server accepted with " + why, "run lesson 9 of this workbook on both sides");
                break;
            }
            if (ev->event == RDMA_CM_EVENT_REJECTED && ev->status == kRejectConsumer) {
                // The server refused us and said why in its own private data.
                const std::string why = check_hello(ev->param.conn.private_data, ev->param.conn.private_data_len);
                Hello theirs{};
                if (ev->param.conn.private_data && ev->param.conn.private_data_len >= sizeof theirs)
                    std::memcpy(&theirs, ev->param.conn.private_data, sizeof theirs);
                CHECK_ERRNO(rdma_ack_cm_event(ev));
                wb::fail("the server rejected the connection: we sent protocol version " + std::to_string(version) +
                             ", it speaks " + std::to_string(theirs.version),
                         why.empty() ? "run the same build of lesson 9 on both sides" : "its answer: " + why);
            }
            // Nothing listens there yet (or the CM got no answer): retry
            // until --timeout, the server may still be starting.
            const bool retry = (ev->event == RDMA_CM_EVENT_REJECTED && ev->status == kRejectNoListener) ||
                               ev->event == RDMA_CM_EVENT_UNREACHABLE;
            if (!retry || Clock::now() + std::chrono::milliseconds(200) >= deadline) {
                if (retry)
                    std::fprintf(stderr, "%s: no lesson-9 server at %s port %u after %d attempts in %d s\n",
                                 wb::program_name(), opt.args[0].c_str(), opt.tcp_port, attempts, opt.timeout_s);
                expect_event(ev, RDMA_CM_EVENT_ESTABLISHED);  // exits with the event and what to check
            }
            CHECK_ERRNO(rdma_ack_cm_event(ev));
            if (attempts == 1) std::printf("nobody listens there yet: retrying for up to %d s\n", opt.timeout_s);
            rdma_destroy_qp(id.get());  // this attempt's QP and id go; PD, CQ and MR stay
            id.reset();
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        std::printf("connected: local qp 0x%x, remote qp 0x%x\n", id->qp->qp_num, remote_qpn);

        // --- The data path: lesson 4's SEND and RECV, unchanged. ---
        put_i64(send_buf, a);
        put_i64(send_buf + 8, b);
        ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(send_buf), .length = kRequestSize, .lkey = mr->lkey};
        ibv_send_wr wr = {
            .wr_id = 2,
            .sg_list = &sge,
            .num_sge = 1,
            .opcode = IBV_WR_SEND,
            .send_flags = IBV_SEND_SIGNALED,
        };
        ibv_send_wr* bad = nullptr;
        CHECK_RC(ibv_post_send(id->qp, &wr, &bad));
        std::printf("sent request: %lld + %lld\n", static_cast<long long>(a), static_cast<long long>(b));
        wb::poll_one(cq.get(), opt.timeout_s, "the SEND of the request");
        const ibv_wc wc = wb::poll_one(cq.get(), opt.timeout_s, "the answer");
        if (wc.byte_len != kResponseSize)
            wb::fail("the server sent a " + std::to_string(wc.byte_len) + "-byte answer, expected " +
                         std::to_string(kResponseSize),
                     "is the server lesson 9 of this workbook?");
        const uint32_t status = get_u32(recv_buf);
        const int64_t sum = get_i64(recv_buf + 8);

        // --- Disconnect: a DisconnectRequest; the server answers with a DisconnectReply. ---
        CHECK_ERRNO(rdma_disconnect(id.get()));
        rdma_cm_event* ev = next_cm_event(ec.get(), opt.timeout_s * 1000, "RDMA_CM_EVENT_DISCONNECTED");
        expect_event(ev, RDMA_CM_EVENT_DISCONNECTED);
        CHECK_ERRNO(rdma_ack_cm_event(ev));
        rdma_destroy_qp(id.get());  // before the CQ and PD it uses; the handles take care of the rest

        if (status == kStatusOverflow)
            wb::fail(std::to_string(a) + " + " + std::to_string(b) + " overflows a 64-bit integer (the server says so)",
                     "choose A and B whose sum lies in -2^63 .. 2^63-1");
        if (status != kStatusOk)
            wb::fail("the server answered with unknown status " + std::to_string(status),
                     "is the server lesson 9 of this workbook?");
        std::printf("result: %lld + %lld = %lld\n", static_cast<long long>(a), static_cast<long long>(b),
                    static_cast<long long>(sum));
        return 0;
    }

    // --- Server: bind, listen, accept one client, answer it, wait for its disconnect. ---
    rdma_cm_id* raw_listen = nullptr;
    CHECK_ERRNO(rdma_create_id(ec.get(), &raw_listen, nullptr, RDMA_PS_TCP));
    wb::CmId listen_id{raw_listen};
    CHECK_ERRNO(rdma_bind_addr(listen_id.get(), reinterpret_cast<sockaddr*>(const_cast<sockaddr_storage*>(&addr))),
                "is another server already on that port (-p)? is -b an address of this host?");
    CHECK_ERRNO(rdma_listen(listen_id.get(), 1));  // backlog: 1 pending connect request
    std::printf("listening on %s, RDMA CM port %u\n",
                address_str(rdma_get_local_addr(listen_id.get())).c_str(), opt.tcp_port);

    // A connect request brings a NEW id for the connection (ev->id); the
    // listening id stays for further requests.
    const int first_wait_ms = opt.accept_timeout_s() < 0 ? -1 : opt.accept_timeout_s() * 1000;
    rdma_cm_event* ev = next_cm_event(ec.get(), first_wait_ms, "a client's RDMA_CM_EVENT_CONNECT_REQUEST");
    expect_event(ev, RDMA_CM_EVENT_CONNECT_REQUEST);
    wb::CmId id{ev->id};
    const std::string peer = address_str(rdma_get_peer_addr(id.get()));
    const std::string why = check_hello(ev->param.conn.private_data, ev->param.conn.private_data_len);
    const uint32_t remote_qpn = ev->param.conn.qp_num;  // the client's QP number, from its ConnectRequest
    if (!why.empty()) {
        // Refuse before spending a QP on it, and tell the client what we speak.
        const Hello ours = make_hello(kProtocolVersion);
        CHECK_ERRNO(rdma_reject(id.get(), &ours, sizeof ours));
        CHECK_ERRNO(rdma_ack_cm_event(ev));
        std::printf("result: rejected %s: it sent %s\n", peer.c_str(), why.c_str());
        wb::fail("rejected the client " + peer + ": it sent " + why, "run lesson 9 of this workbook on both sides");
    }
    CHECK_ERRNO(rdma_ack_cm_event(ev));
    std::printf("connect request from %s on %s port %u\n", peer.c_str(), ibv_get_device_name(id->verbs->device),
                id->port_num);
    if (!opt.device.empty() && opt.device != ibv_get_device_name(id->verbs->device))
        wb::fail(std::string("the client came in through ") + ibv_get_device_name(id->verbs->device) + ", not " +
                     opt.device,
                 "drop -d, or bind to that device's address with -b");

    // Our own PD and CQ on the device the request came in on.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(id->verbs))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(id->verbs, 2, nullptr, nullptr, 0))};  // one send, one receive
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), kBufferSize, IBV_ACCESS_LOCAL_WRITE))};
    ibv_qp_init_attr qp_attr = qp_shape(cq.get());
    CHECK_ERRNO(rdma_create_qp(id.get(), pd.get(), &qp_attr));
    post_receive(id->qp, mr.get(), kRequestSize);  // before accept: the request may follow at once

    const Hello ours = make_hello(kProtocolVersion);
    rdma_conn_param param = {
        .private_data = &ours,
        .private_data_len = sizeof ours,
        .responder_resources = 0,  // RDMA READ/atomic requests the client may have in flight at us: none
        .initiator_depth = 0,      // READ/atomic requests we may have in flight at the client: none
        .flow_control = 0,         // advertised only, unused here
        .retry_count = 7,          // ignored by rdma_accept: the client's retry_count sets ours
        .rnr_retry_count = 7,      // 7 = the client's SENDs retry forever on RNR NAK (3 bits)
    };
    CHECK_ERRNO(rdma_accept(id.get(), &param));
    ev = next_cm_event(ec.get(), opt.timeout_s * 1000, "RDMA_CM_EVENT_ESTABLISHED");
    expect_event(ev, RDMA_CM_EVENT_ESTABLISHED);
    CHECK_ERRNO(rdma_ack_cm_event(ev));
    std::printf("connected: local qp 0x%x, remote qp 0x%x\n", id->qp->qp_num, remote_qpn);

    // --- The data path: lesson 4's RECV and SEND, unchanged. ---
    const ibv_wc wc = wb::poll_one(cq.get(), opt.timeout_s, "the client's request");
    if (wc.byte_len != kRequestSize)
        wb::fail("the client sent a " + std::to_string(wc.byte_len) + "-byte request, expected " +
                     std::to_string(kRequestSize),
                 "is the client lesson 9 of this workbook?");
    const int64_t ra = get_i64(recv_buf), rb = get_i64(recv_buf + 8);
    int64_t sum = 0;
    const bool overflow = __builtin_add_overflow(ra, rb, &sum);
    put_u32(send_buf, overflow ? kStatusOverflow : kStatusOk);
    put_u32(send_buf + 4, 0);
    put_i64(send_buf + 8, overflow ? 0 : sum);
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(send_buf), .length = kResponseSize, .lkey = mr->lkey};
    ibv_send_wr wr = {
        .wr_id = 2,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(id->qp, &wr, &bad));
    wb::poll_one(cq.get(), opt.timeout_s, "the SEND of the answer");

    // --- The client disconnects; we answer its DisconnectRequest with rdma_disconnect. ---
    ev = next_cm_event(ec.get(), opt.timeout_s * 1000, "the client's RDMA_CM_EVENT_DISCONNECTED");
    expect_event(ev, RDMA_CM_EVENT_DISCONNECTED);
    CHECK_ERRNO(rdma_ack_cm_event(ev));
    CHECK_ERRNO(rdma_disconnect(id.get()));  // sends the DisconnectReply
    rdma_destroy_qp(id.get());  // before the CQ and PD; then MR, CQ, PD, the ids, the channel (handles)

    if (overflow) {
        std::printf("result: %lld + %lld overflows int64\n", static_cast<long long>(ra), static_cast<long long>(rb));
        wb::fail(std::to_string(ra) + " + " + std::to_string(rb) + " overflows a 64-bit integer; the client was told");
    }
    std::printf("result: %lld + %lld = %lld\n", static_cast<long long>(ra), static_cast<long long>(rb),
                static_cast<long long>(sum));
    return 0;
}
