// lesson9.cpp - rdma_cm: lesson 4's sum service, connected by the RDMA connection manager.
//
// Lesson 4 with its TCP exchange and its hand-made QP transitions replaced by
// librdmacm; the rest is lesson 4's, line for line: diff the two files. The
// connection manager turns an IP address into a device, port and GID
// (address and route resolution), trades QP numbers and PSNs with the peer in
// CM messages (MADs sent to QP1) and moves the QP through INIT, RTR and RTS
// itself. Each of its steps is asynchronous: we start it, then wait (bounded)
// for the event that says how it went, check it and acknowledge it.
//
// Run it on one host (two terminals). HOST is an IP address on the server's
// RDMA netdev: rdma_cm maps it to the device, so 127.0.0.1 does not work.
//     ./lesson9                        server: waits for one client
//     ./lesson9 192.0.2.1 2 3          client: prints "result: 2 + 3 = 5"
//     ./lesson9 192.0.2.1 -- -7 3      negative numbers go after --
// On two hosts: ./lesson9 on host A, ./lesson9 IP-OF-A 2 3 on host B. Both sides
// take -d DEV -p CM_PORT --timeout SECS, the server -b ADDR (./lesson9 -h). In the
// lab (rxe0 on dummy0 = 192.0.2.1):
//     scripts/lab.sh run -- bash -c './lesson9 --timeout 20 & sleep 1; ./lesson9 192.0.2.1 2 3; wait'
//
// Verbs it introduces (librdmacm):
//     rdma_create_event_channel, rdma_create_id (RDMA_PS_TCP), rdma_get_cm_event,
//     rdma_ack_cm_event, rdma_event_str
//     server: rdma_bind_addr, rdma_listen, rdma_accept
//     client: rdma_resolve_addr, rdma_resolve_route, rdma_connect
//     both:   rdma_create_qp, rdma_disconnect, rdma_destroy_qp, rdma_destroy_id,
//             rdma_destroy_event_channel
//
// Read more: man rdma_cm (the call order on each side), man rdma_get_cm_event
// (every event and its status), man rdma_connect, man rdma_accept;
// docs/lesson9-rdma-cm.md (the CM's packets on the wire, errors, exercises).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <endian.h>
#include <fcntl.h>
#include <poll.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

// The wire format of the two messages, SumRequest and SumResponse, lives in
// common/sum_protocol.hpp (lessons 4 and 8 use it too): two fixed 16-byte
// structs, integers big-endian, and a status in the response so that the
// server can tell the client why it did not answer with a sum.

// The server's receive buffer is larger than a request, so that a message of
// the wrong length still lands and byte_len can tell us how long it was (a
// message larger than the whole buffer fails in the NIC instead, with
// IBV_WC_LOC_LEN_ERR on most NICs; rxe reports IBV_WC_LOC_QP_OP_ERR here and
// IBV_WC_REM_OP_ERR at the sender, see docs/lesson4-send-recv.md).
constexpr uint32_t kRecvBufferBytes = 64;
// The client can send up to this many bytes with -B, to play a misbehaving client.
constexpr uint32_t kMaxSendBytes = 128;

// wr_id: our own label for a work request, handed back in its completion.
constexpr uint64_t kRecvId = 1;
constexpr uint64_t kSendId = 2;

// Post one receive for a whole buffer: the NIC will put the next incoming
// SEND there. Written out so the reader sees every field.
void post_receive(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr),
        .length = length,  // the most the NIC may write; a longer SEND fails (IBV_WC_LOC_LEN_ERR on most NICs)
        .lkey = mr->lkey,  // proves to our NIC that this memory is registered
    };
    ibv_recv_wr wr = {.wr_id = kRecvId, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    CHECK_RC(ibv_post_recv(qp, &wr, &bad));
}

