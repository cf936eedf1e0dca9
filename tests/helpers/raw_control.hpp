// Speaking the control protocol directly (device_interface/control.hpp), as a client
// that does not use the provider would: for tests of garbage, of hostile clients and of
// the descriptors the engine hands out. Runs under `softhca exec` (SYSFS_PATH).
#pragma once

#include "softhca/device_interface/control.hpp"
#include "softhca/device_interface/socket_io.hpp"
#include "test_device.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace raw_control {

namespace di = softhca::device_interface;

inline std::string engine_socket_path() {
    const char* sysfs = std::getenv("SYSFS_PATH");
    REQUIRE(sysfs != nullptr);
    std::ifstream in(std::string(sysfs) + "/class/infiniband/" + test_device_name() +
                     "/softhca_engine_socket");
    std::string path;
    std::getline(in, path);
    REQUIRE(!path.empty());
    return path;
}

// A connection to the engine, with replies bounded by a 5-second wait.
inline int connect_raw() {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", engine_socket_path().c_str());
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    timeval timeout{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    return fd;
}

// Fills OpenDevice's probe: bytes at an address of this process, which the engine reads
// back through the memory file sent along.
inline void prove_memory(di::OpenDeviceRequest& open) {
    for (size_t i = 0; i < sizeof(open.probe); ++i)
        open.probe[i] = static_cast<uint8_t>(0x5a ^ (i * 29));
    open.probe_addr = reinterpret_cast<uintptr_t>(open.probe);
}

inline di::MessageHeader header_for(di::Opcode opcode, uint32_t length) {
    return {di::kControlMagic, di::kControlVersion, static_cast<uint16_t>(opcode), 0, length, 7};
}

// One connection: call() sends a request (its header filled in here) with up to two
// descriptors and returns the reply's status; the reply's bytes stay in `reply` and its
// descriptor goes to *fd_back (or is closed).
class Client {
  public:
    Client() : fd_(connect_raw()) {}
    ~Client() { close(fd_); }
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;

    template <typename Request>
    int call(di::Opcode opcode, Request& request, int pass = -1, int* fd_back = nullptr,
             int pass_second = -1) {
        request.header = header_for(opcode, sizeof(request));
        REQUIRE(di::send_message(fd_, &request, sizeof(request), pass, pass_second) ==
                static_cast<ssize_t>(sizeof(request)));
        di::ReceivedMessage m = di::receive_message(fd_, reply.data(), reply.size());
        REQUIRE(m.size >= static_cast<ssize_t>(sizeof(di::ReplyHeader)));
        if (fd_back)
            *fd_back = m.fd;
        else if (m.fd >= 0)
            close(m.fd);
        di::ReplyHeader h;
        std::memcpy(&h, reply.data(), sizeof(h));
        return h.status;
    }
    template <typename Reply> Reply reply_as() const {
        Reply r;
        std::memcpy(&r, reply.data(), sizeof(r));
        return r;
    }
    // OpenDevice on the test device with `async_write_end` as its async event pipe and
    // this process's memory file; the doorbell pipe's write end goes to *doorbell.
    int open_device(int async_write_end, int* doorbell = nullptr) {
        di::OpenDeviceRequest open{};
        open.provider_abi = di::kControlVersion;
        std::snprintf(open.device_name, sizeof(open.device_name), "%s", test_device_name().c_str());
        prove_memory(open);
        const int memory = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
        const int status = call(di::Opcode::OpenDevice, open, async_write_end, doorbell, memory);
        close(memory);
        return status;
    }
    int fd() const { return fd_; }
    std::vector<char> reply = std::vector<char>(1 << 18);

  private:
    int fd_;
};

} // namespace raw_control
