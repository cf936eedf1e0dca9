#include "resource_limits.hpp"

#include "softhca/transport/settings_text.hpp"

namespace softhca::engine {

std::string ResourceLimits::parse(const std::string& text, ResourceLimits& limits) {
    return transport::for_each_setting(text, [&](const std::string& key, double value) {
        const size_t underscore = key.find('_');
        if (underscore == std::string::npos || value < 1 || value > 1e12)
            return false;
        const std::string scope = key.substr(0, underscore), what = key.substr(underscore + 1);
        ResourceUsage* cap = scope == "context" ? &limits.context
                             : scope == "user"  ? &limits.user
                                                : nullptr;
        if (!cap)
            return false;
        const auto n = static_cast<uint64_t>(value);
        if (what == "qps")
            cap->qps = n;
        else if (what == "cqs")
            cap->cqs = n;
        else if (what == "srqs")
            cap->srqs = n;
        else if (what == "mrs")
            cap->mrs = n;
        else if (what == "mb")
            cap->bytes = n << 20;
        else
            return false;
        return true;
    });
}

} // namespace softhca::engine
