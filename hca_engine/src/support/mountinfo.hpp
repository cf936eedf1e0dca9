// One line of /proc/PID/mountinfo (proc(5)), the fields the engine reads of it:
//   ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER
// The kernel escapes spaces in paths (\040), so fields split at spaces and the first
// " - " ends the optional tags.
#pragma once

#include <string_view>

namespace softhca::engine {

struct MountinfoLine {
    std::string_view id;     // the mount's ID (as /proc/PID/fdinfo's mnt_id names it)
    std::string_view device; // MAJOR:MINOR, in decimal
    std::string_view type;   // the filesystem type: "proc", "tmpfs", "fuse", ...
};

// False when `line` is not such a line. The views point into `line`.
inline bool parse_mountinfo_line(std::string_view line, MountinfoLine& out) {
    auto field = [&line](size_t& at) {
        const size_t end = line.find(' ', at);
        const std::string_view f =
            line.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
        at = end == std::string_view::npos ? line.size() : end + 1;
        return f;
    };
    size_t at = 0;
    out.id = field(at);
    field(at); // the parent's ID
    out.device = field(at);
    const size_t dash = line.find(" - ", at);
    if (out.id.empty() || out.device.empty() || dash == std::string_view::npos)
        return false;
    at = dash + 3;
    out.type = field(at);
    return !out.type.empty();
}

} // namespace softhca::engine
