// bench.cpp - see bench.hpp.
#include "bench.hpp"

#include <time.h>

#include <cerrno>
#include <cstdio>

#include "check.hpp"

namespace wb {

namespace {
int64_t raw_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
constexpr int64_t kHeartbeatNs = 1'000'000'000;
constexpr int kMoreTimeouts = 20;
}  // namespace

void Heartbeat::beat(int64_t now_ns) {
    if (now_ns < next_ns) return;
    if (next_ns != 0) send_token(conn, "MORE");
    next_ns = now_ns + kHeartbeatNs;
}

void wait_for_done(Connection& conn, int timeout_s) {
    const int64_t deadline = raw_ns() + int64_t{kMoreTimeouts} * timeout_s * 1'000'000'000;
    for (std::string t; (t = recv_token(conn, timeout_s, "before it said DONE")) != "DONE";) {
        if (t != "MORE") fail("the client sent '" + printable(t.data(), t.size()) + "' where MORE or DONE belongs");
        if (raw_ns() > deadline)
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