// Post one signaled SEND of `length` bytes from the start of `mr`.
void post_send(ibv_qp* qp, const ibv_mr* mr, uint32_t length) {
    ibv_sge sge = {
        .addr = reinterpret_cast<uintptr_t>(mr->addr),
        .length = length,
        .lkey = mr->lkey,
    };
    ibv_send_wr wr = {
        .wr_id = kSendId,
        .next = nullptr,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,  // we want a completion: it says the peer's NIC acknowledged it
    };
    ibv_send_wr* bad = nullptr;
    CHECK_RC(ibv_post_send(qp, &wr, &bad));
}

// How long one address or one route resolution may take, in milliseconds
// (the unit of rdma_resolve_addr and rdma_resolve_route): ARP on Ethernet, a
// path record query to the subnet manager on InfiniBand.
constexpr int kResolveTimeoutMs = 2000;

// Wait for the next CM event on `ec`, the `expected` one: poll() on the
// channel's fd for at most timeout_s seconds (-1: no limit), then
// rdma_get_cm_event, which cannot block because the fd is O_NONBLOCK (step
// 1), then the check: wb::check_cm_event (common/cm.cpp, the rdma_cm
// counterpart of check_wc) exits 1 unless it is the event expected, naming
// both events, the status or reject reason, and what to check. The caller
// reads what it needs from the event, then MUST acknowledge it with
// rdma_ack_cm_event: rdma_destroy_id waits until every event of its id is
// acknowledged, for ever if one is not.
rdma_cm_event* next_cm_event(rdma_event_channel* ec, rdma_cm_event_type expected, int timeout_s) {
    pollfd p{.fd = ec->fd, .events = POLLIN, .revents = 0};  // readable: an event is queued
    if (CHECK_ERRNO(poll(&p, 1, timeout_s < 0 ? -1 : timeout_s * 1000)) == 0)  // milliseconds
        wb::fail("no rdma_cm event within " + std::to_string(timeout_s) + " s while waiting for " +
                     rdma_event_str(expected),
                 "is the peer still running and reachable? raise --timeout if the machine is slow");
    rdma_cm_event* ev = nullptr;
    CHECK_ERRNO(rdma_get_cm_event(ec, &ev));
    std::printf("cm event: %s\n", rdma_event_str(ev->event));  // "RDMA_CM_EVENT_ESTABLISHED": librdmacm's name
    wb::check_cm_event(ev, expected);
    return ev;
}

}  // namespace

