// pcap_check [--ttl N] [--min-source-ports K] [--min-ipv6 K] FILE...: checks every RoCEv2
// frame of softhca's own captures with the codec (parse, ICRC, byte-for-byte
// re-encoding), as the Soft-RoCE captures are checked. ARP and Neighbor Discovery
// (ICMPv6) frames are counted and skipped. --ttl: every IPv4 unicast frame carries TTL N
// (the route's hop limit); --min-source-ports: the frames use at least K distinct UDP
// source ports; --min-ipv6: at least K of them travel over IPv6. Exit 0 when all pass.
#include "pcap_reader.hpp"
#include "roce_check.hpp"
#include "softhca/transport/byte_order.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

int main(int argc, char** argv) {
    int failures = 0;
    size_t checked = 0, arp = 0, neighbor = 0, ipv6 = 0, min_ipv6 = 0;
    std::map<std::string, size_t> seen;
    int want_ttl = -1;
    size_t min_source_ports = 0;
    std::set<unsigned> ttls, source_ports;
    int first = 1;
    for (; first + 1 < argc && argv[first][0] == '-'; first += 2) {
        if (!std::strcmp(argv[first], "--ttl"))
            want_ttl = std::atoi(argv[first + 1]);
        else if (!std::strcmp(argv[first], "--min-source-ports"))
            min_source_ports = std::strtoul(argv[first + 1], nullptr, 10);
        else if (!std::strcmp(argv[first], "--min-ipv6"))
            min_ipv6 = std::strtoul(argv[first + 1], nullptr, 10);
    }
    for (int i = first; i < argc; ++i) {
        const auto frames = read_pcap(argv[i]);
        for (size_t n = 0; n < frames.size(); ++n) {
            const auto& bytes = frames[n].bytes;
            if (bytes.size() >= 14 && softhca::transport::load_be16(bytes.data() + 12) == 0x0806) {
                ++arp;
                continue;
            }
            const bool over_ipv6 = bytes.size() >= 14 + 40 &&
                                   softhca::transport::load_be16(bytes.data() + 12) == 0x86dd;
            if (over_ipv6 && bytes[14 + 6] == 58) {
                ++neighbor;
                continue;
            }
            ipv6 += over_ipv6;
            if (over_ipv6 && bytes.size() >= 14 + 40 + 8)
                source_ports.insert(softhca::transport::load_be16(bytes.data() + 14 + 40));
            std::string opcode;
            const std::string problem = roce_check::check_frame(bytes, &opcode);
            ++checked;
            ++seen[opcode];
            if (!problem.empty() && failures++ < 10)
                std::printf("%s frame %zu: %s\n", argv[i], n, problem.c_str());
            if (bytes.size() >= 14 + 20 + 8 &&
                softhca::transport::load_be16(bytes.data() + 12) == 0x0800) {
                const uint8_t* ip = bytes.data() + 14;
                const bool multicast = (ip[16] & 0xf0) == 0xe0;
                source_ports.insert(softhca::transport::load_be16(ip + 20));
                if (!multicast) {
                    ttls.insert(ip[8]);
                    if (want_ttl >= 0 && ip[8] != want_ttl && failures++ < 10)
                        std::printf("%s frame %zu: TTL %u, expected %d\n", argv[i], n, ip[8],
                                    want_ttl);
                }
            }
        }
    }
    for (const auto& [name, count] : seen)
        std::printf("  %-32s %zu\n", name.c_str(), count);
    std::printf("unicast IPv4 TTLs:");
    for (unsigned t : ttls)
        std::printf(" %u", t);
    std::printf("; %zu UDP source ports\n", source_ports.size());
    if (source_ports.size() < min_source_ports) {
        std::printf("fewer than %zu UDP source ports\n", min_source_ports);
        ++failures;
    }
    if (ipv6 < min_ipv6) {
        std::printf("%zu frames over IPv6, fewer than %zu\n", ipv6, min_ipv6);
        ++failures;
    }
    std::printf("%zu RoCEv2 frames checked (%zu over IPv6), %zu ARP and %zu ICMPv6 skipped, %d "
                "failed\n",
                checked, ipv6, arp, neighbor, failures);
    return failures || checked == 0 ? 1 : 0;
}
