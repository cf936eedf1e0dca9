#include "instance.hpp"

#include "softhca/device_interface/control.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace softhca::tools {

namespace di = device_interface;

Instance Instance::named(const std::string& prefix) {
    const char* root = std::getenv("SOFTHCA_RUN_ROOT");
    return {prefix, std::string(root && *root ? root : "/run/softhca") + "/" + prefix};
}

pid_t Instance::running_engine() const {
    std::ifstream in(pid_path());
    long pid = 0;
    if (!(in >> pid) || pid <= 0)
        return 0;
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    std::getline(comm, name);
    // /proc/PID/comm holds at most 15 characters of the name.
    if (name != std::string("softhca-engine").substr(0, 15))
        return 0;
    return static_cast<pid_t>(pid);
}

int query_engine_status(const Instance& instance, std::string& text) {
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, instance.socket_path().c_str(), sizeof(addr.sun_path) - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        int err = errno;
        ::close(fd);
        return err;
    }
    timeval timeout{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    di::MessageHeader request{di::kControlMagic,
                              di::kControlVersion,
                              static_cast<uint16_t>(di::Opcode::EngineStatus),
                              0,
                              sizeof(di::MessageHeader),
                              1};
    std::vector<char> buffer(di::kMaxControlMessage * 64);
    int err = 0;
    if (di::send_message(fd, &request, sizeof(request)) != sizeof(request)) {
        err = errno;
    } else {
        di::ReceivedMessage m = di::receive_message(fd, buffer.data(), buffer.size());
        if (m.fd >= 0)
            ::close(m.fd);
        if (m.size < static_cast<ssize_t>(sizeof(di::ReplyHeader))) {
            err = m.size < 0 ? errno : EIO;
        } else {
            di::ReplyHeader reply;
            std::memcpy(&reply, buffer.data(), sizeof(reply));
            err = reply.status;
            text.assign(buffer.data() + sizeof(reply), static_cast<size_t>(m.size) - sizeof(reply));
        }
    }
    ::close(fd);
    return err;
}

} // namespace softhca::tools
