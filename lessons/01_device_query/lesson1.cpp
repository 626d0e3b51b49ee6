// lesson1.cpp - what an RDMA device says about itself: devices, limits, ports, GIDs.
//
// Before a program can move a byte over RDMA it must find a device, open it,
// and learn how to address its port. This lesson walks that path by hand:
// list the devices, open each one, print its limits (ibv_query_device) with
// the names of the struct fields, every port (ibv_query_port), and the GID
// table with each entry's type and network device. It ends by saying which
// GID a RoCE v2 program should use, and why: lessons 3 to 8 make the same
// choice through wb::open_device and wb::choose_address (common/device.hpp).
//
// Run it (no peer: one process, no network traffic):
//     ./lesson1                  every device, its ports and GID tables
//     ./lesson1 -d rxe0          only that device
//     ./lesson1 -g 0             also explain what GID index 0 is (as -g 0 would use it)
//     ./lesson1 -i 2             explain the GID choice for port 2 instead of port 1
// On two hosts, run it on each: each side picks its own GID; the numbers
// should agree with `ibv_devinfo -v` on the same host.
//
// Verbs it introduces:
//     ibv_get_device_list / ibv_free_device_list, ibv_get_device_name,
//     ibv_get_device_guid, ibv_node_type_str
//     ibv_open_device / ibv_close_device (a wb::Context closes it)
//     ibv_query_device, ibv_query_port, ibv_port_state_str
//     ibv_query_gid_table (every valid GID), ibv_query_gid_ex (one GID by index)
//
// Read more: man ibv_get_device_list, man ibv_open_device, man ibv_query_device,
// man ibv_query_port, man ibv_query_gid_table, man ibv_query_gid_ex;
// docs/lesson1-device-query.md (what each number means, exercises, errors).
#include <infiniband/verbs.h>
#include <net/if.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <endian.h>
#include <string>
#include <vector>

#include "check.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"

namespace {

// "5426:73ff:fe08:4564": a 64-bit GUID, which verbs hand us in network byte
// order (__be64), written the way ibv_devinfo writes it.
std::string guid_str(__be64 guid_be) {
    uint64_t g = be64toh(guid_be);
    char text[20];
    std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", unsigned(g >> 48) & 0xffff,
                  unsigned(g >> 32) & 0xffff, unsigned(g >> 16) & 0xffff, unsigned(g) & 0xffff);
    return text;
}

// rdma-core has no string function for these two enums.
const char* atomic_cap_str(ibv_atomic_cap cap) {
    switch (cap) {
    case IBV_ATOMIC_NONE: return "ATOMIC_NONE";  // no atomics (lesson 7 cannot run)
    case IBV_ATOMIC_HCA: return "ATOMIC_HCA";    // atomic among this device's own operations
    case IBV_ATOMIC_GLOB: return "ATOMIC_GLOB";  // atomic also against the CPUs
    }
    return "unknown";
}
const char* mtu_str(ibv_mtu mtu) {
    static char text[16];
    std::snprintf(text, sizeof text, "%d", wb::mtu_bytes(mtu));
    return text;
}

// The rank lesson 1 (and wb::choose_address) gives a GID when choosing one
// for a RoCE connection: higher is better, 0 is unusable.
int roce_rank(const ibv_gid_entry& e) {
    if (wb::gid_is_zero(e.gid)) return 0;  // a zero GID addresses nothing
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2) return wb::gid_is_ipv4_mapped(e.gid) ? 3 : 2;
    if (e.gid_type == IBV_GID_TYPE_ROCE_V1) return 1;
    return 0;
}

const char* rank_reason(int rank) {
    switch (rank) {
    case 3: return "RoCE v2 travels in UDP/IP packets (port 4791),\n"
                   "    so routers can forward it; this GID is the netdev's IPv4 address, the one a peer\n"
                   "    reaches over IPv4 and the one rdma_cm picks";
    case 2: return "RoCE v2 (routable UDP/IP), but an IPv6\n"
                   "    address: fine if both peers use IPv6; a link-local fe80:: GID only reaches peers\n"
                   "    on the same link";
    case 1: return "RoCE v1 is a raw Ethernet frame\n"
                   "    (ethertype 0x8915): it cannot leave one L2 segment";
    }
    return "this entry cannot address a RoCE peer";
}

