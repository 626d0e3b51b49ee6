// check_poll_probe - CHECK_POLL (common/check.hpp), the check of ibv_poll_cq's
// convention, without a device: a stand-in that returns what it is given.
//   check_poll_probe N    prints "n=N" when N >= 0; else CHECK_POLL's failure
#include <cstdio>
#include <cstdlib>

#include "check.hpp"

namespace {
int fake_poll_cq(int result) { return result; }  // ibv_poll_cq's return convention: a count, or < 0
}  // namespace

int main(int argc, char** argv) {
    wb::set_program_name(argv[0]);
    if (argc != 2) return 2;
    const int n = CHECK_POLL(fake_poll_cq(std::atoi(argv[1])));
    std::printf("n=%d\n", n);
    return 0;
}
