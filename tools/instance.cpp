#include "instance.hpp"

#include "softhca/device_interface/control.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
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

int engine_request(const Instance& instance, const void* request, size_t size, std::string& body,
                   int* passed_fd) {
    if (passed_fd)
        *passed_fd = -1;
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", instance.socket_path().c_str());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        int err = errno;
        ::close(fd);
        return err;
    }
    timeval timeout{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    std::vector<char> buffer(di::kMaxControlMessage * 64);
    int err = 0;
    if (di::send_message(fd, request, size) != static_cast<ssize_t>(size)) {
        err = errno;
    } else {
        di::ReceivedMessage m = di::receive_message(fd, buffer.data(), buffer.size());
        if (m.fd >= 0 && passed_fd)
            *passed_fd = m.fd;
        else if (m.fd >= 0)
            ::close(m.fd);
        if (m.size < static_cast<ssize_t>(sizeof(di::ReplyHeader))) {
            err = m.size < 0 ? errno : EIO;
        } else {
            di::ReplyHeader reply;
            std::memcpy(&reply, buffer.data(), sizeof(reply));
            err = reply.status;
            body.assign(buffer.data() + sizeof(reply), static_cast<size_t>(m.size) - sizeof(reply));
        }
    }
    ::close(fd);
    return err;
}

namespace {
di::MessageHeader admin_header(di::Opcode opcode, uint32_t length) {
    return {di::kControlMagic, di::kControlVersion, static_cast<uint16_t>(opcode), 0, length, 1};
}
} // namespace

int query_engine_status(const Instance& instance, std::string& text, bool json) {
    di::MessageHeader request = admin_header(
        json ? di::Opcode::EngineStatusJson : di::Opcode::EngineStatus, sizeof(di::MessageHeader));
    std::string reply;
    int file = -1;
    int err = engine_request(instance, &request, sizeof(request), reply, &file);
    // The text is in the file passed with the reply (control.hpp, StatusReply).
    di::StatusReply r{};
    if (err == 0 && (file < 0 || reply.size() + sizeof(di::ReplyHeader) != sizeof(r)))
        err = EPROTO;
    if (err == 0) {
        std::memcpy(reinterpret_cast<char*>(&r) + sizeof(di::ReplyHeader), reply.data(),
                    reply.size());
        text.resize(r.bytes);
        for (size_t at = 0; at < text.size() && err == 0;) {
            const ssize_t n =
                ::pread(file, text.data() + at, text.size() - at, static_cast<off_t>(at));
            if (n > 0)
                at += static_cast<size_t>(n);
            else
                err = n < 0 ? errno : EPROTO;
        }
    }
    if (file >= 0)
        ::close(file);
    return err;
}

int set_port_state(const Instance& instance, const std::string& device, bool up) {
    di::SetPortStateRequest request{};
    request.header = admin_header(di::Opcode::SetPortState, sizeof(request));
    std::snprintf(request.device_name, sizeof(request.device_name), "%s", device.c_str());
    request.port_num = 1;
    request.up = up ? 1 : 0;
    std::string ignored;
    return engine_request(instance, &request, sizeof(request), ignored);
}

int set_fabric_link(const Instance& instance, const std::string& a, const std::string& b, bool up) {
    di::SetFabricLinkRequest request{};
    request.header = admin_header(di::Opcode::SetFabricLink, sizeof(request));
    if (a.size() >= sizeof(request.node_a) || b.size() >= sizeof(request.node_b))
        return ENOENT;
    std::snprintf(request.node_a, sizeof(request.node_a), "%s", a.c_str());
    std::snprintf(request.node_b, sizeof(request.node_b), "%s", b.c_str());
    request.up = up ? 1 : 0;
    std::string ignored;
    return engine_request(instance, &request, sizeof(request), ignored);
}

} // namespace softhca::tools
