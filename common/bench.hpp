// bench.hpp - what lesson 11 needs only for long runs and `make bench`, not
// for the verbs it teaches: the MORE heartbeat that keeps a long measurement
// within --timeout, the CSV rows scripts/bench/ plots, the warning about a
// coarse clock; and, in wb::bench, its command line, the comparison of both
// sides' options, the latency statistics and the result lines. Lesson 11
// alone uses it.
#pragma once

#include <infiniband/verbs.h>

#include <time.h>

#include <cstdint>
#include <string>
#include <vector>

#include "exchange.hpp"
#include "options.hpp"

namespace wb {

// A long run (a 1 MiB sweep, a slow machine) can outlast --timeout while the
// server, whose CPU takes no part in a WRITE or READ, waits for "DONE". So
// the client says "MORE" on the TCP connection at least once a second while
// it measures (beat(now_ns) costs one comparison when it is not yet due)...
struct Heartbeat {
    Connection& conn;
    int64_t next_ns = 0;
    void beat(int64_t now_ns);
};

// ... and the server waits for "DONE", each token at most timeout_s, the
// whole size at most 20 x timeout_s: a client that says MORE for ever must
// not hold the server for ever. Exits 1 on anything else.
void wait_for_done(Connection& conn, int timeout_s);

// Append `row` to the CSV file `path` (nothing when `path` is empty), with
// the line `header` first when the file is new. Exits 1 if it cannot.
void append_csv(const std::string& path, const char* header, const std::string& row);

// A latency below the clock's tick reads as 0 or one tick: warn on stderr
// when CLOCK_MONOTONIC_RAW ticks coarser than 1 us (a VM without a usable
// TSC: the lab's TCG guest ticks every 4 ms; docs/lesson11-performance.md).
void warn_if_coarse_clock();

}  // namespace wb

// What lesson 11 needs around its timed loops, which stay in the lesson.
namespace wb::bench {

// Nanoseconds since an arbitrary start, from the clock NTP never slews
// (CLOCK_MONOTONIC may be sped up or slowed down; _RAW is the bare counter).
// In Linux this is a vDSO call, no system call: about 20 ns.
inline int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

enum class Test : uint8_t { lat = 1, bw = 2 };
enum class Op : uint8_t { send = 1, write = 2, read = 3 };
const char* test_name(Test t);
const char* op_name(Op o);

// -a sweeps 2 B .. 1 MiB in powers of two, as perftest's -a does (it goes on to 8 MiB).
constexpr uint32_t kSweepFirst = 2;
constexpr uint32_t kSweepLast = 1u << 20;

// The measurement options: both sides must run the same ones.
struct Spec {
    Test test = Test::lat;
    Op op = Op::send;
    uint32_t size = 0;    // -s, or the last size of the sweep with -a
    bool all = false;     // -a
    uint32_t iters = 0;   // -n
    bool inl = false;     // --inline
    uint32_t signal = 1;  // --signal: every Nth WR asks for a completion
    uint32_t batch = 1;   // --batch: WRs per ibv_post_send call
    uint32_t depth = 0;   // --depth: WRs in flight (bw; 1 for lat)
    bool events = false;  // --events
};

// The command line, checked before anything is opened (misuse: one line on
// stderr, exit 2), among others: --signal and --batch at most --depth (a WR
// that asks for no completion keeps its send-queue slot until a later
// signaled one completes: with fewer slots than --signal, the queue fills
// with WRs whose completion never comes).
struct CommandLine {
    Options opt;
    Spec spec;
    std::string csv_path;  // -C: the client's CSV file, or empty
};
CommandLine parse_command_line(int argc, char** argv);

// Send our options as one line of text as one would type them ("--test lat
// --op send -s 2 -n 50"), receive the peer's, and stop both sides when they
// differ: a client measuring 64 KiB WRITEs against a server set up for
// 2-byte SENDs would print a wrong number, or hang, rather than an error.
void agree_on_spec(Connection& conn, const Spec& mine, bool is_server, int timeout_s);

// One latency run of `rtt` round trips (ns, sorted here), each divided by
// `divide` (2: half a round trip): the client's line of min, typical (the
// median), p99, p99.9 and max in us, the CSV row, and the result line.
void report_latency(const Spec& s, uint32_t size, int mtu, std::vector<int64_t>& rtt, double divide,
                    const std::string& csv_path);
// One stream: `size` x s.iters bytes in `seconds`, with `calls` ibv_post_send
// calls: the client's line, the CSV row, and the result line in MiB/s.
void report_bandwidth(const Spec& s, uint32_t size, int mtu, double seconds, unsigned long calls,
                      const std::string& csv_path);

// --depth at most the device's max_qp_wr (ibv_query_device); else a usage error.
void check_depth(uint32_t depth, const char* device, const ibv_device_attr& attr);
// The usage error for --inline -s SIZE when ibv_create_qp refused that
// max_inline_data with EINVAL.
[[noreturn]] void inline_refused(uint32_t size, const char* device);
// -a --inline: the largest power of two from kSweepLast down that a QP made
// with `attr` takes as max_inline_data (each a trial ibv_create_qp, destroyed
// at once); a usage error when the device takes none at all.
uint32_t largest_inline(ibv_pd* pd, ibv_qp_init_attr attr);

// The next PSN our QP expects from its peer (rq_psn, ibv_query_qp): it moves
// on with every request packet that arrives, SEND, WRITE or READ, whether or
// not our CPU sees it. For a WRITE or READ stream, the one sign on the
// server's side that the client's requests really came.
uint32_t expected_psn(ibv_qp* qp);
// Exit 1 when rq_psn is still `psn_at_go` at the client's DONE for `size`:
// none of its requests reached our QP, so nothing was measured.
void check_requests_came(ibv_qp* qp, uint32_t psn_at_go, uint32_t size);

}  // namespace wb::bench
