// check_neg_errno_probe - CHECK_NEG_ERRNO (common/check.hpp), the check of
// ibv_query_gid_table's convention, without a device: a stand-in that returns
// what it is given, with a stale errno (EAGAIN) left behind that the check
// must not read.
//   check_neg_errno_probe N    prints "n=N" when N >= 0; else CHECK_NEG_ERRNO's failure
#include <sys/types.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "check.hpp"

namespace {
// ibv_query_gid_table's return convention: a count, or minus an errno value.
ssize_t fake_query_gid_table(long result) {
    errno = EAGAIN;  // stale: the real verb does not promise to set errno
    return result;
}
}  // namespace

int main(int argc, char** argv) {
    wb::set_program_name(argv[0]);
    if (argc != 2) return 2;
    const ssize_t n = CHECK_NEG_ERRNO(fake_query_gid_table(std::atol(argv[1])));
    std::printf("n=%zd\n", n);
    return 0;
}
