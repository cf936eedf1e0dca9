#include "multicast_groups.hpp"

#include "softhca/transport/roce_frame.hpp"

#include <algorithm>
#include <cerrno>

namespace softhca::engine {

namespace tp = transport;

bool gid_is_ipv4_multicast(const tp::Gid& gid) {
    return tp::gid_is_ipv4_mapped(gid) && (gid[12] & 0xf0) == 0xe0;
}

int MulticastGroups::attach(const tp::Gid& gid, EngineQp* qp) {
    if (!gid_is_ipv4_multicast(gid))
        return EINVAL;
    if (!groups_.count(gid) && groups_.size() >= kMaxGroups)
        return ENOMEM;
    auto& members = groups_[gid];
    if (std::find(members.begin(), members.end(), qp) != members.end())
        return EINVAL;
    if (members.size() >= kMaxQpsPerGroup)
        return ENOMEM;
    members.push_back(qp);
    groups_of_[qp].push_back(gid);
    return 0;
}

int MulticastGroups::detach(const tp::Gid& gid, EngineQp* qp) {
    auto group = groups_.find(gid);
    if (group == groups_.end())
        return EINVAL;
    auto& members = group->second;
    auto it = std::find(members.begin(), members.end(), qp);
    if (it == members.end())
        return EINVAL;
    members.erase(it);
    if (members.empty())
        groups_.erase(group);
    auto mine = groups_of_.find(qp);
    if (mine != groups_of_.end()) {
        std::erase(mine->second, gid);
        if (mine->second.empty())
            groups_of_.erase(mine);
    }
    return 0;
}

uint64_t MulticastGroups::detach_all(EngineQp* qp) {
    // Only the QP's own groups: a QP's destruction costs nothing for the groups of others.
    auto mine = groups_of_.find(qp);
    if (mine == groups_of_.end())
        return 0;
    uint64_t left = 0;
    for (const tp::Gid& gid : mine->second) {
        auto group = groups_.find(gid);
        if (group == groups_.end())
            continue;
        auto& members = group->second;
        const size_t before = members.size();
        members.erase(std::remove(members.begin(), members.end(), qp), members.end());
        left += before - members.size();
        if (members.empty())
            groups_.erase(group);
    }
    groups_of_.erase(mine);
    return left;
}

const std::vector<EngineQp*>* MulticastGroups::members(const tp::Gid& gid) const {
    auto it = groups_.find(gid);
    return it == groups_.end() ? nullptr : &it->second;
}

} // namespace softhca::engine
