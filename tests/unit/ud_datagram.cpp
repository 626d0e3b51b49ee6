// ud_datagram - the parts of lesson 12's ud.hpp (lessons/12_ud_multicast/)
// that need no device: a UD receive's message length after its 40-byte GRH,
// and the IPv4 source read out of the GRH area. Prints one "ok -" line per check; with the argument
// "short", a receive under 40 bytes, which must exit 1 saying why.
#include <arpa/inet.h>

#include <cstring>
#include <string>

#include "check.hpp"
#include "../../lessons/12_ud_multicast/ud.hpp"
#include "unit_check.hpp"

int main(int argc, char** argv) {
    wb::set_program_name(argv[0]);
    if (argc == 2 && std::string(argv[1]) == "short") {
        ibv_wc wc{};
        wc.wc_flags = IBV_WC_GRH;
        wc.byte_len = 39;
        ud::message_length(wc);  // exits 1
        return 0;
    }
    ibv_wc wc{};
    wc.wc_flags = IBV_WC_GRH;
    wc.byte_len = 40 + 16;
    CHECK(ud::message_length(wc) == 16, "a 56-byte receive with its GRH holds a 16-byte message");
    wc.byte_len = 40;
    CHECK(ud::message_length(wc) == 0, "a receive of the GRH alone holds an empty message");

    // On RoCE v2 over IPv4 the GRH area's last 20 bytes are the IPv4 header;
    // its source address is at offset 12 of that header.
    char grh[40] = {};
    in_addr src{};
    inet_pton(AF_INET, "192.0.2.7", &src);
    std::memcpy(grh + 20 + 12, &src, sizeof src);
    const std::string got = ud::grh_source_ipv4(grh);
    CHECK(got == "192.0.2.7", "grh_source_ipv4 reads the IPv4 header's source (got " + got + ")");
    return unit::finish("ud_datagram");
}
