#include "link_shaper.hpp"

#include <cstdlib>
#include <sstream>

namespace softhca::engine {

std::optional<ShaperConfig> parse_shaper_config(const std::string& text, std::string& error) {
    ShaperConfig config;
    std::istringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        const auto eq = item.find('=');
        if (eq == std::string::npos) {
            error = "shaper setting '" + item + "' is not NAME=VALUE";
            return std::nullopt;
        }
        const std::string name = item.substr(0, eq);
        const std::string value = item.substr(eq + 1);
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || *end || v < 0) {
            error = "bad value in shaper setting '" + item + "'";
            return std::nullopt;
        }
        if (name == "rate_mbps")
            config.rate_bps = v * 1e6;
        else if (name == "delay_us")
            config.delay_ns = static_cast<uint64_t>(v * 1000);
        else if (name == "queue_kb")
            config.queue_limit_bytes = static_cast<uint64_t>(v * 1024);
        else {
            error = "unknown shaper setting '" + name + "' (rate_mbps, delay_us, queue_kb)";
            return std::nullopt;
        }
    }
    return config;
}

std::string describe(const ShaperConfig& config) {
    std::ostringstream s;
    s << "rate_mbps=" << config.rate_bps / 1e6 << ",delay_us=" << config.delay_ns / 1000.0
      << ",queue_kb=" << config.queue_limit_bytes / 1024.0;
    return s.str();
}

} // namespace softhca::engine
