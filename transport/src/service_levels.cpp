#include "softhca/transport/service_levels.hpp"

#include "softhca/transport/settings_text.hpp"

#include <cstdio>

namespace softhca::transport {

SlToVlTable::SlToVlTable(unsigned data_vls) {
    const unsigned vls = data_vls == 0 || data_vls > kManagementVl ? kDataVls : data_vls;
    for (unsigned sl = 0; sl < vl_.size(); ++sl)
        vl_[sl] = static_cast<uint8_t>(sl % vls);
}

std::string SlToVlTable::parse(const std::string& text, SlToVlTable& out) {
    SlToVlTable t = out;
    std::string error = for_each_item(text, [&](const std::string& item) -> std::string {
        unsigned sl = 0, vl = 0;
        char end = 0;
        if (std::sscanf(item.c_str(), "%u:%u%c", &sl, &vl, &end) != 2)
            return "'" + item + "' is not SL:VL";
        if (sl > 15)
            return "SL " + std::to_string(sl) + " is not 0..15";
        if (vl >= kManagementVl)
            return "VL " + std::to_string(vl) + " is not a data VL (0..14)";
        t.vl_[sl] = static_cast<uint8_t>(vl);
        return {};
    });
    if (!error.empty())
        return error;
    out = t;
    return {};
}

std::string SlToVlTable::to_string() const {
    std::string s;
    for (unsigned sl = 0; sl < vl_.size(); ++sl) {
        if (sl)
            s += ',';
        s += std::to_string(sl);
        s += ':';
        s += std::to_string(vl_[sl]);
    }
    return s;
}

} // namespace softhca::transport
