// Port identities of a RoCE HCA: the GID of a RoCEv2 port bound to an IPv4 address is
// the IPv4-mapped IPv6 address ::ffff:a.b.c.d (IBTA Annex A17.8, RFC 4291 2.5.5.2), and
// the node/port GUID is the EUI-64 built from the port MAC (IEEE EUI-64 from EUI-48:
// insert ff:fe in the middle and flip the universal/local bit).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace softhca::transport {

using Gid = std::array<uint8_t, 16>;
using MacAddress = std::array<uint8_t, 6>;

constexpr Gid gid_from_ipv4(uint32_t ipv4_host_order) {
    Gid gid{};
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12] = static_cast<uint8_t>(ipv4_host_order >> 24);
    gid[13] = static_cast<uint8_t>(ipv4_host_order >> 16);
    gid[14] = static_cast<uint8_t>(ipv4_host_order >> 8);
    gid[15] = static_cast<uint8_t>(ipv4_host_order);
    return gid;
}

// The link-local address every IPv6 interface has, fe80::/64 with the EUI-64 interface
// identifier of its MAC (RFC 4291 2.5.1 and appendix A): Linux's default GID of a RoCE port.
constexpr Gid gid_link_local_from_mac(const MacAddress& mac) {
    Gid gid{};
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[8] = static_cast<uint8_t>(mac[0] ^ 0x02);
    gid[9] = mac[1];
    gid[10] = mac[2];
    gid[11] = 0xff;
    gid[12] = 0xfe;
    gid[13] = mac[3];
    gid[14] = mac[4];
    gid[15] = mac[5];
    return gid;
}

// The GUID as a 64-bit number whose most significant byte is the first on the wire.
constexpr uint64_t guid_from_mac(const MacAddress& mac) {
    const uint8_t bytes[8] = {
        static_cast<uint8_t>(mac[0] ^ 0x02), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
    uint64_t guid = 0;
    for (uint8_t b : bytes)
        guid = (guid << 8) | b;
    return guid;
}

// The sysfs text form of a GID: eight groups of four hex digits joined by ':'.
inline std::string gid_to_sysfs_string(const Gid& gid) {
    std::string out;
    char group[8];
    for (int i = 0; i < 8; ++i) {
        std::snprintf(group, sizeof(group), "%s%02x%02x", i ? ":" : "", gid[2 * i], gid[2 * i + 1]);
        out += group;
    }
    return out;
}

// The sysfs text form of a GUID: four groups of four hex digits joined by ':'.
inline std::string guid_to_sysfs_string(uint64_t guid) {
    char text[20];
    std::snprintf(text, sizeof(text), "%04x:%04x:%04x:%04x",
                  static_cast<unsigned>(guid >> 48) & 0xffff,
                  static_cast<unsigned>(guid >> 32) & 0xffff,
                  static_cast<unsigned>(guid >> 16) & 0xffff, static_cast<unsigned>(guid) & 0xffff);
    return text;
}

// Its inverse ("0053:48ff:fe60:ae01" to the u64); 0 for text that is not hex digits and
// colons.
inline uint64_t guid_from_sysfs_string(std::string_view text) {
    uint64_t value = 0;
    for (char c : text) {
        if (c == ':')
            continue;
        const int digit = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
        if (digit < 0)
            return 0;
        value = value << 4 | static_cast<uint64_t>(digit);
    }
    return value;
}

// Parses dotted-quad IPv4 text into host byte order.
inline std::optional<uint32_t> parse_ipv4(std::string_view text) {
    uint32_t value = 0;
    int parts = 0;
    size_t i = 0;
    while (parts < 4) {
        if (i >= text.size() || text[i] < '0' || text[i] > '9')
            return std::nullopt;
        uint32_t octet = 0;
        size_t digits = 0;
        while (i < text.size() && text[i] >= '0' && text[i] <= '9' && digits < 4) {
            octet = octet * 10 + static_cast<uint32_t>(text[i] - '0');
            ++i;
            ++digits;
        }
        if (octet > 255 || digits > 3)
            return std::nullopt;
        value = (value << 8) | octet;
        ++parts;
        if (parts < 4) {
            if (i >= text.size() || text[i] != '.')
                return std::nullopt;
            ++i;
        }
    }
    if (i != text.size())
        return std::nullopt;
    return value;
}

inline std::string ipv4_to_string(uint32_t ip) {
    char text[16];
    std::snprintf(text, sizeof(text), "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff,
                  ip & 0xff);
    return text;
}

} // namespace softhca::transport
