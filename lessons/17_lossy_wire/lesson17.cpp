// lesson17.cpp - a lossy wire: a stream of RDMA WRITEs, and what a lost packet costs it.
//
// The client streams COUNT RDMA WRITEs of SIZE bytes (64 KiB by default)
// into one buffer of the server's, several in flight, and reports the
// throughput. At path MTU 1024 each WRITE is 64 packets on the wire, each
// with its own 24-bit PSN. RC promises every byte, in order, exactly once;
// on Ethernet, which may drop a frame, RoCE keeps that promise by go-back-N:
//   - the responder expects one PSN next; a later one means a gap, and it
//     answers with a NAK "PSN sequence error" (AETH syndrome 0x60) carrying
//     the PSN it expected, and drops everything until that one arrives;
//   - the requester, on that NAK, resends from that PSN on: every packet
//     after the lost one travels again;
//   - when nothing comes back at all (the last packet, or its ACK, was lost)
//     the requester waits its ACK timeout (-u) and resends; after retry_cnt
//     (--retry) resends with no progress it gives up: the WRITE completes with
//     IBV_WC_RETRY_EXC_ERR (status 12) and the QP is in the error state.
// Both sides print the port counters that moved (hw_counters), which is how
// you see, on a real deployment, that the fabric drops packets.
//
// The cable and its loss live in the lab, not here: scripts/lab.sh pair
// --netem-b 'loss 1%' ... drops 1% of guest b's frames, the client's (docs/lab.md).
//
// Run it on one host (two terminals; rxe's loopback has no cable, so no loss):
//     ./lesson17                  server: a 64 KiB buffer for the client to write
//     ./lesson17 127.0.0.1        client: 64 WRITEs of 64 KiB, then the throughput
// On two hosts: ./lesson17 on host A, ./lesson17 -n 256 A on host B. Both
// sides take -d DEV -i PORT -g GID_INDEX -p TCP_PORT --timeout SECS (./lesson17 -h).
//
// Verbs it introduces (all seen before; here their knobs matter):
//     ibv_modify_qp to RTR with path_mtu (through wb::qp_to_rtr, common/qp.hpp;
//         read back with ibv_query_qp), to RTS with timeout and retry_cnt (the
//         client's, by hand in step 7)
//     ibv_post_send with many IBV_WR_RDMA_WRITEs in flight
//     ibv_poll_cq: IBV_WC_RETRY_EXC_ERR (the program stops at that first failure;
//         the IBV_WC_WR_FLUSH_ERR of the WRITEs behind it is the page's)
//
// Read more: man ibv_modify_qp (timeout, retry_cnt), man ibv_post_send,
// man ibv_poll_cq, man tc-netem; docs/lesson17-lossy-wire.md (go-back-N on
// the wire, throughput against loss beside TCP, PFC and ECN, exercises).
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "completion.hpp"
#include "qp.hpp"
#include "device.hpp"
#include "exchange.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint16_t kLesson = 17;              // a lesson-17 client only talks to a lesson-17 server
constexpr int64_t kDefaultSize = 64 * 1024;   // 64 KiB: perftest's bandwidth message
constexpr int64_t kMaxSize = 1 << 24;         // 16 MiB
constexpr int64_t kDefaultCount = 64;         // 4 MiB in all: short, as the lab runs under TCG
constexpr uint32_t kDepth = 8;                // WRITEs in flight at most (the send queue's size)
constexpr int64_t kDefaultAckTimeout = 14;    // 4.096 us * 2^14 = 67 ms
constexpr int64_t kDefaultRetry = 6;          // 6 resends, 7 tries; 7 would mean "for ever" on rxe (lesson 3)

// -m's bytes as the verbs' enum: IBV_MTU_256 (1) .. IBV_MTU_4096 (5).
ibv_mtu mtu_enum(int64_t bytes) {
    for (const ibv_mtu e : {IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096})
        if (bytes == wb::mtu_bytes(e)) return e;
    wb::usage_error("-m takes a path MTU of 256, 512, 1024, 2048 or 4096 bytes, not " + std::to_string(bytes));
}

}  // namespace

