// GrantRemoteMemory (device_interface/grant_page.hpp): may the provider move the bytes
// of a QP's RDMA WRITEs or READs itself? The requester's half is checked here: the QP's
// connection, the path, and whether the kernel would let the requester's process reach
// the responder's memory at all; the responder's half by its context
// (resource_tables_grants.cpp).
#include "control_messages.hpp"
#include "control_server.hpp"
#include "engine_qp.hpp"
#include "environment.hpp"

#include <algorithm>
#include <cerrno>

namespace softhca::engine {

namespace di = device_interface;
namespace tp = transport;

namespace {

// A port whose frames nothing but the engine sees: the built-in wire with no capture,
// injected faults, shaping, ECN marking, link-level credits or PFC. Anywhere else every
// byte must cross the port (docs/memory-model.md).
// The ports of a fabric (holds_senders_back) have switches, links and queues between them.
bool single_copy_port(const PortInfo& port) {
    return port.in_engine_wire && !port.holds_senders_back && port.icrc_offload && port.link_up &&
           port.admin_up && port.congestion_point.shaper.rate_bps <= 0 &&
           !port.congestion_point.ecn_marking && !port.lossless() && !port.pfc;
}

} // namespace

void ControlServer::grant_remote_memory(Call& call) {
    const auto& request = call.request<di::GrantRequest>();
    di::GrantReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    int page_fd = -1;
    r.reply.status = grant(call.c, request, r, page_fd);
    if (r.reply.status != 0 && page_fd >= 0) {
        ::close(page_fd);
        page_fd = -1;
    }
    reply_sharing(call, &r, sizeof(r), page_fd);
}

int ControlServer::grant(const Connection& c, const di::GrantRequest& request, di::GrantReply& r,
                         int& page_fd) {
    static const bool enabled = environment_switch_on("SOFTHCA_SINGLE_COPY");
    if ((request.access & ~(di::kGrantWrite | di::kGrantRead)) || !request.access)
        return EINVAL;
    EngineQp* requester = c.resources->find_qp(request.qp_handle);
    if (!requester)
        return EINVAL;
    if (!enabled || requester->type() != tp::QpType::RC ||
        requester->transport().state() != tp::QpState::Rts || !single_copy_port(port_of(c)))
        return EOPNOTSUPP;
    // The responder: the QP of this engine that the requester's path and destination QP
    // name, connected back to the requester, on a port of the same kind.
    const tp::Gid& dgid = requester->addressing().dst_gid;
    const uint32_t dest_qp = requester->transport().attributes().dest_qp;
    EngineQp* responder = nullptr;
    for (size_t d = 0; d < devices_.size() && !responder; ++d) {
        const PortInfo& port = ports_.info(devices_[d].port_index);
        if (devices_[d].removed || !single_copy_port(port) ||
            std::find(port.gids.begin(), port.gids.end(), dgid) == port.gids.end())
            continue;
        const auto& qps = keys_.qps_by_device.at(d);
        if (const auto it = qps.find(dest_qp); it != qps.end())
            responder = it->second;
    }
    if (!responder || responder->type() != tp::QpType::RC ||
        responder->transport().attributes().dest_qp != requester->qp_num() ||
        responder->addressing().dst_gid != requester->addressing().src_gid)
        return EOPNOTSUPP;
    const tp::QpState state = responder->transport().state();
    if (state != tp::QpState::Rtr && state != tp::QpState::Rts && state != tp::QpState::Sqd)
        return EOPNOTSUPP; // it would NAK the request: the engine's path says so
    // The responder's process, and whether the requester's may reach it. The kernel
    // decides at each copy (process_vm_writev(2): the ptrace access rule), but the engine
    // grants only between processes of the same user and group, in one PID namespace,
    // whatever their capabilities: a grant names a PID, and a process that can trace
    // anyone (root) must not be steered by another user into the process that takes that
    // PID after the responder has gone or exec'd. Root to root is the same user.
    // (Every QP's context is a ContextResources: the engine makes no other.)
    auto& target = static_cast<ContextResources&>(responder->context());
    const ClientProcess& mine = c.resources->client();
    const ClientProcess& theirs = target.client();
    if (c.pidns == 0 || target.pid_namespace() != c.pidns || target.pid_in_namespace() <= 0 ||
        mine.uid() != theirs.uid() || mine.gid() != theirs.gid() ||
        mine.in_user_namespace() != theirs.in_user_namespace() || theirs.gone())
        return EPERM;
    if (int err = target.grant(*responder, request.rkey, request.access, r))
        return err;
    // The page goes once to each requesting context (a descriptor opened and sent per
    // grant would cost the engine a /proc lookup each time).
    if (!c.resources->grant_pages_sent().count(r.page_id)) {
        if ((page_fd = target.grant_page().share()) < 0)
            return ENOMEM;
        c.resources->grant_pages_sent().insert(r.page_id);
    }
    r.pid = target.pid_in_namespace();
    requester->note_granted();
    // A responder in RTR learns here that the connection is up (COMM_EST): what the
    // grant covers arrives without packets.
    responder->transport().requests_placed();
    return 0;
}

} // namespace softhca::engine
