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

std::string ResourceLimits::parse(const std::string& text, ResourceLimits& result) {
    ResourceLimits limits = result; // `result` changes only when all of `text` is right
    std::string error =
        transport::for_each_setting(text, [&](const std::string& key, double value) {
            const size_t underscore = key.find('_');
            if (underscore == std::string::npos || value < 1 || value > 1e12)
                return false;
            const std::string scope = key.substr(0, underscore), what = key.substr(underscore + 1);
            const auto n = static_cast<uint64_t>(value);
            if (scope == "user" && what == "connections")
                limits.user_connections = n;
            else if (scope == "user" && what == "cm_files")
                limits.user_cm_files = n;
            else if (scope == "user" && what == "cm_ids")
                limits.user_cm_ids = n;
            else {
                ResourceUsage* cap = scope == "context" ? &limits.context
                                     : scope == "user"  ? &limits.user
                                                        : nullptr;
                if (!cap)
                    return false;
                if (what == "qps")
                    cap->qps = n;
                else if (what == "cqs")
                    cap->cqs = n;
                else if (what == "srqs")
                    cap->srqs = n;
                else if (what == "mrs")
                    cap->mrs = n;
                else if (what == "pds")
                    cap->pds = n;
                else if (what == "mws")
                    cap->mws = n;
                else if (what == "dm_kb")
                    cap->dm_bytes = n << 10;
                else if (what == "attachments")
                    cap->attachments = n;
                else if (what == "mb")
                    cap->bytes = n << 20;
                else
                    return false;
            }
            return true;
        });
    if (!error.empty())
        return error;
    // A user at every cap must leave some of each to the others.
    const ResourceUsage& u = limits.user;
    const ResourceUsage& m = kEngineMaxima.objects;
    const struct {
        const char* key;
        uint64_t cap, maximum;
    } checks[] = {{"user_qps", u.qps, m.qps},
                  {"user_cqs", u.cqs, m.cqs},
                  {"user_srqs", u.srqs, m.srqs},
                  {"user_mrs", u.mrs, m.mrs},
                  {"user_pds", u.pds, m.pds},
                  {"user_mws", u.mws, m.mws},
                  {"user_dm_kb", u.dm_bytes, m.dm_bytes},
                  {"user_attachments", u.attachments, m.attachments},
                  {"user_connections", limits.user_connections, kEngineMaxima.connections},
                  {"user_cm_files", limits.user_cm_files, kEngineMaxima.cm_files},
                  {"user_cm_ids", limits.user_cm_ids, kEngineMaxima.cm_ids}};
    for (const auto& c : checks)
        if (c.cap >= c.maximum)
            return std::string(c.key) + " must be below the engine's maximum (" +
                   std::to_string(c.key == std::string("user_dm_kb") ? c.maximum >> 10
                                                                     : c.maximum) +
                   ")";
    result = limits;
    return {};
}

} // namespace softhca::engine
