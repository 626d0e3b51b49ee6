// exchange.hpp - the out-of-band exchange over TCP, used from lesson 4 on.
//
// Before two RC queue pairs can talk, each side must learn the other's QP
// number, starting PSN and address (GID or LID), and, for RDMA WRITE/READ/
// atomics, the address, length and rkey of the memory it may touch. rdma-core's
// pingpong tools send these as text over TCP port 18515; we send one fixed,
// versioned struct in network byte order (lesson 9 replaces all of this with
// rdma_cm).
//
// Nothing here waits forever: every wait is bounded by a timeout, a client's
// connect is retried until its timeout, and whatever arrives is validated
// before it is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <infiniband/verbs.h>

namespace wb {

// What one side tells the other. Host byte order in memory; encode() and
// decode() convert to and from the wire form.
struct PeerInfo {
    uint16_t lesson = 0;   // which lesson sent it: a lesson-5 client cannot talk to a lesson-4 server
    uint32_t qp_num = 0;   // 24 bits: QP numbers are 24-bit in the BTH
    uint32_t psn = 0;      // 24 bits: the first packet sequence number it will send
    uint16_t lid = 0;      // InfiniBand local identifier (0 on RoCE)
    ibv_gid gid{};         // GID (all zero on InfiniBand LID addressing)
    uint32_t mtu = 0;      // path MTU as enum ibv_mtu (1..5); both sides must agree
    uint64_t addr = 0;     // start of the remote buffer (0 if none is offered)
    uint32_t length = 0;   // its length in bytes
    uint32_t rkey = 0;     // the key that lets the peer's NIC touch it
};

// Wire form: magic "RDWB", version, then the fields above, big-endian.
constexpr size_t kPeerInfoWireSize = 4 + 2 + 2 + 4 + 4 + 2 + 16 + 4 + 8 + 4 + 4;  // 54 bytes
constexpr uint16_t kPeerInfoVersion = 1;

void encode(const PeerInfo& info, std::span<uint8_t, kPeerInfoWireSize> out);
// Returns an empty string on success, else why the bytes were rejected.
std::string decode(std::span<const uint8_t> in, PeerInfo& info);

// A connected TCP socket, closed when it goes out of scope.
class Connection {
public:
    Connection() = default;
    explicit Connection(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
    Connection(Connection&& o) noexcept : fd_(o.fd_), peer_(std::move(o.peer_)) { o.fd_ = -1; }
    Connection& operator=(Connection&& o) noexcept;
    ~Connection();
    int fd() const { return fd_; }
    const std::string& peer() const { return peer_; }  // "192.0.2.2:40312", for messages

private:
    int fd_ = -1;
    std::string peer_;
};

// A listening TCP socket on every address (IPv4 and IPv6) of `port`.
class Listener {
public:
    explicit Listener(uint16_t port);
    ~Listener();
    Listener(const Listener&) = delete;
    Listener& operator=(const Listener&) = delete;
    // Wait up to timeout_s seconds (-1: no limit) for a client; exits 1 on timeout.
    Connection accept(int timeout_s);
    int fd() const { return fd_; }  // to poll() it with other fds (lesson 13)

private:
    int fd_ = -1;
    uint16_t port_;
};

// Connect to host:port, retrying refused or unreachable attempts until
// timeout_s seconds have passed, saying so once ("client: HOST:PORT did not
// answer (...); retrying ..."; `who` names the caller, as its other lines do);
// exits 1 with what to check on failure.
Connection connect_to(const std::string& host, uint16_t port, int timeout_s, const char* who = "client");

struct Options;
// The TCP half of every lesson's meeting: a server listens on opt.tcp_port,
// says "server: waiting for a client on TCP port P" and waits for one client
// (opt.accept_timeout_s()); a client connects to opt.args[0] (connect_to).
Connection meet_peer(const Options& opt, bool is_server);

// Send our PeerInfo and receive the peer's, each way bounded by timeout_s.
// Exits 1 when the peer closes, goes silent or sends something malformed, or
// when the peer is a different lesson.
PeerInfo exchange(Connection& c, const PeerInfo& mine, int timeout_s);

// Small control messages after the exchange ("RTR!", "GO!!", "DONE"): exactly four
// ASCII bytes each, so both sides agree on their length by construction.
void send_token(Connection& c, const char (&token)[5]);
// Wait (bounded) for `token`; exits 1 naming what arrived instead, or that
// the peer closed the connection.
void expect_token(Connection& c, const char (&token)[5], int timeout_s);

// Wait (bounded) for a token that may be any of several ("OK!!" or "ERR!"):
// its four bytes, for the caller to compare. Exits 1 when the peer closes the
// connection first, saying so and `during` ("during the READ inside").
std::string recv_token(Connection& c, int timeout_s, const std::string& during);

// Low-level: send all of `data`; receive exactly data.size() bytes, waiting
// at most timeout_s seconds in total. recv_exact returns false if the peer
// closed (or, by exiting with data unread, reset) the connection first; both
// exit 1 on any other failure.
void send_all(Connection& c, std::span<const uint8_t> data);
bool recv_exact(Connection& c, std::span<uint8_t> data, int timeout_s);

}  // namespace wb

namespace wb {

// For a server that watches many peers in one poll() loop (lesson 13) and
// must wait for none of them: append to `so_far` what has come of a 4-byte
// token, never more than its rest, without waiting (MSG_DONTWAIT). Returns
// "" while all is well (the token is whole when so_far has 4 bytes), else why
// not: "closed its connection before DONE", "lost its connection before
// DONE: ECONNRESET (...)" (`token` names what was awaited).
std::string take_token_bytes(Connection& c, std::string& so_far, const char* token);

}  // namespace wb
