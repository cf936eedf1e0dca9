// Every control request the engine serves, in one table (as the kernel's uverbs method
// tables are): the opcode, the exact size of its request, whether the device must be
// open first, and its handler. dispatch (control_server.cpp) checks the header, finds
// the method here, then the device and the size, and only then calls the handler, so
// no handler sees a request of the wrong size or a context that is not there.
#include "control_server.hpp"

#include <array>

namespace softhca::engine {

namespace di = device_interface;
using Op = di::Opcode;

namespace {

using S = ControlServer;
using Header = di::MessageHeader;
using Handle = di::HandleRequest;

} // namespace

const ControlServer::Method* ControlServer::method_for(uint16_t opcode) {
    static const Method kMethods[] = {
        // The engine and the device, before and after OpenDevice.
        {Op::OpenDevice, sizeof(di::OpenDeviceRequest), false, &S::open_device},
        {Op::EngineStatus, sizeof(Header), false, &S::engine_status},
        {Op::EngineStatusJson, sizeof(Header), false, &S::engine_status},
        {Op::SetPortState, sizeof(di::SetPortStateRequest), false, &S::set_port_state},
        {Op::SetFabricLink, sizeof(di::SetFabricLinkRequest), false, &S::set_fabric_link},
        {Op::LinkAdd, sizeof(di::LinkRequest), false, &S::link},
        {Op::LinkDelete, sizeof(di::LinkRequest), false, &S::link},
        {Op::QpCounter, sizeof(di::QpCounterRequest), false, &S::qp_counter},
        {Op::QueryDevice, sizeof(Header), true, &S::query_device},
        {Op::QueryPort, sizeof(di::QueryPortRequest), true, &S::query_port},
        {Op::MapDoorbells, sizeof(Header), true, &S::map_doorbells},
        // Memory: PDs, MRs, windows, device memory, XRC domains.
        {Op::AllocPd, sizeof(Header), true, &S::alloc_pd},
        {Op::DeallocPd, sizeof(Handle), true, &S::dealloc_pd},
        {Op::RegMr, sizeof(di::RegMrRequest), true, &S::reg_mr},
        {Op::ReregMr, sizeof(di::ReregMrRequest), true, &S::rereg_mr},
        {Op::DeregMr, sizeof(Handle), true, &S::dereg_mr},
        {Op::AllocMw, sizeof(di::AllocMwRequest), true, &S::alloc_mw},
        {Op::DeallocMw, sizeof(Handle), true, &S::dealloc_mw},
        {Op::AllocDm, sizeof(di::AllocDmRequest), true, &S::alloc_dm},
        {Op::FreeDm, sizeof(Handle), true, &S::free_dm},
        {Op::RegDmMr, sizeof(di::RegDmMrRequest), true, &S::reg_dm_mr},
        {Op::OpenXrcd, sizeof(di::OpenXrcdRequest), true, &S::open_xrcd},
        {Op::CloseXrcd, sizeof(Handle), true, &S::close_xrcd},
        {Op::GrantRemoteMemory, sizeof(di::GrantRequest), true, &S::grant_remote_memory},
        // Queues: CQs, QPs, SRQs, multicast.
        {Op::CreateCq, sizeof(di::CreateCqRequest), true, &S::create_cq},
        {Op::ResizeCq, sizeof(di::ResizeCqRequest), true, &S::resize_cq},
        {Op::DestroyCq, sizeof(Handle), true, &S::destroy_cq},
        {Op::CreateQp, sizeof(di::CreateQpRequest), true, &S::create_qp},
        {Op::OpenQp, sizeof(di::OpenQpRequest), true, &S::open_qp},
        {Op::ModifyQp, sizeof(di::ModifyQpRequest), true, &S::modify_qp},
        {Op::QueryQp, sizeof(di::QueryQpRequest), true, &S::query_qp},
        {Op::DestroyQp, sizeof(Handle), true, &S::destroy_qp},
        {Op::AttachMcast, sizeof(di::McastRequest), true, &S::attach_mcast},
        {Op::DetachMcast, sizeof(di::McastRequest), true, &S::detach_mcast},
        {Op::CreateSrq, sizeof(di::CreateSrqRequest), true, &S::create_srq},
        {Op::ModifySrq, sizeof(di::ModifySrqRequest), true, &S::modify_srq},
        {Op::QuerySrq, sizeof(Handle), true, &S::query_srq},
        {Op::DestroySrq, sizeof(Handle), true, &S::destroy_srq},
    };
    // Indexed by opcode once; an opcode with no method finds nothing (EOPNOTSUPP).
    static const auto kByOpcode = [] {
        std::array<const Method*, 64> by{};
        for (const Method& m : kMethods)
            by.at(static_cast<size_t>(m.opcode)) = &m;
        return by;
    }();
    return opcode < kByOpcode.size() ? kByOpcode[opcode] : nullptr;
}

} // namespace softhca::engine
