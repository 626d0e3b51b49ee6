// sum_burst.hpp - lesson 13's command line, its result line and its client: lesson 4's sum
// client, its N requests
// sent in one burst (one post list, as lesson 11 posts them), so that the
// server's shared receive queue runs low. Nothing in it is new: lesson 4
// teaches its QP, buffers and SENDs, lesson 11 the post lists. Lesson 13
// alone uses it.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "device.hpp"
#include "options.hpp"

namespace wb {

// A client's burst at most: its send and receive queues hold N each.
constexpr int kBurstMaxRequests = 1000;

// Lesson 13's command line, checked (misuse: one line on stderr, exit 2): a
// server takes -c CLIENTS (default 2), --srq-size N (8) and --limit L (2),
// with at least one receive per client and 1 <= L < N; a client HOST and -n N
// (10, at most kBurstMaxRequests).
struct BurstArgs {
    Options opt;
    bool is_server = true;
    int clients = 0;
    uint32_t srq_size = 0;
    uint32_t limit = 0;
    int requests = 0;
};
BurstArgs parse_burst_args(int argc, char** argv);

// The server's result line, "result: served 20 requests from 2 clients with
// one SRQ of 8 receives; limit reached 3 times" (singulars in the singular),
// or, when it dropped clients, the error outcome naming how many (exit 1).
void print_srq_result(int total, int clients, int dropped, uint32_t srq_size, int limit_events);

// Connect to the server at opt.args[0] as lesson `lesson`, wait for its
// "GO!!", send `requests` sum requests (request k asks for k + 100k) in one
// ibv_post_send, check every answer, say "DONE", and print the result line.
// Returns 0; a wrong answer or a failure exits 1.
int sum_burst_client(const Options& opt, ibv_context* ctx, const PortAddress& addr, uint16_t lesson, int requests);

}  // namespace wb
