// The engine's notion of time for the transport: CLOCK_MONOTONIC in nanoseconds.
#pragma once

#include <cstdint>
#include <time.h>

namespace softhca::engine {

inline uint64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

} // namespace softhca::engine