int main(int argc, char** argv) {
    std::string send_bytes_text, bind_text;
    const wb::ExtraOption extra[] = {
        {'B', "send-bytes", "N",
         "client: send N bytes, 0..128 (default: 16, one request);\n"
         "                        any other length plays a misbehaving client",
         &send_bytes_text},
        {'b', "bind", "ADDR", "server: the IP address to listen on (default: all, ::)", &bind_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]              server: add the two numbers a client sends\n"
                    "  lesson9 [options] HOST A B     client: send A and B, print the sum",
        .summary = "lesson 4's sum service, connected with rdma_cm instead of a TCP side channel",
        .notes = "Here -p is the RDMA CM port (rdma_cm's own port space, not a TCP socket), and\n"
                 "HOST is an IP address on the server's RDMA netdev (fe80::1%eth0 for a link-local\n"
                 "IPv6 one): rdma_cm picks the device, port and GID from it; -d, if given, must\n"
                 "name the device it picks.\n"
                 "A and B are signed 64-bit integers; a sum that overflows is an error on both sides (exit 1).",
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
    // No host: server. HOST A B: client (common/sum_protocol.cpp checks them).
    const wb::SumArgs sum_args = wb::parse_sum_args(opt);
    const bool is_server = sum_args.is_server;
    if (is_server && opt.given('B')) wb::usage_error("-B is a client option");
    if (!is_server && opt.given('b')) wb::usage_error("-b is a server option");
    const int64_t a = sum_args.a, b = sum_args.b;
    const uint32_t send_bytes = opt.given('B')
                                    ? static_cast<uint32_t>(wb::parse_range(send_bytes_text, "-B", 0, kMaxSendBytes))
                                    : sizeof(wb::SumRequest);

    // 1. Device, port and address: rdma_cm finds all three from an IP address
    //    and hands them to us in an id, its socket. Every CM event arrives on
    //    the event channel, whose fd we make non-blocking: next_cm_event (above)
    //    waits in poll(), bounded, never in the library.
    wb::EventChannel ec{CHECK_PTR(rdma_create_event_channel())};
    const int fd_flags = CHECK_ERRNO(fcntl(ec->fd, F_GETFL));
    CHECK_ERRNO(fcntl(ec->fd, F_SETFL, fd_flags | O_NONBLOCK));
    sockaddr_storage ip = is_server ? wb::ip_address(opt.given('b') ? bind_text : "::", opt.tcp_port, "-b")
                                    : wb::ip_address(opt.args[0], opt.tcp_port, "HOST");
    sockaddr* const ip_addr = reinterpret_cast<sockaddr*>(&ip);
    rdma_cm_id* raw = nullptr;
    CHECK_ERRNO(rdma_create_id(ec.get(), &raw, nullptr, RDMA_PS_TCP));  // RDMA_PS_TCP: RC QPs, TCP-like ports
    wb::CmId listen_id, id;  // the server listens on one id; each client it accepts comes with a new one
    if (is_server) {
        listen_id.reset(raw);
        CHECK_ERRNO(rdma_bind_addr(listen_id.get(), ip_addr),
                    "is another server on that port (-p)? is -b an address of this host?");
        CHECK_ERRNO(rdma_listen(listen_id.get(), 1));  // backlog: 1 connect request may wait for us
        std::printf("server: listening on %s, RDMA CM port %u\n", wb::address_str(ip_addr).c_str(), opt.tcp_port);
        // A client's ConnectRequest arrives with a NEW id, for this connection
        // only, on the device, port and GID that the request came in by.
        rdma_cm_event* ev = next_cm_event(ec.get(), RDMA_CM_EVENT_CONNECT_REQUEST, opt.accept_timeout_s());
        id.reset(ev->id);
        CHECK_ERRNO(rdma_ack_cm_event(ev));
    } else {
        id.reset(raw);
        // Address resolution (which device, port and GID reach HOST), then the
        // route (on RoCE the peer's GID and next hop, on InfiniBand a path
        // record from the subnet manager).
        CHECK_ERRNO(rdma_resolve_addr(id.get(), nullptr, ip_addr, kResolveTimeoutMs),
                    "is HOST reachable through an RDMA netdev? (ip route get HOST; rdma link show) (scripts/doctor.sh --peer HOST checks this)");
        CHECK_ERRNO(rdma_ack_cm_event(next_cm_event(ec.get(), RDMA_CM_EVENT_ADDR_RESOLVED, opt.timeout_s)));
        CHECK_ERRNO(rdma_resolve_route(id.get(), kResolveTimeoutMs),
                    "HOST must be an address on the peer's RDMA netdev; loopback (127.0.0.1) is not one (scripts/doctor.sh --peer HOST checks this)");
        CHECK_ERRNO(rdma_ack_cm_event(next_cm_event(ec.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, opt.timeout_s)));
    }
    const char* dev = ibv_get_device_name(id->verbs->device);
    std::printf("%s: rdma_cm chose %s port %u, GID %s, to reach %s\n", is_server ? "server" : "client", dev,
                id->port_num, wb::gid_to_string(id->route.addr.addr.ibaddr.sgid).c_str(),
                wb::address_str(rdma_get_peer_addr(id.get())).c_str());
    if (!opt.device.empty() && opt.device != dev)
        wb::fail(std::string("rdma_cm chose ") + dev + ", not " + opt.device + " (-d)",
                 is_server ? "drop -d, or listen with -b on an address of " + opt.device
                           : "drop -d, or give a HOST that " + opt.device + " reaches");

    // 2. The objects of an RC connection, in creation order (reverse destruction: lesson 2).
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(id->verbs))};
    // Two CQs, one for our SENDs and one for our RECVs, so that each wait
    // below is for exactly one thing. One entry each: one message each way.
    wb::CompletionQueue send_cq{CHECK_PTR(ibv_create_cq(id->verbs, 1, nullptr, nullptr, 0))};
    wb::CompletionQueue recv_cq{CHECK_PTR(ibv_create_cq(id->verbs, 1, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = send_cq.get(),
        .recv_cq = recv_cq.get(),
        .cap = {
            .max_send_wr = 1,   // one SEND outstanding at a time
            .max_recv_wr = 1,   // one receive posted at a time
            .max_send_sge = 1,  // each message is one contiguous buffer
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,  // reliable connected: acknowledged, in order, one peer
    };
    // The QP is created ON THE ID, so that rdma_cm can drive its transitions.
    CHECK_ERRNO(rdma_create_qp(id.get(), pd.get(), &qp_attr));
    wb::CmQueuePair qp{id->qp, {id.get()}};  // released by rdma_destroy_qp(id)

    // 3. Memory. The receive buffer: LOCAL_WRITE, because our own NIC writes
    //    the incoming SEND into it; no REMOTE_* flag, since a SEND never names
    //    our memory (the receive we post decides where it lands). The send
    //    buffer: no flag at all: the NIC only reads it, and local read access
    //    is always granted.
    const uint32_t recv_len = is_server ? kRecvBufferBytes : sizeof(wb::SumResponse);
    wb::Buffer recv_buf = wb::alloc_buffer(recv_len);
    wb::MemoryRegion recv_mr{CHECK_PTR(ibv_reg_mr(pd.get(), recv_buf.get(), recv_len, IBV_ACCESS_LOCAL_WRITE),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};
    wb::Buffer send_buf = wb::alloc_buffer(kMaxSendBytes);
    wb::MemoryRegion send_mr{CHECK_PTR(ibv_reg_mr(pd.get(), send_buf.get(), kMaxSendBytes, 0),
                                       "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. RESET -> INIT (lesson 3's first transition): rdma_create_qp did it,
    //    on the port rdma_cm chose. A QP accepts receives from INIT on.

    // 5. Post the receive NOW, before the peer learns our QP number: the
    //    peer cannot send before the exchange, so the receive is certainly
    //    there when its SEND arrives. A SEND that finds no receive is answered
    //    with an RNR NAK (receiver not ready) and retried after min_rnr_timer;
    //    with rnr_retry = 0 it would fail at once (docs/lesson4-send-recv.md).
    post_receive(qp.get(), recv_mr.get(), recv_len);
    std::printf("%s: posted a %u-byte receive before the exchange\n", is_server ? "server" : "client", recv_len);

    // 6. The exchange, by rdma_cm: the client's rdma_connect sends a
    //    ConnectRequest (QP number, PSN, MTU and these values), the server's
    //    rdma_accept answers with a ConnectReply, and each side's ESTABLISHED
    //    event says the connection is up. A refused connect (REJECTED: nothing
    //    listens on that port) ends the client.
    rdma_conn_param param = {
        .responder_resources = 0,  // RDMA READ/atomic requests the peer may have in flight at us: none
        .initiator_depth = 0,      // READ/atomic requests we may have in flight at the peer: none
        .retry_count = 6,          // the QP's retry_cnt: 7 tries, then status 12 (7 = for ever on rxe: lesson 3); only the client's counts
        .rnr_retry_count = 7,      // the peer's rnr_retry: 7 = retry for ever on RNR NAK
    };
    if (is_server) {
        CHECK_ERRNO(rdma_accept(id.get(), &param));
    } else {
        CHECK_ERRNO(rdma_connect(id.get(), &param));
    }
    CHECK_ERRNO(rdma_ack_cm_event(next_cm_event(ec.get(), RDMA_CM_EVENT_ESTABLISHED, opt.timeout_s)));
    ibv_qp_attr peer{};  // what rdma_cm set in our QP from the peer's CM message
    ibv_qp_init_attr unused{};
    CHECK_RC(ibv_query_qp(qp.get(), &peer, IBV_QP_DEST_QPN, &unused));
    std::printf("%s: peer %s is QP 0x%x\n", is_server ? "server" : "client",
                wb::address_str(rdma_get_peer_addr(id.get())).c_str(), peer.dest_qp_num);

    // 7. INIT -> RTR -> RTS: lesson 3's other two transitions, made by rdma_cm
    //    during rdma_accept and rdma_connect with the values of step 6.

    // 8. No RTR! token (lesson 4): the server's QP is in RTR before its
    //    ConnectReply leaves, and the client's ESTABLISHED comes from that reply.

    if (is_server) {
        // 9. Wait for the request: a RECV completion. byte_len is how many
        //    bytes the client's SEND carried; only exactly one request is valid.
        std::printf("server: QP 0x%x is RTS; waiting for the client's SEND\n", qp->qp_num);
        const ibv_wc wc = wb::poll_success(recv_cq.get(), opt.timeout_s, "the client's request (RECV)");
        std::printf("server: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);

        // The application's part (common/sum_protocol.cpp): decode exactly
        // one request, never reading beyond byte_len; add with overflow check.
        const wb::SumAnswer answer = wb::answer_sum_request(recv_buf.get(), wc.byte_len);
        if (wc.byte_len == sizeof(wb::SumRequest))
            std::printf("server: request %" PRId64 " + %" PRId64 "\n", answer.a, answer.b);

        // 10. SEND the response, errors included, so that the client can say
        //    why. Its receive was posted before the exchange, so it is there.
        std::memcpy(send_buf.get(), &answer.response, sizeof answer.response);
        post_send(qp.get(), send_mr.get(), sizeof answer.response);
        wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the response");
        std::printf("server: response sent (status %u)\n", be32toh(answer.response.status));

        // 11. The client disconnects once it has the response (a
        //     DisconnectRequest); our rdma_disconnect answers (DisconnectReply).
        CHECK_ERRNO(rdma_ack_cm_event(next_cm_event(ec.get(), RDMA_CM_EVENT_DISCONNECTED, opt.timeout_s)));
        CHECK_ERRNO(rdma_disconnect(id.get()));
        if (!answer.error.empty()) wb::result_error(answer.error);
        std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", answer.a, answer.b, answer.sum);
        return 0;
    }

    // Client.
    // 9. SEND the request: A and B in network byte order. With -B the client
    //    sends a different length on purpose (the rest is zero bytes).
    const wb::SumRequest request = wb::make_sum_request(a, b);
    std::memcpy(send_buf.get(), &request, sizeof request);
    std::printf("client: sending %" PRId64 " and %" PRId64 " (%u bytes)\n", a, b, send_bytes);
    post_send(qp.get(), send_mr.get(), send_bytes);
    // The SEND's completion: the server's NIC acknowledged the message (it is
    // in the server's receive buffer), not that the server has read it.
    wb::poll_success(send_cq.get(), opt.timeout_s, "the SEND of the request");

    // 10. The response arrives in the receive we posted in step 5.
    const ibv_wc wc = wb::poll_success(recv_cq.get(), opt.timeout_s, "the server's response (RECV)");
    std::printf("client: completion %s, %u bytes\n", wb::wc_opcode_str(wc.opcode), wc.byte_len);

    // 11. Disconnect: a DisconnectRequest, which the server's rdma_disconnect answers.
    CHECK_ERRNO(rdma_disconnect(id.get()));
    CHECK_ERRNO(rdma_ack_cm_event(next_cm_event(ec.get(), RDMA_CM_EVENT_DISCONNECTED, opt.timeout_s)));

    const wb::SumResult r = wb::read_sum_response(recv_buf.get(), wc.byte_len, a, b);
    if (r.status == wb::kSumBadRequest)  // we know what we sent: say it
        wb::result_error("the server refused the request: it was " + std::to_string(send_bytes) + " bytes, not " +
                         std::to_string(sizeof(wb::SumRequest)));
    if (!r.error.empty()) wb::result_error(r.error);
    std::printf("result: %" PRId64 " + %" PRId64 " = %" PRId64 "\n", a, b, r.sum);
    return 0;
}
