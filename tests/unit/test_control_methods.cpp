// Engine: the control plane's table (control_methods.cpp). Every opcode of the device
// interface has exactly one method, with its request's size; only the requests that
// come before a device is open (or do not need one) are served without one.
#include "control_server.hpp"

#include <catch2/catch.hpp>
#include <set>

namespace di = softhca::device_interface;
using softhca::engine::ControlServer;

TEST_CASE("control table: one method per opcode, its request's size, and which need a device") {
    constexpr uint16_t kLast = static_cast<uint16_t>(di::Opcode::QpCounter);
    std::set<const ControlServer::Method*> seen;
    for (uint16_t opcode = 1; opcode <= kLast; ++opcode) {
        INFO("opcode " << opcode);
        const ControlServer::Method* m = ControlServer::method_for(opcode);
        REQUIRE(m);
        CHECK(static_cast<uint16_t>(m->opcode) == opcode);
        CHECK(m->request_size >= sizeof(di::MessageHeader));
        CHECK(m->request_size <= di::kMaxControlMessage);
        CHECK(m->handler != nullptr);
        seen.insert(m);
        const auto op = static_cast<di::Opcode>(opcode);
        const bool before_open = op == di::Opcode::OpenDevice || op == di::Opcode::EngineStatus ||
                                 op == di::Opcode::EngineStatusJson ||
                                 op == di::Opcode::SetPortState ||
                                 op == di::Opcode::SetFabricLink || op == di::Opcode::LinkAdd ||
                                 op == di::Opcode::LinkDelete || op == di::Opcode::QpCounter;
        CHECK(m->needs_device == !before_open);
    }
    CHECK(seen.size() == kLast);
    for (uint16_t opcode : {0, kLast + 1, 63, 64, 999, 65535})
        CHECK(ControlServer::method_for(static_cast<uint16_t>(opcode)) == nullptr);
    CHECK(ControlServer::method_for(static_cast<uint16_t>(di::Opcode::RegMr))->request_size ==
          sizeof(di::RegMrRequest));
    CHECK(ControlServer::method_for(static_cast<uint16_t>(di::Opcode::CreateQp))->request_size ==
          sizeof(di::CreateQpRequest));
    CHECK(ControlServer::method_for(static_cast<uint16_t>(di::Opcode::LinkAdd))->request_size ==
          sizeof(di::LinkRequest));
}
