// device.hpp - find and open a device, and choose how to address its port.
//
// Lesson 1 walks the device list and the GID table by hand; later lessons
// call these helpers, which do the same walk and say what they picked.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <string>

#include "handles.hpp"

namespace wb {

// ibv_get_device_list + ibv_open_device for the device named `name` (the first
// device when empty). Exits with a message naming what is missing, and the
// devices that do exist, when there is no such device.
Context open_device(const std::string& name);

// How this side of a connection is addressed: on RoCE by a GID (the port's
// LID is 0 there), on InfiniBand by the LID (and a GID is optional).
struct PortAddress {
    uint8_t port = 1;
    ibv_port_attr attr{};          // from ibv_query_port
    bool roce = false;             // link_layer == IBV_LINK_LAYER_ETHERNET
    int gid_index = -1;            // -1: no GID used (InfiniBand LID addressing)
    ibv_gid gid{};                 // the GID at gid_index
    std::string gid_type;          // "RoCE v2", "RoCE v1", "IB"
    std::string why;               // one sentence: why this GID (or the LID)
};

// Query `port` and choose the address: on RoCE, the GID at `gid_index` when
// it is >= 0, else by type: RoCE v2 with an IPv4-mapped address first, then
// any RoCE v2, then RoCE v1. On InfiniBand, LID addressing (plus the GID at
// `gid_index` when given). Exits with a clear message when the port is not
// ACTIVE or when the chosen GID is zero: a zero GID is never used silently.
PortAddress choose_address(ibv_context* ctx, int port, int gid_index);

// Print "device: ...", "port: ...", "gid: ..." lines saying what was chosen and why.
void print_address(const char* device_name, const PortAddress& a);

// "fe80::1", "::ffff:192.0.2.1": a GID written as the IPv6 address it is.
std::string gid_to_string(const ibv_gid& gid);
bool gid_is_zero(const ibv_gid& gid);
// True for ::ffff:a.b.c.d, the form RoCE v2 gives an IPv4 address.
bool gid_is_ipv4_mapped(const ibv_gid& gid);
// "IB", "RoCE v1", "RoCE v2" for IBV_GID_TYPE_*; rdma-core has no string function for it.
const char* gid_type_str(uint32_t type);

// The port's counters: /sys/class/infiniband/DEV/ports/N/hw_counters/, one
// file per counter, the numbers `rdma statistic` shows. They are how a
// failure with no completion (a dropped packet, an RNR NAK) shows at all.
// Constructed, it reads them all; moved() and moved_list() say what changed
// since. A device without counters has none: every delta is 0.
class PortCounters {
public:
    PortCounters(ibv_context* ctx, uint8_t port);
    // How far counter `name` moved since construction (0 when there is no such counter).
    uint64_t moved(const std::string& name) const;
    // "send_err +1 rcvd_rnr_err +3": every counter that moved, or "none".
    std::string moved_list() const;
    // One counter as it is now; -1 when the device has no such counter.
    static long long read(ibv_context* ctx, uint8_t port, const std::string& name);

private:
    std::map<std::string, uint64_t> read_all() const;
    std::string dir_;
    std::map<std::string, uint64_t> start_;
};

// 256..4096 bytes for IBV_MTU_256..IBV_MTU_4096 (0 for an unknown value).
int mtu_bytes(ibv_mtu mtu);
// "InfiniBand", "Ethernet" for IBV_LINK_LAYER_*.
const char* link_layer_str(uint8_t link_layer);

}  // namespace wb
