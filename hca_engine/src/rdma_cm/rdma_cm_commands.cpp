// The rdma_ucm commands (rdma/rdma_user_cm.h), one handler each (the table that finds
// them is rdma_cm_methods.cpp), answered as the kernel's ucma.c answers them: the errno
// it gives, the response where the command points.
#include "rdma_cm_server.hpp"

#include "client_descriptors.hpp"
#include "clock.hpp"
#include "socket_addresses.hpp"
#include "stall_watch.hpp"

#include <cerrno>
#include <cstring>
#include <deque>
#include <rdma/ib_user_verbs.h>

namespace softhca::engine {

namespace {

bool valid_port_space(uint16_t ps) {
    return ps == RDMA_PS_TCP || ps == RDMA_PS_UDP || ps == RDMA_PS_IB || ps == RDMA_PS_IPOIB;
}

} // namespace

int RdmaCmServer::cmd_create_id(Call& call, const rdma_ucm_create_id& c, Reply& reply) {
    if (!valid_port_space(c.ps))
        return -EINVAL;
    const uint8_t qp_type = c.ps == RDMA_PS_TCP                            ? kQpTypeRc
                            : c.ps == RDMA_PS_UDP || c.ps == RDMA_PS_IPOIB ? kQpTypeUd
                                                                           : c.qp_type;
    CmId* id = create_id(call.file, c.uid, c.ps, qp_type);
    if (!id)
        return -ENOMEM; // the user's ids (--limits user_cm_ids) or the engine's
    rdma_ucm_create_id_resp r{};
    r.id = id->handle;
    reply.set(c.response, r, sizeof(r));
    return 0;
}

int RdmaCmServer::cmd_destroy_id(Call& call, const rdma_ucm_destroy_id& c, Reply& reply) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    rdma_ucm_destroy_id_resp r{};
    r.events_reported = id->events_reported;
    destroy_id(*id);
    reply.set(c.response, r, sizeof(r));
    return 0;
}

int RdmaCmServer::cmd_bind_ip(Call& call, const rdma_ucm_bind_ip& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    return bind(*id, reinterpret_cast<const sockaddr*>(&c.addr), sizeof(c.addr));
}

int RdmaCmServer::cmd_bind(Call& call, const rdma_ucm_bind& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    if (c.reserved || c.addr_size > sizeof(c.addr))
        return -EINVAL;
    return bind(*id, reinterpret_cast<const sockaddr*>(&c.addr), c.addr_size);
}

int RdmaCmServer::cmd_resolve_ip(Call& call, const rdma_ucm_resolve_ip& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    return resolve_address(*id, reinterpret_cast<const sockaddr*>(&c.src_addr),
                           reinterpret_cast<const sockaddr*>(&c.dst_addr), sizeof(c.dst_addr),
                           c.timeout_ms, call.now);
}

int RdmaCmServer::cmd_resolve_addr(Call& call, const rdma_ucm_resolve_addr& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    if (c.reserved || c.src_size > sizeof(c.src_addr) || c.dst_size > sizeof(c.dst_addr))
        return -EINVAL;
    return resolve_address(
        *id, c.src_size ? reinterpret_cast<const sockaddr*>(&c.src_addr) : nullptr,
        reinterpret_cast<const sockaddr*>(&c.dst_addr), sizeof(c.dst_addr), c.timeout_ms, call.now);
}

int RdmaCmServer::cmd_resolve_route(Call& call, const rdma_ucm_resolve_route& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    if (id->state != CmState::AddrResolved && id->state != CmState::RouteResolved)
        return -EINVAL;
    if (events_full(call.file))
        return -ENOMEM; // the user's files hold all the events they may
    // RoCE: the path comes from the addresses (cma_resolve_iboe_route), at once.
    id->route_resolved = true;
    id->state = CmState::RouteResolved;
    queue_event(*id, kEventRouteResolved, 0);
    return 0;
}

int RdmaCmServer::cmd_query_route(Call& call, const rdma_ucm_query& c, Reply& reply) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    rdma_ucm_query_route_resp r{};
    if (id->device >= 0) {
        r.node_guid = htobe64(devices_[static_cast<size_t>(id->device)].node_guid);
        r.port_num = 1;
        fill_route(*id, r.ib_route[0]);
        r.num_paths = id->route_resolved ? 1 : 0;
    }
    std::memcpy(&r.src_addr, &id->src, std::min(sizeof(r.src_addr), sizeof(id->src)));
    std::memcpy(&r.dst_addr, &id->dst, std::min(sizeof(r.dst_addr), sizeof(id->dst)));
    r.ibdev_index = UINT32_MAX; // match by node GUID
    reply.set(c.response, r, sizeof(r));
    return 0;
}

