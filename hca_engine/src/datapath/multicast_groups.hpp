// The multicast groups of one device (ibv_attach_mcast(3)): which UD QPs
// receive a datagram sent to a multicast GID. RoCE multicast GIDs are IPv4-mapped
// 224.0.0.0/4 addresses on our IPv4 ports (sent to IPv4 multicast addresses, RFC 1112 MACs).
#pragma once

#include "softhca/transport/roce_address.hpp"

#include <map>
#include <unordered_map>
#include <vector>

namespace softhca::engine {

class EngineQp;

// True for an IPv4-mapped GID in 224.0.0.0/4.
bool gid_is_ipv4_multicast(const transport::Gid& gid);

class MulticastGroups {
  public:
    static constexpr uint32_t kMaxGroups = 8192;
    static constexpr uint32_t kMaxQpsPerGroup = 64;

    // Returns 0 or an errno: EINVAL for a GID that is not multicast or a QP already
    // in the group (ibv_attach_mcast), or not in it (ibv_detach_mcast); ENOMEM past
    // the limits above.
    int attach(const transport::Gid& gid, EngineQp* qp);
    int detach(const transport::Gid& gid, EngineQp* qp);
    // Returns the number of groups it left.
    uint64_t detach_all(EngineQp* qp);
    // The QPs that joined `gid`, or nullptr.
    const std::vector<EngineQp*>* members(const transport::Gid& gid) const;

  private:
    std::map<transport::Gid, std::vector<EngineQp*>> groups_;
    std::unordered_map<const EngineQp*, std::vector<transport::Gid>> groups_of_; // by QP
};

} // namespace softhca::engine
