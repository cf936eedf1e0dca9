// What `softhca watch` and `softhca sample` share: their --interval and --count options,
// and the engine's status document read as JSON.
#pragma once

#include "instance.hpp"

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace softhca::tools {

struct SamplingOptions {
    double interval = 1.0; // seconds
    long count = -1;       // samples; -1: until interrupted
};

// Takes --interval SECONDS and --count N from `args` (what follows the command); any
// other option with a value goes to `other(option, value)`, which says whether it knows
// it. On a bad argument says `usage`, or what is out of range (an interval outside
// min_interval..3600 s, a count of 0), and returns false: the command exits with 2.
bool parse_sampling_options(
    const std::vector<std::string>& args, const char* command, const char* usage,
    double min_interval, SamplingOptions& options,
    const std::function<bool(const std::string&, const std::string&)>& other = {});

// Reads the engine's status document. 0, or (having said why on stderr) the errno of an
// engine that is not up, or EBADMSG for a document that does not parse.
int read_status(const Instance& instance, nlohmann::ordered_json& doc);

} // namespace softhca::tools