int RdmaCmServer::cmd_query(Call& call, const rdma_ucm_query& c, Reply& reply) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    if (c.option == RDMA_USER_CM_QUERY_ADDR) {
        rdma_ucm_query_addr_resp r{};
        if (id->device >= 0) {
            r.node_guid = htobe64(devices_[static_cast<size_t>(id->device)].node_guid);
            r.port_num = 1;
        }
        r.pkey = 0xffff;
        r.src_size = static_cast<uint16_t>(sockaddr_size(id->src.ss_family));
        r.dst_size = static_cast<uint16_t>(sockaddr_size(id->dst.ss_family));
        std::memcpy(&r.src_addr, &id->src, sizeof(id->src));
        std::memcpy(&r.dst_addr, &id->dst, sizeof(id->dst));
        r.ibdev_index = UINT32_MAX;
        reply.set(c.response, r, sizeof(r));
        return 0;
    }
    if (c.option == RDMA_USER_CM_QUERY_PATH || c.option == RDMA_USER_CM_QUERY_GID) {
        // Paths and GIDs over AF_IB, which this device does not offer (BIND refuses it).
        rdma_ucm_query_path_resp r{};
        reply.set(c.response, r, sizeof(r));
        return 0;
    }
    return -ENOSYS;
}

int RdmaCmServer::cmd_listen(Call& call, const rdma_ucm_listen& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    // ucma_listen: a backlog out of (0, max_backlog) is max_backlog.
    const uint32_t backlog = c.backlog > 0 && static_cast<uint32_t>(c.backlog) < kMaxBacklog
                                 ? static_cast<uint32_t>(c.backlog)
                                 : kMaxBacklog;
    if (id->state == CmState::Listen) {
        id->backlog = backlog; // a second listen only changes the backlog
        return 0;
    }
    if (id->state != CmState::Idle)
        return -EINVAL;
    if (!id->bound) {
        sockaddr_in any{};
        any.sin_family = AF_INET;
        if (const int rc = bind(*id, reinterpret_cast<const sockaddr*>(&any), sizeof(any)))
            return rc;
    }
    // Another listener on this port (both reuse-address ids until now) is refused.
    id->backlog = backlog;
    id->state = CmState::Listen;
    if (port_in_use(*id, port_of_address(id->src))) {
        id->state = CmState::Idle;
        return -EADDRINUSE;
    }
    return 0;
}

int RdmaCmServer::cmd_connect(Call& call, const rdma_ucm_connect& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    if (id->state != CmState::RouteResolved || !c.conn_param.valid)
        return -EINVAL;
    if (id->qp_type == kQpTypeUd)
        return connect_datagram(*id, c.conn_param, call.now);
    return connect(*id, c.conn_param, call.now);
}

int RdmaCmServer::cmd_accept(Call& call, const rdma_ucm_accept& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    const tp::CmConnectionState state = connection_state(*id);
    if (state == tp::CmConnectionState::ReqReceived && c.conn_param.valid) {
        id->uid = c.uid;
        if (CmId* listener = listener_of(*id); listener && listener->pending_requests)
            --listener->pending_requests;
        id->listener = 0;
        const rdma_ucm_conn_param& param = c.conn_param;
        if (id->qp_type == kQpTypeUd)
            return cm_.send_sidr_rep(id->connection, tp::kSidrSuccess, param.qp_num, id->qkey,
                                     param.private_data, param.private_data_len, call.now);
        tp::CmRepParams rep;
        rep.qpn = param.qp_num;
        rep.starting_psn = id->receive_psn; // the PSN the active side sends from
        rep.responder_resources = param.responder_resources;
        rep.initiator_depth = param.initiator_depth;
        rep.rnr_retry_count = param.rnr_retry_count;
        rep.srq = param.srq;
        rep.flow_control = param.flow_control;
        rep.private_data = param.private_data;
        rep.private_data_bytes = param.private_data_len;
        return cm_.send_rep(id->connection, rep, call.now);
    }
    if (state == tp::CmConnectionState::RepReceived && !c.conn_param.valid)
        return cm_.send_rtu(id->connection, call.now); // the active side's accept (cma_rep_recv)
    return -EINVAL;
}

