// bench.cpp - see bench.hpp.
#include "bench.hpp"

#include <time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "check.hpp"

namespace wb {

namespace {
constexpr int64_t kHeartbeatNs = 1'000'000'000;
constexpr int kMoreTimeouts = 20;
}  // namespace

void Heartbeat::beat(int64_t now_ns) {
    if (now_ns < next_ns) return;
    if (next_ns != 0) send_token(conn, "MORE");
    next_ns = now_ns + kHeartbeatNs;
}

void wait_for_done(Connection& conn, int timeout_s) {
    const int64_t deadline = bench::now_ns() + int64_t{kMoreTimeouts} * timeout_s * 1'000'000'000;
    for (std::string t; (t = recv_token(conn, timeout_s, "before it said DONE")) != "DONE";) {
        if (t != "MORE") fail("the client sent '" + printable(t.data(), t.size()) + "' where MORE or DONE belongs");
        if (bench::now_ns() > deadline)
            fail("the client still says MORE after " + std::to_string(kMoreTimeouts * timeout_s) + " s (" +
                     std::to_string(kMoreTimeouts) + " x --timeout) on one size",
                 "raise --timeout for a longer measurement");
    }
}

void append_csv(const std::string& path, const char* header, const std::string& row) {
    if (path.empty()) return;
    FILE* f = std::fopen(path.c_str(), "a");
    if (f == nullptr) fail("cannot open --csv " + path + ": " + errno_str(errno));
    if (std::ftell(f) == 0) std::fprintf(f, "%s\n", header);
    std::fprintf(f, "%s\n", row.c_str());
    std::fclose(f);
}

void warn_if_coarse_clock() {
    timespec res;
    CHECK_ERRNO(clock_getres(CLOCK_MONOTONIC_RAW, &res));
    if (res.tv_sec > 0 || res.tv_nsec > 1000)
        std::fprintf(stderr, "%s: warning: CLOCK_MONOTONIC_RAW ticks every %.0f us here (clock_getres): "
                     "shorter times read as 0 or one tick\n",
                     program_name(), static_cast<double>(res.tv_sec) * 1e6 + static_cast<double>(res.tv_nsec) / 1e3);
}

}  // namespace wb

