// What both control fuzzers do for a connection's input: serve it as the engine's loop
// does. One paused while this process's closes drain (client_descriptors.hpp: the
// engine's closing threads may lag on a loaded machine) is served again once it resumes.
#pragma once

#include "client_descriptors.hpp"

#include <chrono>
#include <thread>

template <class Server> softhca::engine::Served serve(Server& server, int fd) {
    for (;;) {
        const softhca::engine::Served served = server.handle_input(fd);
        if (served != softhca::engine::Served::Paused)
            return served;
        while (server.resumed().empty())
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}
