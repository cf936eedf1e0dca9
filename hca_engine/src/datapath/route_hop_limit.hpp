// The hop limit the kernel's routes give in the engine's network namespace: the IPv4
// default TTL (net.ipv4.ip_default_ttl), read once; 64 where it cannot be read.
#pragma once

#include <cstdint>
#include <fstream>

namespace softhca::engine {

inline uint8_t route_hop_limit() {
    static const uint8_t value = [] {
        std::ifstream in("/proc/sys/net/ipv4/ip_default_ttl");
        int ttl = 0;
        return in >> ttl && ttl > 0 && ttl < 256 ? static_cast<uint8_t>(ttl) : uint8_t{64};
    }();
    return value;
}

} // namespace softhca::engine
