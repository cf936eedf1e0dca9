#include "port_config.hpp"

#include <cstdio>
#include <stdexcept>

namespace softhca::engine {

std::shared_ptr<PcapWriter> PortsConfig::capture_for(size_t port) const {
    if (pcap_prefix.empty())
        return nullptr;
    auto capture = std::make_shared<PcapWriter>();
    const std::string path = pcap_prefix + "-" + prefix + std::to_string(port) + ".pcap";
    if (!capture->open(path))
        throw std::runtime_error("cannot write the capture " + path);
    return capture;
}

bool is_pci_devargs(const std::string& devargs) {
    const std::string id = devargs.substr(0, devargs.find(','));
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    char tail = 0;
    if (std::sscanf(id.c_str(), "%4x:%2x:%2x.%1x%c", &domain, &bus, &device, &function, &tail) == 4)
        return true;
    return std::sscanf(id.c_str(), "%2x:%2x.%1x%c", &bus, &device, &function, &tail) == 3;
}

} // namespace softhca::engine
