// What the kernel says of one of its network interfaces, for the ports that sit on one
// (af_packet, af_xdp, udp): its MTU and its receive queues. Asked once, when a port is
// made.
#pragma once

#include <cstdint>
#include <string>

namespace softhca::engine {

// The interface's MTU (SIOCGIFMTU), or 0 when there is no such interface.
uint32_t kernel_interface_mtu(const std::string& name);

// The receive queues the interface has (ETHTOOL_GCHANNELS: rx and combined), or 1 when
// its driver does not say.
uint32_t kernel_interface_rx_queues(const std::string& name);

} // namespace softhca::engine
