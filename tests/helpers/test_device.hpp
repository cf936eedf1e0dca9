// Opening a softhca device by name through the system libibverbs, for the end-to-end
// test programs (which run under `softhca exec`, so SYSFS_PATH points at the tree).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <infiniband/verbs.h>
#include <string>

inline std::string test_device_name() {
    const char* name = std::getenv("SOFTHCA_TEST_DEVICE");
    return name && *name ? name : "softhca0";
}

// Returns an open context or nullptr (with a message on stderr).
inline ibv_context* open_test_device(const std::string& name) {
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (!list) {
        std::perror("ibv_get_device_list");
        return nullptr;
    }
    ibv_context* context = nullptr;
    for (int i = 0; i < count; ++i) {
        if (name == ibv_get_device_name(list[i])) {
            context = ibv_open_device(list[i]);
            if (!context)
                std::perror("ibv_open_device");
        }
    }
    ibv_free_device_list(list);
    if (!context)
        std::fprintf(stderr, "device %s not opened\n", name.c_str());
    return context;
}

// The running engine's pid (its instance is SOFTHCA_PREFIX), as its pid file says.
inline std::string test_engine_pid() {
    const char* prefix = std::getenv("SOFTHCA_PREFIX");
    std::ifstream pid_file(std::string("/run/softhca/") + (prefix ? prefix : "softhca") +
                           "/engine.pid");
    std::string pid;
    std::getline(pid_file, pid);
    return pid;
}

// A memory figure of the engine from its /proc status ("VmRSS", "VmSize"), in bytes.
inline uint64_t test_engine_memory(const std::string& field) {
    std::ifstream status("/proc/" + test_engine_pid() + "/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind(field + ":", 0) == 0)
            return std::stoull(line.substr(field.size() + 1)) * 1024;
    return 0;
}