namespace wb::bench {

const char* test_name(Test t) { return t == Test::lat ? "lat" : "bw"; }
const char* op_name(Op o) { return o == Op::send ? "send" : o == Op::write ? "write" : "read"; }

namespace {

constexpr uint32_t kMaxSize = 1u << 23;  // -s at most 8 MiB: two buffers of it per side
constexpr int64_t kMaxIters = 10'000'000;

// "--op write", "-s 65536": a Spec's options as one would type them.
std::string spec_text(const Spec& s) {
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

// One CSV row per size for scripts/bench/.
const char* const kCsvHeader = "tool,test,op,bytes,iters,inline,signal,batch,depth,events,mtu,"
                               "min_us,typical_us,p99_us,p999_us,max_us,mib_s,post_calls";
std::string csv_row(const Spec& s, uint32_t size, int mtu, const char* values) {
    char row[300];
    std::snprintf(row, sizeof row, "lesson11,%s,%s,%u,%u,%d,%u,%u,%u,%d,%d,%s", test_name(s.test), op_name(s.op), size,
                  s.iters, s.inl, s.signal, s.batch, s.depth, s.events, mtu, values);
    return row;
}

}  // namespace

CommandLine parse_command_line(int argc, char** argv) {
    std::string test_text, op_text, size_text, all_text, iters_text, inline_text, signal_text, batch_text,
        depth_text, events_text, csv_path;
    const ExtraOption extra[] = {
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
    const Usage usage = {
        .synopsis = "[options]          server\n"
                    "  lesson11 [options] HOST     client: measure, print the result",
        .summary = "latency and bandwidth of SEND, WRITE and READ, measured as perftest does",
        .notes = "Both sides must be given the same measurement options (all but -C).\n"
                 "Results: \"result: send lat 2 B: typical X us, p99 X us, p99.9 X us (n=1000)\",\n"
                 "         \"result: write bw 65536 B: X MiB/s (n=5000)\"; with -a, one per size.",
    };
    CommandLine cl{.opt = parse_options(argc, argv, usage, extra), .spec = {}, .csv_path = csv_path};
    const Options& opt = cl.opt;
    Spec& spec = cl.spec;
    if (opt.args.size() > 1) usage_error("too many arguments: the client takes one HOST");
    const bool is_server = opt.args.empty();
    if (opt.given('T') && test_text != "lat" && test_text != "bw")
        usage_error("--test must be lat or bw, not '" + test_text + "'");
    spec.test = test_text == "bw" ? Test::bw : Test::lat;
    if (opt.given('o') && op_text != "send" && op_text != "write" && op_text != "read")
        usage_error("--op must be send, write or read, not '" + op_text + "'");
    spec.op = op_text == "write" ? Op::write : op_text == "read" ? Op::read : Op::send;
    const bool lat = spec.test == Test::lat;
    spec.all = opt.given('a');
    if (spec.all && opt.given('s')) usage_error("-a sweeps the sizes itself: give -a or -s, not both");
    // A number option: its value, in range, or the default when it was not given.
    const auto number = [&](char letter, const std::string& text, const char* name, int64_t max, uint32_t dflt) {
        return opt.given(letter) ? static_cast<uint32_t>(parse_range(text, name, 1, max)) : dflt;
    };
    spec.size = number('s', size_text, "-s", kMaxSize, spec.all ? kSweepLast : lat ? 2 : 65536);
    spec.iters = number('n', iters_text, "-n", kMaxIters, lat ? 1000 : 5000);
    spec.inl = opt.given('I');
    if (spec.inl && spec.op == Op::read)
        usage_error("--inline with --op read: a READ carries no data from us, so there is nothing to inline");
    for (char bw_only : {'Q', 'l', 't'})
        if (lat && opt.given(bw_only))
            usage_error(std::string(bw_only == 'Q' ? "--signal" : bw_only == 'l' ? "--batch" : "--depth") +
                        " is a bandwidth option: a ping-pong has one message in flight (add --test bw)");
    spec.signal = number('Q', signal_text, "--signal", 1 << 20, 1);
    spec.batch = number('l', batch_text, "--batch", 1 << 20, 1);
    spec.depth = lat ? 1 : number('t', depth_text, "--depth", 1 << 24, 128);
    if (spec.signal > spec.depth)
        usage_error("--signal " + std::to_string(spec.signal) + " is more than --depth " + std::to_string(spec.depth) +
                    ": the send queue would fill before any WR asks for a completion");
    if (spec.batch > spec.depth)
        usage_error("--batch " + std::to_string(spec.batch) + " is more than --depth " + std::to_string(spec.depth) +
                    ": one post list cannot exceed the send queue");
    spec.events = opt.given('e');
    if (spec.events && lat && spec.op == Op::write)
        usage_error("--events with --test lat --op write: a WRITE raises no completion at its target, "
                    "which watches memory; use --op send");
    if (is_server && opt.given('C')) usage_error("-C is a client option: the client writes the results");
    return cl;
}

// The line travels in a fixed field of kSpecBytes, NUL-padded.
constexpr size_t kSpecBytes = 128;  // the longest line, every option at its maximum, is 112
void agree_on_spec(Connection& conn, const Spec& mine, bool is_server, int timeout_s) {
    const std::string text = spec_text(mine);
    std::array<uint8_t, kSpecBytes> out{}, in{};
    std::memcpy(out.data(), text.data(), std::min(text.size(), kSpecBytes - 1));
    send_all(conn, out);
    if (!recv_exact(conn, in, timeout_s)) fail("the peer closed the connection before sending its options");
    if (in == out) return;
    const char* theirs = reinterpret_cast<const char*>(in.data());  // the peer's bytes: no NUL promised
    fail(std::string("options differ: this ") + (is_server ? "server" : "client") + " runs " + text + "; the " +
             (is_server ? "client" : "server") + " runs " + printable(theirs, strnlen(theirs, kSpecBytes)),
         "start both sides with the same measurement options; only HOST differs");
}

void report_latency(const Spec& s, uint32_t size, int mtu, std::vector<int64_t>& rtt, double divide,
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
                typical, p99, p999, max, s.op == Op::read ? " (round trips)" : " (half round trips)");
    char row[200];
    std::snprintf(row, sizeof row, "%.3f,%.3f,%.3f,%.3f,%.3f,,", min, typical, p99, p999, max);
    append_csv(csv_path, kCsvHeader, csv_row(s, size, mtu, row));
    std::printf("result: %s lat %u B: typical %.2f us, p99 %.2f us, p99.9 %.2f us (n=%zu)\n", op_name(s.op), size,
                typical, p99, p999, n);
}

void report_bandwidth(const Spec& s, uint32_t size, int mtu, double seconds, unsigned long calls,
                      const std::string& csv_path) {
    const uint32_t n = s.iters;
    const uint64_t bytes = uint64_t{size} * n;
    const double mib_s = static_cast<double>(bytes) / seconds / (1024.0 * 1024.0);
    std::printf("client: %u B: %" PRIu64 " bytes in %.6f s, %.0f messages/s; %lu ibv_post_send calls for %u WRs\n",
                size, bytes, seconds, n / seconds, calls, n);
    char row[200];
    std::snprintf(row, sizeof row, ",,,,,%.2f,%lu", mib_s, calls);
    append_csv(csv_path, kCsvHeader, csv_row(s, size, mtu, row));
    std::printf("result: %s bw %u B: %.2f MiB/s (n=%u)\n", op_name(s.op), size, mib_s, n);
}

void check_depth(uint32_t depth, const char* device, const ibv_device_attr& attr) {
    if (depth > static_cast<uint32_t>(attr.max_qp_wr))
        usage_error("--depth " + std::to_string(depth) + " is more than " + device + "'s max_qp_wr " +
                    std::to_string(attr.max_qp_wr) + " (ibv_query_device)");
}

void inline_refused(uint32_t size, const char* device) {
    usage_error("--inline -s " + std::to_string(size) + ": " + device + " refused a QP with max_inline_data " +
                std::to_string(size) +
                " (EINVAL): too big to post inline; -a --inline sweeps up to the largest it takes");
}

uint32_t largest_inline(ibv_pd* pd, ibv_qp_init_attr attr) {
    for (uint32_t ask = kSweepLast; ask >= kSweepFirst; ask /= 2) {
        attr.cap.max_inline_data = ask;
        if (ibv_qp* q = ibv_create_qp(pd, &attr)) {
            CHECK_RC(ibv_destroy_qp(q));
            return ask;
        }
    }
    usage_error("--inline: this device takes no inline data at all");
}

uint32_t expected_psn(ibv_qp* qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    CHECK_RC(ibv_query_qp(qp, &attr, IBV_QP_RQ_PSN, &init));
    return attr.rq_psn;
}

void check_requests_came(ibv_qp* qp, uint32_t psn_at_go, uint32_t size) {
    if (expected_psn(qp) == psn_at_go)
        fail("the client said DONE for " + std::to_string(size) +
                 " B, but none of its requests reached our QP (its rq_psn did not move): nothing was measured",
             "is the client a lesson-11 client of this workbook?");
}

}  // namespace wb::bench
