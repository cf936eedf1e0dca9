// A per-port fault injector for testing the transport on a bad wire: it drops,
// duplicates, reorders (holds a frame back behind the next one) and corrupts a
// configured fraction of transmitted frames, reproducibly from a seed. Off by default.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>

namespace softhca::engine {

struct FaultConfig {
    double drop = 0, duplicate = 0, reorder = 0, corrupt = 0;
    uint64_t seed = 1;
    bool enabled() const { return drop > 0 || duplicate > 0 || reorder > 0 || corrupt > 0; }
};

// Parses "drop=0.01,dup=0.01,reorder=0.01,corrupt=0.001,seed=7" (any subset).
std::optional<FaultConfig> parse_fault_config(const std::string& text, std::string& error);
std::string describe(const FaultConfig& config);

struct FaultDecision {
    bool drop = false;
    bool duplicate = false;
    bool hold = false;       // send after the next frame
    int64_t corrupt_at = -1; // byte offset to flip, -1 for none
};

class FaultInjector {
  public:
    FaultInjector() = default;
    FaultInjector(const FaultConfig& config, uint64_t stream)
        : config_(config), rng_(config.seed * 0x9e3779b97f4a7c15ull + stream) {}

    bool enabled() const { return config_.enabled(); }
    // Decides what happens to one frame of `length` bytes whose bytes from
    // `first_corruptible` on may be damaged.
    FaultDecision decide(uint32_t length, uint32_t first_corruptible);

    uint64_t dropped = 0, duplicated = 0, reordered = 0, corrupted = 0;

  private:
    bool chance(double p) {
        return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p;
    }
    FaultConfig config_;
    std::mt19937_64 rng_;
};

} // namespace softhca::engine
