// bench.hpp - what lesson 11 needs only for long runs and `make bench`, not
// for the verbs it teaches: the MORE heartbeat that keeps a long measurement
// within --timeout, the CSV rows scripts/bench/ plots, the warning about a
// coarse clock. Lesson 11 alone uses it.
#pragma once

#include <cstdint>
#include <string>

#include "exchange.hpp"

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