struct Recommendation {
    std::string device;
    std::string text;  // for the result line
};

// Query and print one device; return what a program on port `explain_port`
// should use. `gid_given` is -g (or -1).
Recommendation show_device(ibv_device* dev, int explain_port, int gid_given) {
    const char* name = ibv_get_device_name(dev);
    std::printf("\n== device %s\n", name);
    std::printf("node_type: %s\n", ibv_node_type_str(dev->node_type));
    std::printf("node_guid (ibv_get_device_guid): %s\n", guid_str(ibv_get_device_guid(dev)).c_str());

    // Open it: the context is our handle to the device for every later verb.
    // wb::Context calls ibv_close_device when it goes out of scope.
    wb::Context ctx{CHECK_PTR(ibv_open_device(dev), "do you have read/write access to /dev/infiniband/uverbs*? (make doctor checks this)")};

    // The device's limits. These are upper bounds the device accepts, not
    // what is free right now: other processes share them.
    ibv_device_attr d{};
    CHECK_RC(ibv_query_device(ctx.get(), &d));
    std::printf("ibv_query_device:\n");
    std::printf("  fw_ver: %s\n", d.fw_ver);
    std::printf("  node_guid: %s\n", guid_str(d.node_guid).c_str());
    std::printf("  sys_image_guid: %s\n", guid_str(d.sys_image_guid).c_str());
    std::printf("  vendor_id: 0x%04x   # IEEE OUI of the vendor (0xffffff: software device)\n", d.vendor_id);
    std::printf("  vendor_part_id: %u\n", d.vendor_part_id);
    std::printf("  hw_ver: 0x%X\n", d.hw_ver);
    std::printf("  phys_port_cnt: %u   # ports, numbered from 1\n", d.phys_port_cnt);
    std::printf("  max_mr_size: 0x%" PRIx64 "   # bytes one memory region may cover\n", d.max_mr_size);
    std::printf("  page_size_cap: 0x%" PRIx64 "   # page sizes the device supports (bit n = 2^n bytes)\n",
                d.page_size_cap);
    std::printf("  max_qp: %d   # queue pairs\n", d.max_qp);
    std::printf("  max_qp_wr: %d   # work requests outstanding on one send or receive queue\n", d.max_qp_wr);
    std::printf("  device_cap_flags: 0x%08x   # IBV_DEVICE_* capability bits\n", d.device_cap_flags);
    std::printf("  max_sge: %d   # scatter/gather entries per send or receive work request\n", d.max_sge);
    std::printf("  max_sge_rd: %d   # scatter/gather entries per RDMA READ\n", d.max_sge_rd);
    std::printf("  max_cq: %d   # completion queues\n", d.max_cq);
    std::printf("  max_cqe: %d   # entries in one completion queue\n", d.max_cqe);
    std::printf("  max_mr: %d   # memory regions\n", d.max_mr);
    std::printf("  max_pd: %d   # protection domains\n", d.max_pd);
    std::printf("  max_qp_rd_atom: %d   # READ/atomic requests one QP may receive in flight (max_dest_rd_atomic)\n",
                d.max_qp_rd_atom);
    std::printf("  max_res_rd_atom: %d   # the same, summed over the whole device\n", d.max_res_rd_atom);
    std::printf("  max_qp_init_rd_atom: %d   # READ/atomic requests one QP may send in flight (max_rd_atomic)\n",
                d.max_qp_init_rd_atom);
    std::printf("  atomic_cap: %s (%d)   # how atomic lesson 7's operations are\n", atomic_cap_str(d.atomic_cap),
                d.atomic_cap);
    std::printf("  max_mw: %d   # memory windows\n", d.max_mw);
    std::printf("  max_ah: %d   # address handles (UD)\n", d.max_ah);
    std::printf("  max_srq: %d   # shared receive queues\n", d.max_srq);
    std::printf("  max_srq_wr: %d\n", d.max_srq_wr);
    std::printf("  max_srq_sge: %d\n", d.max_srq_sge);
    std::printf("  max_pkeys: %u   # partition keys per port\n", d.max_pkeys);
    std::printf("  local_ca_ack_delay: %u   # 4.096 us * 2^n: how fast this device acknowledges\n",
                d.local_ca_ack_delay);

    // Every port: its state, MTUs, link layer and (on InfiniBand) its LID.
    std::vector<ibv_port_attr> ports(d.phys_port_cnt + 1);  // ports[1..phys_port_cnt]
    for (uint8_t port = 1; port <= d.phys_port_cnt; ++port) {
        ibv_port_attr& p = ports[port];
        CHECK_RC(ibv_query_port(ctx.get(), port, &p));
        std::printf("port %u (ibv_query_port):\n", port);
        std::printf("  state: %s (%d)   # only an ACTIVE port carries traffic\n", ibv_port_state_str(p.state),
                    p.state);
        std::printf("  max_mtu: %s (%d)   # bytes; the value in parentheses is enum ibv_mtu\n",
                    mtu_str(p.max_mtu), p.max_mtu);
        std::printf("  active_mtu: %s (%d)   # the largest payload per packet now; RoCE: fits the netdev MTU\n",
                    mtu_str(p.active_mtu), p.active_mtu);
        std::printf("  lid: %u   # InfiniBand local identifier from the subnet manager; 0 on RoCE\n", p.lid);
        std::printf("  sm_lid: %u   # LID of the subnet manager\n", p.sm_lid);
        std::printf("  lmc: 0x%02x   # LID mask control: 2^lmc LIDs for this port\n", p.lmc);
        std::printf("  link_layer: %s   # Ethernet = RoCE (GID addressing), InfiniBand = LID addressing\n",
                    wb::link_layer_str(p.link_layer));
        std::printf("  max_msg_sz: 0x%x   # bytes in one message\n", p.max_msg_sz);
        std::printf("  port_cap_flags: 0x%08x\n", p.port_cap_flags);
        std::printf("  pkey_tbl_len: %u\n", p.pkey_tbl_len);
        std::printf("  gid_tbl_len: %d   # slots in the GID table (most are empty)\n", p.gid_tbl_len);
    }

    // The GID table: one call returns every valid entry of every port, with
    // its type and network device. (ibv_query_gid_ex reads one slot; an empty
    // slot fails with ENODATA.)
    std::vector<ibv_gid_entry> gids(1024);
    ssize_t n = CHECK_NEG_ERRNO(ibv_query_gid_table(ctx.get(), gids.data(), gids.size(), 0),
                            "more than 1024 valid GIDs? (EINVAL means the array was too small)");
    std::printf("GID table (ibv_query_gid_table): %zd valid entries\n", n);
    const ibv_gid_entry* best = nullptr;
    for (ssize_t i = 0; i < n; ++i) {
        const ibv_gid_entry& e = gids[i];
        char ifname[IF_NAMESIZE] = "-";
        if (e.ndev_ifindex != 0 && !if_indextoname(e.ndev_ifindex, ifname)) std::snprintf(ifname, sizeof ifname, "?");
        std::printf("  port %u GID[%3u]: %s, %s, netdev %s\n", e.port_num, e.gid_index,
                    wb::gid_to_string(e.gid).c_str(), wb::gid_type_str(e.gid_type), ifname);
        if (e.port_num == static_cast<uint32_t>(explain_port) && roce_rank(e) > (best ? roce_rank(*best) : 0))
            best = &e;
    }

    // Which address should a program on port `explain_port` use?
    Recommendation rec{name, ""};
    if (explain_port > d.phys_port_cnt)
        wb::fail(std::string(name) + " has no port " + std::to_string(explain_port),
                 "ports count from 1 to phys_port_cnt (" + std::to_string(d.phys_port_cnt) + " here): see -i");
    const ibv_port_attr& p = ports[explain_port];
    std::printf("which address on port %d:\n", explain_port);
    if (p.link_layer != IBV_LINK_LAYER_ETHERNET) {
        std::printf("  InfiniBand: address the peer by LID %u (set by the subnet manager); a GID (GRH) is\n"
                    "  needed only to leave the subnet\n", p.lid);
        rec.text = "port " + std::to_string(explain_port) + " InfiniBand LID " + std::to_string(p.lid);
    } else if (!best) {
        std::printf("  no usable RoCE GID: does the netdev have an IP address? (ip addr)\n");
        rec.text = "port " + std::to_string(explain_port) + " has no usable RoCE GID";
    } else {
        std::printf("  use GID index %u (%s, %s): %s\n", best->gid_index, wb::gid_to_string(best->gid).c_str(),
                    wb::gid_type_str(best->gid_type), rank_reason(roce_rank(*best)));
        std::printf("  both peers must use GIDs of the same type and address family (both IPv4-mapped or\n"
                    "  both IPv6), or RTR fails with EINVAL; an empty index fails it with ENODATA (lesson 3)\n");
        rec.text = "port " + std::to_string(explain_port) + " GID index " + std::to_string(best->gid_index) + " " +
                   wb::gid_to_string(best->gid) + " (" + wb::gid_type_str(best->gid_type) + ")";
    }

    // -g: what one index holds, read the way a program given -g reads it.
    if (gid_given >= 0) {
        ibv_gid_entry e{};
        CHECK_RC(ibv_query_gid_ex(ctx.get(), explain_port, gid_given, &e, 0),
                 "is -g a populated index? the GID table above lists them (ENODATA: an empty slot)");
        std::printf("  -g %d (ibv_query_gid_ex): %s, %s: %s\n", gid_given, wb::gid_to_string(e.gid).c_str(),
                    wb::gid_type_str(e.gid_type), rank_reason(roce_rank(e)));
    }
    return rec;  // ~Context: ibv_close_device
}

}  // namespace

