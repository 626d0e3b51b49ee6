// bench.hpp - what lesson 11 needs around its timed loops, and not for the
// verbs it teaches: the command line, both sides' options compared on the
// wire, the clock, the statistics and result lines, the CSV rows that
// scripts/bench/ plots, the MORE heartbeat that keeps a long run within
// --timeout, and the two warnings about a machine that cannot measure (a
// coarse clock; busy polling on one CPU). lesson11.cpp holds the verbs.
#pragma once

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "check.hpp"
#include "exchange.hpp"
#include "options.hpp"

namespace bench {

// Nanoseconds since an arbitrary start, from the clock NTP never slews
// (CLOCK_MONOTONIC may be sped up or slowed down; _RAW is the bare counter).
// In Linux this is a vDSO call, no system call: about 20 ns on a host, 140
// to 200 ns in the lab's guest (perftest's raw cycle counter: 25 to 50 ns).
inline int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

enum class Test : uint8_t { lat = 1, bw = 2 };
enum class Op : uint8_t { send = 1, write = 2, read = 3 };
inline const char* test_name(Test t) { return t == Test::lat ? "lat" : "bw"; }
inline const char* op_name(Op o) {
    switch (o) {
        case Op::send: return "send";
        case Op::write: return "write";
        case Op::read: return "read";
    }
    return "?";
}

// -a sweeps 2 B .. 1 MiB in powers of two, as perftest's -a does (it goes on to 8 MiB).
constexpr uint32_t kSweepFirst = 2;
constexpr uint32_t kSweepLast = 1u << 20;
constexpr uint32_t kMaxSize = 1u << 23;  // -s at most 8 MiB: two buffers of it per side
constexpr int64_t kMaxIters = 10'000'000;

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

struct CommandLine {
    wb::Options opt;
    Spec spec;
    std::string csv_path;  // -C: the client's CSV file, or empty
};

// The command line, checked before anything is opened (misuse: one line on
// stderr, exit 2), among others: --signal and --batch at most --depth (a WR
// that asks for no completion keeps its send-queue slot until a later
// signaled one completes: with fewer slots than --signal, the queue fills
// with WRs whose completion never comes).
inline CommandLine parse_command_line(int argc, char** argv) {
    std::string test_text, op_text, size_text, all_text, iters_text, inline_text, signal_text, batch_text,
        depth_text, events_text, csv_path;
    const wb::ExtraOption extra[] = {
        // The letters are perftest's where it has one (-a -n -s -I -Q -l -t -e).
        {'T', "test", "lat|bw", "latency ping-pong or bandwidth stream (default: lat)", &test_text},
        {'o', "op", "OP", "the operation measured: send, write or read (default: send)", &op_text},
        {'s', "size", "BYTES", "message size, 1..8388608 (default: 2 for lat, 65536 for bw)", &size_text},
        {'a', "all", nullptr, "sweep sizes from 2 B to 1 MiB in powers of two", &all_text},
        {'n', "iters", "N", "iterations per size (default: 1000 for lat, 5000 for bw)", &iters_text},
        {'I', "inline", nullptr, "post with IBV_SEND_INLINE (SEND and WRITE, up to max_inline_data)", &inline_text},
        {'Q', "signal", "N", "bw: ask for a completion every Nth WR (default: 1)", &signal_text},
        {'l', "batch", "N", "bw: post N WRs per ibv_post_send call (default: 1)", &batch_text},
        {'t', "depth", "N", "bw: WRs in flight, up to max_qp_wr (default: 128)", &depth_text},
        {'e', "events", nullptr, "wait on a completion channel instead of busy polling", &events_text},
        {'C', "csv", "FILE", "client: append one row per size to FILE", &csv_path},
    };
    const wb::Usage usage = {
        .synopsis = "[options]          server\n"
                    "  lesson11 [options] HOST     client: measure, print the result",
        .summary = "latency and bandwidth of SEND, WRITE and READ, measured as perftest does",
        .notes = "Both sides must be given the same measurement options (all but -C).\n"
                 "Results: \"result: send lat 2 B: typical X us, p99 X us, p99.9 X us (n=1000)\",\n"
                 "         \"result: write bw 65536 B: X MiB/s (n=5000)\"; with -a, one per size.",
    };
    CommandLine cl{.opt = wb::parse_options(argc, argv, usage, extra), .spec = {}, .csv_path = csv_path};
    const wb::Options& opt = cl.opt;
    Spec& spec = cl.spec;
    if (opt.args.size() > 1) wb::usage_error("too many arguments: the client takes one HOST");
    if (opt.given('T') && test_text != "lat" && test_text != "bw")
        wb::usage_error("--test must be lat or bw, not '" + test_text + "'");
    spec.test = test_text == "bw" ? Test::bw : Test::lat;
    if (op_text == "write") {
        spec.op = Op::write;
    } else if (op_text == "read") {
        spec.op = Op::read;
    } else if (opt.given('o') && op_text != "send") {
        wb::usage_error("--op must be send, write or read, not '" + op_text + "'");
    }
    const bool lat = spec.test == Test::lat;
    spec.all = opt.given('a');
    if (spec.all && opt.given('s')) wb::usage_error("-a sweeps the sizes itself: give -a or -s, not both");
    // A number option: its value, in range, or the default when it was not given.
    const auto number = [&](char letter, const std::string& text, const char* name, int64_t max, uint32_t dflt) {
        return opt.given(letter) ? static_cast<uint32_t>(wb::parse_range(text, name, 1, max)) : dflt;
    };
    const uint32_t default_size = lat ? 2 : 65536;
    spec.size = number('s', size_text, "-s", kMaxSize, spec.all ? kSweepLast : default_size);
    spec.iters = number('n', iters_text, "-n", kMaxIters, lat ? 1000 : 5000);
    spec.inl = opt.given('I');
    if (spec.inl && spec.op == Op::read)
        wb::usage_error("--inline with --op read: a READ carries no data from us, so there is nothing to inline");
    for (const auto& [letter, name] : {std::pair{'Q', "--signal"}, std::pair{'l', "--batch"}, std::pair{'t', "--depth"}})
        if (lat && opt.given(letter))
            wb::usage_error(std::string(name) +
                            " is a bandwidth option: a ping-pong has one message in flight (add --test bw)");
    spec.signal = number('Q', signal_text, "--signal", 1 << 20, 1);
    spec.batch = number('l', batch_text, "--batch", 1 << 20, 1);
    spec.depth = lat ? 1 : number('t', depth_text, "--depth", 1 << 24, 128);
    if (spec.signal > spec.depth)
        wb::usage_error("--signal " + std::to_string(spec.signal) + " is more than --depth " +
                        std::to_string(spec.depth) + ": the send queue would fill before any WR asks for a completion");
    if (spec.batch > spec.depth)
        wb::usage_error("--batch " + std::to_string(spec.batch) + " is more than --depth " +
                        std::to_string(spec.depth) + ": one post list cannot exceed the send queue");
    spec.events = opt.given('e');
    if (spec.events && lat && spec.op == Op::write)
        wb::usage_error("--events with --test lat --op write: a WRITE raises no completion at its target, "
                        "which watches memory; use --op send");
    if (opt.args.empty() && opt.given('C')) wb::usage_error("-C is a client option: the client writes the results");
    return cl;
}

// "--op write", "-s 65536": a Spec's options as one would type them.
inline std::string spec_text(const Spec& s) {
    std::string t = std::string("--test ") + test_name(s.test) + " --op " + op_name(s.op);
    t += s.all ? " -a" : " -s " + std::to_string(s.size);
    t += " -n " + std::to_string(s.iters);
    if (s.inl) t += " --inline";
    if (s.test == Test::bw)
        t += " --signal " + std::to_string(s.signal) + " --batch " + std::to_string(s.batch) + " --depth " +
             std::to_string(s.depth);
    if (s.events) t += " --events";
    return t;
}

// Send our options as one line of text ("--test lat --op send -s 2 -n 50"),
// receive the peer's, and stop both sides when they differ: a client
// measuring 64 KiB WRITEs against a server set up for 2-byte SENDs would
// print a wrong number, or hang, rather than an error. The line travels in
// a fixed field of kSpecBytes, NUL-padded.
constexpr size_t kSpecBytes = 128;  // the longest line, every option at its maximum, is 112
inline void agree_on_spec(wb::Connection& conn, const Spec& mine, bool is_server, int timeout_s) {
    const std::string text = spec_text(mine);
    std::array<uint8_t, kSpecBytes> out{}, in{};
    std::memcpy(out.data(), text.data(), std::min(text.size(), kSpecBytes - 1));
    wb::send_all(conn, out);
    if (!wb::recv_exact(conn, in, timeout_s)) wb::fail("the peer closed the connection before sending its options");
    if (in == out) return;
    const char* theirs = reinterpret_cast<const char*>(in.data());  // the peer's bytes: no NUL promised
    wb::fail(std::string("options differ: this ") + (is_server ? "server" : "client") + " runs " + text + "; the " +
                 (is_server ? "client" : "server") + " runs " + wb::printable(theirs, strnlen(theirs, kSpecBytes)),
             "start both sides with the same measurement options; only HOST differs");
}

// A long run (a 1 MiB sweep, a slow machine) can outlast --timeout while the
// server, whose CPU takes no part in a WRITE or READ, waits for "DONE". So
// the client says "MORE" on the TCP connection at least once a second while
// it measures (beat(now) costs one comparison when it is not yet due)...
struct Heartbeat {
    static constexpr int64_t kEveryNs = 1'000'000'000;
    wb::Connection& conn;
    int64_t next_ns = 0;
    void beat(int64_t now) {
        if (now < next_ns) return;
        if (next_ns != 0) wb::send_token(conn, "MORE");
        next_ns = now + kEveryNs;
    }
};

// ... and the server waits for "DONE", each token at most timeout_s, the
// whole size at most 20 x timeout_s: a client that says MORE for ever must
// not hold the server for ever. Exits 1 on anything else.
inline void wait_for_done(wb::Connection& conn, int timeout_s) {
    constexpr int kMoreTimeouts = 20;
    const int64_t deadline = now_ns() + int64_t{kMoreTimeouts} * timeout_s * 1'000'000'000;
    for (std::string t; (t = wb::recv_token(conn, timeout_s, "before it said DONE")) != "DONE";) {
        if (t != "MORE") wb::fail("the client sent '" + wb::printable(t.data(), t.size()) + "' where MORE or DONE belongs");
        if (now_ns() > deadline)
            wb::fail("the client still says MORE after " + std::to_string(kMoreTimeouts * timeout_s) + " s (" +
                         std::to_string(kMoreTimeouts) + " x --timeout) on one size",
                     "raise --timeout for a longer measurement");
    }
}

// One CSV row per size for scripts/bench/, appended to `path` (nothing when
// it is empty), with the header first when the file is new.
constexpr const char* kCsvHeader = "tool,test,op,bytes,iters,inline,signal,batch,depth,events,mtu,"
                                   "min_us,typical_us,p99_us,p999_us,max_us,mib_s,post_calls";
inline void append_csv(const std::string& path, const Spec& s, uint32_t size, int mtu, const char* values) {
    if (path.empty()) return;
    FILE* f = std::fopen(path.c_str(), "a");
    if (f == nullptr) wb::fail("cannot open --csv " + path + ": " + wb::errno_str(errno));
    if (std::ftell(f) == 0) std::fprintf(f, "%s\n", kCsvHeader);
    std::fprintf(f, "lesson11,%s,%s,%u,%u,%d,%u,%u,%u,%d,%d,%s\n", test_name(s.test), op_name(s.op), size, s.iters,
                 s.inl, s.signal, s.batch, s.depth, s.events, mtu, values);
    std::fclose(f);
}

// One latency run of `rtt` round trips (ns, sorted here), each divided by
// `divide` (2: half a round trip): the client's line of min, typical (the
// median), p99, p99.9 and max in us, the CSV row, and the result line.
inline void report_latency(const Spec& s, uint32_t size, int mtu, std::vector<int64_t>& rtt, double divide,
                           const std::string& csv_path) {
    std::sort(rtt.begin(), rtt.end());
    const size_t n = rtt.size();
    auto us = [&](size_t i) { return static_cast<double>(rtt[std::min(i, n - 1)]) / 1000.0 / divide; };
    // The median of an even count is the mean of the two middle samples (as
    // perftest's get_median); the p-th percentile is the sample at ceil(p x n).
    const double typical = n % 2 ? us(n / 2) : (us(n / 2 - 1) + us(n / 2)) / 2;
    auto pct = [&](double p) { return us(static_cast<size_t>(std::ceil(p * static_cast<double>(n))) - 1); };
    const double min = us(0), p99 = pct(0.99), p999 = pct(0.999), max = us(n - 1);
    std::printf("client: %u B: min %.2f us, typical %.2f us, p99 %.2f us, p99.9 %.2f us, max %.2f us%s\n", size, min,
                typical, p99, p999, max, divide == 1.0 ? " (round trips)" : " (half round trips)");
    char row[200];
    std::snprintf(row, sizeof row, "%.3f,%.3f,%.3f,%.3f,%.3f,,", min, typical, p99, p999, max);
    append_csv(csv_path, s, size, mtu, row);
    std::printf("result: %s lat %u B: typical %.2f us, p99 %.2f us, p99.9 %.2f us (n=%zu)\n", op_name(s.op), size,
                typical, p99, p999, n);
}

// One stream: `size` x s.iters bytes in `seconds`, with `calls` ibv_post_send
// calls: the client's line, the CSV row, and the result line in MiB/s.
inline void report_bandwidth(const Spec& s, uint32_t size, int mtu, double seconds, unsigned long calls,
                             const std::string& csv_path) {
    const uint32_t n = s.iters;
    const uint64_t bytes = uint64_t{size} * n;
    const double mib_s = static_cast<double>(bytes) / seconds / (1024.0 * 1024.0);
    std::printf("client: %u B: %" PRIu64 " bytes in %.6f s, %.0f messages/s; %lu ibv_post_send calls for %u WRs\n",
                size, bytes, seconds, n / seconds, calls, n);
    char row[200];
    std::snprintf(row, sizeof row, ",,,,,%.2f,%lu", mib_s, calls);
    append_csv(csv_path, s, size, mtu, row);
    std::printf("result: %s bw %u B: %.2f MiB/s (n=%u)\n", op_name(s.op), size, mib_s, n);
}

// A latency below the clock's tick reads as 0 or one tick: warn on stderr
// when CLOCK_MONOTONIC_RAW ticks coarser than 1 us (a VM without a usable
// TSC: 4 ms, the jiffies clock; docs/lesson11-performance.md).
inline void warn_if_coarse_clock() {
    timespec res;
    CHECK_ERRNO(clock_getres(CLOCK_MONOTONIC_RAW, &res));
    if (res.tv_sec > 0 || res.tv_nsec > 1000)
        std::fprintf(stderr,
                     "%s: warning: CLOCK_MONOTONIC_RAW ticks every %.0f us here (clock_getres): "
                     "shorter times read as 0 or one tick\n",
                     wb::program_name(),
                     static_cast<double>(res.tv_sec) * 1e6 + static_cast<double>(res.tv_nsec) / 1e3);
}

// A busy poller keeps its CPU until its time slice ends. With one CPU
// online, the peer's process (on one host) and rxe's kernel work wait for
// it, and every round trip measures the scheduler's tick (4 ms at HZ=250),
// not the network: a side that busy-polls says so, once, on stderr.
inline void warn_if_one_cpu(bool busy_polls) {
    if (!busy_polls || sysconf(_SC_NPROCESSORS_ONLN) != 1) return;
    std::fprintf(stderr,
                 "%s: warning: busy polling with one CPU online measures the scheduler's tick, not the network: "
                 "give the machine two CPUs, or use --events (docs/lesson11-performance.md#the-one-vcpu-trap)\n",
                 wb::program_name());
}

}  // namespace bench
