#include "fault_injector.hpp"

#include <cstdlib>
#include <sstream>

namespace softhca::engine {

std::optional<FaultConfig> parse_fault_config(const std::string& text, std::string& error) {
    FaultConfig config;
    std::istringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        const auto eq = item.find('=');
        if (eq == std::string::npos) {
            error = "fault setting '" + item + "' is not NAME=VALUE";
            return std::nullopt;
        }
        const std::string name = item.substr(0, eq);
        const std::string value = item.substr(eq + 1);
        char* end = nullptr;
        if (name == "seed") {
            config.seed = std::strtoull(value.c_str(), &end, 10);
        } else {
            const double p = std::strtod(value.c_str(), &end);
            if (p < 0 || p > 1) {
                error = "fault fraction " + name + " must be within 0..1";
                return std::nullopt;
            }
            if (name == "drop")
                config.drop = p;
            else if (name == "dup")
                config.duplicate = p;
            else if (name == "reorder")
                config.reorder = p;
            else if (name == "corrupt")
                config.corrupt = p;
            else {
                error = "unknown fault '" + name + "' (drop, dup, reorder, corrupt, seed)";
                return std::nullopt;
            }
        }
        if (value.empty() || *end) {
            error = "bad value in fault setting '" + item + "'";
            return std::nullopt;
        }
    }
    return config;
}

std::string describe(const FaultConfig& c) {
    std::ostringstream out;
    out << "drop=" << c.drop << ",dup=" << c.duplicate << ",reorder=" << c.reorder
        << ",corrupt=" << c.corrupt << ",seed=" << c.seed;
    return out.str();
}

FaultDecision FaultInjector::decide(uint32_t length, uint32_t first_corruptible) {
    FaultDecision d;
    if (!enabled())
        return d;
    if (chance(config_.drop)) {
        d.drop = true;
        ++dropped;
        return d;
    }
    if (chance(config_.corrupt) && length > first_corruptible) {
        d.corrupt_at = std::uniform_int_distribution<int64_t>(first_corruptible, length - 1)(rng_);
        ++corrupted;
    }
    if (chance(config_.duplicate)) {
        d.duplicate = true;
        ++duplicated;
    }
    if (chance(config_.reorder)) {
        d.hold = true;
        ++reordered;
    }
    return d;
}

} // namespace softhca::engine
