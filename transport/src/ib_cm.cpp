// The IB CM's state machine (ib_cm.hpp): the messages of 12.6 as the CM state diagrams
// (12.9.6) send and answer them, their timers and retries, and SIDR (12.11).
#include "softhca/transport/ib_cm.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace softhca::transport {

namespace {

constexpr uint8_t kMraServiceTimeout = 24;  // CMA_CM_MRA_SETTING: the listener's app decides
constexpr uint16_t kLidPermissive = 0xffff; // RoCE has no LIDs; the kernel sends this

// IBA time: 4.096 µs * 2^value, as milliseconds rounded the way cm.c does.
uint64_t iba_time_ms(uint8_t value) {
    return 1ull << (value > 8 ? value - 8 : 0);
}

CmMad new_mad(CmAttribute attribute, uint64_t tid) {
    CmMad mad{};
    mad.header.set(kMgmtClassCm, kCmClassVersion, kMadMethodSend, tid,
                   static_cast<uint16_t>(attribute));
    return mad;
}

} // namespace

IbCm::IbCm(CmConsumer& consumer, const CmConfig& config, uint32_t seed)
    : consumer_(consumer), config_(config), random_(seed) {}

uint64_t IbCm::cm_timeout_ns(uint8_t response_timeout) const {
    // cm.c: the peer's response time plus a round trip of packet life times.
    return (iba_time_ms(response_timeout) + 2 * iba_time_ms(config_.packet_life)) * 1'000'000;
}

uint32_t IbCm::new_comm_id() {
    for (;;) {
        const uint32_t id = static_cast<uint32_t>(random_());
        if (id && !by_comm_id_.count(id))
            return id;
    }
}

uint64_t IbCm::new_tid() {
    return (static_cast<uint64_t>(random_()) << 32) | static_cast<uint32_t>(next_tid_++);
}

const CmConnection* IbCm::connection(uint32_t handle) const {
    auto it = connections_.find(handle);
    return it == connections_.end() ? nullptr : &it->second;
}

CmConnection* IbCm::find(uint32_t handle) {
    auto it = connections_.find(handle);
    return it == connections_.end() ? nullptr : &it->second;
}

CmConnection* IbCm::by_local_comm_id(uint32_t comm_id) {
    auto it = by_comm_id_.find(comm_id);
    return it == by_comm_id_.end() ? nullptr : find(it->second);
}

CmConnection& IbCm::create(uint64_t context, size_t port, const MadPeer& peer) {
    const uint32_t handle = next_handle_++;
    CmConnection& c = connections_[handle];
    c.handle = handle;
    c.context = context;
    c.port = port;
    c.peer = peer;
    c.local_comm_id = new_comm_id();
    by_comm_id_[c.local_comm_id] = handle;
    return c;
}

void IbCm::release(uint32_t handle) {
    auto it = connections_.find(handle);
    if (it == connections_.end())
        return;
    if (it->second.local_comm_id)
        by_comm_id_.erase(it->second.local_comm_id);
    connections_.erase(it);
}

void IbCm::answer(size_t port, const MadPeer& to, const CmMad& mad, uint64_t now) {
    ++counters_.mads_out;
    consumer_.send_mad(port, to, mad, now);
}

void IbCm::transmit(CmConnection& c, uint64_t now, bool expect_reply) {
    answer(c.port, c.peer, c.last_sent, now);
    c.awaiting_reply = expect_reply;
    if (expect_reply) {
        c.retry_at = now + c.retry_interval_ns;
        schedule(c.retry_at);
    }
}

