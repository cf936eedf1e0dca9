// pcap_check FILE...: checks every RoCEv2 frame of softhca's own captures with the
// codec (parse, ICRC, byte-for-byte re-encoding), as the Soft-RoCE captures are
// checked. ARP frames are counted and skipped. Exit status 0 when all pass.
#include "pcap_reader.hpp"
#include "roce_check.hpp"
#include "softhca/transport/byte_order.hpp"

#include <cstdio>
#include <map>

int main(int argc, char** argv) {
    int failures = 0;
    size_t checked = 0, arp = 0;
    std::map<std::string, size_t> seen;
    for (int i = 1; i < argc; ++i) {
        const auto frames = read_pcap(argv[i]);
        for (size_t n = 0; n < frames.size(); ++n) {
            const auto& bytes = frames[n].bytes;
            if (bytes.size() >= 14 && softhca::transport::load_be16(bytes.data() + 12) == 0x0806) {
                ++arp;
                continue;
            }
            std::string opcode;
            const std::string problem = roce_check::check_frame(bytes, &opcode);
            ++checked;
            ++seen[opcode];
            if (!problem.empty() && failures++ < 10)
                std::printf("%s frame %zu: %s\n", argv[i], n, problem.c_str());
        }
    }
    for (const auto& [name, count] : seen)
        std::printf("  %-32s %zu\n", name.c_str(), count);
    std::printf("%zu RoCEv2 frames checked, %zu ARP skipped, %d failed\n", checked, arp, failures);
    return failures || checked == 0 ? 1 : 0;
}
