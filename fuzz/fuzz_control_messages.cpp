// libFuzzer target: the engine's control plane (ControlServer over its Unix socket, as a
// provider talks to it), fed sequences of requests built from the input. Each request is
// four bytes of the input — an opcode, how to size it, flags, a body length — and then
// its body: the header is made valid (magic, version, length, sequence) unless a flag
// says otherwise, the size is the table's for the opcode or the input's, and a pipe or a
// memfd rides along when asked (OpenDevice needs the pipe and the process's memory
// file; some requests take a file).
// An OpenDevice flag names a real device so that later requests reach an open context.
// Invariants: no crash or sanitizer report, and every request gets exactly one reply,
// which answers it (its sequence). Closing the connection destroys everything it made.
// The status requests (text and JSON) go at most once per input: they read every table
// and cost more than all the rest together, so more would only slow the fuzzer.
#include "control_server.hpp"
#include "device_links.hpp"
#include "serve_connection.hpp"
#include "sim_ports.hpp"
#include "softhca/device_interface/control.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <string>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace di = softhca::device_interface;
using namespace softhca::engine;

namespace {

struct Engine {
    sim::SimulatedPortSet ports{FaultConfig{}};
    std::vector<Device> devices{{"fz0", 0, 1}, {"fz1", 1, 2}};
    std::string path = "/tmp/softhca-fuzz-" + std::to_string(::getpid()) + ".sock";
    std::unique_ptr<ControlServer> server = [this] {
        auto made = std::make_unique<ControlServer>(path, devices, ports, "fz");
        // LinkAdd and LinkDelete: the engine's checks, then nothing (simulated ports take
        // no new port).
        made->set_link_handler(
            [this](bool add, const std::string& name, const std::string& netdev) {
                size_t device = 0;
                const int error =
                    add ? DeviceLinks::check_add(devices, ports, "/nonexistent", name, netdev)
                        : DeviceLinks::check_remove(devices, name, device);
                return error ? error : EOPNOTSUPP;
            });
        return made;
    }();
};

Engine& engine() {
    // Lives for the process (the server keeps references); its socket goes at exit.
    static Engine* e = [] {
        auto* created = new Engine;
        std::atexit([] { ::unlink(engine().path.c_str()); });
        return created;
    }();
    return *e;
}

int connect_client(const std::string& path) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
        std::abort();
    return fd;
}

enum Flags : uint8_t {
    kPassPipe = 1 << 0,
    kPassMemfd = 1 << 1,
    kRealDevice = 1 << 2, // OpenDevice: name fz0 and the current ABI
    kBadMagic = 1 << 5,
    kBadLength = 1 << 6,
    kBadVersion = 1 << 7,
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Engine& e = engine();
    const int client = connect_client(e.path);
    const std::vector<int> accepted = e.server->accept_pending();
    if (accepted.size() != 1)
        std::abort();
    const int served = accepted[0];
    static std::vector<uint8_t> reply(di::kMaxControlMessage * 64 + 4096);
    uint32_t sequence = 0;
    size_t at = 0;
    bool status_asked = false;
    for (int n = 0; n < 48 && at + 4 <= size; ++n) {
        uint8_t opcode = data[at] % 39;
        if (opcode == static_cast<uint8_t>(di::Opcode::EngineStatus) ||
            opcode == static_cast<uint8_t>(di::Opcode::EngineStatusJson)) {
            if (status_asked)
                opcode = static_cast<uint8_t>(di::Opcode::QueryDevice);
            status_asked = true;
        }
        const uint8_t sizing = data[at + 1];
        const uint8_t flags = data[at + 2];
        const size_t body = data[at + 3];
        at += 4;
        const ControlServer::Method* method = ControlServer::method_for(opcode);
        size_t length = method && (sizing & 3) ? method->request_size
                                               : sizeof(di::MessageHeader) + sizing % 200;
        // Shorter than any header (not empty: on a SEQPACKET socket an empty message
        // reads as the peer's close, and the engine takes it as that).
        if ((sizing & 0xe0) == 0xe0)
            length = 1 + sizing % (sizeof(di::MessageHeader) - 1);
        std::vector<uint8_t> message(std::max<size_t>(length, 1), 0);
        const size_t take = std::min({body, size - at, message.size()});
        std::memcpy(message.data(), data + at, take);
        at += take;
        di::MessageHeader h{};
        h.magic = flags & kBadMagic ? 0x1234 : di::kControlMagic;
        h.version = flags & kBadVersion ? 77 : di::kControlVersion;
        h.opcode = opcode;
        h.length = static_cast<uint32_t>(flags & kBadLength ? length + 8 : length);
        h.sequence = ++sequence;
        if (length >= sizeof(h))
            std::memcpy(message.data(), &h, sizeof(h));
        if (opcode == static_cast<uint8_t>(di::Opcode::OpenDevice) && (flags & kRealDevice) &&
            length == sizeof(di::OpenDeviceRequest)) {
            di::OpenDeviceRequest open{};
            std::memcpy(&open, message.data(), sizeof(open));
            std::snprintf(open.device_name, sizeof(open.device_name), "fz0");
            open.provider_abi = di::kControlVersion;
            std::memcpy(message.data(), &open, sizeof(open));
            // The probe: the bytes at its address in this process are the message's own.
            auto* sent = reinterpret_cast<di::OpenDeviceRequest*>(message.data());
            sent->probe_addr = reinterpret_cast<uintptr_t>(sent->probe);
        }
        int pipe_fds[2] = {-1, -1};
        int passed = -1;
        if ((flags & kPassPipe) && ::pipe2(pipe_fds, O_CLOEXEC) == 0)
            passed = pipe_fds[1];
        else if (flags & kPassMemfd)
            passed = ::memfd_create("fuzz", MFD_CLOEXEC);
        // OpenDevice with a real device also sends this process's memory file.
        const int memory = (flags & kRealDevice) && passed >= 0
                               ? ::open("/proc/self/mem", O_RDWR | O_CLOEXEC)
                               : -1;
        if (di::send_message(client, message.data(), length, passed, memory) !=
            static_cast<ssize_t>(length))
            std::abort();
        if (passed >= 0)
            ::close(passed);
        if (memory >= 0)
            ::close(memory);
        if (pipe_fds[0] >= 0)
            ::close(pipe_fds[0]);
        if (serve(*e.server, served) != Served::Open)
            std::abort(); // the engine hung up on a request
        // Exactly one reply, answering this request.
        di::ReceivedMessage m =
            di::receive_message(client, reply.data(), reply.size(), MSG_DONTWAIT);
        if (m.fd >= 0)
            ::close(m.fd);
        if (m.size < static_cast<ssize_t>(sizeof(di::ReplyHeader)))
            std::abort();
        di::ReplyHeader r;
        std::memcpy(&r, reply.data(), sizeof(r));
        if (length >= sizeof(h) && r.header.sequence != h.sequence)
            std::abort();
        m = di::receive_message(client, reply.data(), reply.size(), MSG_DONTWAIT);
        if (m.size >= 0)
            std::abort(); // a second reply
    }
    ::close(client);
    if (serve(*e.server, served) != Served::Closed) // sees the close: all it made goes
        std::abort();
    return 0;
}