uint32_t IbCm::send_req(const CmReqParams& p, uint64_t now) {
    if (p.private_data_bytes > CmReq::kPrivateDataBytes)
        return 0;
    CmConnection& c = create(p.context, p.port, p.peer);
    c.service_id = p.service_id;
    c.local_ca_guid = p.local_ca_guid;
    c.local_qpn = p.qpn & 0xffffff;
    c.responder_resources = p.responder_resources;
    c.initiator_depth = p.initiator_depth;
    c.retry_count = p.retry_count & 7;
    c.rnr_retry_count = p.rnr_retry_count & 7;
    c.srq = p.srq;
    c.flow_control = p.flow_control;
    c.path_mtu = p.path_mtu;
    c.local_ack_timeout = p.local_ack_timeout;
    c.peer_response_timeout = config_.response_timeout;
    c.tid = new_tid();

    c.last_sent = new_mad(CmAttribute::Req, c.tid);
    auto& req = c.last_sent.as<CmReq>();
    req.set_local_comm_id(c.local_comm_id);
    req.set_service_id(p.service_id);
    req.set_local_ca_guid(p.local_ca_guid);
    req.set_local_qkey(0);
    req.set_local_qpn(c.local_qpn);
    req.set_responder_resources(c.responder_resources);
    req.set_initiator_depth(c.initiator_depth);
    req.set_remote_cm_response_timeout(config_.response_timeout);
    req.set_transport_service_type(p.unreliable_connection ? 1 : 0);
    req.set_end_to_end_flow_control(c.flow_control);
    // Each side announces the PSN its receive queue expects: the REQ's Starting PSN is
    // the one the passive side sends from, the REP's the one the active side sends from
    // (as the kernel's cm.c and rdma_cm fill them; see tests/vectors/rxe-cm-*.pcap).
    req.set_starting_psn(p.starting_psn);
    req.set_local_cm_response_timeout(config_.response_timeout);
    req.set_retry_count(c.retry_count);
    req.set_partition_key(0xffff);
    req.set_path_mtu(c.path_mtu);
    req.set_rnr_retry_count(c.rnr_retry_count);
    req.set_max_cm_retries(static_cast<uint8_t>(config_.max_retries));
    req.set_srq(c.srq);
    req.set_primary_local_lid(kLidPermissive);
    req.set_primary_remote_lid(kLidPermissive);
    req.set_primary_local_gid(p.local_gid);
    req.set_primary_remote_gid(p.peer.gid);
    req.set_primary_packet_rate(7);
    req.set_primary_traffic_class(p.traffic_class);
    req.set_primary_hop_limit(64);
    req.set_primary_sl(0);
    req.set_primary_subnet_local(false); // hop limit > 1 (cm_format_req)
    req.set_primary_local_ack_timeout(c.local_ack_timeout);
    if (p.private_data_bytes)
        std::memcpy(req.private_data(), p.private_data, p.private_data_bytes);

    c.state = CmConnectionState::ReqSent;
    c.retries_left = config_.max_retries;
    c.retry_interval_ns = cm_timeout_ns(config_.response_timeout);
    transmit(c, now, true);
    return c.handle;
}

void IbCm::send_mra(CmConnection& c, uint64_t now) {
    c.last_sent = new_mad(CmAttribute::Mra, c.tid);
    auto& mra = c.last_sent.as<CmMra>();
    mra.set_local_comm_id(c.local_comm_id);
    mra.set_remote_comm_id(c.remote_comm_id);
    mra.set_message_mraed(0); // the REQ
    mra.set_service_timeout(kMraServiceTimeout);
    transmit(c, now, false);
}

int IbCm::send_rep(uint32_t handle, const CmRepParams& p, uint64_t now) {
    CmConnection* c = find(handle);
    if (!c || c->state != CmConnectionState::ReqReceived ||
        p.private_data_bytes > CmRep::kPrivateDataBytes)
        return -EINVAL;
    c->local_qpn = p.qpn & 0xffffff;
    c->responder_resources = p.responder_resources;
    c->initiator_depth = p.initiator_depth;
    c->srq = p.srq;
    c->last_sent = new_mad(CmAttribute::Rep, c->tid);
    auto& rep = c->last_sent.as<CmRep>();
    rep.set_local_comm_id(c->local_comm_id);
    rep.set_remote_comm_id(c->remote_comm_id);
    rep.set_local_qkey(0);
    rep.set_local_qpn(c->local_qpn);
    rep.set_starting_psn(p.starting_psn); // the PSN the active side sends from
    rep.set_responder_resources(c->responder_resources);
    rep.set_initiator_depth(c->initiator_depth);
    rep.set_target_ack_delay(0);
    rep.set_failover_accepted(0);
    rep.set_end_to_end_flow_control(p.flow_control);
    rep.set_rnr_retry_count(p.rnr_retry_count & 7);
    rep.set_srq(p.srq);
    rep.set_local_ca_guid(c->local_ca_guid);
    if (p.private_data_bytes)
        std::memcpy(rep.private_data(), p.private_data, p.private_data_bytes);
    c->state = CmConnectionState::RepSent;
    // The REP is sent again as often as the REQ asked (its Max CM Retries).
    c->retry_interval_ns = cm_timeout_ns(c->peer_response_timeout);
    transmit(*c, now, true);
    return 0;
}

