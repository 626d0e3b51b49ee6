// options_probe - run wb::parse_options on its own command line and print what
// it parsed, one "field=value" line each, so tests/common_unit.bats can check
// defaults, every option, and the one-line errors (exit 2) for misuse.
//
//   build/tests/options_probe [options] [args...]
//   PROBE_NO_NETWORK=1 build/tests/options_probe ...   as a lesson without a peer
//   PROBE_NO_PORT_GID=1 ...          as a lesson that reads no port or GID (lesson 2)
//   PROBE_NO_PORT_GID="why" ...      the same, saying why in -h and in the refusal (lesson 9)
//   PROBE_NO_GID=1 ...               as a lesson that reads a port but no GID (lesson15_probe)
//
// It has options of its own, as a lesson would: -n/--count N (a number
// that may be negative, parsed with parse_range), -v/--verbose (a flag), and
// -k/--key K (a key in hex or decimal, parsed with parse_hex; -b/--bits W
// its width, default 32), and --label TEXT, an option with no letter.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "options.hpp"

int main(int argc, char** argv) {
    const char* no_network = std::getenv("PROBE_NO_NETWORK");
    const char* no_port_gid = std::getenv("PROBE_NO_PORT_GID");
    const std::string why = no_port_gid ? no_port_gid : "";
    std::string count, verbose, key, bits, label;
    const wb::ExtraOption extra[] = {
        {'n', "count", "N", "a count, -100..100 (default: 1)", &count},
        {'v', "verbose", nullptr, "say more (default: off)", &verbose},
        {'k', "key", "K", "a key, 0x hex or decimal (default: none)", &key},
        {'b', "bits", "W", "the key's width in bits, 1..64 (default: 32)", &bits},
        {0, "label", "TEXT", "a long-only option: no letter (default: none)", &label},
    };
    wb::Usage usage{
        .synopsis = "[options] [HOST] [-- NUMBERS...]",
        .summary = "print what the shared option parser made of the command line",
        .network = !(no_network && std::string(no_network) == "1"),
        .numbers_after_host = !(no_network && std::string(no_network) == "1"),
        .port_and_gid = no_port_gid == nullptr,
        .no_address_options = why.empty() || why == "1" ? nullptr : why.c_str(),
        .gid = std::getenv("PROBE_NO_GID") == nullptr,
    };
    wb::Options opt = wb::parse_options(argc, argv, usage, extra);

    std::printf("device=%s\n", opt.device.c_str());
    std::printf("ib_port=%d\n", opt.ib_port);
    std::printf("gid_index=%d\n", opt.gid_index);
    std::printf("tcp_port=%u\n", opt.tcp_port);
    std::printf("timeout_s=%d\n", opt.timeout_s);
    std::printf("timeout_given=%d\n", opt.timeout_given ? 1 : 0);
    std::printf("accept_timeout_s=%d\n", opt.accept_timeout_s());
    if (opt.given('n'))
        std::printf("count=%lld\n", static_cast<long long>(wb::parse_range(count, "-n", -100, 100)));
    std::printf("verbose=%s\n", verbose.c_str());
    if (opt.given('k')) {
        const int width = opt.given('b') ? static_cast<int>(wb::parse_range(bits, "-b", 1, 64)) : 32;
        std::printf("key=0x%llx\n", static_cast<unsigned long long>(wb::parse_hex(key, "-k", width)));
    }
    if (!opt.given_extras.empty()) std::printf("given=%s\n", opt.given_extras.c_str());
    if (opt.given("label")) std::printf("label=%s\n", label.c_str());
    std::string args;
    for (const std::string& a : opt.args) args += "[" + a + "]";
    std::printf("args=%s\n", args.c_str());
    // Positional numbers, as a lesson would parse them (they may be negative).
    for (size_t i = 1; i < opt.args.size(); ++i)
        std::printf("number=%lld\n", static_cast<long long>(wb::parse_i64(opt.args[i], "NUMBER")));
    return 0;
}
