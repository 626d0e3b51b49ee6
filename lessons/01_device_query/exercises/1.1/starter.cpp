// ex1_1.cpp - exercise 1.1: name every capability flag the device claims.
//
// ibv_query_device fills device_cap_flags, a bit mask of IBV_DEVICE_*
// capabilities (<infiniband/verbs.h>, enum ibv_device_cap_flags). Lesson 1
// prints the mask in hex; a learner wants names. Print one line
//     cap: IBV_DEVICE_<NAME>
// for every bit that is set, then say whether memory windows (lesson 14)
// are claimed. The task is in README.md beside this file; `make grade EX=1.1`
// checks it against `ibv_devinfo -v` on a real device.
#include <infiniband/verbs.h>

#include <cinttypes>
#include <cstdio>

#include "check.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"

int main(int argc, char** argv) {
    const wb::Usage usage = {
        .synopsis = "[-d DEV]",
        .summary = "exercise 1.1: print the device's capability flags by name",
        .network = false,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage);

    wb::Context ctx = wb::open_device(opt.device);
    ibv_device_attr attr{};
    CHECK_RC(ibv_query_device(ctx.get(), &attr));
    const uint64_t flags = attr.device_cap_flags;
    std::printf("device: %s\n", ibv_get_device_name(ctx->device));
    std::printf("device_cap_flags: 0x%08" PRIx64 "\n", flags);

    // TODO(1.1): print "cap: IBV_DEVICE_<NAME>" for each bit set in flags,
    // in the order of enum ibv_device_cap_flags, and "cap: unknown 0x<bits>"
    // for set bits that have no name here. Then print
    // "memory windows: yes" or "memory windows: no" (IBV_DEVICE_MEM_WINDOW).

    return 0;
}