int IbCm::send_rtu(uint32_t handle, uint64_t now) {
    CmConnection* c = find(handle);
    if (!c || c->state != CmConnectionState::RepReceived)
        return -EINVAL;
    c->last_sent = new_mad(CmAttribute::Rtu, c->tid);
    auto& rtu = c->last_sent.as<CmRtu>();
    rtu.set_local_comm_id(c->local_comm_id);
    rtu.set_remote_comm_id(c->remote_comm_id);
    c->state = CmConnectionState::Established;
    transmit(*c, now, false);
    return 0;
}

int IbCm::send_rej(uint32_t handle, CmRejectReason reason, const uint8_t* data, size_t bytes,
                   uint64_t now) {
    CmConnection* c = find(handle);
    // 12.9.6: a REJ answers a REQ or a REP, or withdraws our own REQ; nothing later.
    if (!c || bytes > CmRej::kPrivateDataBytes ||
        (c->state != CmConnectionState::ReqSent && c->state != CmConnectionState::ReqReceived &&
         c->state != CmConnectionState::RepSent && c->state != CmConnectionState::RepReceived))
        return -EINVAL;
    c->last_sent = new_mad(CmAttribute::Rej, c->tid);
    auto& rej = c->last_sent.as<CmRej>();
    rej.set_local_comm_id(c->local_comm_id);
    rej.set_remote_comm_id(c->remote_comm_id);
    // Which message is rejected (12.6.7, table 108): the REQ by the passive side, the REP
    // by the active side.
    const bool active =
        c->state == CmConnectionState::ReqSent || c->state == CmConnectionState::RepReceived;
    rej.set_message_rejected(active ? (c->state == CmConnectionState::RepReceived ? 1 : 2) : 0);
    rej.set_reason(static_cast<uint16_t>(reason));
    if (reason == CmRejectReason::Timeout) {
        // ARI of a timeout REJ: the rejecting CA's GUID (cm.c cm_destroy_id).
        store_be64(rej.b + 12, c->local_ca_guid);
        rej.set_rejected_info_length(8);
    }
    if (data && bytes)
        std::memcpy(rej.private_data(), data, bytes);
    c->state = CmConnectionState::Closed;
    transmit(*c, now, false);
    return 0;
}

int IbCm::send_dreq(uint32_t handle, uint64_t now) {
    CmConnection* c = find(handle);
    // 12.9.6: a DREQ ends an established connection, or one whose RTU is still awaited.
    if (!c ||
        (c->state != CmConnectionState::Established && c->state != CmConnectionState::RepSent))
        return -EINVAL;
    c->tid = new_tid();
    c->last_sent = new_mad(CmAttribute::Dreq, c->tid);
    auto& dreq = c->last_sent.as<CmDreq>();
    dreq.set_local_comm_id(c->local_comm_id);
    dreq.set_remote_comm_id(c->remote_comm_id);
    dreq.set_remote_qpn(c->remote_qpn);
    c->state = CmConnectionState::DreqSent;
    c->retries_left = config_.max_retries;
    c->retry_interval_ns = cm_timeout_ns(c->peer_response_timeout);
    transmit(*c, now, true);
    return 0;
}

int IbCm::send_drep(uint32_t handle, uint64_t now) {
    CmConnection* c = find(handle);
    if (!c ||
        (c->state != CmConnectionState::DreqReceived && c->state != CmConnectionState::DreqSent))
        return -EINVAL;
    c->last_sent = new_mad(CmAttribute::Drep, c->tid);
    auto& drep = c->last_sent.as<CmDrep>();
    drep.set_local_comm_id(c->local_comm_id);
    drep.set_remote_comm_id(c->remote_comm_id);
    transmit(*c, now, false);
    enter_time_wait(*c, now);
    return 0;
}

void IbCm::enter_time_wait(CmConnection& c, uint64_t now) {
    // 12.9.6: a connection that ended waits before its comm id may be reused; meanwhile
    // duplicates of the DREQ are answered with the DREP again.
    c.state = CmConnectionState::TimeWait;
    c.awaiting_reply = false;
    c.time_wait_until = now + cm_timeout_ns(c.peer_response_timeout);
    schedule(c.time_wait_until);
}

