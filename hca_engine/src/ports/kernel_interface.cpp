#include "kernel_interface.hpp"

#include <algorithm>
#include <cstring>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace softhca::engine {

namespace {

// An interface request about `name` through a socket of its own; false when it failed.
bool ask(const std::string& name, unsigned long command, ifreq& request) {
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    std::memcpy(request.ifr_name, name.c_str(), std::min(name.size(), size_t{IFNAMSIZ - 1}));
    const bool ok = ioctl(fd, command, &request) == 0;
    ::close(fd);
    return ok;
}

} // namespace

uint32_t kernel_interface_mtu(const std::string& name) {
    ifreq request{};
    return ask(name, SIOCGIFMTU, request) && request.ifr_mtu > 0
               ? static_cast<uint32_t>(request.ifr_mtu)
               : 0;
}

uint32_t kernel_interface_rx_queues(const std::string& name) {
    ethtool_channels channels{};
    channels.cmd = ETHTOOL_GCHANNELS;
    ifreq request{};
    request.ifr_data = reinterpret_cast<char*>(&channels);
    if (!ask(name, SIOCETHTOOL, request))
        return 1;
    const uint32_t queues = channels.rx_count + channels.combined_count;
    return queues > 0 ? queues : 1;
}

} // namespace softhca::engine
