// lesson15_probe.cpp - what this device can do: the extended device query, as a matrix.
//
// Lesson 15's second program (lesson15.cpp is the first: lesson 4's sum with
// the extended verbs), as rdma-core keeps ibv_devinfo (devinfo.c) apart from
// its pingpong examples. It asks the device with ibv_query_device_ex (the
// classic ibv_device_attr of lesson 1 and what was added since: ODP,
// completion timestamps, device memory, extended capability flags) and
// ibv_query_port, and by creating a few objects to see whether they can be
// (UC and UD QPs, the largest inline data), then prints a matrix: each
// feature, yes or no here, how the probe knows, and the lesson where a
// learner meets it; a "no" adds which kernel or hardware has it. The rows
// agree with `ibv_devinfo -v` wherever it shows the same thing.
//
// Run it (no peer: it talks to this host's device only):
//     ./lesson15_probe                 the matrix of the first device, port 1
//     ./lesson15_probe -d mlx5_0 -i 2  of another device and port
//
// Verbs it introduces:
//     ibv_query_device_ex (ibv_device_attr_ex: odp_caps, completion_timestamp_mask,
//     max_dm_size, device_cap_flags_ex)
//
// Read more: man ibv_query_device_ex, man ibv_devinfo; docs/lesson15-extended-verbs.md
// ("The probe": the matrix on rxe and on other devices, and on newer kernels).
#include <infiniband/verbs.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>

#include "check.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

// Each row of the matrix is a feature, yes or no here, how the probe knows,
// and the lesson where a learner meets it; a "no" adds which kernel or
// hardware has it (docs/lesson15-extended-verbs.md says more).
struct Row {
    const char* feature;
    bool yes;
    std::string how;              // where the answer comes from ("from")
    const char* where;            // the lesson that uses it
    const char* elsewhere = "";   // printed on a "no": who has it
};

// The tries, at the end of this file: whether a QP of a type can be created,
// and the largest inline data an RC QP accepts.
bool can_create_qp(ibv_pd* pd, ibv_cq* cq, ibv_qp_type type, uint32_t max_inline = 0);
uint32_t max_inline_data(ibv_pd* pd, ibv_cq* cq);

}  // namespace

