// One rdma_cm file as the preload library opens it (device_interface/rdma_cm.hpp): the
// application's pipe (the event doorbell) opened twice through /proc, once for the
// application and once non-blocking for the engine; a connection to the engine's rdma_cm
// socket; and the Open message, which carries the engine's end of the pipe. Shared by
// the rdma_cm unit tests and fuzz_rdma_cm.
#pragma once

#include "softhca/device_interface/rdma_cm.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <cstdint>
#include <cstdio>
#include <fcntl.h>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct RdmaCmFileEnds {
    int sock = -1; // the connection to the engine
    int app = -1;  // the application's end of the pipe (its "file")
};

// Connects to `socket_path` and sends Open with `sequence`. False on any failure (what was
// opened is closed). The reply is the caller's to take.
inline bool open_rdma_cm_file(const std::string& socket_path, uint32_t sequence,
                              RdmaCmFileEnds& out) {
    namespace di = softhca::device_interface;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        return false;
    const std::string proc = "/proc/self/fd/" + std::to_string(fds[0]);
    const int app = ::open(proc.c_str(), O_RDWR | O_CLOEXEC);
    const int engine_end = ::open(proc.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    ::close(fds[0]);
    ::close(fds[1]);
    const int sock = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path.c_str());
    di::RdmaCmOpen open{};
    open.header = {di::kRdmaCmMagic,
                   di::kRdmaCmVersion,
                   static_cast<uint16_t>(di::RdmaCmOp::Open),
                   0,
                   sizeof(open),
                   sequence};
    const bool ok = app >= 0 && engine_end >= 0 && sock >= 0 &&
                    ::connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                    di::send_message(sock, &open, sizeof(open), engine_end) == sizeof(open);
    if (engine_end >= 0)
        ::close(engine_end);
    if (!ok) {
        for (int fd : {app, sock})
            if (fd >= 0)
                ::close(fd);
        return false;
    }
    out = {sock, app};
    return true;
}
