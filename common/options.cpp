// options.cpp - see options.hpp.
#include "options.hpp"

#include <getopt.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "check.hpp"

namespace wb {

void usage_error(const std::string& message) {
    std::fprintf(stderr, "%s: %s (see %s -h)\n", program_name(), message.c_str(), program_name());
    std::exit(2);
}

int64_t parse_i64(const std::string& text, const char* what) {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0')
        usage_error(std::string(what) + ": '" + text + "' is not a whole number");
    if (errno == ERANGE)
        usage_error(std::string(what) + ": '" + text + "' does not fit in 64 bits");
    return v;
}

int64_t parse_range(const std::string& text, const char* what, int64_t min, int64_t max) {
    int64_t v = parse_i64(text, what);
    if (v < min || v > max)
        usage_error(std::string(what) + ": '" + text + "' is out of range " + std::to_string(min) +
                    ".." + std::to_string(max));
    return v;
}

uint64_t parse_hex(const std::string& text, const char* what, int bits) {
    const bool hex = text.starts_with("0x") || text.starts_with("0X");
    const std::string digits = hex ? text.substr(2) : text;
    // strtoull alone would take " 7", "+7", "-7" (as 2^64 - 7) and "0x" (as 0).
    const bool well_formed =
        !digits.empty() && digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") == std::string::npos;
    errno = 0;
    const unsigned long long v = well_formed ? std::strtoull(digits.c_str(), nullptr, hex ? 16 : 10) : 0;
    const bool fits = errno != ERANGE && (bits >= 64 || v >> bits == 0);
    if (!well_formed || !fits)
        usage_error(std::string(what) + ": '" + text + "' is not a " + std::to_string(bits) +
                    "-bit number (decimal or 0x hex)");
    return v;
}

namespace {

void print_usage(const Usage& usage, std::span<const ExtraOption> extra) {
    const char* p = program_name();
    std::printf("%s - %s\n\nUsage:\n  %s %s\n\nOptions:\n", p, usage.summary, p, usage.synopsis);
    std::printf("  -d, --ib-dev=DEV      RDMA device (default: the first device found)\n");
    if (!usage.port_and_gid) {
        if (usage.no_address_options) std::printf("  -i, -g                not taken: %s\n", usage.no_address_options);
    } else {
        std::printf("  -i, --ib-port=PORT    port of the device (default: 1)\n");
        if (usage.gid)
            std::printf("  -g, --gid-idx=INDEX   GID index (default: chosen by type, RoCE v2 IPv4-mapped first;\n"
                        "                        LID addressing on InfiniBand)\n");
    }
    if (usage.network) {
        std::printf("  -p, --port=PORT       %s (default: %u)\n",
                    usage.port_help ? usage.port_help : "TCP port of the out-of-band exchange", kDefaultTcpPort);
        std::printf("      --timeout=SECS    %s\n"
                    "                        (default: %d; a server waits for its first client\n"
                    "                        without limit unless --timeout is given)\n",
                    usage.timeout_help ? usage.timeout_help : "client connect retries and every wait on the peer",
                    kDefaultTimeoutSeconds);
    }
    for (const ExtraOption& o : extra) {
        std::string flag = (o.letter ? std::string("-") + o.letter + ", --" : std::string("    --")) + o.name;
        if (o.metavar) flag += std::string("=") + o.metavar;
        std::printf("  %-21s %s\n", flag.c_str(), o.help);
    }
    std::printf("  -h, --help            print this help and exit\n");
    if (usage.network) std::printf("\n%s\n", usage.server_scope ? usage.server_scope : kOneShotServer);
    if (usage.numbers_after_host)
        std::printf("\nNumbers after the host may be negative: end the options with --, as in\n"
                    "  %s HOST -- -3 5\n", p);
    if (usage.notes) std::printf("\n%s\n", usage.notes);
}

// How the user wrote the option getopt rejected: "--bogus" (without any
// "=value") for a long option, else "-x" for the short option letter. (For a
// long option, getopt's optopt holds its short letter or 0, so argv is the
// reliable source.)
std::string option_text(const char* arg, int letter) {
    std::string text = arg;
    if (text.starts_with("--")) return text.substr(0, text.find('='));
    if (letter > 0 && letter < 256) return std::string("-") + static_cast<char>(letter);
    return text;
}

}  // namespace

Options parse_options(int argc, char** argv, const Usage& usage, std::span<const ExtraOption> extra) {
    set_program_name(argv[0]);
    // Line-buffered stdout: each narration line reaches a pipe or file at once,
    // in order with the messages on stderr.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    enum { kTimeout = 256, kLongOnly = 512 };  // long-only option ids, outside the char range: --timeout, the lesson's

    std::string shortopts = ":d:h";  // leading ':' reports a missing argument as ':'
    std::vector<option> longopts = {
        {"ib-dev", required_argument, nullptr, 'd'},
        {"help", no_argument, nullptr, 'h'},
    };
    if (usage.port_and_gid || usage.no_address_options) {
        shortopts += "i:";
        longopts.push_back({"ib-port", required_argument, nullptr, 'i'});
        if (usage.gid || !usage.port_and_gid) {
            shortopts += "g:";
            longopts.push_back({"gid-idx", required_argument, nullptr, 'g'});
        }
    }
    if (usage.network) shortopts += "p:";
    if (usage.network) {
        longopts.push_back({"port", required_argument, nullptr, 'p'});
        longopts.push_back({"timeout", required_argument, nullptr, kTimeout});
    }
    for (size_t i = 0; i < extra.size(); ++i) {
        const ExtraOption& o = extra[i];
        if (o.letter) shortopts += std::string(1, o.letter) + (o.metavar ? ":" : "");
        const int id = o.letter ? o.letter : kLongOnly + static_cast<int>(i);
        longopts.push_back({o.name, o.metavar ? required_argument : no_argument, nullptr, id});
    }
    longopts.push_back({nullptr, 0, nullptr, 0});

    Options opt;
    opterr = 0;  // we print our own one-line messages
    for (;;) {
        int c = getopt_long(argc, argv, shortopts.c_str(), longopts.data(), nullptr);
        if (c == -1) break;
        const std::string arg = optarg ? optarg : "";
        switch (c) {
        case 'd': opt.device = arg; break;
        case 'i':
        case 'g':
            if (!usage.port_and_gid)  // only a lesson that explains why accepts them, to refuse them
                usage_error(std::string("-") + static_cast<char>(c) + " does not apply: " + usage.no_address_options);
            if (c == 'i') opt.ib_port = static_cast<int>(parse_range(arg, "-i", 1, 255));
            // 0..255: the verbs carry the GID index as ibv_global_route.sgid_index, a uint8_t.
            if (c == 'g') opt.gid_index = static_cast<int>(parse_range(arg, "-g", 0, 255));
            break;
        case 'p': opt.tcp_port = static_cast<uint16_t>(parse_range(arg, "-p", 1, 65535)); break;
        case kTimeout:
            opt.timeout_s = static_cast<int>(parse_range(arg, "--timeout", 1, 86400));
            opt.timeout_given = true;
            break;
        case 'h': print_usage(usage, extra); std::exit(0);
        case ':': usage_error("option " + option_text(argv[optind - 1], optopt) + " needs an argument");
        case '?': {
            std::string msg = "unknown option '" + option_text(argv[optind - 1], optopt) + "'";
            if (optopt >= '0' && optopt <= '9') msg += "; put negative numbers after --";
            usage_error(msg);
        }
        default:
            for (size_t i = 0; i < extra.size(); ++i) {
                const ExtraOption& o = extra[i];
                if (c != (o.letter ? o.letter : kLongOnly + static_cast<int>(i))) continue;
                *o.value = o.metavar ? arg : "1";
                if (o.letter) opt.given_extras += o.letter;
                else opt.given_long.emplace_back(o.name);
            }
        }
    }
    for (int i = optind; i < argc; ++i) opt.args.emplace_back(argv[i]);
    return opt;
}

}  // namespace wb
