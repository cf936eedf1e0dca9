// A port's GID table: the source addresses its QPs and address handles pick by
// sgid_index, and the destinations it accepts. Every entry is RoCE v2 (IBTA Annex A17;
// softhca speaks no RoCE v1), built from the port's addresses as Linux builds a RoCE
// port's table (drivers/infiniband/core/roce_gid_mgmt.c): the IPv4-mapped GID of its IPv4
// address, the link-local default GID from its MAC, and one GID per IPv6 address.
// One difference in order: Linux puts the default GID first; softhca keeps the IPv4 GID
// at index 0 (when the port has IPv4), so that `-g 0` and `-x 0` keep meaning IPv4.
#pragma once

#include "ports.hpp"
#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/roce_address.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <cstdint>
#include <vector>

namespace softhca::engine {

// At most this many GIDs per port (what the GID table's sysfs tree and gid_tbl_len show).
constexpr size_t kMaxGids = 16;

// True when `gid` is one of the port's unicast addresses.
inline bool gid_table_holds(const std::vector<transport::Gid>& table, const transport::Gid& gid) {
    for (const transport::Gid& entry : table)
        if (entry == gid)
            return true;
    return false;
}

// with_link_local: false for a port whose interface's link-local address the kernel
// owns (a kernel UDP socket port).
inline std::vector<transport::Gid> build_gid_table(uint32_t ipv4,
                                                   const std::vector<transport::Gid>& ipv6,
                                                   const transport::MacAddress& mac,
                                                   bool with_link_local = true) {
    std::vector<transport::Gid> table;
    if (ipv4)
        table.push_back(transport::gid_from_ipv4(ipv4));
    if (with_link_local)
        table.push_back(transport::gid_link_local_from_mac(mac));
    for (const transport::Gid& gid : ipv6)
        if (table.size() < kMaxGids && !gid_table_holds(table, gid))
            table.push_back(gid);
    return table;
}

// Whether `gid` is one of the port's own unicast addresses (the IPv4 one compared as a
// number: this runs for every received packet).
inline bool port_owns(const PortInfo& port, const transport::Gid& gid) {
    if (transport::gid_is_ipv4_mapped(gid))
        return port.ipv4 && transport::load_be32(gid.data() + 12) == port.ipv4;
    return gid_table_holds(port.gids, gid);
}

// The source GID for sgid_index toward dgid: null when the index is past the table or
// names the other family (an IPv4-mapped source needs an IPv4-mapped destination, as the
// kernel requires the GID's network type to match the destination's, A17.4.5).
inline const transport::Gid* source_gid_for(const std::vector<transport::Gid>& table,
                                            uint32_t sgid_index, const transport::Gid& dgid) {
    if (sgid_index >= table.size())
        return nullptr;
    const transport::Gid& sgid = table[sgid_index];
    if (transport::gid_is_ipv4_mapped(sgid) != transport::gid_is_ipv4_mapped(dgid))
        return nullptr;
    return &sgid;
}

// The source GID of a datagram whose address vector came through the ring: the engine
// does not trust what the provider validated, so an index that is out of range or of
// the other family falls back to the table's first GID of the destination's family
// (the packet then goes out consistent), or to entry 0 when the port has none.
inline const transport::Gid& source_gid_or_fallback(const std::vector<transport::Gid>& table,
                                                    uint32_t sgid_index,
                                                    const transport::Gid& dgid) {
    if (const transport::Gid* sgid = source_gid_for(table, sgid_index, dgid))
        return *sgid;
    for (const transport::Gid& entry : table)
        if (transport::gid_is_ipv4_mapped(entry) == transport::gid_is_ipv4_mapped(dgid))
            return entry;
    return table.front();
}

} // namespace softhca::engine
