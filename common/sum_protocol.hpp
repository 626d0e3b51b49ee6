// sum_protocol.hpp - the two messages of the sum service (lessons 4, 8, 9, 12 and 15).
//
// This is the application's own protocol, not RDMA: what the bytes of a
// SEND mean. Lesson 4 introduces it; lessons 8, 9, 12 and 15 reuse it
// unchanged, so that a diff of lesson 4 against them shows only what they
// change (event-driven completions; rdma_cm; UD; the extended verbs). Each
// message travels as one SEND (over UD, one datagram).
//
// Integers are big-endian (network byte order) so that hosts of any
// endianness agree: htobe64 on the way out, be64toh on the way in (not
// htonl, which converts only 32 bits). A signed int64 travels as its
// two's-complement bit pattern.
#pragma once

#include <cstdint>
#include <string>

#include "options.hpp"

namespace wb {

struct SumRequest {          // client -> server, exactly 16 bytes
    uint64_t a;              // int64, big-endian
    uint64_t b;              // int64, big-endian
};
struct SumResponse {         // server -> client, exactly 16 bytes
    uint32_t status;         // big-endian: one of SumStatus
    uint32_t reserved;       // zero; keeps `sum` on an 8-byte boundary
    uint64_t sum;            // int64, big-endian; meaningful only when status is kSumOk
};
static_assert(sizeof(SumRequest) == 16 && sizeof(SumResponse) == 16, "no padding on the wire");

enum SumStatus : uint32_t {
    kSumOk = 0,          // sum holds a + b
    kSumOverflow = 1,    // a + b does not fit in a signed 64-bit integer
    kSumBadRequest = 2,  // the request was not exactly sizeof(SumRequest) bytes
};

// The positional arguments of a sum lesson: none for the server, HOST A B
// for a client (A and B signed 64-bit; misuse exits 2 via wb::usage_error).
struct SumArgs {
    bool is_server = true;
    int64_t a = 0, b = 0;
};
SumArgs parse_sum_args(const Options& opt);

// A request for a + b, in wire form.
SumRequest make_sum_request(int64_t a, int64_t b);

// The server's side: what arrived (byte_len bytes at data) decoded, added
// with __builtin_add_overflow, and the response to send back. Only a message
// of exactly sizeof(SumRequest) bytes is read: never beyond what arrived.
struct SumAnswer {
    SumResponse response{};  // wire form, errors included, so the client can say why
    int64_t a = 0, b = 0, sum = 0;
    std::string error;       // empty when the sum is good, else the reason (for "result: error: ...")
};
SumAnswer answer_sum_request(const char* data, uint32_t byte_len);

// The client's side: the server's response (byte_len bytes at data) to the
// request a + b. `error` is empty and `sum` set when the server added them.
struct SumResult {
    int64_t sum = 0;
    uint32_t status = kSumOk;
    std::string error;
};
SumResult read_sum_response(const char* data, uint32_t byte_len, int64_t a, int64_t b);

}  // namespace wb
