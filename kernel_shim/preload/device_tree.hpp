// The device tree `softhca exec` pointed the program at (SYSFS_PATH): what the preload's
// redirections and answers come from.
#pragma once

#include <cstdlib>
#include <cstring>

namespace softhca::preload {

// The tree's root; nullptr when there is none to answer from (SYSFS_PATH unset, empty or
// the real /sys). Read once.
inline const char* device_tree_root() {
    static const char* root = [] {
        const char* value = std::getenv("SYSFS_PATH");
        return value && *value && std::strcmp(value, "/sys") != 0 ? value : nullptr;
    }();
    return root;
}

} // namespace softhca::preload
