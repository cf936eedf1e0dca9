#include "port_config.hpp"

#include <cstdio>

namespace softhca::engine {

bool is_pci_devargs(const std::string& devargs) {
    const std::string id = devargs.substr(0, devargs.find(','));
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    char tail = 0;
    if (std::sscanf(id.c_str(), "%4x:%2x:%2x.%1x%c", &domain, &bus, &device, &function, &tail) == 4)
        return true;
    return std::sscanf(id.c_str(), "%2x:%2x.%1x%c", &bus, &device, &function, &tail) == 3;
}

} // namespace softhca::engine
