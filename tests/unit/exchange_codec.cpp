// exchange_codec - the wire form of wb::PeerInfo (common/exchange.hpp):
// encode/decode round trip, the byte layout (big-endian, 64-bit address not
// cut to 32 bits), and decode's rejection of every malformed or truncated
// message, each with its reason; and wb::printable (common/check.hpp), which
// shows a peer's bytes on one line. Prints one "ok -" line per check.
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "exchange.hpp"
#include "unit_check.hpp"

namespace {

using Wire = std::vector<uint8_t>;

// A message that decodes: every field set, most of them to extreme values.
wb::PeerInfo sample() {
    wb::PeerInfo p;
    p.lesson = 0xBEEF;
    p.qp_num = 0xFFFFFF;                  // the largest 24-bit QPN
    p.psn = 0xABCDEF;
    p.lid = 0x1234;
    for (int i = 0; i < 16; ++i) p.gid.raw[i] = static_cast<uint8_t>(0xF0 + i);
    p.mtu = IBV_MTU_4096;
    p.addr = 0x0123456789ABCDEFull;       // above 4 GiB: htonl would lose the top half
    p.length = 0x10000;
    p.rkey = 0xCAFEF00D;
    return p;
}

Wire encoded(const wb::PeerInfo& p) {
    Wire w(wb::kPeerInfoWireSize);
    wb::encode(p, std::span<uint8_t, wb::kPeerInfoWireSize>(w.data(), w.size()));
    return w;
}

// Big-endian field writers, to build malformed messages by hand.
void put32(Wire& w, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) w[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
void put64(Wire& w, size_t at, uint64_t v) {
    for (int i = 0; i < 8; ++i) w[at + i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}

// Offsets of the wire form: magic 0, version 4, lesson 6, qp_num 8, psn 12,
// lid 16, gid 18, mtu 34, addr 38, length 46, rkey 50; 54 bytes in all.
constexpr size_t kVersion = 4, kQpn = 8, kPsn = 12, kGid = 18, kMtu = 34, kAddr = 38, kLength = 46, kRkey = 50;

// decode must refuse `w`, say why (containing `reason`), and leave `info` untouched.
void rejects(const Wire& w, const std::string& reason, const std::string& what) {
    wb::PeerInfo info;
    info.lesson = 77;  // a marker: a refused message must not change the output
    std::string why = wb::decode(w, info);
    CHECK(!why.empty() && why.find(reason) != std::string::npos && info.lesson == 77,
          "rejects " + what + ": \"" + why + "\"");
}

}  // namespace

int main() {
    const wb::PeerInfo in = sample();
    const Wire w = encoded(in);

    // Round trip.
    wb::PeerInfo out;
    std::string why = wb::decode(w, out);
    CHECK(why.empty(), "a message encode() wrote decodes (" + why + ")");
    CHECK(out.lesson == in.lesson && out.qp_num == in.qp_num && out.psn == in.psn && out.lid == in.lid,
          "round trip keeps lesson, QPN, PSN and LID");
    CHECK(std::memcmp(out.gid.raw, in.gid.raw, 16) == 0, "round trip keeps the 16 GID bytes in order");
    CHECK(out.mtu == in.mtu && out.addr == in.addr && out.length == in.length && out.rkey == in.rkey,
          "round trip keeps MTU, the 64-bit address, length and rkey");

    // Layout: a fixed size, a magic and version first, big-endian numbers.
    CHECK(wb::kPeerInfoWireSize == 54 && w.size() == 54, "the wire form is 54 bytes");
    CHECK(std::memcmp(w.data(), "RDWB", 4) == 0, "it starts with the magic RDWB");
    CHECK(w[kVersion] == 0 && w[kVersion + 1] == wb::kPeerInfoVersion, "then the version, big-endian");
    CHECK(w[kQpn] == 0x00 && w[kQpn + 1] == 0xFF && w[kQpn + 3] == 0xFF, "the QPN is big-endian at offset 8");
    CHECK(w[kGid] == 0xF0 && w[kGid + 15] == 0xFF, "the GID is copied byte for byte at offset 18");
    CHECK(w[kAddr] == 0x01 && w[kAddr + 3] == 0x67 && w[kAddr + 7] == 0xEF,
          "the address is all 64 bits, big-endian, at offset 38");
    CHECK(w[kRkey] == 0xCA && w[kRkey + 3] == 0x0D, "the rkey is big-endian at offset 50");

    // A message without a buffer (SEND/RECV lessons) is valid too.
    wb::PeerInfo plain = in;
    plain.addr = 0, plain.length = 0, plain.rkey = 0;
    CHECK(wb::decode(encoded(plain), out).empty() && out.addr == 0, "a message offering no buffer decodes");

    // Rejections, each with its reason.
    Wire bad = w;
    bad[0] = 'X';
    rejects(bad, "bad magic", "a wrong magic");
    rejects(Wire(54, 'A'), "bad magic", "54 bytes of garbage");
    bad = w, bad[kVersion + 1] = 2;
    rejects(bad, "protocol version 2, expected 1", "another protocol version");
    rejects(Wire(w.begin(), w.begin() + 53), "expected 54 bytes, got 53", "a message one byte short");
    rejects(Wire(), "expected 54 bytes, got 0", "an empty message");
    Wire longer = w;
    longer.push_back(0);
    rejects(longer, "expected 54 bytes, got 55", "a message one byte long");
    bad = w, put32(bad, kQpn, 0);
    rejects(bad, "QP number 0", "QPN 0");
    bad = w, put32(bad, kQpn, 0x1000000);
    rejects(bad, "QP number 16777216 is not a 24-bit", "a QPN of 25 bits");
    bad = w, put32(bad, kPsn, 0x1000000);
    rejects(bad, "PSN 16777216 does not fit in 24 bits", "a PSN of 25 bits");
    bad = w, put32(bad, kMtu, 0);
    rejects(bad, "path MTU enum 0 is not 1..5", "MTU enum 0");
    bad = w, put32(bad, kMtu, 6);
    rejects(bad, "path MTU enum 6 is not 1..5", "MTU enum 6");
    bad = w, put32(bad, kMtu, 4096);
    rejects(bad, "path MTU enum 4096", "an MTU in bytes instead of the enum");
    bad = w, put64(bad, kAddr, 0xFFFFFFFFFFFFF000ull), put32(bad, kLength, 0x2000);
    rejects(bad, "wraps around", "an address + length past 2^64");
    bad = w, put64(bad, kAddr, 0), put32(bad, kLength, 4096), put32(bad, kRkey, 0);
    rejects(bad, "without an address", "a length without an address");
    bad = w, put64(bad, kAddr, 0), put32(bad, kLength, 0), put32(bad, kRkey, 0x1234);
    rejects(bad, "without an address", "an rkey without an address");
    // wb::printable: a peer's text, escaped so that it cannot act on the terminal.
    const auto shown = [](std::string bytes) { return wb::printable(bytes.data(), bytes.size()); };
    CHECK(shown("Hi \"x\"\\") == "Hi \\\"x\\\"\\\\", "printable escapes quotes and backslashes");
    CHECK(shown("a\x1b[2Jb") == "a\\x1b[2Jb", "printable escapes ESC (\\x1b)");
    CHECK(shown("\xc2\x9b" "31m") == "\\xc2\\x9b31m", "printable escapes the UTF-8 CSI c2 9b");
    CHECK(shown("\x9b" "31m") == "\\x9b31m", "printable escapes a raw 9b");
    CHECK(shown("abc\xe2\x80\xae" "def") == "abc\\xe2\\x80\\xaedef", "printable escapes the right-to-left override e2 80 ae");
    CHECK(shown(std::string("\x7f\xff\0", 3)) == "\\x7f\\xff\\x00", "printable escapes DEL, ff and NUL");
    return unit::finish("exchange_codec");
}
