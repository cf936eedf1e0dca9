// `softhca sample`: the status document (softhca status --json) every interval, each
// number in it that belongs to a device or a QP written as one CSV row.
#include "sample.hpp"

#include "status_sampling.hpp"

#include <cerrno>
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
        if (const Json& cp = d["congestion_point"]; cp.is_object()) {
            put_numbers(out, time, object, cp["link_credits"]);
            for (const Json& vl : cp["vls"])
                put_numbers(out, time, object + "/vl" + std::to_string(vl["vl"].get<int>()), vl);
        }
    }
    // A fabric's egress ports ("link:leaf0>spine1") and switches ("switch:leaf0").
    if (const auto fabric = doc.find("fabric"); fabric != doc.end() && fabric->is_object()) {
        for (const Json& e : (*fabric)["egress"])
            put_numbers(out, time,
                        "link:" + e["from"].get<std::string>() + ">" + e["to"].get<std::string>(),
                        e);
        for (const Json& s : (*fabric)["switches"])
            put_numbers(out, time, "switch:" + s["name"].get<std::string>(), s);
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
    SamplingOptions options;
    options.interval = 0.1;
    std::string output;
    if (!parse_sampling_options(args, "sample",
                                "usage: softhca sample [--prefix P] [--interval SECONDS] "
                                "[--count N] [--output FILE]\n",
                                0.01, options,
                                [&](const std::string& option, const std::string& value) {
                                    if (option != "--output")
                                        return false;
                                    output = value;
                                    return true;
                                }))
        return 2;
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
    for (long n = 0; options.count < 0 || n < options.count; ++n) {
        Json doc;
        // An engine going down ends a sampling that had begun.
        if (int err = read_status(instance, doc))
            return n > 0 && err != EBADMSG ? 0 : 1;
        put_sample(out,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                   doc);
        next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(options.interval));
        if (options.count < 0 || n + 1 < options.count)
            std::this_thread::sleep_until(next);
    }
    return 0;
}

} // namespace softhca::tools
