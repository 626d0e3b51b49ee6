// check.cpp - error reporting for the CHECK_* macros (see check.hpp).
#include "check.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace wb {

namespace {
const char* g_program = "workbook";
}

void set_program_name(const char* argv0) {
    const char* slash = std::strrchr(argv0, '/');
    g_program = slash ? slash + 1 : argv0;
}

const char* program_name() { return g_program; }

std::string errno_str(int err) {
    // strerrorname_np (glibc 2.32) gives "EINVAL"; strerror gives the text.
    const char* name = strerrorname_np(err);
    std::string s = name ? name : ("errno " + std::to_string(err));
    return s + " (" + std::strerror(err) + ")";
}

void fail(const std::string& what, const std::string& hint) {
    std::fflush(stdout);  // keep the narration before the error
    std::fprintf(stderr, "%s: %s\n", g_program, what.c_str());
    if (!hint.empty()) std::fprintf(stderr, "%s: check: %s\n", g_program, hint.c_str());
    std::exit(1);
}

void result_error(const std::string& what) {
    std::printf("result: error: %s\n", what.c_str());
    std::fflush(stdout);
    std::exit(1);
}

std::string printable(const char* data, size_t len) {
    std::string out;
    for (size_t i = 0; i < len; ++i) {
        const unsigned char c = static_cast<unsigned char>(data[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20 || c >= 0x7f) {  // controls, DEL, and every byte of UTF-8 or C1
            char hex[5];
            std::snprintf(hex, sizeof hex, "\\x%02x", c);
            out += hex;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

void fail_call(const char* call, int err, const char* hint) {
    fail(std::string(call) + " failed: " + errno_str(err), hint ? hint : "");
}

void fail_poll(const char* call, int n, const char* hint) {
    fail(std::string(call) + " failed (returned " + std::to_string(n) + ")",
         hint && *hint ? hint : "the CQ overran (more completions than entries?) or the device failed: dmesg");
}

}  // namespace wb