uint32_t IbCm::send_sidr_req(const CmSidrReqParams& p, uint64_t now) {
    // 12.11: a UD QP "connects" by asking the peer's CM for the QP behind a service id.
    if (p.private_data_bytes > CmSidrReq::kPrivateDataBytes)
        return 0;
    CmConnection& c = create(p.context, p.port, p.peer); // the comm id is the request id
    c.datagram = true;
    c.service_id = p.service_id;
    c.local_qpn = p.qpn & 0xffffff;
    c.tid = new_tid();
    c.last_sent = new_mad(CmAttribute::SidrReq, c.tid);
    auto& req = c.last_sent.as<CmSidrReq>();
    req.set_request_id(c.local_comm_id);
    req.set_partition_key(0xffff);
    req.set_service_id(p.service_id);
    if (p.private_data_bytes)
        std::memcpy(req.private_data(), p.private_data, p.private_data_bytes);
    c.state = CmConnectionState::ReqSent;
    c.retries_left = config_.max_retries;
    c.retry_interval_ns = iba_time_ms(config_.response_timeout) * 1'000'000; // cma_resolve_ib_udp
    transmit(c, now, true);
    return c.handle;
}

int IbCm::send_sidr_rep(uint32_t handle, uint8_t status, uint32_t qpn, uint32_t qkey,
                        const uint8_t* data, size_t bytes, uint64_t now) {
    CmConnection* c = find(handle);
    if (!c || c->state != CmConnectionState::ReqReceived || bytes > CmSidrRep::kPrivateDataBytes)
        return -EINVAL;
    c->last_sent = new_mad(CmAttribute::SidrRep, c->tid);
    auto& rep = c->last_sent.as<CmSidrRep>();
    rep.set_request_id(c->remote_comm_id);
    rep.set_status(status);
    if (status == kSidrSuccess) {
        c->local_qpn = qpn & 0xffffff;
        rep.set_qpn(c->local_qpn);
        rep.set_qkey(qkey);
    }
    rep.set_service_id(c->service_id);
    if (data && bytes)
        std::memcpy(rep.private_data(), data, bytes);
    c->state = status == kSidrSuccess ? CmConnectionState::Established : CmConnectionState::Closed;
    transmit(*c, now, false);
    return 0;
}

bool IbCm::destroy(uint32_t handle, uint64_t now) {
    CmConnection* c = find(handle);
    if (!c)
        return false;
    // What ib_destroy_cm_id does on the wire, state by state (cm.c cm_destroy_id).
    if (c->datagram) {
        // SIDR has no connection to end; a request not yet answered is refused
        // (cm_destroy_id: SIDR_REQ_RCVD gets a SIDR_REP "rejected").
        if (c->state == CmConnectionState::ReqReceived)
            send_sidr_rep(handle, kSidrReject, 0, 0, nullptr, 0, now);
        c->awaiting_reply = false;
        c->state = CmConnectionState::Closed;
    }
    switch (c->state) {
    case CmConnectionState::ReqSent:
        send_rej(handle, CmRejectReason::Timeout, nullptr, 0, now);
        break;
    case CmConnectionState::ReqReceived:
    case CmConnectionState::RepSent:
    case CmConnectionState::RepReceived:
        send_rej(handle, CmRejectReason::ConsumerDefined, nullptr, 0, now);
        break;
    case CmConnectionState::Established:
        send_dreq(handle, now);
        break;
    case CmConnectionState::DreqReceived:
        send_drep(handle, now);
        break;
    default:
        break;
    }
    return c->state == CmConnectionState::DreqSent || c->state == CmConnectionState::TimeWait;
}

