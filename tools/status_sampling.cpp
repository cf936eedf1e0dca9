#include "status_sampling.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace softhca::tools {

bool parse_sampling_options(
    const std::vector<std::string>& args, const char* command, const char* usage,
    double min_interval, SamplingOptions& options,
    const std::function<bool(const std::string&, const std::string&)>& other) {
    for (size_t i = 0; i < args.size(); ++i) {
        const bool has_value = i + 1 < args.size();
        if (args[i] == "--interval" && has_value) {
            options.interval = std::atof(args[++i].c_str());
        } else if (args[i] == "--count" && has_value) {
            options.count = std::atol(args[++i].c_str());
        } else if (has_value && other && other(args[i], args[i + 1])) {
            ++i;
        } else {
            std::cerr << usage;
            return false;
        }
    }
    if (!(options.interval >= min_interval && options.interval <= 3600) || options.count == 0) {
        std::cerr << "softhca " << command << ": --interval must be " << min_interval
                  << "..3600 s, --count at least 1\n";
        return false;
    }
    return true;
}

int read_status(const Instance& instance, nlohmann::ordered_json& doc) {
    std::string text;
    if (int err = query_engine_status(instance, text, true)) {
        std::cerr << "softhca: " << instance.prefix << " is not up (" << std::strerror(err)
                  << ")\n";
        return err;
    }
    doc = nlohmann::ordered_json::parse(text, nullptr, false);
    if (doc.is_discarded()) {
        std::cerr << "softhca: the engine's status did not parse\n";
        return EBADMSG;
    }
    return 0;
}

} // namespace softhca::tools
