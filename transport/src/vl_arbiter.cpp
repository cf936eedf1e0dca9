#include "softhca/transport/vl_arbiter.hpp"

#include "softhca/transport/settings_text.hpp"

#include <cstdio>
#include <sstream>

namespace softhca::transport {

VlArbitrationTables VlArbitrationTables::round_robin(unsigned vls, uint8_t weight) {
    VlArbitrationTables t;
    for (unsigned vl = 0; vl < vls && vl < kManagementVl; ++vl)
        t.low.push_back({static_cast<uint8_t>(vl), weight});
    return t;
}

namespace {

// "VL:W,VL:W" into entries; empty text is an empty table.
std::string parse_entries(const std::string& text, std::vector<VlArbitrationEntry>& out) {
    std::string error = for_each_item(text, [&](const std::string& item) -> std::string {
        const size_t colon = item.find(':');
        unsigned vl = 0, weight = 0;
        char end = 0;
        if (colon == std::string::npos ||
            std::sscanf(item.substr(0, colon).c_str(), "%u%c", &vl, &end) != 1 ||
            std::sscanf(item.substr(colon + 1).c_str(), "%u%c", &weight, &end) != 1)
            return "'" + item + "' is not VL:WEIGHT";
        if (vl >= kManagementVl)
            return "VL " + std::to_string(vl) + " is not a data VL (0..14)";
        if (weight > 255)
            return "weight " + std::to_string(weight) + " is over 255";
        out.push_back({static_cast<uint8_t>(vl), static_cast<uint8_t>(weight)});
        return {};
    });
    if (!error.empty())
        return error;
    if (out.size() > kMaxArbitrationEntries)
        return "more than 64 entries in a table";
    return {};
}

} // namespace

std::string VlArbitrationTables::parse(const std::string& text, VlArbitrationTables& out) {
    VlArbitrationTables t;
    std::stringstream parts(text);
    std::string part;
    while (std::getline(parts, part, ';')) {
        if (part.empty())
            continue;
        const size_t eq = part.find('=');
        const std::string key = part.substr(0, eq);
        const std::string value = eq == std::string::npos ? "" : part.substr(eq + 1);
        std::string err;
        if (eq == std::string::npos) {
            err = "'" + part + "' is not KEY=VALUE";
        } else if (key == "high") {
            err = parse_entries(value, t.high);
        } else if (key == "low") {
            err = parse_entries(value, t.low);
        } else if (key == "limit") {
            unsigned limit = 0;
            char end = 0;
            if (std::sscanf(value.c_str(), "%u%c", &limit, &end) != 1 || limit > 255)
                err = "limit must be 0..255";
            t.limit_of_high_priority = static_cast<uint8_t>(limit);
        } else {
            err = "unknown key '" + key + "' (high, low, limit)";
        }
        if (!err.empty())
            return err;
    }
    out = t;
    return {};
}

bool VlArbitrationTables::serves(uint8_t vl) const {
    for (const auto* table : {&high, &low})
        for (const VlArbitrationEntry& e : *table)
            if (e.vl == vl && e.weight > 0)
                return true;
    return false;
}

std::string VlArbitrationTables::to_string() const {
    std::string s;
    for (const auto* table : {&high, &low}) {
        s += table == &high ? "high=" : ";low=";
        for (size_t i = 0; i < table->size(); ++i) {
            if (i)
                s += ',';
            s += std::to_string((*table)[i].vl);
            s += ':';
            s += std::to_string((*table)[i].weight);
        }
    }
    return s + ";limit=" + std::to_string(limit_of_high_priority);
}

VlArbiter::VlArbiter(const VlArbitrationTables& tables) : tables_(tables) {
    for (auto [from, to] : {std::pair{&tables.high, &high_}, std::pair{&tables.low, &low_}}) {
        for (const VlArbitrationEntry& e : *from)
            if (e.vl < kManagementVl && e.weight > 0) // weight 0 and VL15: skipped
                to->entries.push_back(e);
        to->overdrawn.assign(to->entries.size(), 0);
        if (!to->entries.empty())
            to->remaining = int64_t{to->entries[0].weight} * kArbitrationWeightUnit;
    }
}

bool VlArbiter::Table::has_work(const std::array<uint32_t, kVlSlots>& head) const {
    for (const VlArbitrationEntry& e : entries)
        if (head[e.vl])
            return true;
    return false;
}

void VlArbiter::Table::advance() {
    if (remaining < 0)
        overdrawn[index] = -remaining;
    index = (index + 1) % entries.size();
    remaining = int64_t{entries[index].weight} * kArbitrationWeightUnit - overdrawn[index];
    overdrawn[index] = 0;
}

int VlArbiter::Table::serve(const std::array<uint32_t, kVlSlots>& head) {
    // The current entry keeps the turn while it has weight left and a packet; otherwise
    // the next entry with a packet takes it with its weight less what it overdrew last
    // time (has_work() said one has a packet; every pass round the table pays debts off).
    for (size_t tried = 0; tried <= entries.size() * 2048; ++tried) {
        const VlArbitrationEntry& e = entries[index];
        if (remaining > 0 && head[e.vl]) {
            // A packet may start while any weight is left; what it overdraws ends the turn.
            const uint32_t units =
                (head[e.vl] + kArbitrationWeightUnit - 1) / kArbitrationWeightUnit;
            remaining -= int64_t{units} * kArbitrationWeightUnit;
            const int vl = e.vl;
            if (remaining <= 0)
                advance();
            return vl;
        }
        if (remaining > 0)
            remaining = 0; // an entry with nothing to send keeps no credit for later
        advance();
    }
    return kNone;
}

int VlArbiter::pick(const std::array<uint32_t, kVlSlots>& head_bytes) {
    if (head_bytes[kManagementVl])
        return kManagementVl; // VL15 is not subject to arbitration (7.6.9)
    const bool high_ready = high_.has_work(head_bytes);
    const bool low_ready = low_.has_work(head_bytes);
    // LimitOfHighPriority: after limit x 4 KiB of high-priority bytes (one packet for 0),
    // a waiting low-priority packet goes next.
    const uint8_t limit = tables_.limit_of_high_priority;
    const bool within_limit = limit == kUnlimitedHighPriority || high_run_ == 0 ||
                              high_run_ < uint64_t{limit} * kHighPriorityLimitUnit;
    if (high_ready && (!low_ready || within_limit)) {
        const int vl = high_.serve(head_bytes);
        high_run_ += head_bytes[static_cast<size_t>(vl)];
        return vl;
    }
    if (low_ready) {
        high_run_ = 0;
        return low_.serve(head_bytes);
    }
    return kNone;
}

} // namespace softhca::transport
