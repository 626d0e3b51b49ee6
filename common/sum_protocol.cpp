// sum_protocol.cpp - see sum_protocol.hpp.
#include "sum_protocol.hpp"

#include <endian.h>

#include <cstring>

namespace wb {

namespace {
std::string overflow_text(int64_t a, int64_t b) {
    return std::to_string(a) + " + " + std::to_string(b) + " overflows a signed 64-bit integer";
}
}  // namespace

SumArgs parse_sum_args(const Options& opt) {
    SumArgs args;
    args.is_server = opt.args.empty();
    if (args.is_server) return args;
    if (opt.args.size() != 3)
        usage_error("a client needs HOST A B, got " + std::to_string(opt.args.size()) + " argument" +
                    (opt.args.size() == 1 ? "" : "s"));
    args.a = parse_i64(opt.args[1], "A");
    args.b = parse_i64(opt.args[2], "B");
    return args;
}

SumRequest make_sum_request(int64_t a, int64_t b) {
    return {.a = htobe64(static_cast<uint64_t>(a)), .b = htobe64(static_cast<uint64_t>(b))};
}

SumAnswer answer_sum_request(const char* data, uint32_t byte_len) {
    SumAnswer ans;
    if (byte_len != sizeof(SumRequest)) {
        // Never read beyond what arrived: the rest of the buffer is stale.
        ans.response.status = htobe32(kSumBadRequest);
        ans.error = "the request was " + std::to_string(byte_len) + " bytes, a sum request is exactly " +
                    std::to_string(sizeof(SumRequest));
        return ans;
    }
    SumRequest request;
    std::memcpy(&request, data, sizeof request);
    ans.a = static_cast<int64_t>(be64toh(request.a));
    ans.b = static_cast<int64_t>(be64toh(request.b));
    if (__builtin_add_overflow(ans.a, ans.b, &ans.sum)) {  // true when the exact sum does not fit in int64
        ans.response.status = htobe32(kSumOverflow);
        ans.error = overflow_text(ans.a, ans.b);
        ans.sum = 0;
    } else {
        ans.response.status = htobe32(kSumOk);
        ans.response.sum = htobe64(static_cast<uint64_t>(ans.sum));
    }
    return ans;
}

SumResult read_sum_response(const char* data, uint32_t byte_len, int64_t a, int64_t b) {
    SumResult r;
    if (byte_len != sizeof(SumResponse)) {
        r.error = "the server's response was " + std::to_string(byte_len) + " bytes, expected " +
                  std::to_string(sizeof(SumResponse));
        return r;
    }
    SumResponse response;
    std::memcpy(&response, data, sizeof response);
    r.status = be32toh(response.status);
    switch (r.status) {
    case kSumOk: r.sum = static_cast<int64_t>(be64toh(response.sum)); break;
    case kSumOverflow: r.error = overflow_text(a, b); break;
    case kSumBadRequest: r.error = "the server refused the request as malformed"; break;
    default: r.error = "the server answered with unknown status " + std::to_string(r.status); break;
    }
    return r;
}

}  // namespace wb
