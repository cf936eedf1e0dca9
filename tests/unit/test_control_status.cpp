// Engine: `softhca status` through the control plane (control_device.cpp, StatusReply).
// The document travels in a file passed with the reply, so that an engine holding
// thousands of QPs answers with all of them: more bytes than a socket takes in one
// message, which before control ABI 5 cut the document or lost the reply.
#include "control_server.hpp"
#include "sim_ports.hpp"
#include "softhca/device_interface/control.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace di = softhca::device_interface;
using namespace softhca::engine;

namespace {

struct Client {
    sim::SimulatedPortSet ports{FaultConfig{}};
    std::vector<Device> devices{{"st0", 0, 1}, {"st1", 1, 2}};
    std::string path = "/tmp/softhca-status-test-" + std::to_string(::getpid()) + ".sock";
    ControlServer server{path, devices, ports, "st"};
    int fd = -1;
    int served = -1;
    uint32_t sequence = 0;

    Client() {
        fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
        REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
        const std::vector<int> accepted = server.accept_pending();
        REQUIRE(accepted.size() == 1);
        served = accepted[0];
    }
    ~Client() {
        ::close(fd);
        server.handle_input(served);
        ::unlink(path.c_str());
    }

    // Sends `request` (its header filled in here) and returns the reply; a descriptor
    // passed with it goes to `passed`.
    template <typename Request>
    std::vector<uint8_t> call(di::Opcode opcode, Request& request, int pass = -1,
                              int* passed = nullptr, int pass_second = -1) {
        request.header = {di::kControlMagic, di::kControlVersion, static_cast<uint16_t>(opcode), 0,
                          sizeof(Request),   ++sequence};
        REQUIRE(di::send_message(fd, &request, sizeof(request), pass, pass_second) ==
                sizeof(request));
        REQUIRE(server.handle_input(served) == Served::Open);
        std::vector<uint8_t> reply(di::kMaxControlMessage);
        di::ReceivedMessage m = di::receive_message(fd, reply.data(), reply.size(), MSG_DONTWAIT);
        REQUIRE(m.size >= static_cast<ssize_t>(sizeof(di::ReplyHeader)));
        reply.resize(static_cast<size_t>(m.size));
        di::ReplyHeader h;
        std::memcpy(&h, reply.data(), sizeof(h));
        REQUIRE(h.status == 0);
        if (passed)
            *passed = m.fd;
        else if (m.fd >= 0)
            ::close(m.fd);
        return reply;
    }
    template <typename Reply> static Reply as(const std::vector<uint8_t>& bytes) {
        Reply r{};
        REQUIRE(bytes.size() >= sizeof(r));
        std::memcpy(&r, bytes.data(), sizeof(r));
        return r;
    }

    std::string status(bool json) {
        di::MessageHeader request{};
        struct Bare {
            di::MessageHeader header;
        } bare{request};
        int file = -1;
        auto r = as<di::StatusReply>(
            call(json ? di::Opcode::EngineStatusJson : di::Opcode::EngineStatus, bare, -1, &file));
        REQUIRE(file >= 0);
        std::string text(r.bytes, '\0');
        REQUIRE(::pread(file, text.data(), text.size(), 0) == static_cast<ssize_t>(r.bytes));
        ::close(file);
        return text;
    }
};

} // namespace

TEST_CASE("status: the document of 1,200 QPs comes whole, larger than a socket message") {
    Client client;
    int pipe_fds[2];
    REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
    di::OpenDeviceRequest open{};
    std::snprintf(open.device_name, sizeof(open.device_name), "st0");
    open.provider_abi = di::kControlVersion;
    for (size_t i = 0; i < sizeof(open.probe); ++i)
        open.probe[i] = static_cast<uint8_t>(i * 7 + 1);
    open.probe_addr = reinterpret_cast<uintptr_t>(open.probe);
    const int memory = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    client.call(di::Opcode::OpenDevice, open, pipe_fds[1], nullptr, memory);
    ::close(pipe_fds[1]);
    ::close(memory);
    di::MessageHeader none{};
    struct Bare {
        di::MessageHeader header;
    } alloc{none};
    const uint32_t pd = Client::as<di::HandleReply>(client.call(di::Opcode::AllocPd, alloc)).handle;
    di::CreateCqRequest cq_request{};
    cq_request.cqe = 64;
    const uint32_t cq =
        Client::as<di::CreateCqReply>(client.call(di::Opcode::CreateCq, cq_request)).cq_handle;
    constexpr int kQps = 1200;
    for (int i = 0; i < kQps; ++i) {
        di::CreateQpRequest q{};
        q.pd_handle = pd;
        q.send_cq_handle = q.recv_cq_handle = cq;
        q.qp_type = 2; // RC
        q.caps = {1, 1, 1, 1, 0, 0};
        client.call(di::Opcode::CreateQp, q);
    }
    const std::string json = client.status(true);
    INFO(json.size() << " bytes");
    int sndbuf = 0;
    socklen_t len = sizeof(sndbuf);
    REQUIRE(::getsockopt(client.fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) == 0);
    CHECK(json.size() > static_cast<size_t>(sndbuf));
    const auto doc = nlohmann::json::parse(json);
    CHECK(doc["objects"]["qp"] == kQps);
    REQUIRE(doc["contexts"].size() == 1);
    CHECK(doc["contexts"][0]["qps"].size() == kQps);
    const std::string text = client.status(false);
    CHECK(text.rfind("engine pid", 0) == 0);
    CHECK(text.find("objects: pd 1 mr 0 cq 1 qp 1200") != std::string::npos);
    ::close(pipe_fds[0]);
}

TEST_CASE("control path: one connection is served a bounded number of requests per round") {
    // A client that keeps sending must leave the others their turn: one handle_input
    // serves kRequestsPerRound of its requests; the rest wait for the next round.
    Client client;
    struct Bare {
        di::MessageHeader header;
    } query{};
    const unsigned sent = ControlServer::kRequestsPerRound * 2 + 3;
    for (unsigned i = 0; i < sent; ++i) {
        query.header = {di::kControlMagic,
                        di::kControlVersion,
                        static_cast<uint16_t>(di::Opcode::QueryDevice),
                        0,
                        sizeof(query),
                        i + 1};
        REQUIRE(di::send_message(client.fd, &query, sizeof(query)) == sizeof(query));
    }
    auto replies = [&] {
        unsigned n = 0;
        std::vector<uint8_t> reply(di::kMaxControlMessage);
        while (di::receive_message(client.fd, reply.data(), reply.size(), MSG_DONTWAIT).size > 0)
            ++n;
        return n;
    };
    REQUIRE(client.server.handle_input(client.served) == Served::Open);
    CHECK(replies() == ControlServer::kRequestsPerRound);
    REQUIRE(client.server.handle_input(client.served) == Served::Open);
    CHECK(replies() == ControlServer::kRequestsPerRound);
    REQUIRE(client.server.handle_input(client.served) == Served::Open);
    CHECK(replies() == 3);
}
