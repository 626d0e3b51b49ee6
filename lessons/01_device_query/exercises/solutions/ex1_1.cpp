// SPOILER: a reference solution of exercise 1.1 (the starter is ../1.1/ex1_1.cpp).
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

    // The flags in the order of enum ibv_device_cap_flags (verbs.h).
    struct Flag {
        uint64_t bit;
        const char* name;
    };
    static constexpr Flag kFlags[] = {
        {IBV_DEVICE_RESIZE_MAX_WR, "IBV_DEVICE_RESIZE_MAX_WR"},
        {IBV_DEVICE_BAD_PKEY_CNTR, "IBV_DEVICE_BAD_PKEY_CNTR"},
        {IBV_DEVICE_BAD_QKEY_CNTR, "IBV_DEVICE_BAD_QKEY_CNTR"},
        {IBV_DEVICE_RAW_MULTI, "IBV_DEVICE_RAW_MULTI"},
        {IBV_DEVICE_AUTO_PATH_MIG, "IBV_DEVICE_AUTO_PATH_MIG"},
        {IBV_DEVICE_CHANGE_PHY_PORT, "IBV_DEVICE_CHANGE_PHY_PORT"},
        {IBV_DEVICE_UD_AV_PORT_ENFORCE, "IBV_DEVICE_UD_AV_PORT_ENFORCE"},
        {IBV_DEVICE_CURR_QP_STATE_MOD, "IBV_DEVICE_CURR_QP_STATE_MOD"},
        {IBV_DEVICE_SHUTDOWN_PORT, "IBV_DEVICE_SHUTDOWN_PORT"},
        {IBV_DEVICE_INIT_TYPE, "IBV_DEVICE_INIT_TYPE"},
        {IBV_DEVICE_PORT_ACTIVE_EVENT, "IBV_DEVICE_PORT_ACTIVE_EVENT"},
        {IBV_DEVICE_SYS_IMAGE_GUID, "IBV_DEVICE_SYS_IMAGE_GUID"},
        {IBV_DEVICE_RC_RNR_NAK_GEN, "IBV_DEVICE_RC_RNR_NAK_GEN"},
        {IBV_DEVICE_SRQ_RESIZE, "IBV_DEVICE_SRQ_RESIZE"},
        {IBV_DEVICE_N_NOTIFY_CQ, "IBV_DEVICE_N_NOTIFY_CQ"},
        {IBV_DEVICE_MEM_WINDOW, "IBV_DEVICE_MEM_WINDOW"},
        {IBV_DEVICE_UD_IP_CSUM, "IBV_DEVICE_UD_IP_CSUM"},
        {IBV_DEVICE_XRC, "IBV_DEVICE_XRC"},
        {IBV_DEVICE_MEM_MGT_EXTENSIONS, "IBV_DEVICE_MEM_MGT_EXTENSIONS"},
        {IBV_DEVICE_MEM_WINDOW_TYPE_2A, "IBV_DEVICE_MEM_WINDOW_TYPE_2A"},
        {IBV_DEVICE_MEM_WINDOW_TYPE_2B, "IBV_DEVICE_MEM_WINDOW_TYPE_2B"},
        {IBV_DEVICE_RC_IP_CSUM, "IBV_DEVICE_RC_IP_CSUM"},
        {IBV_DEVICE_RAW_IP_CSUM, "IBV_DEVICE_RAW_IP_CSUM"},
        {IBV_DEVICE_MANAGED_FLOW_STEERING, "IBV_DEVICE_MANAGED_FLOW_STEERING"},
    };
    uint64_t named = 0;
    for (const Flag& f : kFlags) {
        if (flags & f.bit) std::printf("cap: %s\n", f.name);
        named |= f.bit;
    }
    if (flags & ~named) std::printf("cap: unknown 0x%" PRIx64 "\n", flags & ~named);
    std::printf("memory windows: %s\n", (flags & IBV_DEVICE_MEM_WINDOW) ? "yes" : "no");

    return 0;
}