int RdmaCmServer::cmd_reject(Call& call, const rdma_ucm_reject& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    const tp::CmConnectionState state = connection_state(*id);
    if (state != tp::CmConnectionState::ReqReceived && state != tp::CmConnectionState::RepReceived)
        return -EINVAL;
    if (id->qp_type == kQpTypeUd) {
        if (state != tp::CmConnectionState::ReqReceived ||
            c.private_data_len > tp::CmSidrRep::kPrivateDataBytes)
            return -EINVAL;
        return cm_.send_sidr_rep(id->connection, tp::kSidrReject, 0, 0, c.private_data,
                                 c.private_data_len, call.now);
    }
    if (c.private_data_len > tp::CmRej::kPrivateDataBytes)
        return -EINVAL;
    return cm_.send_rej(id->connection, tp::CmRejectReason::ConsumerDefined, c.private_data,
                        c.private_data_len, call.now);
}

int RdmaCmServer::cmd_disconnect(Call& call, const rdma_ucm_disconnect& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    if (id->qp_type == kQpTypeUd)
        return -EINVAL; // no connection to end (rdma_disconnect on a UD id)
    const tp::CmConnectionState state = connection_state(*id);
    if (state == tp::CmConnectionState::Established || state == tp::CmConnectionState::RepSent)
        return cm_.send_dreq(id->connection, call.now);
    if (state == tp::CmConnectionState::DreqReceived) {
        cm_.send_drep(id->connection, call.now);
        return 0;
    }
    return -EINVAL;
}

int RdmaCmServer::cmd_init_qp_attr(Call& call, const rdma_ucm_init_qp_attr& c, Reply& reply) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    ib_uverbs_qp_attr r{};
    if (const int rc = init_qp_attr(*id, c.qp_state, r))
        return rc;
    reply.set(c.response, r, sizeof(r));
    return 0;
}

int RdmaCmServer::cmd_get_event(Call& call, const rdma_ucm_get_event& c, Reply& reply) {
    CmFile& file = call.file;
    if (file.events.empty()) {
        reply.wait_again = true;
        return 0;
    }
    CmEvent event = file.events.front();
    file.events.pop_front();
    events_by_user_.give_back(file.account);
    uint8_t token;
    [[maybe_unused]] ssize_t r = ::read(file.pipe, &token, 1);
    if (auto it = ids_.find(event.owner); it != ids_.end()) {
        ++it->second->events_reported;
        if (event.resp.event == kEventConnectRequest && it->second->unretrieved_requests)
            --it->second->unretrieved_requests; // room in the backlog again
    } else if (auto mc = multicasts_.find(event.owner); mc != multicasts_.end())
        ++mc->second.events_reported;
    reply.set(c.response, event.resp, sizeof(event.resp));
    return 0;
}

int RdmaCmServer::cmd_set_option(Call& call, const rdma_ucm_set_option& c, Reply& /*reply*/) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    if (c.optlen > call.extra_bytes)
        return -EINVAL;
    auto value8 = [&]() -> int {
        if (c.optlen < 1)
            return -EINVAL;
        return call.extra[0];
    };
    auto value_int = [&]() -> int {
        int v = 0;
        if (c.optlen != sizeof(v))
            return -1;
        std::memcpy(&v, call.extra, sizeof(v));
        return v;
    };
    if (c.level == RDMA_OPTION_ID) {
        switch (c.optname) {
        case RDMA_OPTION_ID_TOS: {
            const int v = value8();
            if (v < 0)
                return -EINVAL;
            id->tos = static_cast<uint8_t>(v);
            return 0;
        }
        case RDMA_OPTION_ID_REUSEADDR:
            if (c.optlen != sizeof(int))
                return -EINVAL;
            if (id->state != CmState::Idle)
                return -EINVAL;
            id->reuse_address = value_int() != 0;
            return 0;
        case RDMA_OPTION_ID_AFONLY:
            if (c.optlen != sizeof(int) || id->bound)
                return -EINVAL;
            id->af_only = value_int() != 0;
            return 0;
        case RDMA_OPTION_ID_ACK_TIMEOUT: {
            const int v = value8();
            if (v < 0)
                return -EINVAL;
            id->ack_timeout = static_cast<uint8_t>(std::min(v, 31));
            return 0;
        }
        default:
            return -ENOSYS;
        }
    }
    if (c.level == RDMA_OPTION_IB && c.optname == RDMA_OPTION_IB_PATH)
        return -ENOSYS; // setting an IB path record does not apply to RoCE
    return -ENOSYS;
}

int RdmaCmServer::cmd_notify(Call& call, const rdma_ucm_notify& c, Reply& /*reply*/) {
    return find_id(call.file, c.id) ? 0 : -ENOENT; // rdma_notify: nothing for RoCE
}

