// The rdma_cm's connections (the kernel's cma.c over ib_cm): CONNECT hands the IB CM a REQ
// (or a SIDR_REQ for a UD id) with the rdma_cm's IP addressing header in front of the
// application's private data; this class is the CM's consumer (transport/ib_cm.hpp): its
// MADs go onto the wire, it is asked which listener a REQ or SIDR_REQ reaches, and its
// events become the rdma_cm's (CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED, REJECTED,
// DISCONNECTED, UNREACHABLE, TIMEWAIT_EXIT), as cma_ib_handler and cma_sidr_rep_handler
// make them.
#include "rdma_cm_server.hpp"

#include "socket_addresses.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <netinet/in.h>

namespace softhca::engine {

namespace {

constexpr uint8_t kLocalAckTimeout = 18; // packet life time + 1 + the CA's ack delay (1)

// The rdma_cm header's destination address as a GID.
tp::Gid cma_destination(const tp::CmaHeader& cma) {
    tp::Gid gid{};
    if (cma.ip_version() == 4)
        gid = tp::gid_from_ipv4(cma.dst_ipv4());
    else
        std::memcpy(gid.data(), cma.dst_addr(), 16);
    return gid;
}

} // namespace

void RdmaCmServer::send_mad(size_t port, const MadPeer& to, const tp::CmMad& mad, uint64_t now) {
    wire_.send_mad(port, to, mad, now);
}

void RdmaCmServer::fill_conn_event(CmEvent& event, const tp::CmConnection& connection,
                                   const uint8_t* data, size_t bytes) const {
    auto& conn = event.resp.param.conn;
    bytes = std::min(bytes, sizeof(conn.private_data));
    if (data && bytes)
        std::memcpy(conn.private_data, data, bytes);
    conn.private_data_len = static_cast<uint8_t>(bytes);
    conn.qp_num = connection.remote_qpn;
    conn.flow_control = connection.flow_control;
    conn.retry_count = connection.retry_count;
    conn.rnr_retry_count = connection.rnr_retry_count;
}

int RdmaCmServer::connect(CmId& id, const rdma_ucm_conn_param& param, uint64_t now) {
    const size_t user_bytes = param.private_data_len;
    if (user_bytes > tp::CmReq::kPrivateDataBytes - tp::CmaHeader::kBytes)
        return -EINVAL;
    if (id.device < 0 || id.peer.gid == tp::Gid{})
        return -EINVAL;
    const Device& device = devices_[static_cast<size_t>(id.device)];
    // The private data: the rdma_cm's header, then the application's (cma_connect_ib).
    uint8_t private_data[tp::CmReq::kPrivateDataBytes] = {};
    const tp::CmaHeader cma = cma_header(id);
    std::memcpy(private_data, &cma, sizeof(cma));
    std::memcpy(private_data + sizeof(cma), param.private_data, user_bytes);
    tp::CmReqParams req;
    req.port = device.port_index;
    req.peer = id.peer;
    req.context = id.handle;
    req.local_ca_guid = device.node_guid;
    req.service_id = tp::rdma_cm_service_id(id.port_space, port_of_address(id.dst));
    req.qpn = param.qp_num;
    req.starting_psn = id.receive_psn;
    req.responder_resources = param.responder_resources;
    req.initiator_depth = param.initiator_depth;
    req.retry_count = param.retry_count;
    req.rnr_retry_count = param.rnr_retry_count;
    req.srq = param.srq;
    req.flow_control = param.flow_control;
    req.unreliable_connection = id.qp_type == kQpTypeUc;
    req.path_mtu = active_mtu(id);
    req.local_ack_timeout = id.ack_timeout ? id.ack_timeout : kLocalAckTimeout;
    req.local_gid = source_gid(id);
    req.traffic_class = id.tos;
    req.private_data = private_data;
    req.private_data_bytes = sizeof(private_data);
    id.connection = cm_.send_req(req, now);
    id.state = CmState::Connect;
    return 0;
}

int RdmaCmServer::connect_datagram(CmId& id, const rdma_ucm_conn_param& param, uint64_t now) {
    // 12.11: a UD id "connects" by asking the peer's CM for the QP behind a service id.
    const size_t user_bytes = param.private_data_len;
    if (user_bytes > tp::CmSidrReq::kPrivateDataBytes - tp::CmaHeader::kBytes)
        return -EINVAL;
    if (id.device < 0 || id.peer.gid == tp::Gid{})
        return -EINVAL;
    uint8_t private_data[tp::CmSidrReq::kPrivateDataBytes] = {};
    const tp::CmaHeader cma = cma_header(id);
    std::memcpy(private_data, &cma, sizeof(cma));
    std::memcpy(private_data + sizeof(cma), param.private_data, user_bytes);
    tp::CmSidrReqParams req;
    req.port = devices_[static_cast<size_t>(id.device)].port_index;
    req.peer = id.peer;
    req.context = id.handle;
    req.service_id = tp::rdma_cm_service_id(id.port_space, port_of_address(id.dst));
    req.qpn = param.qp_num;
    req.private_data = private_data;
    req.private_data_bytes = sizeof(private_data);
    id.connection = cm_.send_sidr_req(req, now);
    id.state = CmState::Connect;
    return 0;
}

tp::CmaHeader RdmaCmServer::cma_header(const CmId& id) const {
    // The rdma_cm's IP addressing header (cma_format_hdr): version 4 between IPv4
    // addresses (also IPv4-mapped ones), else 6.
    // The destination as the application named it (127.0.0.1 for loopback), else the peer.
    tp::CmaHeader cma{};
    const tp::Gid src = source_gid(id);
    tp::Gid dst = gid_of_address(id.dst);
    if (dst == tp::Gid{})
        dst = id.peer.gid;
    if (tp::gid_is_ipv4_mapped(src) && tp::gid_is_ipv4_mapped(dst)) {
        cma.set_ipv4(port_of_address(id.src), tp::load_be32(src.data() + 12),
                     tp::load_be32(dst.data() + 12));
    } else {
        uint8_t s[16], d[16];
        std::memcpy(s, src.data(), 16);
        std::memcpy(d, dst.data(), 16);
        cma.set_ipv6(port_of_address(id.src), s, d);
    }
    return cma;
}

CmId* RdmaCmServer::listener_for(uint16_t port_space, uint16_t port, size_t device,
                                 const tp::Gid& destination) {
    // A listener of a fabric host's namespace hears only its host's devices (set_hosts).
    // Only the ids bound to that port are looked at (index_bound_port).
    CmId* any = nullptr;
    auto [first, last] = bound_ports_.equal_range({port_space, port});
    for (auto b = first; b != last; ++b) {
        auto found = ids_.find(b->second);
        if (found == ids_.end())
            continue;
        const auto& id = found->second;
        // (The index holds only this port space's ids bound to this port.)
        if (id->state != CmState::Listen || !id->file || !device_in_host(device, id->host))
            continue;
        if (gid_of_address(id->src) == destination && id->device == static_cast<int>(device))
            return id.get();
        if (is_any_address(id->src))
            any = id.get();
    }
    return any;
}

tp::CmRequestAnswer RdmaCmServer::connection_request(size_t port, const MadPeer& from,
                                                     const tp::CmMad& mad) {
    const size_t device = device_of_port(port);
    tp::CmRequestAnswer answer;
    if (static_cast<tp::CmAttribute>(mad.header.attribute_id()) == tp::CmAttribute::SidrReq) {
        const auto& req = mad.as<tp::CmSidrReq>();
        const uint64_t sid = req.service_id();
        tp::CmaHeader cma;
        std::memcpy(&cma, req.private_data(), sizeof(cma));
        CmId* listener = nullptr;
        if (device < devices_.size() && (sid >> 32) == 0 && cma.cma_version() == 0 &&
            (cma.ip_version() == 4 || cma.ip_version() == 6))
            listener = listener_for(static_cast<uint16_t>(sid >> 16), static_cast<uint16_t>(sid),
                                    device, cma_destination(cma));
        if (!listener || listener->qp_type != kQpTypeUd) {
            answer.sidr_status = tp::kSidrUnsupported; // cm_sidr_req_handler: nobody serves it
            return answer;
        }
        if (listener->unretrieved_requests >= listener->backlog) {
            // The backlog is full: refused as the kernel's CM refuses it (IB_SIDR_REJECT).
            ++counters_.backlog_full;
            answer.sidr_status = tp::kSidrReject;
            return answer;
        }
        const CmId* id = new_request(*listener, device, from, cma, sid);
        if (!id) { // the listener's user holds all the ids it may
            ++counters_.over_limit;
            answer.sidr_status = tp::kSidrReject;
            return answer;
        }
        answer.context = id->handle;
        answer.local_ca_guid = devices_[device].node_guid;
        answer.datagram = true;
        return answer;
    }
    const auto& req = mad.as<tp::CmReq>();
    const uint64_t sid = req.service_id();
    tp::CmaHeader cma;
    std::memcpy(&cma, req.private_data(), sizeof(cma));
    const uint8_t transport_type = req.transport_service_type();
    if (device == devices_.size() || (sid >> 32) != 0 || cma.cma_version() != 0 ||
        (cma.ip_version() != 4 && cma.ip_version() != 6)) {
        answer.reject_reason = static_cast<uint16_t>(tp::CmRejectReason::InvalidServiceId);
        return answer;
    }
    if (transport_type > 1) {
        answer.reject_reason = static_cast<uint16_t>(tp::CmRejectReason::InvalidTransportType);
        return answer;
    }
    if (trace_)
        std::fprintf(stderr, "rdma_cm: REQ for service 0x%llx to %08x on port %zu\n",
                     static_cast<unsigned long long>(sid), cma.dst_ipv4(), port);
    CmId* listener = listener_for(static_cast<uint16_t>(sid >> 16), static_cast<uint16_t>(sid),
                                  device, cma_destination(cma));
    if (!listener || (listener->qp_type == kQpTypeUc) != (transport_type == 1)) {
        // Nobody listens there.
        answer.reject_reason = static_cast<uint16_t>(tp::CmRejectReason::InvalidServiceId);
        return answer;
    }
    if (listener->unretrieved_requests >= listener->backlog) {
        // The backlog is full: the kernel's ucma fails the request event and the CM
        // destroys the new id, which rejects as the consumer (cm_destroy_id).
        ++counters_.backlog_full;
        answer.reject_reason = static_cast<uint16_t>(tp::CmRejectReason::ConsumerDefined);
        return answer;
    }
    const CmId* id = new_request(*listener, device, from, cma, sid);
    if (!id) {
        // The listener's user holds all the ids it may: rejected as a consumer would
        // (ucma could not make the id for the request).
        ++counters_.over_limit;
        answer.reject_reason = static_cast<uint16_t>(tp::CmRejectReason::ConsumerDefined);
        return answer;
    }
    answer.context = id->handle;
    answer.local_ca_guid = devices_[device].node_guid;
    answer.datagram = id->qp_type == kQpTypeUd;
    answer.path_mtu = active_mtu(*id);
    return answer;
}

CmId* RdmaCmServer::new_request(CmId& listener, size_t device, const MadPeer& from,
                                const tp::CmaHeader& cma, uint64_t sid) {
    // The id a REQ or SIDR_REQ makes: the listener's file and port space, the addresses
    // of the rdma_cm header (cma_save_net_info), reported on the listener until ACCEPT.
    CmId* made = listener.file ? create_id(*listener.file, listener.uid, listener.port_space,
                                           listener.qp_type)
                               : nullptr;
    if (!made)
        return nullptr; // the listener's user is at its cap of ids: the request is rejected
    CmId& id = *made;
    id.listener = listener.handle;
    ++listener.pending_requests;
    id.device = static_cast<int>(device);
    id.bound = true;
    id.from_request = true;
    id.route_resolved = true;
    if (cma.ip_version() == 6) {
        id.src.ss_family = AF_INET6;
        std::memcpy(ipv6_bytes(id.src), cma.dst_addr(), 16);
        id.dst.ss_family = AF_INET6;
        std::memcpy(ipv6_bytes(id.dst), cma.src_addr(), 16);
    } else {
        auto& src = reinterpret_cast<sockaddr_in&>(id.src);
        src.sin_family = AF_INET;
        src.sin_addr.s_addr = htonl(cma.dst_ipv4());
        auto& dst = reinterpret_cast<sockaddr_in&>(id.dst);
        dst.sin_family = AF_INET;
        dst.sin_addr.s_addr = htonl(cma.src_ipv4());
    }
    set_port(id.src, static_cast<uint16_t>(sid));
    set_port(id.dst, cma.port());
    id.peer = from;
    id.peer.qpn = tp::kGsiQp;
    id.state = CmState::Connect;
    return made;
}

void RdmaCmServer::fill_ud_event(CmEvent& event, const CmId& id, uint32_t qpn, uint32_t qkey,
                                 const uint8_t* data, size_t bytes) const {
    auto& ud = event.resp.param.ud;
    ud.qp_num = qpn;
    ud.qkey = qkey;
    fill_roce_ah(ud.ah_attr, id.peer.gid, id.tos, source_gid_index(id)); // toward the peer
    bytes = std::min(bytes, sizeof(ud.private_data));
    if (data && bytes)
        std::memcpy(ud.private_data, data, bytes);
    ud.private_data_len = static_cast<uint8_t>(bytes);
}

void RdmaCmServer::cm_event(const tp::CmConnection& connection, tp::CmEventType type,
                            const tp::CmMad* mad, uint64_t now) {
    auto found = ids_.find(static_cast<uint32_t>(connection.context));
    if (found == ids_.end())
        return;
    CmId& id = *found->second;
    switch (type) {
    case tp::CmEventType::ReqReceived: {
        id.connection = connection.handle;
        const auto& req = mad->as<tp::CmReq>();
        CmId* found_listener = listener_of(id);
        if (!found_listener)
            return; // its listener is gone: nobody to report the request to
        CmId& listener = *found_listener;
        // Counted on the listener, naming the new id (ucma_connect_event_handler).
        CmEvent event = event_for(listener, kEventConnectRequest);
        event.resp.id = id.handle;
        // The rdma_cm header is the CM's, not the application's (cma_set_req_event_data).
        fill_conn_event(event, connection, req.private_data() + tp::CmaHeader::kBytes,
                        tp::CmReq::kPrivateDataBytes - tp::CmaHeader::kBytes);
        ++listener.unretrieved_requests;
        event.resp.param.conn.responder_resources = connection.responder_resources;
        event.resp.param.conn.initiator_depth = connection.initiator_depth;
        event.resp.param.conn.srq = req.srq();
        queue_event(listener, event);
        return;
    }
    case tp::CmEventType::SidrReqReceived: {
        id.connection = connection.handle;
        const auto& req = mad->as<tp::CmSidrReq>();
        CmId* found_listener = listener_of(id);
        if (!found_listener)
            return;
        CmId& listener = *found_listener;
        CmEvent event = event_for(listener, kEventConnectRequest);
        event.resp.id = id.handle;
        fill_ud_event(event, id, 0, 0, req.private_data() + tp::CmaHeader::kBytes,
                      tp::CmSidrReq::kPrivateDataBytes - tp::CmaHeader::kBytes);
        ++listener.unretrieved_requests;
        queue_event(listener, event);
        return;
    }
    case tp::CmEventType::RepReceived: {
        const auto& rep = mad->as<tp::CmRep>();
        CmEvent event = event_for(id, kEventConnectResponse);
        fill_conn_event(event, connection, rep.private_data(), tp::CmRep::kPrivateDataBytes);
        event.resp.param.conn.responder_resources = connection.responder_resources;
        event.resp.param.conn.initiator_depth = connection.initiator_depth;
        event.resp.param.conn.srq = rep.srq();
        event.resp.param.conn.flow_control = rep.end_to_end_flow_control();
        queue_event(id, event);
        return;
    }
    case tp::CmEventType::Established:
        queue_event(id, kEventEstablished, 0);
        return;
    case tp::CmEventType::Rejected: {
        const auto& rej = mad->as<tp::CmRej>();
        CmEvent event = event_for(id, kEventRejected);
        event.resp.status = rej.reason();
        fill_conn_event(event, connection, rej.private_data(), tp::CmRej::kPrivateDataBytes);
        queue_event(id, event);
        if (!id.file)
            release_id(id);
        return;
    }
    case tp::CmEventType::DreqReceived:
        queue_event(id, kEventDisconnected, 0);
        if (!id.file)
            cm_.send_drep(connection.handle, now); // destroyed: nobody else answers it
        return;
    case tp::CmEventType::Disconnected:
        queue_event(id, kEventDisconnected, 0);
        return;
    case tp::CmEventType::TimewaitExit:
        if (!id.file) {
            release_id(id);
            return;
        }
        queue_event(id, kEventTimewaitExit, 0);
        return;
    case tp::CmEventType::Unreachable:
        queue_event(id, kEventUnreachable, -ETIMEDOUT);
        if (!id.file)
            release_id(id);
        return;
    case tp::CmEventType::SidrRepReceived: {
        const auto& rep = mad->as<tp::CmSidrRep>();
        CmEvent event = event_for(id, 0);
        if (rep.status() == tp::kSidrSuccess) {
            event.resp.event = kEventEstablished;
            fill_ud_event(event, id, rep.qpn(), rep.qkey(), rep.private_data(),
                          tp::CmSidrRep::kPrivateDataBytes);
        } else {
            // cma_sidr_rep_handler: a refusal is UNREACHABLE with the SIDR status.
            event.resp.event = kEventUnreachable;
            event.resp.status = rep.status();
            fill_ud_event(event, id, 0, 0, rep.private_data(), tp::CmSidrRep::kPrivateDataBytes);
        }
        queue_event(id, event);
        return;
    }
    }
}

} // namespace softhca::engine
