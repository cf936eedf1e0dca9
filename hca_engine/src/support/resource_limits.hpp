// What one context and one user may hold in the engine, and what they hold: a client is
// charged for what it makes the engine keep (queues, regions, domains, windows, device
// memory, multicast attachments, the rings and the per-work-request state behind them),
// as the kernel charges an rdma cgroup's objects and a process's pinned pages; and what
// one user may hold of the engine's connections and rdma_cm ids. `softhca up --limits`
// sets the caps. Every cap of a user lies strictly below the engine's own maximum of that
// object, so a user at every cap leaves the rest to the others. A create past a cap fails
// with ENOMEM and leaves nothing behind; a connection past one is refused. Pinned memory
// is charged separately, to the process's RLIMIT_MEMLOCK (control/resource_tables.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace softhca::engine {

struct ResourceUsage {
    uint64_t qps = 0, cqs = 0, srqs = 0, mrs = 0, pds = 0, mws = 0;
    uint64_t dm_bytes = 0;    // device memory (ibv_alloc_dm), of the device's pool
    uint64_t attachments = 0; // multicast attachments (ibv_attach_mcast)
    uint64_t bytes = 0;       // engine memory: rings, work request state, device memory
    ResourceUsage& operator+=(const ResourceUsage& o);
    // Each field less `o`'s, never below zero.
    ResourceUsage& operator-=(const ResourceUsage& o);
    bool operator==(const ResourceUsage&) const = default;
    // Whether any count or the bytes exceed `cap`'s.
    bool exceeds(const ResourceUsage& cap) const;
};

// Every field of ResourceUsage: the --limits key that sets it (after context_ or user_)
// and the power of two that key counts in.
struct ResourceField {
    const char* key;
    uint64_t ResourceUsage::*member;
    unsigned shift;
};
inline constexpr ResourceField kResourceFields[] = {
    {"qps", &ResourceUsage::qps, 0},         {"cqs", &ResourceUsage::cqs, 0},
    {"srqs", &ResourceUsage::srqs, 0},       {"mrs", &ResourceUsage::mrs, 0},
    {"pds", &ResourceUsage::pds, 0},         {"mws", &ResourceUsage::mws, 0},
    {"dm_kb", &ResourceUsage::dm_bytes, 10}, {"attachments", &ResourceUsage::attachments, 0},
    {"mb", &ResourceUsage::bytes, 20}};

inline ResourceUsage& ResourceUsage::operator+=(const ResourceUsage& o) {
    for (const ResourceField& f : kResourceFields)
        this->*f.member += o.*f.member;
    return *this;
}

inline ResourceUsage& ResourceUsage::operator-=(const ResourceUsage& o) {
    for (const ResourceField& f : kResourceFields)
        this->*f.member -= std::min(this->*f.member, o.*f.member);
    return *this;
}

inline bool ResourceUsage::exceeds(const ResourceUsage& cap) const {
    for (const ResourceField& f : kResourceFields)
        if (this->*f.member > cap.*f.member)
            return true;
    return false;
}

// The engine's own maxima (what ibv_query_device reports: datapath/device_model.hpp,
// engine_qp.hpp, engine_srq.hpp, device_interface/control.hpp) that the caps of one user
// must stay below, and those of the engine's connections and rdma_cm ids.
struct EngineMaxima {
    ResourceUsage objects;
    uint64_t connections = 0; // control connections (open device contexts), all users
    uint64_t cm_files = 0;    // open rdma_cm files, all users
    uint64_t cm_ids = 0;      // rdma_cm ids, all users
};
extern const EngineMaxima kEngineMaxima;

struct ResourceLimits {
    // Defaults: room for heavy real programs (UCX, MPI, rdma-core's tests, perftest with
    // deep queues), and at most half of any engine-wide maximum for one user.
    ResourceUsage context{8192, 8192, 2048, 65536, 8192, 8192, 256 << 10, 2048, 4ull << 30};
    ResourceUsage user{8192, 16384, 2048, 131072, 16384, 16384, 256 << 10, 4096, 8ull << 30};
    // Per user, engine-wide.
    uint64_t user_connections = 1024; // control connections
    uint64_t user_cm_files = 1024;    // rdma_cm files (one connection each)
    uint64_t user_cm_ids = 16384;     // rdma_cm ids, connection requests included

    // "context_qps=N,...,user_mb=N": keys context_ and user_ with qps, cqs, srqs, mrs, pds,
    // mws, dm_kb, attachments, mb; user_connections, user_cm_files and user_cm_ids. Over
    // the defaults. Returns an empty string or what is wrong: an unknown key, or a user's
    // cap that is not below the engine's maximum.
    static std::string parse(const std::string& text, ResourceLimits& limits);
};

} // namespace softhca::engine
