// device.cpp - see device.hpp.
#include "device.hpp"

#include <arpa/inet.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "check.hpp"

namespace wb {

Context open_device(const std::string& name) {
    int n = 0;
    const std::string hint = std::string("is the ib_uverbs module loaded? ENOSYS: this kernel has no RDMA; "
                                         "run in the lab: scripts/lab.sh shell (or scripts/lab.sh run -- ./") +
                             program_name() + " ...) (make doctor checks this)";
    ibv_device** list = CHECK_PTR(ibv_get_device_list(&n), hint.c_str());
    if (n == 0) {
        ibv_free_device_list(list);
        fail("no RDMA devices found",
             "set up Soft-RoCE (sudo scripts/setup_rxe.sh up), or run in the lab "
             "(scripts/lab.sh shell); is ibverbs-providers installed? (make doctor checks this)");
    }
    ibv_device* dev = nullptr;
    std::string names;
    for (int i = 0; i < n; ++i) {
        const char* dn = ibv_get_device_name(list[i]);
        names += (i ? ", " : "") + std::string(dn);
        if (!dev && (name.empty() || name == dn)) dev = list[i];
    }
    if (!dev) {
        ibv_free_device_list(list);
        fail("no RDMA device named '" + name + "'", "the devices here are: " + names);
    }
    // The context stays valid after the list is freed (ibv_get_device_list(3)).
    Context ctx{CHECK_PTR(ibv_open_device(dev), "do you have read/write access to /dev/infiniband/uverbs*? (make doctor checks this)")};
    ibv_free_device_list(list);
    return ctx;
}

std::string gid_to_string(const ibv_gid& gid) {
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, gid.raw, text, sizeof text);
    return text;
}

bool gid_is_zero(const ibv_gid& gid) {
    static const ibv_gid zero{};
    return std::memcmp(gid.raw, zero.raw, sizeof zero.raw) == 0;
}

bool gid_is_ipv4_mapped(const ibv_gid& gid) {
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(gid.raw, prefix, sizeof prefix) == 0;
}

const char* gid_type_str(uint32_t type) {
    switch (type) {
    case IBV_GID_TYPE_IB: return "IB";
    case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
    default: return "unknown";
    }
}

int mtu_bytes(ibv_mtu mtu) {
    switch (mtu) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    }
    return 0;
}

const char* link_layer_str(uint8_t link_layer) {
    switch (link_layer) {
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
    default: return "unspecified";
    }
}

PortAddress choose_address(ibv_context* ctx, int port, int gid_index) {
    PortAddress a;
    a.port = static_cast<uint8_t>(port);
    CHECK_RC(ibv_query_port(ctx, a.port, &a.attr), "does the device have this port? see ibv_devinfo");
    if (a.attr.state != IBV_PORT_ACTIVE)
        fail("port " + std::to_string(port) + " is " + ibv_port_state_str(a.attr.state) + ", not ACTIVE",
             "is the netdev under it up? (ip link; rdma link; ibv_devinfo) (make doctor checks this)");
    a.roce = a.attr.link_layer == IBV_LINK_LAYER_ETHERNET;

    if (gid_index >= 0) {  // -g given: use it, but never a zero or unreadable GID
        ibv_gid_entry e{};
        CHECK_RC(ibv_query_gid_ex(ctx, a.port, gid_index, &e, 0),
                 "is -g a valid index? list the table with ./lesson1 or ibv_devinfo -v");
        if (gid_is_zero(e.gid))
            fail("GID index " + std::to_string(gid_index) + " holds a zero GID",
                 "pick a populated index: ./lesson1 or ibv_devinfo -v lists them");
        a.gid_index = gid_index;
        a.gid = e.gid;
        a.gid_type = gid_type_str(e.gid_type);
        a.why = "given with -g";
        return a;
    }
    if (!a.roce) {  // InfiniBand: the subnet manager's LID routes packets inside the subnet
        if (a.attr.lid == 0)
            fail("port " + std::to_string(port) + " has LID 0", "is a subnet manager (opensm) running?");
        a.why = "InfiniBand link layer: LID addressing, no GRH needed inside a subnet";
        return a;
    }

    // RoCE: choose by type from the valid entries of the GID table.
    ibv_gid_entry table[256];
    ssize_t n = CHECK_NEG_ERRNO(ibv_query_gid_table(ctx, table, 256, 0));
    const ibv_gid_entry* best = nullptr;
    int best_rank = 0;
    for (ssize_t i = 0; i < n; ++i) {
        const ibv_gid_entry& e = table[i];
        if (e.port_num != a.port || gid_is_zero(e.gid)) continue;
        int rank = 0;  // higher is better
        if (e.gid_type == IBV_GID_TYPE_ROCE_V2) rank = gid_is_ipv4_mapped(e.gid) ? 3 : 2;
        else if (e.gid_type == IBV_GID_TYPE_ROCE_V1) rank = 1;
        if (rank > best_rank) best = &e, best_rank = rank;
    }
    if (!best)
        fail("port " + std::to_string(port) + " has no usable RoCE GID",
             "does the netdev under the device have an IP address? (ip addr; ibv_devinfo -v) (make doctor checks this)");
    a.gid_index = static_cast<int>(best->gid_index);
    a.gid = best->gid;
    a.gid_type = gid_type_str(best->gid_type);
    a.why = best_rank == 3 ? "RoCE v2 with an IPv4-mapped address: routable over UDP/IP, "
                             "and what rdma_cm would pick for an IPv4 peer"
          : best_rank == 2 ? "RoCE v2 (no IPv4-mapped GID on this port): routable over UDP/IPv6"
                           : "RoCE v1 (no RoCE v2 GID on this port): works only inside one L2 segment";
    return a;
}