void IbCm::on_req(size_t port, const MadPeer& from, const CmMad& mad, uint64_t now) {
    const auto& req = mad.as<CmReq>();
    // A REQ seen before (same remote comm id and CA): answered from the last message
    // (12.9.8: duplicate REQ; the MRA, the REP, or REJ "stale connection" in time wait).
    for (auto& [handle, c] : connections_) {
        if (c.remote_comm_id != req.local_comm_id() || c.remote_ca_guid != req.local_ca_guid() ||
            c.local_comm_id == 0)
            continue;
        ++counters_.duplicates;
        // Still with the consumer: an MRA asks the peer to wait (as cm_dup_req_handler
        // does; Linux sends none for the first REQ). Answered already: the REP again.
        if (c.state == CmConnectionState::ReqReceived)
            send_mra(c, now);
        else if (c.state == CmConnectionState::RepSent)
            transmit(c, now, true);
        return;
    }
    const CmRequestAnswer taken = consumer_.connection_request(port, from, mad);
    if (taken.reject_reason) {
        // cm_issue_rej: to a REQ with no connection here, comm ids swapped from the REQ.
        CmMad rej_mad = new_mad(CmAttribute::Rej, mad.header.transaction_id());
        auto& rej = rej_mad.as<CmRej>();
        rej.set_local_comm_id(0);
        rej.set_remote_comm_id(req.local_comm_id());
        rej.set_message_rejected(0);
        rej.set_reason(taken.reject_reason);
        answer(port, from, rej_mad, now);
        return;
    }
    MadPeer peer = from;
    peer.qpn = kGsiQp;
    CmConnection& c = create(taken.context, port, peer);
    c.passive = true;
    c.datagram = taken.datagram;
    c.local_ca_guid = taken.local_ca_guid;
    c.service_id = req.service_id();
    c.tid = mad.header.transaction_id();
    c.remote_comm_id = req.local_comm_id();
    c.remote_ca_guid = req.local_ca_guid();
    c.remote_qpn = req.local_qpn();
    c.send_psn = req.starting_psn();
    c.responder_resources = req.initiator_depth();
    c.initiator_depth = req.responder_resources();
    c.retry_count = req.retry_count();
    c.rnr_retry_count = req.rnr_retry_count();
    c.flow_control = req.end_to_end_flow_control();
    c.path_mtu = std::min(req.path_mtu(), taken.path_mtu);
    c.local_ack_timeout = req.primary_local_ack_timeout();
    c.peer_response_timeout = req.local_cm_response_timeout();
    c.retries_left = req.max_cm_retries();
    c.state = CmConnectionState::ReqReceived;
    consumer_.cm_event(c, CmEventType::ReqReceived, &mad, now);
}

void IbCm::on_sidr_req(size_t port, const MadPeer& from, const CmMad& mad, uint64_t now) {
    const auto& req = mad.as<CmSidrReq>();
    for (auto& [handle, c] : connections_) {
        if (!c.passive || !c.datagram || c.remote_comm_id != req.request_id() ||
            c.peer.gid != from.gid)
            continue;
        // A repeated SIDR_REQ: the answer again, once there is one (12.11.1).
        ++counters_.duplicates;
        if (c.state == CmConnectionState::Established || c.state == CmConnectionState::Closed)
            transmit(c, now, false);
        return;
    }
    const uint64_t sid = req.service_id();
    const CmRequestAnswer taken = consumer_.connection_request(port, from, mad);
    if (taken.sidr_status != kSidrSuccess) {
        CmMad rep_mad = new_mad(CmAttribute::SidrRep, mad.header.transaction_id());
        auto& rep = rep_mad.as<CmSidrRep>();
        rep.set_request_id(req.request_id());
        rep.set_status(taken.sidr_status);
        rep.set_service_id(sid);
        answer(port, from, rep_mad, now);
        return;
    }
    MadPeer peer = from;
    peer.qpn = kGsiQp;
    CmConnection& c = create(taken.context, port, peer);
    c.passive = true;
    c.datagram = true;
    c.local_ca_guid = taken.local_ca_guid;
    c.service_id = sid;
    c.tid = mad.header.transaction_id();
    c.remote_comm_id = req.request_id();
    c.state = CmConnectionState::ReqReceived;
    consumer_.cm_event(c, CmEventType::SidrReqReceived, &mad, now);
}

void IbCm::on_sidr_rep(const CmMad& mad, uint64_t now) {
    const auto& rep = mad.as<CmSidrRep>();
    CmConnection* c = by_local_comm_id(rep.request_id());
    if (!c || !c->datagram || c->state != CmConnectionState::ReqSent) {
        ++counters_.duplicates;
        return;
    }
    c->awaiting_reply = false;
    if (rep.status() == kSidrSuccess) {
        c->state = CmConnectionState::Established;
        c->remote_qpn = rep.qpn();
    } else {
        c->state = CmConnectionState::Closed;
    }
    consumer_.cm_event(*c, CmEventType::SidrRepReceived, &mad, now);
}

