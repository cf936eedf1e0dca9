// `softhca watch`: two status documents (softhca status --json) an interval apart, their
// counters' differences divided by the time between them.
#include "watch.hpp"

#include "status_sampling.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

namespace softhca::tools {

namespace {

using Json = nlohmann::ordered_json;

struct Sample {
    Json doc;
    std::chrono::steady_clock::time_point at;
};

bool take(const Instance& instance, Sample& sample) {
    if (read_status(instance, sample.doc) != 0)
        return false;
    sample.at = std::chrono::steady_clock::now();
    return true;
}

// The counters of each device, then of each QP, in the document's order, by a key that
// names the object.
std::vector<std::pair<std::string, Json>> by_key(const Json& doc) {
    std::vector<std::pair<std::string, Json>> out;
    for (const Json& d : doc["devices"])
        out.emplace_back("device " + d["name"].get<std::string>(), d["counters"]);
    for (const Json& c : doc["contexts"])
        for (const Json& q : c["qps"])
            out.emplace_back("  qp " + std::to_string(q["qpn"].get<uint32_t>()) + " (" +
                                 c["command"].get<std::string>() + ")",
                             q["counters"]);
    return out;
}

std::string rate(double per_second, bool bytes) {
    char text[32];
    if (bytes)
        std::snprintf(text, sizeof(text), "%.1f MB/s", per_second / 1e6);
    else
        std::snprintf(text, sizeof(text), "%.0f/s", per_second);
    return text;
}

void print_rates(const Sample& before, const Sample& after) {
    const double seconds = std::chrono::duration<double>(after.at - before.at).count();
    std::map<std::string, Json> old_counters;
    for (auto& [key, counters] : by_key(before.doc))
        old_counters.emplace(key, std::move(counters));
    for (const auto& [key, counters] : by_key(after.doc)) {
        const auto old = old_counters.find(key);
        std::string line;
        for (const auto& [name, value] : counters.items()) {
            const uint64_t then =
                old == old_counters.end() ? 0 : old->second.value(name, uint64_t{0});
            const uint64_t now = value.get<uint64_t>();
            const bool always = name == "rx_packets" || name == "tx_packets" ||
                                name == "rx_bytes" || name == "tx_bytes";
            if (now == then && !always)
                continue;
            const double delta = now >= then ? static_cast<double>(now - then) : 0.0;
            line += " " + name + " " + rate(delta / seconds, name.ends_with("_bytes"));
        }
        if (!line.empty() || key.rfind("device", 0) == 0)
            std::cout << key << ":" << line << "\n";
    }
    std::cout << std::flush;
}

} // namespace

int cmd_watch(const Instance& instance, const std::vector<std::string>& args) {
    SamplingOptions options;
    if (!parse_sampling_options(
            args, "watch", "usage: softhca watch [--prefix P] [--interval SECONDS] [--count N]\n",
            0.05, options))
        return 2;
    Sample before;
    if (!take(instance, before))
        return 1;
    for (long n = 0; options.count < 0 || n < options.count; ++n) {
        std::this_thread::sleep_for(std::chrono::duration<double>(options.interval));
        Sample after;
        if (!take(instance, after))
            return 1;
        print_rates(before, after);
        if (options.count < 0 || n + 1 < options.count)
            std::cout << "\n";
        before = std::move(after);
    }
    return 0;
}

} // namespace softhca::tools
