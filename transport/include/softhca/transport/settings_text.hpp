// The comma-separated lists the engine's options take: "KEY=NUMBER,..." settings (--ecn,
// --dcqcn, --link-credits) and the VL tables' items (--vl-arbitration, --sl-to-vl): one
// reader for all of them.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>

namespace softhca::transport {

// Hands each item of the comma-separated `text` (empty items skipped) to read(item), which
// returns an empty string or what is wrong with it. Returns the first such, or empty.
template <typename Read> std::string for_each_item(const std::string& text, Read&& read) {
    std::stringstream items(text);
    std::string item;
    while (std::getline(items, item, ','))
        if (!item.empty())
            if (std::string error = read(item); !error.empty())
                return error;
    return {};
}

// Hands each KEY=NUMBER item of `text` to take(key, value), which says false for a key it
// does not know or a value out of its range. Returns an empty string, or what is wrong
// with which item.
template <typename Take> std::string for_each_setting(const std::string& text, Take&& take) {
    return for_each_item(text, [&](const std::string& item) -> std::string {
        const size_t eq = item.find('=');
        double v = 0;
        char end = 0;
        if (eq == std::string::npos ||
            std::sscanf(item.substr(eq + 1).c_str(), "%lf%c", &v, &end) != 1 || v < 0)
            return "'" + item + "' is not KEY=NUMBER";
        if (!take(item.substr(0, eq), v))
            return "'" + item + "': unknown key or value out of range";
        return {};
    });
}

} // namespace softhca::transport