void IbCm::on_rep(const CmMad& mad, uint64_t now) {
    const auto& rep = mad.as<CmRep>();
    CmConnection* c = by_local_comm_id(rep.remote_comm_id());
    if (!c) {
        ++counters_.mads_dropped;
        return;
    }
    if (c->state == CmConnectionState::Established && c->remote_comm_id == rep.local_comm_id()) {
        ++counters_.duplicates; // our RTU was lost: again
        transmit(*c, now, false);
        return;
    }
    if (c->state != CmConnectionState::ReqSent) {
        ++counters_.duplicates;
        return;
    }
    c->awaiting_reply = false;
    c->remote_comm_id = rep.local_comm_id();
    c->remote_ca_guid = rep.local_ca_guid();
    c->remote_qpn = rep.local_qpn();
    c->send_psn = rep.starting_psn();
    c->responder_resources = rep.initiator_depth();
    c->initiator_depth = rep.responder_resources();
    c->rnr_retry_count = rep.rnr_retry_count();
    c->state = CmConnectionState::RepReceived;
    consumer_.cm_event(*c, CmEventType::RepReceived, &mad, now);
}

void IbCm::on_rtu(const CmMad& mad, uint64_t now) {
    const auto& rtu = mad.as<CmRtu>();
    CmConnection* c = by_local_comm_id(rtu.remote_comm_id());
    if (!c || c->remote_comm_id != rtu.local_comm_id()) {
        ++counters_.mads_dropped;
        return;
    }
    if (c->state != CmConnectionState::RepSent) {
        ++counters_.duplicates;
        return;
    }
    c->awaiting_reply = false;
    c->state = CmConnectionState::Established;
    consumer_.cm_event(*c, CmEventType::Established, nullptr, now);
}

void IbCm::on_rej(const CmMad& mad, uint64_t now) {
    const auto& rej = mad.as<CmRej>();
    CmConnection* c = by_local_comm_id(rej.remote_comm_id());
    if (!c && rej.reason() == static_cast<uint16_t>(CmRejectReason::Timeout)) {
        // A timeout REJ from an active side that never heard our comm id (it gave up on
        // its REQ): found by its own comm id and CA GUID, the ARI (cm_acquire_rejected_id).
        const uint64_t guid = rej.rejected_info_length() >= 8 ? load_be64(rej.ari()) : 0;
        for (auto& [handle, other] : connections_)
            if (other.remote_comm_id == rej.local_comm_id() &&
                (!guid || other.remote_ca_guid == guid) && other.local_comm_id)
                c = &other;
    }
    if (!c) {
        ++counters_.mads_dropped;
        return;
    }
    switch (c->state) {
    case CmConnectionState::ReqSent:
    case CmConnectionState::ReqReceived:
    case CmConnectionState::RepSent:
    case CmConnectionState::RepReceived:
        c->awaiting_reply = false;
        c->state = CmConnectionState::Closed;
        consumer_.cm_event(*c, CmEventType::Rejected, &mad, now);
        return;
    default:
        ++counters_.duplicates;
        return;
    }
}

void IbCm::on_mra(const CmMad& mad, uint64_t now) {
    const auto& mra = mad.as<CmMra>();
    CmConnection* c = by_local_comm_id(mra.remote_comm_id());
    if (!c || c->state != CmConnectionState::ReqSent || mra.message_mraed() != 0) {
        ++counters_.duplicates;
        return;
    }
    // 12.6.6: the peer needs longer; wait its service timeout before repeating the REQ.
    c->remote_comm_id = mra.local_comm_id();
    c->retry_at =
        now + (iba_time_ms(mra.service_timeout()) + iba_time_ms(config_.packet_life)) * 1'000'000;
    schedule(c->retry_at);
}

void IbCm::on_dreq(size_t port, const MadPeer& from, const CmMad& mad, uint64_t now) {
    const auto& dreq = mad.as<CmDreq>();
    CmConnection* c = by_local_comm_id(dreq.remote_comm_id());
    if (!c || c->remote_comm_id != dreq.local_comm_id()) {
        // cm_issue_drep: a DREQ for no connection here still gets its DREP.
        CmMad drep_mad = new_mad(CmAttribute::Drep, mad.header.transaction_id());
        auto& drep = drep_mad.as<CmDrep>();
        drep.set_local_comm_id(dreq.remote_comm_id());
        drep.set_remote_comm_id(dreq.local_comm_id());
        ++counters_.mads_dropped;
        answer(port, from, drep_mad, now);
        return;
    }
    // 12.6.11: the DREQ names the QP it ends (its Remote QPN is ours); one for another QP
    // is dropped, as the kernel's cm_dreq_handler drops it.
    if (dreq.remote_qpn() != c->local_qpn) {
        ++counters_.mads_dropped;
        return;
    }
    c->tid = mad.header.transaction_id();
    switch (c->state) {
    case CmConnectionState::Established:
    case CmConnectionState::RepSent:
        c->awaiting_reply = false;
        c->state = CmConnectionState::DreqReceived;
        consumer_.cm_event(*c, CmEventType::DreqReceived, &mad, now);
        return;
    case CmConnectionState::DreqSent: // both ends disconnected at once
        send_drep(c->handle, now);
        consumer_.cm_event(*c, CmEventType::Disconnected, &mad, now);
        return;
    case CmConnectionState::TimeWait:
        ++counters_.duplicates;
        transmit(*c, now, false); // the DREP again
        return;
    default:
        ++counters_.duplicates;
        return;
    }
}