int main(int argc, char** argv) {
    std::string count_text, size_text, mtu_text, ack_text, retry_text;
    const wb::ExtraOption extra[] = {
        {'n', "count", "N", "client: WRITEs to send, 1..100000 (default: 64)", &count_text},
        {'s', "size", "BYTES", "bytes per WRITE; the server's buffer, 1..16777216 (default: 65536)", &size_text},
        {'m', "mtu", "BYTES", "largest path MTU to use: 256, 512, 1024, 2048, 4096 (default: 1024;\n"
                              "                        both sides' -m and active MTUs: the smallest wins)", &mtu_text},
        {'u', "ack-timeout", "EXP", "client: ACK timeout 4.096 us * 2^EXP, 1..31 (default: 14 = 67 ms)", &ack_text},
        {0, "retry", "N", "client: retry_cnt, resends one WRITE may need, 0..7 (default: 6;\n"
                          "                        7 = for ever on rxe)", &retry_text},
    };
    const wb::Usage usage = {
        .synopsis = "[options]         server: offer a buffer, report what the stream did\n"
                    "  lesson17 [options] HOST    client: stream RDMA WRITEs into it, print the throughput",
        .summary = "a lossy wire: a stream of RDMA WRITEs, go-back-N, and retry exhaustion",
        .notes = "Lose packets on purpose between two lab guests: scripts/lab.sh pair --netem-b 'loss 1%' ...",
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage, extra);
    const bool is_server = opt.args.empty();
    if (opt.args.size() > 1) wb::usage_error("expected at most HOST, got " + std::to_string(opt.args.size()) + " arguments");
    for (const char letter : {'n', 'u'})
        if (is_server && opt.given(letter)) wb::usage_error(std::string("-") + letter + " is a client option");
    if (is_server && opt.given("retry")) wb::usage_error("--retry is a client option");
    const uint32_t count = static_cast<uint32_t>(opt.given('n') ? wb::parse_range(count_text, "-n", 1, 100000) : kDefaultCount);
    const uint32_t size = static_cast<uint32_t>(opt.given('s') ? wb::parse_range(size_text, "-s", 1, kMaxSize) : kDefaultSize);
    const ibv_mtu max_mtu = mtu_enum(opt.given('m') ? wb::parse_i64(mtu_text, "-m") : 1024);
    const uint8_t ack_timeout = static_cast<uint8_t>(opt.given('u') ? wb::parse_range(ack_text, "-u", 1, 31) : kDefaultAckTimeout);
    const uint8_t retry = static_cast<uint8_t>(opt.given("retry") ? wb::parse_range(retry_text, "--retry", 0, 7) : kDefaultRetry);

    // 1. Device, port and address (lesson 1's walk, done by common/device.cpp).
    wb::Context ctx = wb::open_device(opt.device);
    const wb::PortAddress addr = wb::choose_address(ctx.get(), opt.ib_port, opt.gid_index);
    wb::print_address(ibv_get_device_name(ctx->device), addr);

    // 2. PD, CQ and QP, in creation order (reverse destruction: lesson 2).
    //    The client keeps up to kDepth WRITEs in flight, each signaled: the
    //    send queue and the CQ hold that many.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), kDepth, nullptr, nullptr, 0))};
    ibv_qp_init_attr qp_attr = {
        .send_cq = cq.get(),
        .recv_cq = cq.get(),
        .cap = {.max_send_wr = kDepth, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,  // go-back-N is RC's: UC would drop a damaged message and say nothing
    };
    wb::QueuePair qp{CHECK_PTR(ibv_create_qp(pd.get(), &qp_attr))};
    const uint32_t psn = wb::random_psn();

    // 3. The buffer. The server's may be written by the client's NIC
    //    (REMOTE_WRITE, and the LOCAL_WRITE it requires: lesson 5); the
    //    client's is only read by its own NIC: no access flag at all.
    wb::Buffer buf = wb::alloc_buffer(size);
    const uint8_t pattern = static_cast<uint8_t>(1 + std::random_device{}() % 255);  // never 0: a fresh buffer is 0
    std::memset(buf.get(), is_server ? 0 : pattern, size);
    const int access = is_server ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE : 0;
    wb::MemoryRegion mr{CHECK_PTR(ibv_reg_mr(pd.get(), buf.get(), size, access),
                                  "ulimit -l: is locked memory limited? (make doctor checks this)")};

    // 4. RESET -> INIT (lesson 3): the server lets the client write.
    wb::qp_to_init(qp.get(), addr, is_server ? IBV_ACCESS_REMOTE_WRITE : 0);

    // 5. Out-of-band exchange (lesson 4). Each side offers the smaller of its
    //    active MTU and -m, and uses the smaller of both offers (step 6).
    wb::PeerInfo mine = wb::local_info(kLesson, qp.get(), psn, addr);
    mine.mtu = std::min(static_cast<ibv_mtu>(mine.mtu), max_mtu);
    wb::Connection conn;
    if (is_server) {
        mine.addr = reinterpret_cast<uintptr_t>(buf.get());
        mine.length = size;
        mine.rkey = mr->rkey;
        wb::Listener listener(opt.tcp_port);
        std::printf("server: offering %u bytes at 0x%llx, rkey 0x%x; waiting for a client on TCP port %u\n", size,
                    static_cast<unsigned long long>(mine.addr), mr->rkey, opt.tcp_port);
        conn = listener.accept(opt.accept_timeout_s());
    } else {
        conn = wb::connect_to(opt.args[0], opt.tcp_port, opt.timeout_s);
    }
    const wb::PeerInfo peer = wb::exchange(conn, mine, opt.timeout_s);
    // Never trust the peer's numbers (exchange() refused a length without an
    // address, or one that wraps): a lesson-17 server offers its -s bytes,
    // 1..kMaxSize, and our WRITEs must fill exactly that (it checks each byte).
    if (!is_server) {
        if (peer.length == 0 || peer.length > kMaxSize)
            wb::fail("the server offers " + std::to_string(peer.length) + " bytes: no lesson-17 server does (1.." +
                         std::to_string(kMaxSize) + ")",
                     "is the server a lesson-17 server of this workbook?");
        if (peer.length != size)
            wb::result_error("the server offers " + std::to_string(peer.length) + " bytes, a WRITE here is " +
                             std::to_string(size) + ": give both sides the same -s");
    }

    // 6. INIT -> RTR: the path MTU is set here, and it is what turns one
    //    WRITE into packets: 64 KiB at 1024 bytes is 64 packets, 64 PSNs.
    //    Both sides must agree on it: a responder that gets packets larger
    //    than its path MTU refuses them (IBV_WC_REM_INV_REQ_ERR). qp_to_rtr
    //    takes the smaller of our active MTU and the peer's offer; the
    //    smaller of the two offers makes it the same number on both sides.
    wb::PeerInfo path = peer;
    path.mtu = std::min(peer.mtu, mine.mtu);
    wb::qp_to_rtr(qp.get(), addr, path);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    CHECK_RC(ibv_query_qp(qp.get(), &attr, IBV_QP_PATH_MTU, &init));
    const uint32_t mtu_bytes = static_cast<uint32_t>(wb::mtu_bytes(attr.path_mtu));
    const uint32_t packets = (size + mtu_bytes - 1) / mtu_bytes;

    // 7. RTR -> RTS: the two knobs of this lesson, by hand (lesson 3 explains
    //    the rest). The requester starts a timer for its oldest packet that
    //    is not acknowledged: `timeout` is its length, 4.096 us * 2^timeout
    //    (0 would mean "wait for ever"). When it expires the requester
    //    resends from that packet on; `retry_cnt` is how many times it may
    //    do so before the WRITE fails with IBV_WC_RETRY_EXC_ERR. A resend a
    //    NAK starts counts too (--retry 0 fails on the first NAK). rxe gives the
    //    count back when the oldest WRITE completes (rxe_comp.c), so a lossy
    //    but live cable costs time, not errors, until one WRITE meets
    //    retry_cnt + 1 NAKs or timeouts.
    if (is_server) {
        wb::qp_to_rts(qp.get(), psn);  // the responder sends only ACKs and NAKs: the usual values
    } else {
        ibv_qp_attr rts = {
            .qp_state = IBV_QPS_RTS,
            .sq_psn = psn,         // our first PSN, as told to the server
            .max_rd_atomic = 1,    // no READs or atomics here; 1 is the usual minimum
            .timeout = ack_timeout,  // -u: ACK timeout exponent, 4.096 us * 2^timeout
            .retry_cnt = retry,      // --retry: resends one WRITE may need (3 bits, 0..7; 7 = for ever on rxe)
            .rnr_retry = 7,          // RNR NAKs cannot happen: a WRITE consumes no receive
        };
        CHECK_RC(ibv_modify_qp(qp.get(), &rts,
                               IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT |
                                   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY));
    }
    // The port counters now (hw_counters, what `rdma statistic` shows); each
    // side prints the ones that moved. rxe counts per device, so on one host
    // the client and the server see each other's packets too.
    const wb::PortCounters counters(ctx.get(), addr.port);

    if (is_server) {
        wb::send_token(conn, "RTR!");  // our QP is past RTR: the client may write (lesson 4, step 8)
        std::printf("server: client %s, QP 0x%x; path MTU %u; waiting for its stream\n", conn.peer().c_str(),
                    peer.qp_num, mtu_bytes);
        // 8. The WRITEs are silent here (no receive, no completion: lesson 5).
        //    The client says DONE on the TCP connection when its last WRITE
        //    completed, or closes it when it gave up (then its output says why).
        wb::expect_token(conn, "DONE", opt.timeout_s);
        std::printf("server: port counters that moved: %s\n", counters.moved_list().c_str());
        // 9. Every byte of the buffer is the client's pattern: its last WRITE
        //    landed whole, whatever was lost and resent on the way.
        const auto* bytes = reinterpret_cast<const uint8_t*>(buf.get());
        for (uint32_t i = 0; i < size; ++i)
            if (bytes[i] != bytes[0] || bytes[0] == 0)
                wb::result_error("byte " + std::to_string(i) + " of the buffer is " + std::to_string(bytes[i]) +
                                 ", byte 0 is " + std::to_string(bytes[0]) + ": not one WRITE's pattern");
        std::printf("result: the buffer holds %u bytes of 0x%02x, the client's pattern\n", size, bytes[0]);
        return 0;
    }

    // Client.
    wb::expect_token(conn, "RTR!", opt.timeout_s);  // not before the server's QP is in RTR (lesson 4, step 8)
    std::printf("client: server QP 0x%x; path MTU %u: %u packets per %u-byte WRITE; ACK timeout %.1f ms, retry_cnt %u\n",
                peer.qp_num, mtu_bytes, packets, size, 4.096e-3 * (1ull << ack_timeout), retry);
    std::printf("client: streaming %u WRITEs of %u bytes (pattern 0x%02x), up to %u in flight\n", count, size,
                pattern, kDepth);

    // 8. The stream: keep up to kDepth WRITEs posted; reap completions as
    //    they come. Every WRITE goes to the same remote buffer (the bytes are
    //    not the lesson; the packets are). wr_id is the WRITE's number.
    ibv_sge sge = {.addr = reinterpret_cast<uintptr_t>(buf.get()), .length = size, .lkey = mr->lkey};
    ibv_send_wr wr = {
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED,  // one completion per WRITE: each says "acknowledged"
        .wr = {.rdma = {.remote_addr = peer.addr, .rkey = peer.rkey}},
    };
    std::vector<Clock::time_point> posted(count);
    uint32_t sent = 0, done = 0;
    const Clock::time_point start = Clock::now();
    Clock::time_point last_progress = start;
    while (done < count) {
        while (sent < count && sent - done < kDepth) {
            wr.wr_id = sent;
            ibv_send_wr* bad = nullptr;
            posted[sent] = Clock::now();
            CHECK_RC(ibv_post_send(qp.get(), &wr, &bad));
            ++sent;
        }
        ibv_wc wc[kDepth];
        const int n = CHECK_POLL(ibv_poll_cq(cq.get(), kDepth, wc));
        for (int i = 0; i < n; ++i) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                // 9. The first failed completion is the cause; the WRITEs
                //    behind it come back IBV_WC_WR_FLUSH_ERR (the QP is in ERR).
                const double waited = std::chrono::duration<double>(Clock::now() - posted[wc[i].wr_id]).count();
                std::printf("client: WRITE %llu of %u failed after %.3f s: status %d (%s, %s)\n",
                            static_cast<unsigned long long>(wc[i].wr_id), count, waited, wc[i].status,
                            wb::wc_status_name(wc[i].status), ibv_wc_status_str(wc[i].status));
                std::printf("client: port counters that moved: %s\n", counters.moved_list().c_str());
                if (wc[i].status == IBV_WC_RETRY_EXC_ERR)
                    wb::fail("retry_cnt " + std::to_string(retry) + ": " + std::to_string(retry + 1) +
                                 (retry == 0 ? " NAK or ACK timeout" : " NAKs or ACK timeouts") +
                                 " before the WRITE completed, one more than the resends allowed; the requester gave up",
                             "is the cable losing packets (tc qdisc show dev eth0, on both sides)? is the server "
                             "alive? --retry (retry_cnt) and -u (ACK timeout) trade recovery time against false "
                             "failures: docs/lesson17-lossy-wire.md");
                wb::check_wc(wc[i], "an RDMA WRITE of the stream");
            }
            ++done;
            last_progress = Clock::now();
        }
        if (n == 0 && Clock::now() - last_progress > std::chrono::seconds(opt.timeout_s))
            wb::fail("no completion for " + std::to_string(opt.timeout_s) + " s (" + std::to_string(done) + " of " +
                         std::to_string(count) + " WRITEs done)",
                     "with retry_cnt 7 rxe resends for ever: give --retry 6 or less");
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    wb::send_token(conn, "DONE");  // the last WRITE is acknowledged: the server may look

    // 10. The throughput: bytes acknowledged over the time from the first
    //     post to the last completion (perftest's definition, lesson 11).
    std::printf("client: port counters that moved: %s\n", counters.moved_list().c_str());
    const double bytes = static_cast<double>(count) * size;
    std::printf("result: %u WRITEs of %u bytes in %.3f s: %.1f MiB/s (%.1f Mbit/s)\n", count, size, secs,
                bytes / secs / (1 << 20), bytes * 8 / secs / 1e6);
    return 0;
}
