// The engine's own report, for end-to-end tests that check what it counted: `softhca status`
// of the instance the test runs against ($SOFTHCA, $SOFTHCA_PREFIX).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>

// The text of `softhca status`, or "" when the test was not told which engine.
inline std::string engine_status() {
    const char* softhca = std::getenv("SOFTHCA");
    const char* prefix = std::getenv("SOFTHCA_PREFIX");
    if (!softhca || !prefix)
        return "";
    const std::string command = std::string(softhca) + " status --prefix " + prefix;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (!pipe)
        return "";
    std::string out;
    char chunk[4096];
    size_t n;
    while ((n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0)
        out.append(chunk, n);
    ::pclose(pipe);
    return out;
}

// Reads the status until `done(status)` holds, for up to `seconds` (the engine's threads
// may be slow to get there on a loaded machine): whether it came to hold. The last status
// read is left in `last`, when given.
template <typename Done>
bool wait_for_status(Done done, std::string* last = nullptr, int seconds = 10) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    std::string status = engine_status();
    bool held;
    while (!(held = done(status)) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        status = engine_status();
    }
    if (last)
        *last = std::move(status);
    return held;
}