void print_address(const char* device_name, const PortAddress& a) {
    std::printf("device: %s port %u, %s link layer, active MTU %d\n", device_name, a.port,
                link_layer_str(a.attr.link_layer), mtu_bytes(a.attr.active_mtu));
    if (a.gid_index >= 0)
        std::printf("gid: index %d %s (%s) - %s\n", a.gid_index, gid_to_string(a.gid).c_str(),
                    a.gid_type.c_str(), a.why.c_str());
    else
        std::printf("lid: %u - %s\n", a.attr.lid, a.why.c_str());
}

namespace {
std::string counters_dir(ibv_context* ctx, uint8_t port) {
    return "/sys/class/infiniband/" + std::string(ibv_get_device_name(ctx->device)) + "/ports/" +
           std::to_string(port) + "/hw_counters";
}
}  // namespace

PortCounters::PortCounters(ibv_context* ctx, uint8_t port) : dir_(counters_dir(ctx, port)), start_(read_all()) {}

std::map<std::string, uint64_t> PortCounters::read_all() const {
    // The kernel keeps a device's hw_counters for 10 ms
    // (RDMA_HW_STATS_DEFAULT_LIFESPAN) and answers a read within that time
    // with the values it read last; so a read waits until 50 ms after the
    // previous one (lesson 17 once saw no counter move in a 6 ms failure).
    static std::chrono::steady_clock::time_point last{};
    std::this_thread::sleep_until(last + std::chrono::milliseconds(50));
    std::map<std::string, uint64_t> values;
    std::error_code ec;  // no such folder: no counters
    for (const auto& f : std::filesystem::directory_iterator(dir_, ec)) {
        std::ifstream in(f.path());
        uint64_t v = 0;
        if (in >> v) values[f.path().filename().string()] = v;
    }
    last = std::chrono::steady_clock::now();
    return values;
}

uint64_t PortCounters::moved(const std::string& name) const {
    const auto now = read_all();
    const auto before = start_.find(name), after = now.find(name);
    return before == start_.end() || after == now.end() ? 0 : after->second - before->second;
}

std::string PortCounters::moved_list() const {
    std::string moved;
    for (const auto& [name, value] : read_all()) {
        const auto before = start_.find(name);
        if (before != start_.end() && value != before->second)
            moved += (moved.empty() ? "" : " ") + name + " +" + std::to_string(value - before->second);
    }
    return moved.empty() ? "none" : moved;
}

long long PortCounters::read(ibv_context* ctx, uint8_t port, const std::string& name) {
    std::ifstream in(counters_dir(ctx, port) + "/" + name);
    long long v = -1;
    return in >> v ? v : -1;
}

}  // namespace wb
