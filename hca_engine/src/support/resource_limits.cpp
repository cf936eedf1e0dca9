#include "resource_limits.hpp"

#include "softhca/transport/settings_text.hpp"

namespace softhca::engine {

// What ibv_query_device reports (max_qp, max_cq, max_srq, max_mr, max_pd, max_mw;
// multicast: max_mcast_grp * max_mcast_qp_attach), each device's pool of device memory
// (device_interface/control.hpp) and the engine's own
// connection and rdma_cm maxima. Engine memory has no maximum of the engine's (it is the
// machine's), so a user's bytes are not compared with one. Kept equal to the device
// model's by a unit test (test_resource_limits.cpp).
const EngineMaxima kEngineMaxima{ResourceUsage{16384, 1u << 16, 4096, 1u << 20, 1u << 16, 1u << 16,
                                               1024 << 10, 8192 * 64, UINT64_MAX},
                                 8192, 8192, 65536};

namespace {

// The per-user counts of ResourceLimits, each with the engine's maximum of it.
struct UserCount {
    const char* key; // after user_
    uint64_t ResourceLimits::*cap;
    uint64_t EngineMaxima::*maximum;
};
constexpr UserCount kUserCounts[] = {
    {"connections", &ResourceLimits::user_connections, &EngineMaxima::connections},
    {"cm_files", &ResourceLimits::user_cm_files, &EngineMaxima::cm_files},
    {"cm_ids", &ResourceLimits::user_cm_ids, &EngineMaxima::cm_ids}};

// Whether `key` names one of `table`'s entries; `set` is given it.
template <typename Table, typename Set>
bool set_by_key(const Table& table, const std::string& key, Set&& set) {
    for (const auto& entry : table)
        if (key == entry.key) {
            set(entry);
            return true;
        }
    return false;
}

} // namespace

std::string ResourceLimits::parse(const std::string& text, ResourceLimits& result) {
    ResourceLimits limits = result; // `result` changes only when all of `text` is right
    std::string error =
        transport::for_each_setting(text, [&](const std::string& key, double value) {
            const size_t underscore = key.find('_');
            if (underscore == std::string::npos || value < 1 || value > 1e12)
                return false;
            const std::string scope = key.substr(0, underscore), what = key.substr(underscore + 1);
            const auto n = static_cast<uint64_t>(value);
            if (scope == "user" &&
                set_by_key(kUserCounts, what, [&](const UserCount& c) { limits.*c.cap = n; }))
                return true;
            ResourceUsage* cap = scope == "context" ? &limits.context
                                 : scope == "user"  ? &limits.user
                                                    : nullptr;
            return cap && set_by_key(kResourceFields, what, [&](const ResourceField& f) {
                       cap->*f.member = n << f.shift;
                   });
        });
    if (!error.empty())
        return error;
    // A user at every cap must leave some of each to the others (engine memory has no
    // maximum: UINT64_MAX is never reached).
    auto below = [](const std::string& key, uint64_t cap, uint64_t maximum, unsigned shift) {
        return cap < maximum ? std::string()
                             : "user_" + key + " must be below the engine's maximum (" +
                                   std::to_string(maximum >> shift) + ")";
    };
    for (const ResourceField& f : kResourceFields)
        if (std::string e =
                below(f.key, limits.user.*f.member, kEngineMaxima.objects.*f.member, f.shift);
            !e.empty())
            return e;
    for (const UserCount& c : kUserCounts)
        if (std::string e = below(c.key, limits.*c.cap, kEngineMaxima.*c.maximum, 0); !e.empty())
            return e;
    result = limits;
    return {};
}

} // namespace softhca::engine