int main(int argc, char** argv) {
    const wb::Usage usage = {
        .synopsis = "[-d DEV] [-i PORT]   the device's capability matrix, and its limits",
        .summary = "what this device can do, as a matrix checked against ibv_devinfo -v (no peer)",
        .network = false,  // no peer: no -p, no --timeout
        .notes = "The extended verbs themselves, in lesson 4's sum, are ./lesson15.",
        .gid = false,  // it reads the port, not a GID: no -g
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage);
    if (!opt.args.empty()) wb::usage_error("the probe asks this host's device only: it takes no HOST or numbers");

    // 1. The device, and the extended query: the classic ibv_device_attr
    //    (lesson 1) is its first member, followed by what was added since.
    wb::Context ctx = wb::open_device(opt.device);
    const char* name = ibv_get_device_name(ctx->device);
    ibv_device_attr_ex dx = {};
    CHECK_RC(ibv_query_device_ex(ctx.get(), nullptr, &dx));
    const ibv_device_attr& d = dx.orig_attr;
    ibv_port_attr port = {};
    CHECK_RC(ibv_query_port(ctx.get(), static_cast<uint8_t>(opt.ib_port), &port),
             "-i: does the device have this port? ./lesson1 lists them");
    std::printf("probe: %s port %d: %s, %s, active MTU %d (ibv_query_device_ex, ibv_query_port)\n", name,
                opt.ib_port, ibv_port_state_str(port.state), wb::link_layer_str(port.link_layer),
                wb::mtu_bytes(port.active_mtu));

    // 2. A PD and a CQ to try QPs with, and the tries: RC, UC and UD have no
    //    capability bit, and no attribute states the inline limit.
    wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
    wb::CompletionQueue cq{CHECK_PTR(ibv_create_cq(ctx.get(), 1, nullptr, nullptr, 0))};
    const uint32_t inline_max = max_inline_data(pd.get(), cq.get());

    // 3. The matrix, row by row.
    const uint64_t flags = d.device_cap_flags, flags_ex = dx.device_cap_flags_ex;
    // Bits of device_cap_flags_ex that rdma-core 44 (Debian 12) has no names
    // for yet: the kernel's IB_UVERBS_DEVICE_FLUSH_GLOBAL, _FLUSH_PERSISTENT
    // and _ATOMIC_WRITE (include/uapi/rdma/ib_user_verbs.h, Linux 6.2).
    constexpr uint64_t kFlushGlobal = 1ULL << 38, kFlushPersistent = 1ULL << 39, kAtomicWrite = 1ULL << 40;
    char ts_mask[32];
    std::snprintf(ts_mask, sizeof ts_mask, "0x%" PRIx64, dx.completion_timestamp_mask);
    const Row rows[] = {
        {"RC queue pairs", can_create_qp(pd.get(), cq.get(), IBV_QPT_RC), "ibv_create_qp(IBV_QPT_RC)",
         "lessons 3 on, but 12 (UD)"},
        {"UC queue pairs", can_create_qp(pd.get(), cq.get(), IBV_QPT_UC), "ibv_create_qp(IBV_QPT_UC)",
         "no lesson: RC without ACKs or retries", "InfiniBand and RoCE hardware (mlx4, mlx5)"},
        {"UD queue pairs", can_create_qp(pd.get(), cq.get(), IBV_QPT_UD), "ibv_create_qp(IBV_QPT_UD)", "lesson 12"},
        {"XRC", (flags & IBV_DEVICE_XRC) != 0, "device_cap_flags XRC", "no lesson",
         "not in rxe, in any kernel; mlx4 and mlx5 hardware"},
        {"shared receive queues", d.max_srq > 0, "max_srq " + std::to_string(d.max_srq), "lesson 13"},
        {"memory windows type 1", (flags & IBV_DEVICE_MEM_WINDOW) != 0 && d.max_mw > 0,
         "device_cap_flags MEM_WINDOW, max_mw " + std::to_string(d.max_mw), "lesson 14",
         "rxe (Linux 6.1 has them); mlx5 hardware"},
        {"memory windows type 2", (flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0,
         std::string("device_cap_flags MEM_WINDOW_TYPE_2") + ((flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) ? "B" : "A"),
         "lesson 14", "rxe type 2B (Linux 6.1 has them); mlx5 hardware"},
        {"inline data", inline_max > 0,
         "max_inline_data " + std::to_string(inline_max) + " taken by ibv_create_qp", "lesson 11"},
        {"atomics", d.atomic_cap != IBV_ATOMIC_NONE,
         d.atomic_cap == IBV_ATOMIC_GLOB ? "atomic_cap ATOMIC_GLOB"
         : d.atomic_cap == IBV_ATOMIC_HCA ? "atomic_cap ATOMIC_HCA" : "atomic_cap ATOMIC_NONE",
         "lesson 7", "rxe; most InfiniBand and RoCE hardware"},
        {"on-demand paging (ODP)", (dx.odp_caps.general_caps & IBV_ODP_SUPPORT) != 0,
         "odp_caps.general_caps ODP_SUPPORT", "lesson 16", "rxe from Linux 6.15; mlx5 hardware (ConnectX-4 and later)"},
        {"completion timestamps", dx.completion_timestamp_mask != 0, std::string("completion_timestamp_mask ") + ts_mask,
         "no lesson", "not in rxe; mlx4 and mlx5 hardware (hca_core_clock)"},
        {"device memory", dx.max_dm_size > 0, "max_dm_size " + std::to_string(dx.max_dm_size), "no lesson",
         "not in rxe; mlx5 hardware (ConnectX-5 and later)"},
        {"atomic write", (flags_ex & kAtomicWrite) != 0, "device_cap_flags_ex bit 40", "no lesson",
         "rxe from Linux 6.2 (64-bit kernels), the first driver to offer it"},
        {"flush", (flags_ex & (kFlushGlobal | kFlushPersistent)) != 0, "device_cap_flags_ex bits 38, 39", "no lesson",
         "rxe from Linux 6.2, the first driver to offer it"},
    };
    std::printf("%-24s %-4s %-46s %s\n", "feature", "here", "from", "where you meet it");
    int yes = 0;
    for (const Row& r : rows) {
        std::printf("%-24s %-4s %-46s %s\n", r.feature, r.yes ? "yes" : "no", r.how.c_str(), r.where);
        if (!r.yes && r.elsewhere[0] != '\0') std::printf("%-29s elsewhere: %s\n", "", r.elsewhere);
        yes += r.yes;
    }

    // 4. The limits, named as ibv_devinfo -v names them (lesson 1 prints some too).
    std::printf("limits (ibv_query_device_ex; ibv_query_port for max_msg_sz):\n");
    const struct {
        const char* name;
        uint64_t value;
    } limits[] = {
        {"max_qp", static_cast<uint64_t>(d.max_qp)},   {"max_qp_wr", static_cast<uint64_t>(d.max_qp_wr)},
        {"max_sge", static_cast<uint64_t>(d.max_sge)}, {"max_sge_rd", static_cast<uint64_t>(d.max_sge_rd)},
        {"max_cq", static_cast<uint64_t>(d.max_cq)},   {"max_cqe", static_cast<uint64_t>(d.max_cqe)},
        {"max_mr", static_cast<uint64_t>(d.max_mr)},   {"max_pd", static_cast<uint64_t>(d.max_pd)},
        {"max_mw", static_cast<uint64_t>(d.max_mw)},   {"max_srq", static_cast<uint64_t>(d.max_srq)},
        {"max_srq_wr", static_cast<uint64_t>(d.max_srq_wr)},
        {"max_qp_rd_atom", static_cast<uint64_t>(d.max_qp_rd_atom)},
        {"max_ah", static_cast<uint64_t>(d.max_ah)},
    };
    for (const auto& l : limits) std::printf("  %-16s %" PRIu64 "\n", l.name, l.value);
    std::printf("  %-16s 0x%" PRIx64 "\n", "max_mr_size", d.max_mr_size);  // hex, as ibv_devinfo prints them
    std::printf("  %-16s 0x%x\n", "max_msg_sz", port.max_msg_sz);
    std::printf("result: %s has %d of the %zu features\n", name, yes, std::size(rows));
    return 0;
}

namespace {

// Whether a QP of `type` with `max_inline` bytes of inline data can be
// created: the one sure test, since RC, UC and UD have no capability bit and
// no attribute states the inline limit. A refusal is the answer, not an error.
bool can_create_qp(ibv_pd* pd, ibv_cq* cq, ibv_qp_type type, uint32_t max_inline) {
    ibv_qp_init_attr attr = {
        .send_cq = cq,
        .recv_cq = cq,
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1,
                .max_inline_data = max_inline},
        .qp_type = type,
    };
    const wb::QueuePair qp{ibv_create_qp(pd, &attr)};  // destroyed at once
    return qp != nullptr;
}

// The largest max_inline_data an RC QP accepts, up to 64 KiB: halve the
// range with each ibv_create_qp (17 tries). 0 when even 0 is refused.
uint32_t max_inline_data(ibv_pd* pd, ibv_cq* cq) {
    uint32_t ok = 0, refused = 64 * 1024 + 1;  // invariant: ok is accepted (or 0), refused is not
    if (!can_create_qp(pd, cq, IBV_QPT_RC, 0)) return 0;
    while (refused - ok > 1) {
        const uint32_t mid = ok + (refused - ok) / 2;
        (can_create_qp(pd, cq, IBV_QPT_RC, mid) ? ok : refused) = mid;
    }
    return ok;
}

}  // namespace
