// Socket addresses as rdma_cm commands carry them (sockaddr_in, sockaddr_in6 in a
// sockaddr_storage): port, IPv4 address (also IPv4-mapped IPv6), "any".
#pragma once

#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/roce_address.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>

namespace softhca::engine {

namespace tp = transport;

// The 16 address bytes of an AF_INET6 address (no in6_addr macros: the kernel's uapi
// headers, which rdma_user_cm.h brings, define that struct differently).
inline const uint8_t* ipv6_bytes(const sockaddr_storage& s) {
    return reinterpret_cast<const uint8_t*>(&s) + offsetof(sockaddr_in6, sin6_addr);
}
inline uint8_t* ipv6_bytes(sockaddr_storage& s) {
    return reinterpret_cast<uint8_t*>(&s) + offsetof(sockaddr_in6, sin6_addr);
}

inline uint16_t port_of_address(const sockaddr_storage& s) {
    if (s.ss_family == AF_INET)
        return ntohs(reinterpret_cast<const sockaddr_in&>(s).sin_port);
    if (s.ss_family == AF_INET6)
        return ntohs(reinterpret_cast<const sockaddr_in6&>(s).sin6_port);
    return 0;
}

inline void set_port(sockaddr_storage& s, uint16_t port) {
    if (s.ss_family == AF_INET)
        reinterpret_cast<sockaddr_in&>(s).sin_port = htons(port);
    else if (s.ss_family == AF_INET6)
        reinterpret_cast<sockaddr_in6&>(s).sin6_port = htons(port);
}

// The IPv4 address (host order) of an AF_INET address or an IPv4-mapped AF_INET6 one; 0
// for "any" and for other IPv6 addresses.
inline uint32_t ipv4_of_address(const sockaddr_storage& s) {
    if (s.ss_family == AF_INET)
        return ntohl(reinterpret_cast<const sockaddr_in&>(s).sin_addr.s_addr);
    if (s.ss_family == AF_INET6) {
        const uint8_t* a = ipv6_bytes(s);
        static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (std::memcmp(a, kMapped, sizeof(kMapped)) == 0)
            return tp::load_be32(a + 12);
    }
    return 0;
}

// The address as a GID: IPv4 as ::ffff:a.b.c.d (also an IPv4-mapped AF_INET6 address),
// IPv6 as it is; all zeros for "any" and other families.
inline tp::Gid gid_of_address(const sockaddr_storage& s) {
    tp::Gid gid{};
    if (s.ss_family == AF_INET)
        gid = tp::gid_from_ipv4(ntohl(reinterpret_cast<const sockaddr_in&>(s).sin_addr.s_addr));
    else if (s.ss_family == AF_INET6)
        std::memcpy(gid.data(), ipv6_bytes(s), 16);
    if (s.ss_family == AF_INET && gid == tp::gid_from_ipv4(0))
        gid = {};
    return gid;
}

// Sets the address part (keeping family and port): IPv4 from an IPv4-mapped GID into an
// AF_INET address, any GID into an AF_INET6 one.
inline void set_address(sockaddr_storage& s, const tp::Gid& gid) {
    if (s.ss_family == AF_INET)
        reinterpret_cast<sockaddr_in&>(s).sin_addr.s_addr = htonl(tp::load_be32(gid.data() + 12));
    else if (s.ss_family == AF_INET6)
        std::memcpy(ipv6_bytes(s), gid.data(), 16);
}

// 127.0.0.0/8 (also IPv4-mapped) or ::1.
inline bool is_loopback_address(const sockaddr_storage& s) {
    if ((ipv4_of_address(s) >> 24) == 127)
        return true;
    static constexpr uint8_t kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return s.ss_family == AF_INET6 && std::memcmp(ipv6_bytes(s), kLoopback, 16) == 0;
}

inline bool is_any_address(const sockaddr_storage& s) {
    if (s.ss_family == AF_INET)
        return reinterpret_cast<const sockaddr_in&>(s).sin_addr.s_addr == INADDR_ANY;
    if (s.ss_family == AF_INET6) {
        static constexpr uint8_t kAny[16] = {};
        return std::memcmp(ipv6_bytes(s), kAny, sizeof(kAny)) == 0;
    }
    return true;
}

inline size_t sockaddr_size(int family) {
    return family == AF_INET ? sizeof(sockaddr_in) : family == AF_INET6 ? sizeof(sockaddr_in6) : 0;
}

// A user address as the kernel copies it in: the family decides the size.
inline bool copy_address(const void* from, size_t room, sockaddr_storage& to) {
    sockaddr_storage s{};
    std::memcpy(&s, from, std::min(room, sizeof(s)));
    const size_t size = sockaddr_size(s.ss_family);
    if (!size || size > room)
        return false;
    to = {};
    std::memcpy(&to, from, size);
    return true;
}

} // namespace softhca::engine
