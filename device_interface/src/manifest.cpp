#include "softhca/device_interface/manifest.hpp"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sys/mount.h>
#include <system_error>
#include <unistd.h>

namespace softhca::device_interface {

void Manifest::record(Kind kind, const std::string& created_path) {
    std::ofstream out(path_, std::ios::app);
    out << static_cast<char>(kind) << ' ' << created_path << '\n';
    out.flush();
    if (!out)
        throw std::system_error(errno, std::generic_category(), "writing " + path_);
}

int Manifest::remove_all() const {
    std::ifstream in(path_);
    if (!in)
        return 0;
    std::vector<std::pair<char, std::string>> entries;
    std::string line;
    while (std::getline(in, line)) {
        if (line.size() > 2 && line[1] == ' ')
            entries.emplace_back(line[0], line.substr(2));
    }
    int failures = 0;
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        const auto& [kind, path] = *it;
        std::error_code ec;
        switch (static_cast<Kind>(kind)) {
        case Kind::File:
            if (::unlink(path.c_str()) != 0 && errno != ENOENT)
                ++failures;
            break;
        case Kind::Directory:
            // Only when empty: someone else may have put things there since.
            if (::rmdir(path.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY &&
                errno != EEXIST)
                ++failures;
            break;
        case Kind::Shared: {
            const std::string mark = path + "/" + kSharedMark;
            size_t present = 0;
            for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
                (void)entry;
                ++present;
            }
            if (!ec && present == 1 && std::filesystem::exists(mark)) {
                ::unlink(mark.c_str());
                if (::rmdir(path.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY)
                    ++failures;
            }
            break;
        }
        case Kind::NetNamespace:
            // Recorded before it was mounted: it may not be (EINVAL), or be gone already.
            if (::umount2(path.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
                ++failures;
            else if (::unlink(path.c_str()) != 0 && errno != ENOENT)
                ++failures;
            break;
        case Kind::Tree:
            std::filesystem::remove_all(path, ec);
            if (ec)
                ++failures;
            break;
        }
    }
    ::unlink(path_.c_str());
    return failures;
}

} // namespace softhca::device_interface
