// exchange_tcp - the out-of-band TCP exchange of common/exchange.hpp over
// loopback: this process is the lesson, a thread plays its peer. Each
// scenario is one run, because a failure ends the process the way it ends a
// lesson (a message on stderr, exit 1); tests/common_unit.bats checks them.
//
//   build/tests/exchange_tcp SCENARIO
//
//   ok             a well-behaved peer: both PeerInfos and a DONE token cross
//   late-server    the client starts first; its connect retries until the server listens
//   refused        nobody listens: connect_to gives up after --timeout 1
//   no-client      a server nobody connects to: accept(1) gives up
//   early-close    the peer accepts and closes without a word
//   truncated      the peer sends half a message and closes
//   silent         the peer connects and says nothing: the wait ends after 1 s
//   garbage        the peer sends 54 bytes of an HTTP request
//   mismatch       the peer is lesson 5, we are lesson 4
//   wrong-token    the exchange works, then the peer sends NOPE instead of DONE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "check.hpp"
#include "exchange.hpp"

namespace {

constexpr uint16_t kLesson = 4;

wb::PeerInfo info(uint16_t lesson, uint32_t qpn) {
    wb::PeerInfo p;
    p.lesson = lesson;
    p.qp_num = qpn;
    p.psn = 0x123456;
    p.gid.raw[10] = p.gid.raw[11] = 0xFF;  // ::ffff:192.0.2.1
    p.gid.raw[12] = 192, p.gid.raw[13] = 0, p.gid.raw[14] = 2, p.gid.raw[15] = 1;
    p.mtu = IBV_MTU_1024;
    p.addr = 0x7F0000001000ull;
    p.length = 4096;
    p.rkey = 0xABCD;
    return p;
}

// A free TCP port on loopback: bind to port 0 and ask the kernel which it gave.
uint16_t free_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(INADDR_LOOPBACK)}, .sin_zero = {}};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        std::perror("free_port");
        std::exit(3);
    }
    close(fd);
    return ntohs(a.sin_port);
}

// The peer's side with raw sockets, so that it can misbehave.
int raw_connect(uint16_t port) {
    for (int i = 0; i < 100; ++i) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{.sin_family = AF_INET, .sin_port = htons(port), .sin_addr = {htonl(INADDR_LOOPBACK)}, .sin_zero = {}};
        if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
        close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::fprintf(stderr, "exchange_tcp: the test peer could not connect\n");
    std::exit(3);
}

void raw_send(int fd, const void* data, size_t n) {
    if (send(fd, data, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) std::perror("raw_send");
}

void print_peer(const wb::PeerInfo& p) {
    std::printf("peer: lesson %u qpn 0x%x psn 0x%x mtu %u addr 0x%llx length %u rkey 0x%x\n", p.lesson,
                p.qp_num, p.psn, p.mtu, static_cast<unsigned long long>(p.addr), p.length, p.rkey);
}

// The server side of most scenarios: a Listener in this thread, the peer a
// client thread running `peer` on a raw socket.
template <typename Peer>
void serve(Peer peer) {
    const uint16_t port = free_port();
    wb::Listener listener(port);
    std::thread([port, peer] { peer(raw_connect(port)); }).detach();
    wb::Connection c = listener.accept(5);
    std::printf("accepted a client from %s\n", c.peer().c_str());
    print_peer(wb::exchange(c, info(kLesson, 0x11), 1));
    wb::expect_token(c, "DONE", 1);
    std::printf("result: exchange ok\n");
}

// What a correct peer sends: its encoded PeerInfo.
void send_info(int fd, const wb::PeerInfo& p) {
    uint8_t w[wb::kPeerInfoWireSize];
    wb::encode(p, w);
    raw_send(fd, w, sizeof w);
}

}  // namespace

int main(int argc, char** argv) {
    wb::set_program_name("exchange_tcp");
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    const std::string s = argc > 1 ? argv[1] : "";

    if (s == "ok") {
        // Both sides use the library: a server thread and this client.
        const uint16_t port = free_port();
        std::thread([port] {
            wb::Listener listener(port);
            wb::Connection c = listener.accept(5);
            wb::PeerInfo got = wb::exchange(c, info(kLesson, 0x22), 5);
            std::printf("server got: qpn 0x%x rkey 0x%x\n", got.qp_num, got.rkey);
            wb::send_token(c, "DONE");
        }).detach();
        wb::Connection c = wb::connect_to("127.0.0.1", port, 5);
        print_peer(wb::exchange(c, info(kLesson, 0x11), 5));
        wb::expect_token(c, "DONE", 5);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the server print first
        std::printf("result: exchange ok\n");
    } else if (s == "late-server") {
        const uint16_t port = free_port();
        std::thread([port] {
            std::this_thread::sleep_for(std::chrono::milliseconds(700));  // the client tries first
            wb::Listener listener(port);
            wb::Connection c = listener.accept(5);
            wb::exchange(c, info(kLesson, 0x22), 5);
        }).detach();
        const auto start = std::chrono::steady_clock::now();
        wb::Connection c = wb::connect_to("127.0.0.1", port, 5);
        auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
        std::printf("connected after retrying for %s 0.5 s\n", waited.count() >= 500 ? "more than" : "less than");
        print_peer(wb::exchange(c, info(kLesson, 0x11), 5));
        std::printf("result: exchange ok\n");
    } else if (s == "refused") {
        wb::connect_to("127.0.0.1", free_port(), 1);
        std::printf("result: connected to nobody?\n");
    } else if (s == "no-client") {
        wb::Listener listener(free_port());
        listener.accept(1);
        std::printf("result: accepted nobody?\n");
    } else if (s == "early-close") {
        serve([](int fd) { close(fd); });
    } else if (s == "truncated") {
        serve([](int fd) {
            uint8_t w[wb::kPeerInfoWireSize];
            wb::encode(info(kLesson, 0x22), w);
            raw_send(fd, w, 20);
            close(fd);
        });
    } else if (s == "silent") {
        serve([](int fd) {
            std::this_thread::sleep_for(std::chrono::seconds(10));  // longer than the 1 s wait
            close(fd);
        });
    } else if (s == "garbage") {
        serve([](int fd) {
            char w[wb::kPeerInfoWireSize + 1] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n   ";
            raw_send(fd, w, wb::kPeerInfoWireSize);
            std::this_thread::sleep_for(std::chrono::seconds(2));
        });
    } else if (s == "mismatch") {
        serve([](int fd) {
            send_info(fd, info(5, 0x22));
            std::this_thread::sleep_for(std::chrono::seconds(2));
        });
    } else if (s == "wrong-token") {
        serve([](int fd) {
            send_info(fd, info(kLesson, 0x22));
            raw_send(fd, "NOPE", 4);
            std::this_thread::sleep_for(std::chrono::seconds(2));
        });
    } else {
        std::fprintf(stderr, "exchange_tcp: unknown scenario '%s'\n", s.c_str());
        return 2;
    }
    return 0;
}
