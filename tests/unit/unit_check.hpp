// unit_check.hpp (tests/unit) - the smallest test harness that will do: CHECK(cond,
// what) prints "ok - what" or "not ok - what (file:line)", and finish() prints
// "NAME: N checks, M failed" and returns the exit status. No framework needed.
#pragma once

#include <cstdio>
#include <string>

namespace unit {

inline int g_checks = 0;
inline int g_failed = 0;

inline void check(bool ok, const std::string& what, const char* file, int line) {
    ++g_checks;
    if (ok) {
        std::printf("ok - %s\n", what.c_str());
    } else {
        ++g_failed;
        std::printf("not ok - %s (%s:%d)\n", what.c_str(), file, line);
    }
}

inline int finish(const char* name) {
    std::printf("%s: %d checks, %d failed\n", name, g_checks, g_failed);
    return g_failed == 0 ? 0 : 1;
}

}  // namespace unit

#define CHECK(cond, what) ::unit::check((cond), (what), __FILE__, __LINE__)
