// options.hpp - the command line every lesson shares, in the style of
// rdma-core's pingpong tools: no host argument means server, a host argument
// means client.
//
//   -d, --ib-dev=DEV      RDMA device (default: the first one found)
//   -i, --ib-port=PORT    port of that device (default: 1)
//   -g, --gid-idx=INDEX   GID index (default: chosen by type, RoCE v2 IPv4 first)
//   -p, --port=PORT       TCP port of the out-of-band exchange (default: 18515)
//       --timeout=SECS    how long a client retries its connect and either side
//                         waits for its peer (default: 30; a server waits for its
//                         first client without limit unless --timeout is given)
//   -h, --help            usage with every default, exit 0
//
// A lesson adds its own options (ExtraOption) and positional arguments.
// Misuse prints one line on stderr and exits 2. `--` ends the options, so
// negative numbers can follow it: ./lesson4 host -- -3 5
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wb {

constexpr uint16_t kDefaultTcpPort = 18515;  // the same port as ibv_rc_pingpong
constexpr int kDefaultTimeoutSeconds = 30;

struct Options {
    std::string device;                // -d; empty means the first device
    int ib_port = 1;                   // -i; ports count from 1
    int gid_index = -1;                // -g; -1 means choose by type
    uint16_t tcp_port = kDefaultTcpPort;  // -p
    int timeout_s = kDefaultTimeoutSeconds;  // --timeout
    bool timeout_given = false;        // a server waits forever for its first client unless set
    std::vector<std::string> args;     // positional arguments (host first, if any)
    std::string given_extras;          // the letters of the lesson's own options that were given
    std::vector<std::string> given_long;  // the names of its long-only options that were given

    // True when the lesson's own option `letter` was on the command line,
    // even with an empty value ("-m ''"): the one way to ask "was it given?".
    bool given(char letter) const { return given_extras.find(letter) != std::string::npos; }
    // The same for a long-only option, by its name ("retry" for --retry).
    bool given(std::string_view name) const {
        for (const std::string& n : given_long)
            if (n == name) return true;
        return false;
    }

    // The server's wait for its first client: -1 (no limit) unless --timeout was given.
    int accept_timeout_s() const { return timeout_given ? timeout_s : -1; }
};

// An option that only one lesson has. `value` receives the argument (or "1"
// for a flag with metavar == nullptr); the lesson parses it with the parse_*
// helpers below so that bad values are reported the same way everywhere.
struct ExtraOption {
    char letter;            // short option, e.g. 'n'; 0 for a long-only option
    const char* name;       // long option, e.g. "count"
    const char* metavar;    // e.g. "N"; nullptr for a flag without argument
    const char* help;       // one line, stating the default
    std::string* value;     // where the argument goes; left untouched if absent
};

struct Usage {
    const char* synopsis;   // e.g. "[options]              server\n  lesson4 [options] HOST A B   client"
    const char* summary;    // one line: what the lesson does
    bool network = true;    // false: the lesson has no peer (-p, --timeout not shown)
    const char* notes = nullptr;  // extra lines printed after the options
    // What -p means, when it is not the TCP port of the out-of-band exchange
    // (lesson 9: the RDMA CM port). nullptr: the usual text.
    const char* port_help = nullptr;
    // What --timeout bounds, when the client does not retry its connect
    // (lesson 9). nullptr: the usual text.
    const char* timeout_help = nullptr;
    // True when numbers follow the host (lessons 4, 8, 9): -h then shows how
    // to pass negative ones after --.
    bool numbers_after_host = false;
    // False when the lesson reads no port and no GID (lesson 2 only opens the
    // device; lesson 9's rdma_cm picks them): -h does not list -i and -g, and
    // they are refused as unknown options...
    bool port_and_gid = true;
    // ...or, when this says why (lesson 9), -h shows it in their place and
    // -i or -g is refused with it.
    const char* no_address_options = nullptr;
    // What the server of a network lesson listens on and how many clients it
    // serves, for -h; nullptr: the one-shot server's kOneShotServer.
    const char* server_scope = nullptr;
    // False when the lesson reads a port but no GID (lesson15_probe): -h
    // lists -i but not -g, and -g is refused as an unknown option.
    bool gid = true;
};

// The server of most two-process lessons: one client, then exit.
inline constexpr const char* kOneShotServer =
    "The server listens on every address of this host (IPv4 and IPv6, port -p) and serves\n"
    "one client: the first connection that goes wrong ends it (exit 1). Run it where you\n"
    "trust whoever can reach that port.";

// Parse argv; on -h print the usage and exit 0; on misuse print one line and exit 2.
Options parse_options(int argc, char** argv, const Usage& usage,
                      std::span<const ExtraOption> extra = {});

// Print "PROGRAM: message (see PROGRAM -h)" on stderr and exit 2.
[[noreturn]] void usage_error(const std::string& message);

// Parse helpers: `what` names the argument in the error ("-n", "A").
int64_t parse_i64(const std::string& text, const char* what);
int64_t parse_range(const std::string& text, const char* what, int64_t min, int64_t max);
// An unsigned number of at most `bits` bits (1..64), written in hex with 0x
// ("0x01234567") or in decimal ("19088743"), as Q_Keys and keys are written;
// a leading 0 is decimal, never octal. Misuse names `what` and the width:
// "-q: '0x1ffffffff' is not a 32-bit number (decimal or 0x hex)".
uint64_t parse_hex(const std::string& text, const char* what, int bits);

}  // namespace wb
