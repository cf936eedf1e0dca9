// The IB CM on the wire (IBTA chapter 12) for rdma_cm ids: REQ, MRA, REJ, REP, RTU, DREQ
// and DREP on each port's QP1, the retransmission of REQ, REP and DREQ until answered
// (12.7.29-12.7.31: a response timeout and a retry count), duplicates answered from
// the last message sent, and the time-wait state. Fields are filled as Linux's ib_cm and
// rdma_cm fill them for RoCE (cm.c cm_format_req, cma.c cma_connect_ib), so a kernel
// peer finds what it checks.
#include "rdma_cm_server.hpp"

#include "clock.hpp"
#include "socket_addresses.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <netinet/in.h>

namespace softhca::engine {

namespace {

constexpr uint8_t kLocalAckTimeout = 18;    // packet life time + 1 + the CA's ack delay (1)
constexpr uint8_t kMraServiceTimeout = 24;  // CMA_CM_MRA_SETTING: the listener's app decides
constexpr uint16_t kLidPermissive = 0xffff; // RoCE has no LIDs; the kernel sends this

// IBA time: 4.096 µs * 2^value, as milliseconds rounded the way cm.c does.
uint64_t iba_time_ms(uint8_t value) {
    return 1ull << (value > 8 ? value - 8 : 0);
}

tp::CmMad new_mad(tp::CmAttribute attribute, uint64_t tid) {
    tp::CmMad mad{};
    mad.header.set(tp::kMgmtClassCm, tp::kCmClassVersion, tp::kMadMethodSend, tid,
                   static_cast<uint16_t>(attribute));
    return mad;
}

} // namespace

uint64_t RdmaCmServer::cm_timeout_ns(uint8_t response_timeout) const {
    // cm.c: the peer's response time plus a round trip of packet life times.
    return (iba_time_ms(response_timeout) + 2 * iba_time_ms(packet_life_)) * 1'000'000;
}

uint32_t RdmaCmServer::new_comm_id() {
    for (;;) {
        const uint32_t id = static_cast<uint32_t>(random_());
        if (id && !by_comm_id_.count(id))
            return id;
    }
}

CmId* RdmaCmServer::by_local_comm_id(uint32_t comm_id) {
    auto it = by_comm_id_.find(comm_id);
    return it == by_comm_id_.end() ? nullptr : it->second;
}

void RdmaCmServer::answer(size_t port, const MadPeer& to, const tp::CmMad& mad, uint64_t now) {
    ++counters_.mads_out;
    wire_.send_mad(port, to, mad, now);
}

void RdmaCmServer::transmit(CmId& id, uint64_t now, bool expect_reply) {
    if (id.device < 0)
        return;
    answer(devices_[static_cast<size_t>(id.device)].port_index, id.peer, id.last_sent, now);
    id.awaiting_reply = expect_reply;
    if (expect_reply) {
        id.retry_at = now + id.retry_interval_ns;
        schedule(id.retry_at);
    }
}

void RdmaCmServer::fill_conn_event(CmEvent& event, const CmId& id, const uint8_t* data,
                                   size_t bytes) const {
    auto& conn = event.resp.param.conn;
    bytes = std::min(bytes, sizeof(conn.private_data));
    if (data && bytes)
        std::memcpy(conn.private_data, data, bytes);
    conn.private_data_len = static_cast<uint8_t>(bytes);
    conn.qp_num = id.remote_qpn;
    conn.flow_control = id.flow_control;
    conn.retry_count = id.retry_count;
    conn.rnr_retry_count = id.rnr_retry_count;
}

int RdmaCmServer::send_req(CmId& id, const rdma_ucm_conn_param& param, uint64_t now) {
    const size_t user_bytes = param.private_data_len;
    if (user_bytes > tp::CmReq::kPrivateDataBytes - tp::CmaHeader::kBytes)
        return -EINVAL;
    if (id.device < 0 || id.peer.gid == tp::Gid{})
        return -EINVAL;
    const Device& device = devices_[static_cast<size_t>(id.device)];
    id.local_comm_id = new_comm_id();
    by_comm_id_[id.local_comm_id] = &id;
    id.local_qpn = param.qp_num & 0xffffff;
    id.responder_resources = param.responder_resources;
    id.initiator_depth = param.initiator_depth;
    id.retry_count = param.retry_count & 7;
    id.rnr_retry_count = param.rnr_retry_count & 7;
    id.srq = param.srq;
    id.flow_control = param.flow_control;
    id.path_mtu = active_mtu(id);
    id.local_ack_timeout = id.ack_timeout ? id.ack_timeout : kLocalAckTimeout;
    id.peer_response_timeout = response_timeout_;
    id.tid = (static_cast<uint64_t>(random_()) << 32) | static_cast<uint32_t>(next_tid_++);

    id.last_sent = new_mad(tp::CmAttribute::Req, id.tid);
    auto& req = id.last_sent.as<tp::CmReq>();
    req.set_local_comm_id(id.local_comm_id);
    req.set_service_id(tp::rdma_cm_service_id(id.port_space, port_of_address(id.dst)));
    req.set_local_ca_guid(device.node_guid);
    req.set_local_qkey(0);
    req.set_local_qpn(id.local_qpn);
    req.set_responder_resources(id.responder_resources);
    req.set_initiator_depth(id.initiator_depth);
    req.set_remote_cm_response_timeout(response_timeout_);
    req.set_transport_service_type(id.qp_type == kQpTypeUc ? 1 : 0);
    req.set_end_to_end_flow_control(id.flow_control);
    // Each side announces the PSN its receive queue expects: the REQ's Starting PSN is
    // the one the passive side sends from, the REP's the one the active side sends from
    // (as the kernel's cm.c and rdma_cm fill them; see tests/vectors/rxe-cm-*.pcap).
    req.set_starting_psn(id.receive_psn);
    req.set_local_cm_response_timeout(response_timeout_);
    req.set_retry_count(id.retry_count);
    req.set_partition_key(0xffff);
    req.set_path_mtu(id.path_mtu);
    req.set_rnr_retry_count(id.rnr_retry_count);
    req.set_max_cm_retries(static_cast<uint8_t>(max_retries_));
    req.set_srq(id.srq);
    req.set_primary_local_lid(kLidPermissive);
    req.set_primary_remote_lid(kLidPermissive);
    req.set_primary_local_gid(source_gid(id));
    req.set_primary_remote_gid(id.peer.gid);
    req.set_primary_packet_rate(7);
    req.set_primary_traffic_class(id.tos);
    req.set_primary_hop_limit(64);
    req.set_primary_sl(0);
    req.set_primary_subnet_local(false); // hop limit > 1 (cm_format_req)
    req.set_primary_local_ack_timeout(id.local_ack_timeout);
    const tp::CmaHeader cma = cma_header(id);
    std::memcpy(req.private_data(), &cma, sizeof(cma));
    std::memcpy(req.private_data() + sizeof(cma), param.private_data, user_bytes);

    id.state = CmState::ReqSent;
    id.retries_left = max_retries_;
    id.retry_interval_ns = cm_timeout_ns(response_timeout_);
    transmit(id, now, true);
    return 0;
}

void RdmaCmServer::send_mra(CmId& id, uint64_t now) {
    id.last_sent = new_mad(tp::CmAttribute::Mra, id.tid);
    auto& mra = id.last_sent.as<tp::CmMra>();
    mra.set_local_comm_id(id.local_comm_id);
    mra.set_remote_comm_id(id.remote_comm_id);
    mra.set_message_mraed(0); // the REQ
    mra.set_service_timeout(kMraServiceTimeout);
    transmit(id, now, false);
}

int RdmaCmServer::send_rep(CmId& id, const rdma_ucm_conn_param& param, uint64_t now) {
    if (param.private_data_len > tp::CmRep::kPrivateDataBytes)
        return -EINVAL;
    const Device& device = devices_[static_cast<size_t>(id.device)];
    id.local_qpn = param.qp_num & 0xffffff;
    id.responder_resources = param.responder_resources;
    id.initiator_depth = param.initiator_depth;
    id.srq = param.srq;
    id.last_sent = new_mad(tp::CmAttribute::Rep, id.tid);
    auto& rep = id.last_sent.as<tp::CmRep>();
    rep.set_local_comm_id(id.local_comm_id);
    rep.set_remote_comm_id(id.remote_comm_id);
    rep.set_local_qkey(0);
    rep.set_local_qpn(id.local_qpn);
    rep.set_starting_psn(id.receive_psn); // the PSN the active side sends from
    rep.set_responder_resources(id.responder_resources);
    rep.set_initiator_depth(id.initiator_depth);
    rep.set_target_ack_delay(0);
    rep.set_failover_accepted(0);
    rep.set_end_to_end_flow_control(param.flow_control);
    rep.set_rnr_retry_count(param.rnr_retry_count & 7);
    rep.set_srq(param.srq);
    rep.set_local_ca_guid(device.node_guid);
    std::memcpy(rep.private_data(), param.private_data, param.private_data_len);
    id.state = CmState::RepSent;
    id.retry_interval_ns = cm_timeout_ns(id.peer_response_timeout);
    transmit(id, now, true);
    return 0;
}

int RdmaCmServer::send_rtu(CmId& id, uint64_t now) {
    id.last_sent = new_mad(tp::CmAttribute::Rtu, id.tid);
    auto& rtu = id.last_sent.as<tp::CmRtu>();
    rtu.set_local_comm_id(id.local_comm_id);
    rtu.set_remote_comm_id(id.remote_comm_id);
    id.state = CmState::Established;
    transmit(id, now, false);
    return 0;
}

int RdmaCmServer::send_rej(CmId& id, uint16_t reason, const uint8_t* data, size_t bytes,
                           uint64_t now) {
    id.last_sent = new_mad(tp::CmAttribute::Rej, id.tid);
    auto& rej = id.last_sent.as<tp::CmRej>();
    rej.set_local_comm_id(id.local_comm_id);
    rej.set_remote_comm_id(id.remote_comm_id);
    // Which message is rejected (table 108): the REQ by the passive side, the REP by
    // the active side.
    const bool active = id.state == CmState::ReqSent || id.state == CmState::RepReceived;
    rej.set_message_rejected(active ? (id.state == CmState::RepReceived ? 1 : 2) : 0);
    rej.set_reason(reason);
    if (reason == static_cast<uint16_t>(tp::CmRejectReason::Timeout) && id.device >= 0) {
        // ARI of a timeout REJ: the rejecting CA's GUID (cm.c cm_destroy_id).
        tp::store_be64(rej.b + 12, devices_[static_cast<size_t>(id.device)].node_guid);
        rej.set_rejected_info_length(8);
    }
    if (data && bytes)
        std::memcpy(rej.private_data(), data, std::min(bytes, tp::CmRej::kPrivateDataBytes));
    id.state = CmState::Closed;
    transmit(id, now, false);
    return 0;
}

int RdmaCmServer::send_dreq(CmId& id, uint64_t now) {
    id.tid = (static_cast<uint64_t>(random_()) << 32) | static_cast<uint32_t>(next_tid_++);
    id.last_sent = new_mad(tp::CmAttribute::Dreq, id.tid);
    auto& dreq = id.last_sent.as<tp::CmDreq>();
    dreq.set_local_comm_id(id.local_comm_id);
    dreq.set_remote_comm_id(id.remote_comm_id);
    dreq.set_remote_qpn(id.remote_qpn);
    id.state = CmState::DreqSent;
    id.retries_left = max_retries_;
    id.retry_interval_ns = cm_timeout_ns(id.peer_response_timeout);
    transmit(id, now, true);
    return 0;
}

void RdmaCmServer::send_drep(CmId& id, uint64_t now) {
    id.last_sent = new_mad(tp::CmAttribute::Drep, id.tid);
    auto& drep = id.last_sent.as<tp::CmDrep>();
    drep.set_local_comm_id(id.local_comm_id);
    drep.set_remote_comm_id(id.remote_comm_id);
    transmit(id, now, false);
    enter_time_wait(id, now);
}

void RdmaCmServer::enter_time_wait(CmId& id, uint64_t now) {
    // 12.9.6: a connection that ended waits before its comm id may be reused; meanwhile
    // duplicates of the DREQ are answered with the DREP again.
    id.state = CmState::TimeWait;
    id.awaiting_reply = false;
    id.time_wait_until = now + cm_timeout_ns(id.peer_response_timeout);
    schedule(id.time_wait_until);
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

namespace {
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

CmId* RdmaCmServer::listener_for(uint16_t port_space, uint16_t port, size_t device,
                                 const tp::Gid& destination) {
    // A listener of a fabric host's namespace hears only its host's devices (set_hosts).
    CmId* any = nullptr;
    for (auto& [handle, id] : ids_) {
        if (id->state != CmState::Listen || !id->file || id->port_space != port_space ||
            port_of_address(id->src) != port || !device_in_host(device, id->host))
            continue;
        if (gid_of_address(id->src) == destination && id->device == static_cast<int>(device))
            return id.get();
        if (is_any_address(id->src))
            any = id.get();
    }
    return any;
}

void RdmaCmServer::on_req(size_t port, const MadPeer& from, const tp::CmMad& mad, uint64_t now) {
    const auto& req = mad.as<tp::CmReq>();
    // A REQ seen before (same remote comm id and CA): answered from the last message
    // (12.9.8: duplicate REQ; the MRA, the REP, or REJ "stale connection" in time wait).
    for (auto& [handle, id] : ids_) {
        if (id->remote_comm_id != req.local_comm_id() ||
            id->remote_ca_guid != req.local_ca_guid() || id->local_comm_id == 0)
            continue;
        ++counters_.duplicates;
        // Still with the application: an MRA asks the peer to wait (as cm_dup_req_handler
        // does; Linux sends none for the first REQ). Answered already: the REP again.
        if (id->state == CmState::ReqReceived)
            send_mra(*id, now);
        else if (id->state == CmState::RepSent)
            transmit(*id, now, true);
        return;
    }
    const size_t device = device_of_port(port);
    const uint64_t sid = req.service_id();
    tp::CmaHeader cma;
    std::memcpy(&cma, req.private_data(), sizeof(cma));
    auto reject = [&](tp::CmRejectReason reason) {
        // cm_issue_rej: to a REQ with no id here, comm ids swapped from the REQ.
        tp::CmMad rej_mad = new_mad(tp::CmAttribute::Rej, mad.header.transaction_id());
        auto& rej = rej_mad.as<tp::CmRej>();
        rej.set_local_comm_id(0);
        rej.set_remote_comm_id(req.local_comm_id());
        rej.set_message_rejected(0);
        rej.set_reason(static_cast<uint16_t>(reason));
        answer(port, from, rej_mad, now);
    };
    const uint8_t transport_type = req.transport_service_type();
    if (device == devices_.size() || (sid >> 32) != 0 || cma.cma_version() != 0 ||
        (cma.ip_version() != 4 && cma.ip_version() != 6)) {
        reject(tp::CmRejectReason::InvalidServiceId);
        return;
    }
    if (transport_type > 1) {
        reject(tp::CmRejectReason::InvalidTransportType);
        return;
    }
    if (trace_)
        std::fprintf(stderr, "rdma_cm: REQ for service 0x%llx to %08x on port %zu\n",
                     static_cast<unsigned long long>(sid), cma.dst_ipv4(), port);
    CmId* listener = listener_for(static_cast<uint16_t>(sid >> 16), static_cast<uint16_t>(sid),
                                  device, cma_destination(cma));
    if (!listener || (listener->qp_type == kQpTypeUc) != (transport_type == 1)) {
        reject(tp::CmRejectReason::InvalidServiceId); // nobody listens there
        return;
    }
    if (listener->unretrieved_requests >= listener->backlog) {
        // The backlog is full: the kernel's ucma fails the request event and the CM
        // destroys the new id, which rejects as the consumer (cm_destroy_id).
        ++counters_.backlog_full;
        reject(tp::CmRejectReason::ConsumerDefined);
        return;
    }
    CmId& id = *new_request(*listener, device, from, cma, sid);
    id.tid = mad.header.transaction_id();
    id.remote_comm_id = req.local_comm_id();
    id.remote_ca_guid = req.local_ca_guid();
    id.remote_qpn = req.local_qpn();
    id.send_psn = req.starting_psn(); // this side's receive_psn was drawn with the id
    id.responder_resources = req.initiator_depth();
    id.initiator_depth = req.responder_resources();
    id.retry_count = req.retry_count();
    id.rnr_retry_count = req.rnr_retry_count();
    id.flow_control = req.end_to_end_flow_control();
    id.path_mtu = std::min(req.path_mtu(), active_mtu(id));
    id.local_ack_timeout = req.primary_local_ack_timeout();
    id.peer_response_timeout = req.local_cm_response_timeout();
    id.retries_left = req.max_cm_retries();
    id.state = CmState::ReqReceived;

    // Counted on the listener, naming the new id (ucma_connect_event_handler).
    CmEvent event = event_for(*listener, kEventConnectRequest);
    event.resp.id = id.handle;
    // The rdma_cm header is the CM's, not the application's (cma_set_req_event_data).
    fill_conn_event(event, id, req.private_data() + sizeof(cma),
                    tp::CmReq::kPrivateDataBytes - sizeof(cma));
    ++listener->unretrieved_requests;
    event.resp.param.conn.responder_resources = id.responder_resources;
    event.resp.param.conn.initiator_depth = id.initiator_depth;
    event.resp.param.conn.srq = req.srq();
    queue_event(*listener, event);
}

CmId* RdmaCmServer::new_request(CmId& listener, size_t device, const MadPeer& from,
                                const tp::CmaHeader& cma, uint64_t sid) {
    // The id a REQ or SIDR_REQ makes: the listener's file and port space, the addresses
    // of the rdma_cm header (cma_save_net_info), reported on the listener until ACCEPT.
    CmId& id = create_id(listener.file, listener.uid, listener.port_space, listener.qp_type);
    id.listener = &listener;
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
    id.local_comm_id = new_comm_id();
    by_comm_id_[id.local_comm_id] = &id;
    return &id;
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

int RdmaCmServer::send_sidr_req(CmId& id, const rdma_ucm_conn_param& param, uint64_t now) {
    // 12.11: a UD id "connects" by asking the peer's CM for the QP behind a service id.
    const size_t user_bytes = param.private_data_len;
    if (user_bytes > tp::CmSidrReq::kPrivateDataBytes - tp::CmaHeader::kBytes)
        return -EINVAL;
    if (id.device < 0 || id.peer.gid == tp::Gid{})
        return -EINVAL;
    id.local_comm_id = new_comm_id(); // the request id
    by_comm_id_[id.local_comm_id] = &id;
    id.local_qpn = param.qp_num & 0xffffff;
    id.tid = (static_cast<uint64_t>(random_()) << 32) | static_cast<uint32_t>(next_tid_++);
    id.last_sent = new_mad(tp::CmAttribute::SidrReq, id.tid);
    auto& req = id.last_sent.as<tp::CmSidrReq>();
    req.set_request_id(id.local_comm_id);
    req.set_partition_key(0xffff);
    req.set_service_id(tp::rdma_cm_service_id(id.port_space, port_of_address(id.dst)));
    const tp::CmaHeader cma = cma_header(id);
    std::memcpy(req.private_data(), &cma, sizeof(cma));
    std::memcpy(req.private_data() + sizeof(cma), param.private_data, user_bytes);
    id.state = CmState::ReqSent;
    id.retries_left = max_retries_;
    id.retry_interval_ns = iba_time_ms(response_timeout_) * 1'000'000; // cma_resolve_ib_udp
    transmit(id, now, true);
    return 0;
}

int RdmaCmServer::send_sidr_rep(CmId& id, uint8_t status, uint32_t qpn, const uint8_t* data,
                                size_t bytes, uint64_t now) {
    if (bytes > tp::CmSidrRep::kPrivateDataBytes)
        return -EINVAL;
    id.last_sent = new_mad(tp::CmAttribute::SidrRep, id.tid);
    auto& rep = id.last_sent.as<tp::CmSidrRep>();
    rep.set_request_id(id.remote_comm_id);
    rep.set_status(status);
    if (status == kSidrSuccess) {
        id.local_qpn = qpn & 0xffffff;
        rep.set_qpn(id.local_qpn);
        rep.set_qkey(id.qkey);
    }
    rep.set_service_id(tp::rdma_cm_service_id(id.port_space, port_of_address(id.src)));
    if (data && bytes)
        std::memcpy(rep.private_data(), data, bytes);
    id.state = status == kSidrSuccess ? CmState::Established : CmState::Closed;
    transmit(id, now, false);
    return 0;
}

void RdmaCmServer::on_sidr_req(size_t port, const MadPeer& from, const tp::CmMad& mad,
                               uint64_t now) {
    const auto& req = mad.as<tp::CmSidrReq>();
    for (auto& [handle, id] : ids_) {
        if (!id->from_request || id->qp_type != kQpTypeUd ||
            id->remote_comm_id != req.request_id() || id->peer.gid != from.gid)
            continue;
        // A repeated SIDR_REQ: the answer again, once there is one (12.11.1).
        ++counters_.duplicates;
        if (id->state == CmState::Established || id->state == CmState::Closed)
            transmit(*id, now, false);
        return;
    }
    const size_t device = device_of_port(port);
    const uint64_t sid = req.service_id();
    tp::CmaHeader cma;
    std::memcpy(&cma, req.private_data(), sizeof(cma));
    CmId* listener = nullptr;
    if (device < devices_.size() && (sid >> 32) == 0 && cma.cma_version() == 0 &&
        (cma.ip_version() == 4 || cma.ip_version() == 6))
        listener = listener_for(static_cast<uint16_t>(sid >> 16), static_cast<uint16_t>(sid),
                                device, cma_destination(cma));
    auto refuse = [&](uint8_t status) {
        tp::CmMad rep_mad = new_mad(tp::CmAttribute::SidrRep, mad.header.transaction_id());
        auto& rep = rep_mad.as<tp::CmSidrRep>();
        rep.set_request_id(req.request_id());
        rep.set_status(status);
        rep.set_service_id(sid);
        answer(port, from, rep_mad, now);
    };
    if (!listener || listener->qp_type != kQpTypeUd) {
        refuse(kSidrUnsupported); // cm_sidr_req_handler: nobody serves this id
        return;
    }
    if (listener->unretrieved_requests >= listener->backlog) {
        // The backlog is full: refused as the kernel's CM refuses it (IB_SIDR_REJECT).
        ++counters_.backlog_full;
        refuse(kSidrReject);
        return;
    }
    CmId& id = *new_request(*listener, device, from, cma, sid);
    id.tid = mad.header.transaction_id();
    id.remote_comm_id = req.request_id();
    id.state = CmState::ReqReceived;
    // Counted on the listener, naming the new id (ucma_connect_event_handler).
    CmEvent event = event_for(*listener, kEventConnectRequest);
    event.resp.id = id.handle;
    fill_ud_event(event, id, 0, 0, req.private_data() + sizeof(cma),
                  tp::CmSidrReq::kPrivateDataBytes - sizeof(cma));
    ++listener->unretrieved_requests;
    queue_event(*listener, event);
}

void RdmaCmServer::on_sidr_rep(const tp::CmMad& mad) {
    const auto& rep = mad.as<tp::CmSidrRep>();
    CmId* id = by_local_comm_id(rep.request_id());
    if (!id || id->qp_type != kQpTypeUd || id->state != CmState::ReqSent) {
        ++counters_.duplicates;
        return;
    }
    id->awaiting_reply = false;
    CmEvent event = event_for(*id, 0);
    if (rep.status() == kSidrSuccess) {
        id->state = CmState::Established;
        id->remote_qpn = rep.qpn();
        event.resp.event = kEventEstablished;
        fill_ud_event(event, *id, rep.qpn(), rep.qkey(), rep.private_data(),
                      tp::CmSidrRep::kPrivateDataBytes);
    } else {
        // cma_sidr_rep_handler: a refusal is UNREACHABLE with the SIDR status.
        id->state = CmState::Closed;
        event.resp.event = kEventUnreachable;
        event.resp.status = rep.status();
        fill_ud_event(event, *id, 0, 0, rep.private_data(), tp::CmSidrRep::kPrivateDataBytes);
    }
    queue_event(*id, event);
}

void RdmaCmServer::on_rep(const tp::CmMad& mad, uint64_t now) {
    const auto& rep = mad.as<tp::CmRep>();
    CmId* id = by_local_comm_id(rep.remote_comm_id());
    if (!id) {
        ++counters_.mads_dropped;
        return;
    }
    if (id->state == CmState::Established && id->remote_comm_id == rep.local_comm_id()) {
        ++counters_.duplicates; // our RTU was lost: again
        transmit(*id, now, false);
        return;
    }
    if (id->state != CmState::ReqSent) {
        ++counters_.duplicates;
        return;
    }
    id->awaiting_reply = false;
    id->remote_comm_id = rep.local_comm_id();
    id->remote_ca_guid = rep.local_ca_guid();
    id->remote_qpn = rep.local_qpn();
    id->send_psn = rep.starting_psn();
    id->responder_resources = rep.initiator_depth();
    id->initiator_depth = rep.responder_resources();
    id->rnr_retry_count = rep.rnr_retry_count();
    id->state = CmState::RepReceived;
    CmEvent event = event_for(*id, kEventConnectResponse);
    fill_conn_event(event, *id, rep.private_data(), tp::CmRep::kPrivateDataBytes);
    event.resp.param.conn.responder_resources = id->responder_resources;
    event.resp.param.conn.initiator_depth = id->initiator_depth;
    event.resp.param.conn.srq = rep.srq();
    event.resp.param.conn.flow_control = rep.end_to_end_flow_control();
    queue_event(*id, event);
}

void RdmaCmServer::on_rtu(const tp::CmMad& mad) {
    const auto& rtu = mad.as<tp::CmRtu>();
    CmId* id = by_local_comm_id(rtu.remote_comm_id());
    if (!id || id->remote_comm_id != rtu.local_comm_id()) {
        ++counters_.mads_dropped;
        return;
    }
    if (id->state != CmState::RepSent) {
        ++counters_.duplicates;
        return;
    }
    id->awaiting_reply = false;
    id->state = CmState::Established;
    queue_event(*id, kEventEstablished, 0);
}

void RdmaCmServer::on_rej(const tp::CmMad& mad) {
    const auto& rej = mad.as<tp::CmRej>();
    CmId* id = by_local_comm_id(rej.remote_comm_id());
    if (!id && rej.reason() == static_cast<uint16_t>(tp::CmRejectReason::Timeout)) {
        // A timeout REJ from an active side that never heard our comm id (it gave up on
        // its REQ): found by its own comm id and CA GUID, the ARI (cm_acquire_rejected_id).
        const uint64_t guid = rej.rejected_info_length() >= 8 ? tp::load_be64(rej.ari()) : 0;
        for (auto& [handle, other] : ids_)
            if (other->remote_comm_id == rej.local_comm_id() &&
                (!guid || other->remote_ca_guid == guid) && other->local_comm_id)
                id = other.get();
    }
    if (!id) {
        ++counters_.mads_dropped;
        return;
    }
    switch (id->state) {
    case CmState::ReqSent:
    case CmState::ReqReceived:
    case CmState::RepSent:
    case CmState::RepReceived: {
        id->awaiting_reply = false;
        id->state = CmState::Closed;
        CmEvent event = event_for(*id, kEventRejected);
        event.resp.status = rej.reason();
        fill_conn_event(event, *id, rej.private_data(), tp::CmRej::kPrivateDataBytes);
        queue_event(*id, event);
        if (!id->file)
            release_id(*id);
        return;
    }
    default:
        ++counters_.duplicates;
        return;
    }
}

void RdmaCmServer::on_mra(const tp::CmMad& mad, uint64_t now) {
    const auto& mra = mad.as<tp::CmMra>();
    CmId* id = by_local_comm_id(mra.remote_comm_id());
    if (!id || id->state != CmState::ReqSent || mra.message_mraed() != 0) {
        ++counters_.duplicates;
        return;
    }
    // 12.6.6: the peer needs longer; wait its service timeout before repeating the REQ.
    id->remote_comm_id = mra.local_comm_id();
    id->retry_at =
        now + (iba_time_ms(mra.service_timeout()) + iba_time_ms(packet_life_)) * 1'000'000;
    schedule(id->retry_at);
}

void RdmaCmServer::on_dreq(size_t port, const MadPeer& from, const tp::CmMad& mad, uint64_t now) {
    const auto& dreq = mad.as<tp::CmDreq>();
    CmId* id = by_local_comm_id(dreq.remote_comm_id());
    if (!id || id->remote_comm_id != dreq.local_comm_id()) {
        // cm_issue_drep: a DREQ for no connection here still gets its DREP.
        tp::CmMad drep_mad = new_mad(tp::CmAttribute::Drep, mad.header.transaction_id());
        auto& drep = drep_mad.as<tp::CmDrep>();
        drep.set_local_comm_id(dreq.remote_comm_id());
        drep.set_remote_comm_id(dreq.local_comm_id());
        ++counters_.mads_dropped;
        answer(port, from, drep_mad, now);
        return;
    }
    // 12.6.11: the DREQ names the QP it ends (its Remote QPN is ours); one for another QP
    // is dropped, as the kernel's cm_dreq_handler drops it.
    if (dreq.remote_qpn() != id->local_qpn) {
        ++counters_.mads_dropped;
        return;
    }
    id->tid = mad.header.transaction_id();
    switch (id->state) {
    case CmState::Established:
    case CmState::RepSent:
        id->awaiting_reply = false;
        id->state = CmState::DreqReceived;
        queue_event(*id, kEventDisconnected, 0);
        if (!id->file)
            send_drep(*id, now);
        return;
    case CmState::DreqSent: // both ends disconnected at once
        send_drep(*id, now);
        queue_event(*id, kEventDisconnected, 0);
        return;
    case CmState::TimeWait:
        ++counters_.duplicates;
        transmit(*id, now, false); // the DREP again
        return;
    default:
        ++counters_.duplicates;
        return;
    }
}

void RdmaCmServer::on_drep(const tp::CmMad& mad, uint64_t now) {
    const auto& drep = mad.as<tp::CmDrep>();
    CmId* id = by_local_comm_id(drep.remote_comm_id());
    if (!id || id->state != CmState::DreqSent) {
        ++counters_.duplicates;
        return;
    }
    enter_time_wait(*id, now);
    queue_event(*id, kEventDisconnected, 0);
}

void RdmaCmServer::on_timeout(CmId& id, uint64_t now) {
    if (id.state == CmState::TimeWait) {
        id.state = CmState::Closed;
        if (id.local_comm_id)
            by_comm_id_.erase(id.local_comm_id);
        id.local_comm_id = 0;
        if (!id.file) {
            release_id(id);
            return;
        }
        queue_event(id, kEventTimewaitExit, 0);
        return;
    }
    if (id.retries_left > 0) {
        --id.retries_left;
        ++counters_.retransmissions;
        transmit(id, now, true);
        return;
    }
    // Out of retries (12.7.29): the peer is unreachable, or gone while disconnecting.
    id.awaiting_reply = false;
    if (id.state == CmState::DreqSent) {
        enter_time_wait(id, now);
        queue_event(id, kEventDisconnected, 0);
        return;
    }
    id.state = CmState::Closed;
    queue_event(id, kEventUnreachable, -ETIMEDOUT);
    if (!id.file)
        release_id(id);
}

void RdmaCmServer::receive_mad(size_t port, const MadPeer& from, const uint8_t* payload,
                               size_t length, uint64_t now) {
    ++counters_.mads_in;
    tp::CmMad mad;
    if (tp::parse_cm_mad(payload, length, mad) != tp::MadError::None) {
        ++counters_.mads_dropped;
        return;
    }
    switch (static_cast<tp::CmAttribute>(mad.header.attribute_id())) {
    case tp::CmAttribute::Req:
        on_req(port, from, mad, now);
        return;
    case tp::CmAttribute::Mra:
        on_mra(mad, now);
        return;
    case tp::CmAttribute::Rej:
        on_rej(mad);
        return;
    case tp::CmAttribute::Rep:
        on_rep(mad, now);
        return;
    case tp::CmAttribute::Rtu:
        on_rtu(mad);
        return;
    case tp::CmAttribute::Dreq:
        on_dreq(port, from, mad, now);
        return;
    case tp::CmAttribute::Drep:
        on_drep(mad, now);
        return;
    case tp::CmAttribute::SidrReq:
        on_sidr_req(port, from, mad, now);
        return;
    case tp::CmAttribute::SidrRep:
        on_sidr_rep(mad);
        return;
    default:
        ++counters_.mads_dropped;
        return;
    }
}

} // namespace softhca::engine
