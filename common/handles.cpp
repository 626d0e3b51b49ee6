// handles.cpp - the release side of handles.hpp.
#include "handles.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.hpp"

namespace wb {

void report_release_failure(const char* verb, int err) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s failed: %s\n", program_name(), verb, errno_str(err).c_str());
}

int dealloc_mw(ibv_mw* mw) { return ibv_dealloc_mw(mw); }

void FreeBuffer::operator()(void* p) const noexcept { std::free(p); }

Buffer alloc_buffer(size_t bytes) {
    void* p = nullptr;
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t rounded = (bytes + page - 1) / page * page;  // whole pages: an MR pins whole pages anyway
    if (int rc = posix_memalign(&p, page, rounded); rc != 0)
        fail("posix_memalign(" + std::to_string(rounded) + " bytes) failed: " + errno_str(rc));
    std::memset(p, 0, rounded);
    return Buffer(static_cast<char*>(p));
}

}  // namespace wb
