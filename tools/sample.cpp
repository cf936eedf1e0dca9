// `softhca sample`: the status document (softhca status --json) every interval, each
// number in it that belongs to a device or a QP written as one CSV row.
#include "sample.hpp"

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

namespace softhca::tools {

namespace {

using Json = nlohmann::ordered_json;

// "time,object,field,value" for every number (and boolean) of a flat object.
void put_numbers(std::ostream& out, const std::string& time, const std::string& object,
                 const Json& fields) {
    if (!fields.is_object())
        return;
    for (const auto& [name, value] : fields.items())
        if (value.is_number() || value.is_boolean())
            out << time << "," << object << "," << name << ","
                << (value.is_boolean() ? (value.get<bool>() ? "1" : "0") : value.dump()) << "\n";
}

void put_sample(std::ostream& out, double seconds, const Json& doc) {
    char time[32];
    std::snprintf(time, sizeof(time), "%.4f", seconds);
    for (const Json& d : doc["devices"]) {
        const std::string object = "device:" + d["name"].get<std::string>();
        put_numbers(out, time, object, d["counters"]);
        put_numbers(out, time, object, d["congestion_point"]);
    }
    for (const Json& c : doc["contexts"])
        for (const Json& q : c["qps"]) {
            const std::string object = "qp:" + c["device"].get<std::string>() + "/" +
                                       std::to_string(q["qpn"].get<uint32_t>());
            put_numbers(out, time, object, q["counters"]);
            put_numbers(out, time, object, q["congestion"]);
        }
    out.flush();
}

} // namespace

int cmd_sample(const Instance& instance, const std::vector<std::string>& args) {
    double interval = 0.1;
    long count = -1; // until interrupted
    std::string output;
    for (size_t i = 0; i < args.size(); ++i) {
        const bool has_value = i + 1 < args.size();
        if (args[i] == "--interval" && has_value)
            interval = std::atof(args[++i].c_str());
        else if (args[i] == "--count" && has_value)
            count = std::atol(args[++i].c_str());
        else if (args[i] == "--output" && has_value)
            output = args[++i];
        else {
            std::cerr << "usage: softhca sample [--prefix P] [--interval SECONDS] [--count N] "
                         "[--output FILE]\n";
            return 2;
        }
    }
    if (!(interval >= 0.01 && interval <= 3600) || count == 0) {
        std::cerr << "softhca sample: --interval must be 0.01..3600 s, --count at least 1\n";
        return 2;
    }
    std::ofstream file;
    if (!output.empty()) {
        file.open(output);
        if (!file) {
            std::cerr << "softhca sample: cannot write " << output << "\n";
            return 1;
        }
    }
    std::ostream& out = output.empty() ? std::cout : file;
    out << "time_s,object,field,value\n";
    const auto start = std::chrono::steady_clock::now();
    auto next = start;
    for (long n = 0; count < 0 || n < count; ++n) {
        std::string text;
        if (int err = query_engine_status(instance, text, true)) {
            std::cerr << "softhca: " << instance.prefix << " is not up (" << std::strerror(err)
                      << ")\n";
            return n > 0 ? 0 : 1; // an engine going down ends a sampling that had begun
        }
        const Json doc = Json::parse(text, nullptr, false);
        if (doc.is_discarded()) {
            std::cerr << "softhca sample: the engine's status did not parse\n";
            return 1;
        }
        put_sample(out,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                   doc);
        next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(interval));
        if (count < 0 || n + 1 < count)
            std::this_thread::sleep_until(next);
    }
    return 0;
}

} // namespace softhca::tools
