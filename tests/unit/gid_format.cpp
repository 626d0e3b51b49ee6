// gid_format - the GID and port helpers of common/device.hpp that need no
// device: how a GID is written, which GIDs are IPv4-mapped or zero, and the
// names of GID types, MTUs and link layers. Prints one "ok -" line per check.
#include <arpa/inet.h>

#include <cstring>
#include <string>

#include "device.hpp"
#include "unit_check.hpp"

namespace {

// A GID from its IPv6 text form, as a test input.
ibv_gid gid_from(const char* text) {
    ibv_gid g{};
    if (inet_pton(AF_INET6, text, g.raw) != 1) std::abort();
    return g;
}

void check_text(const char* text) {
    std::string got = wb::gid_to_string(gid_from(text));
    CHECK(got == text, std::string("gid_to_string writes ") + text + " (got " + got + ")");
}

}  // namespace

int main() {
    // How GIDs are written: as the IPv6 addresses they are, compressed.
    check_text("fe80::5054:ff:fe12:3456");  // RoCE link-local GID, from the MAC
    check_text("::ffff:192.0.2.1");         // RoCE v2 IPv4-mapped GID
    check_text("2001:db8::1");              // RoCE v2 with an IPv6 address
    check_text("fe80::2:c903:a:1234");      // InfiniBand: subnet prefix + port GUID
    check_text("::");                       // the zero GID
    ibv_gid raw{};
    for (int i = 0; i < 16; ++i) raw.raw[i] = static_cast<uint8_t>(0x10 + i);
    CHECK(wb::gid_to_string(raw) == "1011:1213:1415:1617:1819:1a1b:1c1d:1e1f",
          "gid_to_string keeps the byte order of raw[] (network order)");

    // Zero and IPv4-mapped detection.
    CHECK(wb::gid_is_zero(ibv_gid{}), "an all-zero GID is zero");
    CHECK(!wb::gid_is_zero(gid_from("::1")), "::1 is not zero (its last byte is set)");
    CHECK(!wb::gid_is_zero(gid_from("8000::")), "8000:: is not zero (its first byte is set)");
    CHECK(wb::gid_is_ipv4_mapped(gid_from("::ffff:192.0.2.1")), "::ffff:192.0.2.1 is IPv4-mapped");
    CHECK(wb::gid_is_ipv4_mapped(gid_from("::ffff:10.0.0.7")), "::ffff:10.0.0.7 is IPv4-mapped");
    CHECK(!wb::gid_is_ipv4_mapped(gid_from("fe80::5054:ff:fe12:3456")), "a link-local GID is not IPv4-mapped");
    CHECK(!wb::gid_is_ipv4_mapped(ibv_gid{}), "the zero GID is not IPv4-mapped");
    CHECK(!wb::gid_is_ipv4_mapped(gid_from("::fffe:192.0.2.1")), "::fffe:... is not IPv4-mapped (prefix must be ::ffff)");
    CHECK(!wb::gid_is_ipv4_mapped(gid_from("1::ffff:192.0.2.1")), "1::ffff:... is not IPv4-mapped (the first 80 bits must be zero)");
    CHECK(!wb::gid_is_ipv4_mapped(gid_from("::192.0.2.1")), "::192.0.2.1 (IPv4-compatible) is not IPv4-mapped");

    // Names rdma-core has no string function for.
    CHECK(std::string(wb::gid_type_str(IBV_GID_TYPE_IB)) == "IB", "gid_type_str(IBV_GID_TYPE_IB) is IB");
    CHECK(std::string(wb::gid_type_str(IBV_GID_TYPE_ROCE_V1)) == "RoCE v1", "gid_type_str(IBV_GID_TYPE_ROCE_V1) is RoCE v1");
    CHECK(std::string(wb::gid_type_str(IBV_GID_TYPE_ROCE_V2)) == "RoCE v2", "gid_type_str(IBV_GID_TYPE_ROCE_V2) is RoCE v2");
    CHECK(std::string(wb::gid_type_str(99)) == "unknown", "gid_type_str of an unknown type is unknown");
    CHECK(wb::mtu_bytes(IBV_MTU_256) == 256 && wb::mtu_bytes(IBV_MTU_1024) == 1024 && wb::mtu_bytes(IBV_MTU_4096) == 4096,
          "mtu_bytes maps IBV_MTU_256/1024/4096 to 256/1024/4096 bytes");
    CHECK(wb::mtu_bytes(static_cast<ibv_mtu>(0)) == 0 && wb::mtu_bytes(static_cast<ibv_mtu>(6)) == 0,
          "mtu_bytes of an unknown enum is 0");
    CHECK(std::string(wb::link_layer_str(IBV_LINK_LAYER_ETHERNET)) == "Ethernet", "link_layer_str(ETHERNET) is Ethernet");
    CHECK(std::string(wb::link_layer_str(IBV_LINK_LAYER_INFINIBAND)) == "InfiniBand", "link_layer_str(INFINIBAND) is InfiniBand");
    return unit::finish("gid_format");
}