void IbCm::on_drep(const CmMad& mad, uint64_t now) {
    const auto& drep = mad.as<CmDrep>();
    CmConnection* c = by_local_comm_id(drep.remote_comm_id());
    if (!c || c->state != CmConnectionState::DreqSent) {
        ++counters_.duplicates;
        return;
    }
    enter_time_wait(*c, now);
    consumer_.cm_event(*c, CmEventType::Disconnected, &mad, now);
}

void IbCm::on_timeout(CmConnection& c, uint64_t now) {
    if (c.state == CmConnectionState::TimeWait) {
        c.state = CmConnectionState::Closed;
        if (c.local_comm_id)
            by_comm_id_.erase(c.local_comm_id);
        c.local_comm_id = 0;
        consumer_.cm_event(c, CmEventType::TimewaitExit, nullptr, now);
        return;
    }
    if (c.retries_left > 0) {
        --c.retries_left;
        ++counters_.retransmissions;
        transmit(c, now, true);
        return;
    }
    // Out of retries (12.7.29): the peer is unreachable, or gone while disconnecting.
    c.awaiting_reply = false;
    if (c.state == CmConnectionState::DreqSent) {
        enter_time_wait(c, now);
        consumer_.cm_event(c, CmEventType::Disconnected, nullptr, now);
        return;
    }
    c.state = CmConnectionState::Closed;
    consumer_.cm_event(c, CmEventType::Unreachable, nullptr, now);
}

bool IbCm::poll(uint64_t now) {
    // Nothing is looked at before the earliest deadline (set wherever a timer starts).
    if (now < wake_at_)
        return false;
    uint64_t next = UINT64_MAX;
    std::vector<uint32_t> due;
    for (auto& [handle, c] : connections_) {
        if ((c.awaiting_reply && now >= c.retry_at) ||
            (c.state == CmConnectionState::TimeWait && now >= c.time_wait_until))
            due.push_back(handle);
        else if (c.awaiting_reply)
            next = std::min(next, c.retry_at);
        else if (c.state == CmConnectionState::TimeWait)
            next = std::min(next, c.time_wait_until);
    }
    wake_at_ = next;
    for (uint32_t handle : due)
        if (CmConnection* c = find(handle))
            on_timeout(*c, now); // schedules what it starts again
    return !due.empty();
}

void IbCm::receive_mad(size_t port, const MadPeer& from, const uint8_t* payload, size_t length,
                       uint64_t now) {
    ++counters_.mads_in;
    CmMad mad;
    if (parse_cm_mad(payload, length, mad) != MadError::None) {
        ++counters_.mads_dropped;
        return;
    }
    switch (static_cast<CmAttribute>(mad.header.attribute_id())) {
    case CmAttribute::Req:
        on_req(port, from, mad, now);
        return;
    case CmAttribute::Mra:
        on_mra(mad, now);
        return;
    case CmAttribute::Rej:
        on_rej(mad, now);
        return;
    case CmAttribute::Rep:
        on_rep(mad, now);
        return;
    case CmAttribute::Rtu:
        on_rtu(mad, now);
        return;
    case CmAttribute::Dreq:
        on_dreq(port, from, mad, now);
        return;
    case CmAttribute::Drep:
        on_drep(mad, now);
        return;
    case CmAttribute::SidrReq:
        on_sidr_req(port, from, mad, now);
        return;
    case CmAttribute::SidrRep:
        on_sidr_rep(mad, now);
        return;
    default:
        ++counters_.mads_dropped;
        return;
    }
}

} // namespace softhca::transport
