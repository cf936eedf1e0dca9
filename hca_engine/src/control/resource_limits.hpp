// What one context and one user may hold in the engine, and what they hold: a client is
// charged for what it makes the engine keep (queues, regions, the rings and the
// per-work-request state behind them), as the kernel charges an rdma cgroup's objects
// and a process's pinned pages. `softhca up --limits` sets the caps; a create past one
// fails with ENOMEM and leaves nothing behind. Pinned memory is charged separately, to
// the process's RLIMIT_MEMLOCK (resource_tables.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace softhca::engine {

struct ResourceUsage {
    uint64_t qps = 0, cqs = 0, srqs = 0, mrs = 0;
    uint64_t bytes = 0; // engine memory: rings, work request state, device memory
    ResourceUsage& operator+=(const ResourceUsage& o) {
        qps += o.qps;
        cqs += o.cqs;
        srqs += o.srqs;
        mrs += o.mrs;
        bytes += o.bytes;
        return *this;
    }
    // Whether any count or the bytes exceed `cap`'s.
    bool exceeds(const ResourceUsage& cap) const {
        return qps > cap.qps || cqs > cap.cqs || srqs > cap.srqs || mrs > cap.mrs ||
               bytes > cap.bytes;
    }
};

struct ResourceLimits {
    // Defaults: room for heavy real programs (UCX, MPI, rdma-core's tests, perftest with
    // deep queues), bounded so one user cannot take the engine's memory from the rest.
    ResourceUsage context{8192, 8192, 4096, 65536, 4ull << 30};
    ResourceUsage user{16384, 16384, 8192, 131072, 8ull << 30};

    // "context_qps=N,...,user_mb=N" (keys context_ and user_ with qps, cqs, srqs, mrs, mb)
    // over the defaults. Returns an empty string or what is wrong.
    static std::string parse(const std::string& text, ResourceLimits& limits);
};

} // namespace softhca::engine