int RdmaCmServer::cmd_migrate_id(Call& call, const rdma_ucm_migrate_id& c, Reply& reply) {
    // Written on the file the id moves to; `fd` names the file it is on now, which the
    // kernel finds with fdget in the caller's own descriptor table, then refuses unless
    // it is an rdma_cm file (ucma_migrate_id). The preload library passes the descriptor
    // the caller holds at that number (device_interface/rdma_cm.hpp): the source is the
    // file whose event pipe that descriptor is. Holding it is the right to move the
    // file's ids, as with the kernel; no number or PID the caller names finds a file.
    // The descriptor is looked at through its /proc/self/fd link only: an fstat of a FUSE
    // file would ask its daemon, which the caller may run (client_descriptors.hpp).
    // Pipe inode numbers wrap (files_by_pipe_), so only the caller's user's files are
    // candidates: another user's file is never found, whatever number collides.
    if (call.passed_fd < 0)
        return -ENOENT; // the number names no descriptor of the caller's (fdget fails)
    CmFile& file = call.file;
    const ino_t pipe = anonymous_pipe_inode(call.passed_fd);
    CmFile* source = nullptr;
    auto [first, last] = files_by_pipe_.equal_range(pipe);
    for (auto it = first; pipe && it != last; ++it)
        if (it->second->uid == file.uid && it->second->account == file.account)
            source = it->second;
    if (!source)
        return -EINVAL; // not an rdma_cm file (of the caller's user)
    CmId* id = find_id(*source, c.id);
    if (!id)
        return -ENOENT;
    rdma_ucm_migrate_resp r{};
    r.events_reported = id->events_reported;
    if (source != &file) {
        // Its queued events move with it, in order (ucma_move_events).
        // One pass over the source's queue (both files are the same user's, charged to
        // the same account: the count of its queued events does not change).
        std::deque<CmEvent> kept;
        size_t moved = 0;
        for (CmEvent& e : source->events) {
            if (e.owner == id->handle) {
                file.events.push_back(e);
                ++moved;
            } else {
                kept.push_back(e);
            }
        }
        source->events.swap(kept);
        for (size_t i = 0; i < moved; ++i) {
            uint8_t token = 1;
            const StallWatch::Touch touch({-1, file.account, file.uid});
            [[maybe_unused]] ssize_t rd = ::read(source->pipe, &token, 1);
            [[maybe_unused]] ssize_t wr = ::write(file.pipe, &token, 1);
        }
        source->ids.erase(id->handle);
        file.ids.insert(id->handle);
        id->file = &file;
    }
    reply.set(c.response, r, sizeof(r));
    return 0;
}

int RdmaCmServer::cmd_join_ip_mcast(Call& call, const rdma_ucm_join_ip_mcast& c, Reply& reply) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    rdma_ucm_create_id_resp r{};
    if (const int rc = join_multicast(*id, c.uid, reinterpret_cast<const sockaddr*>(&c.addr),
                                      sizeof(c.addr), RDMA_MC_JOIN_FLAG_FULLMEMBER, r.id))
        return rc;
    reply.set(c.response, r, sizeof(r));
    return 0;
}

int RdmaCmServer::cmd_join_mcast(Call& call, const rdma_ucm_join_mcast& c, Reply& reply) {
    CmId* id = find_id(call.file, c.id);
    if (!id)
        return -ENOENT;
    if (c.addr_size > sizeof(c.addr) || (c.join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER &&
                                         c.join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER))
        return -EINVAL;
    rdma_ucm_create_id_resp r{};
    if (const int rc = join_multicast(*id, c.uid, reinterpret_cast<const sockaddr*>(&c.addr),
                                      c.addr_size, c.join_flags, r.id))
        return rc;
    reply.set(c.response, r, sizeof(r));
    return 0;
}

int RdmaCmServer::cmd_leave_mcast(Call& call, const rdma_ucm_destroy_id& c, Reply& reply) {
    auto it = multicasts_.find(c.id);
    CmId* id = it == multicasts_.end() ? nullptr : find_id(call.file, it->second.id);
    if (!id)
        return -ENOENT;
    rdma_ucm_destroy_id_resp r{};
    r.events_reported = it->second.events_reported;
    drop_events(call.file, {c.id});
    std::erase(id->multicasts, c.id);
    ids_by_user_.give_back(it->second.user);
    multicasts_.erase(it);
    reply.set(c.response, r, sizeof(r));
    return 0;
}

} // namespace softhca::engine