int main(int argc, char** argv) {
    wb::Usage usage{
        .synopsis = "[-d DEV] [-i PORT] [-g INDEX]",
        .summary = "list RDMA devices, their limits, ports and GID tables, and which GID to use",
        .network = false,
        .notes = "Without -d it shows every device. -i chooses the port whose GID choice is explained;\n"
                 "-g also explains that GID index. Compare with: ibv_devinfo -v",
    };
    wb::Options opt = wb::parse_options(argc, argv, usage);
    if (!opt.args.empty()) wb::usage_error("unexpected argument '" + opt.args[0] + "': lesson 1 takes no host");

    // 1. The devices this host has: one entry per RDMA device the kernel and
    //    a user-space provider (ibverbs-providers) both know.
    int num = 0;
    ibv_device** list = CHECK_PTR(ibv_get_device_list(&num),
                                  "is the ib_uverbs module loaded? ENOSYS: this kernel has no RDMA; "
                                  "run in the lab: scripts/lab.sh run -- ./lesson1 (make doctor checks this)");
    std::printf("ibv_get_device_list: %d device(s):", num);
    for (int i = 0; i < num; ++i) std::printf(" %s", ibv_get_device_name(list[i]));
    std::printf("\n");
    if (num == 0) {
        ibv_free_device_list(list);
        wb::fail("no RDMA devices found", "set up Soft-RoCE (sudo scripts/setup_rxe.sh up) or run in the lab "
                                          "(scripts/lab.sh run -- ./lesson1); is ibverbs-providers installed? (make doctor checks this)");
    }

    // 2. Each device (or the one named by -d): open it and query it.
    std::vector<Recommendation> recs;
    std::string names;
    for (int i = 0; i < num; ++i) {
        const char* name = ibv_get_device_name(list[i]);
        names += (i ? ", " : "") + std::string(name);
        if (!opt.device.empty() && opt.device != name) continue;
        recs.push_back(show_device(list[i], opt.ib_port, opt.gid_index));
    }
    // 3. The list is ours to free; contexts opened from it would stay valid.
    ibv_free_device_list(list);
    if (recs.empty())
        wb::fail("no RDMA device named '" + opt.device + "'", "the devices here are: " + names);

    // The first device shown is the one later lessons pick without -d.
    std::printf("\nresult: %zu device(s) listed; %s %s\n", recs.size(), recs[0].device.c_str(), recs[0].text.c_str());
    return 0;
}
