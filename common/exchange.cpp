// exchange.cpp - see exchange.hpp.
#include "exchange.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <endian.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "check.hpp"
#include "options.hpp"

namespace wb {

namespace {

constexpr uint8_t kMagic[4] = {'R', 'D', 'W', 'B'};

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline` for poll(): -1 when there is no deadline.
int ms_left(Clock::time_point deadline, bool unlimited) {
    if (unlimited) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 0 ? static_cast<int>(left) : 0;
}

Clock::time_point deadline_after(int timeout_s) {
    return Clock::now() + std::chrono::seconds(timeout_s < 0 ? 0 : timeout_s);
}

// Write helpers for the big-endian wire form.
struct Writer {
    uint8_t* p;
    void u16(uint16_t v) { v = htobe16(v); std::memcpy(p, &v, 2); p += 2; }
    void u32(uint32_t v) { v = htobe32(v); std::memcpy(p, &v, 4); p += 4; }
    void u64(uint64_t v) { v = htobe64(v); std::memcpy(p, &v, 8); p += 8; }  // not htonl: 64 bits
    void raw(const void* src, size_t n) { std::memcpy(p, src, n); p += n; }
};
struct Reader {
    const uint8_t* p;
    uint16_t u16() { uint16_t v; std::memcpy(&v, p, 2); p += 2; return be16toh(v); }
    uint32_t u32() { uint32_t v; std::memcpy(&v, p, 4); p += 4; return be32toh(v); }
    uint64_t u64() { uint64_t v; std::memcpy(&v, p, 8); p += 8; return be64toh(v); }
    void raw(void* dst, size_t n) { std::memcpy(dst, p, n); p += n; }
};

// "192.0.2.2:40312" (also for an IPv4 client of our dual-stack listener,
// which the kernel reports as ::ffff:192.0.2.2), "[2001:db8::2]:40312".
std::string describe(const sockaddr* sa) {
    char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
    getnameinfo(sa, sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in), host,
                sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
    std::string h = host;
    if (h.starts_with("::ffff:") && h.find('.') != std::string::npos) h = h.substr(7);
    else if (h.find(':') != std::string::npos) h = "[" + h + "]";
    return h + ":" + serv;
}

}  // namespace

void encode(const PeerInfo& info, std::span<uint8_t, kPeerInfoWireSize> out) {
    Writer w{out.data()};
    w.raw(kMagic, 4);
    w.u16(kPeerInfoVersion);
    w.u16(info.lesson);
    w.u32(info.qp_num);
    w.u32(info.psn);
    w.u16(info.lid);
    w.raw(info.gid.raw, 16);
    w.u32(info.mtu);
    w.u64(info.addr);
    w.u32(info.length);
    w.u32(info.rkey);
}

std::string decode(std::span<const uint8_t> in, PeerInfo& info) {
    if (in.size() != kPeerInfoWireSize)
        return "expected " + std::to_string(kPeerInfoWireSize) + " bytes, got " + std::to_string(in.size());
    Reader r{in.data()};
    uint8_t magic[4];
    r.raw(magic, 4);
    if (std::memcmp(magic, kMagic, 4) != 0) return "not a workbook peer (bad magic)";
    uint16_t version = r.u16();
    if (version != kPeerInfoVersion)
        return "protocol version " + std::to_string(version) + ", expected " + std::to_string(kPeerInfoVersion);
    PeerInfo p;
    p.lesson = r.u16();
    p.qp_num = r.u32();
    p.psn = r.u32();
    p.lid = r.u16();
    r.raw(p.gid.raw, 16);
    p.mtu = r.u32();
    p.addr = r.u64();
    p.length = r.u32();
    p.rkey = r.u32();
    if (p.qp_num == 0 || p.qp_num > 0xFFFFFF) return "QP number " + std::to_string(p.qp_num) + " is not a 24-bit QP number";
    if (p.psn > 0xFFFFFF) return "PSN " + std::to_string(p.psn) + " does not fit in 24 bits";
    if (p.mtu < IBV_MTU_256 || p.mtu > IBV_MTU_4096) return "path MTU enum " + std::to_string(p.mtu) + " is not 1..5";
    if (p.addr == 0 && (p.length != 0 || p.rkey != 0)) return "a buffer length or rkey without an address";
    if (p.addr + p.length < p.addr) return "buffer address + length wraps around";
    info = p;
    return "";
}

Connection& Connection::operator=(Connection&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) close(fd_);
        fd_ = o.fd_;
        peer_ = std::move(o.peer_);
        o.fd_ = -1;
    }
    return *this;
}

Connection::~Connection() {
    if (fd_ >= 0) close(fd_);
}

Listener::Listener(uint16_t port) : port_(port) {
    // One IPv6 socket with V6ONLY off accepts IPv4 clients too (as ::ffff:a.b.c.d).
    fd_ = CHECK_ERRNO(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int on = 1, off = 0;
    CHECK_ERRNO(setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on));
    CHECK_ERRNO(setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off));
    sockaddr_in6 addr{.sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_flowinfo = 0,
                      .sin6_addr = in6addr_any, .sin6_scope_id = 0};
    CHECK_ERRNO(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr),
                ("is another server already using TCP port " + std::to_string(port) + "? choose one with -p").c_str());
    CHECK_ERRNO(listen(fd_, 8));
}

Listener::~Listener() {
    if (fd_ >= 0) close(fd_);
}

Connection Listener::accept(int timeout_s) {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    int n = CHECK_ERRNO(poll(&p, 1, timeout_s < 0 ? -1 : timeout_s * 1000));
    if (n == 0)
        fail("no client connected to TCP port " + std::to_string(port_) + " within " +
                 std::to_string(timeout_s) + " s",
             "start the client with this host's address, the same -p, and a reachable network");
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = CHECK_ERRNO(::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC));
    return Connection(fd, describe(reinterpret_cast<sockaddr*>(&ss)));
}

Connection connect_to(const std::string& host, uint16_t port, int timeout_s, const char* who) {
    const auto deadline = deadline_after(timeout_s);
    const std::string service = std::to_string(port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
        fail("getaddrinfo(" + host + ") failed: " + gai_strerror(rc), "is the host name or address right?");
    std::string last_error = "no address";
    int attempts = 0;
    for (bool first_round = true;; first_round = false) {
        for (addrinfo* ai = res; ai; ai = ai->ai_next) {
            int fd = CHECK_ERRNO(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
            ++attempts;
            int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
            int err = rc == 0 ? 0 : errno;
            if (err == EINPROGRESS) {  // wait for the handshake, but not past the deadline
                pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
                int n = poll(&p, 1, std::max(ms_left(deadline, false), 1));
                socklen_t len = sizeof err;
                if (n == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
                else err = ETIMEDOUT;
            }
            if (err == 0) {
                // Back to blocking mode: every read is bounded by poll() anyway.
                CHECK_ERRNO(fcntl(fd, F_SETFL, CHECK_ERRNO(fcntl(fd, F_GETFL)) & ~O_NONBLOCK));
                std::string peer = describe(ai->ai_addr);
                freeaddrinfo(res);
                return Connection(fd, peer);
            }
            last_error = errno_str(err);
            close(fd);
        }
        if (Clock::now() >= deadline) break;
        if (first_round)  // say it once, not on every retry
            std::printf("%s: %s:%s did not answer (%s); retrying for up to %d s\n", who, host.c_str(),
                        service.c_str(), last_error.c_str(), timeout_s);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server may not be up yet
    }
    freeaddrinfo(res);
    fail("could not connect to " + host + ":" + service + " within " + std::to_string(timeout_s) +
             " s (" + std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts") + ", last: " + last_error + ")",
         "is the server running there with the same -p? is TCP port " + service +
             " open in the firewall (make doctor checks this)? is " + host +
             " the server's address (a wrong one fails the same way)?");
}

void send_all(Connection& c, std::span<const uint8_t> data) {
    size_t done = 0;
    while (done < data.size()) {
        ssize_t n = ::send(c.fd(), data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("send to " + c.peer() + " failed: " + errno_str(errno), "did the peer exit? see its output");
        done += static_cast<size_t>(n);
    }
}

bool recv_exact(Connection& c, std::span<uint8_t> data, int timeout_s) {
    const auto deadline = deadline_after(timeout_s);
    size_t done = 0;
    while (done < data.size()) {
        pollfd p{.fd = c.fd(), .events = POLLIN, .revents = 0};
        int n = poll(&p, 1, ms_left(deadline, timeout_s < 0));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("poll on the connection to " + c.peer() + " failed: " + errno_str(errno));
        if (n == 0)
            fail("the peer " + c.peer() + " sent nothing for " + std::to_string(timeout_s) + " s",
                 "is the peer still running? is it the same lesson? raise --timeout if it is slow");
        ssize_t got = ::recv(c.fd(), data.data() + done, data.size() - done, 0);
        if (got < 0 && errno == EINTR) continue;
        // A peer that exits with our data unread resets the connection
        // instead of closing it: for the caller that is the same thing.
        if (got < 0 && errno == ECONNRESET) return false;
        if (got < 0) fail("recv from " + c.peer() + " failed: " + errno_str(errno), "did the peer exit? see its output");
        if (got == 0) return false;  // orderly close
        done += static_cast<size_t>(got);
    }
    return true;
}

PeerInfo exchange(Connection& c, const PeerInfo& mine, int timeout_s) {
    uint8_t out[kPeerInfoWireSize];
    encode(mine, out);
    send_all(c, out);
    uint8_t in[kPeerInfoWireSize];
    if (!recv_exact(c, in, timeout_s))
        fail("the peer " + c.peer() + " closed the connection before sending its QP information",
             "see the peer's output; is it a workbook lesson?");
    PeerInfo theirs;
    if (std::string why = decode(in, theirs); !why.empty())
        fail("the peer " + c.peer() + " sent a malformed exchange message: " + why,
             "is the peer the same lesson of this workbook, built from the same version?");
    if (theirs.lesson != mine.lesson)
        fail("the peer " + c.peer() + " runs lesson " + std::to_string(theirs.lesson) + ", this is lesson " +
                 std::to_string(mine.lesson),
             "run the same lesson on both sides");
    return theirs;
}

void send_token(Connection& c, const char (&token)[5]) {
    send_all(c, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(token), 4));
}

void expect_token(Connection& c, const char (&token)[5], int timeout_s) {
    uint8_t got[4];
    if (!recv_exact(c, got, timeout_s))
        fail("the peer " + c.peer() + " closed the connection instead of sending " + token,
             "see the peer's output: did it fail?");
    if (std::memcmp(got, token, 4) != 0) {
        std::string shown;
        for (uint8_t b : got) shown += (b >= 32 && b < 127) ? static_cast<char>(b) : '?';
        fail("the peer " + c.peer() + " sent '" + shown + "' where " + token + " was expected",
             "is the peer the same lesson of this workbook?");
    }
}

Connection meet_peer(const Options& opt, bool is_server) {
    if (!is_server) return connect_to(opt.args.at(0), opt.tcp_port, opt.timeout_s);
    Listener listener(opt.tcp_port);
    std::printf("server: waiting for a client on TCP port %u\n", opt.tcp_port);
    return listener.accept(opt.accept_timeout_s());
}

std::string recv_token(Connection& c, int timeout_s, const std::string& during) {
    std::string token(4, '\0');
    if (!recv_exact(c, std::span<uint8_t>(reinterpret_cast<uint8_t*>(token.data()), 4), timeout_s))
        fail("the peer " + c.peer() + " closed the connection " + during, "see the peer's output: did it fail?");
    return token;
}

}  // namespace wb

namespace wb {

std::string take_token_bytes(Connection& c, std::string& so_far, const char* token) {
    char got[4];
    if (so_far.size() >= sizeof got) return "";
    const ssize_t n = recv(c.fd(), got, sizeof got - so_far.size(), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return "";
    if (n == 0) return std::string("closed its connection before ") + token;
    if (n < 0) return std::string("lost its connection before ") + token + ": " + errno_str(errno);
    so_far.append(got, static_cast<size_t>(n));
    return "";
}

}  // namespace wb
