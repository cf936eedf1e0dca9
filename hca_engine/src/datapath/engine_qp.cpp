#include "engine_qp.hpp"

#include "clock.hpp"
#include "completion_queue.hpp"
#include "gid_table.hpp"
#include "ports.hpp"
#include "queue_context.hpp"
#include "route_hop_limit.hpp"
#include "softhca/device_interface/async_event.hpp"
#include "softhca/transport/roce_path.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <new>

namespace softhca::engine {

namespace di = device_interface;
namespace tp = transport;

namespace {

constexpr uint32_t kIbvWcGrh = 1u << 0;     // IBV_WC_GRH
constexpr uint32_t kIbvWcWithImm = 1u << 1; // IBV_WC_WITH_IMM
constexpr uint32_t kIbvWcWithInv = 1u << 3; // IBV_WC_WITH_INV

tp::Service service_of(tp::QpType type) {
    switch (type) {
    case tp::QpType::UC:
        return tp::Service::UC;
    case tp::QpType::UD:
        return tp::Service::UD;
    case tp::QpType::XrcSend:
    case tp::QpType::XrcRecv:
        return tp::Service::XRC;
    default:
        return tp::Service::RC;
    }
}

// Copies a work request's scatter/gather list out of its ring slot; returns the total
// length, capped at the largest message (2^31 bytes).
uint32_t read_sges(const uint8_t* at, uint32_t count, std::array<tp::Sge, tp::kMaxSge>& out) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < count; ++i) {
        di::WireSge s;
        std::memcpy(&s, at + i * sizeof(s), sizeof(s));
        out[i] = {s.addr, s.length, s.lkey};
        total += s.length;
    }
    return static_cast<uint32_t>(std::min<uint64_t>(total, 1ull << 31));
}

} // namespace

EngineQp::EngineQp(uint32_t handle, uint32_t qp_num, tp::QpType type, size_t device,
                   QueueContext& context, const QpBinding& binding, const di::QpCaps& caps,
                   bool sq_sig_all, uint64_t user_handle, const PortInfo& port)
    : handle_(handle), qp_num_(qp_num), type_(type), device_(device), binding_(binding),
      caps_(caps), sq_sig_all_(sq_sig_all), user_handle_(user_handle), context_(context),
      memory_(context, binding.pd_handle),
      transport_(qp_num, service_of(type), caps.max_send_wr, caps.max_recv_wr, memory_, *this) {
    memory_.set_qp_num(qp_num);
    memory_.set_fault_listener(this);
    if (binding.srq)
        transport_.use_srq(binding.srq->queue());
    if (type == tp::QpType::XrcRecv)
        transport_.use_srq_directory(*this);
    // UDP source port: per-QP entropy in the range RoCEv2 uses (A17.4.5.1); a connected
    // QP's comes from its path once it has one (modify below).
    addressing_.udp_src_port = ud_source_port(qp_num);
    addressing_.src_gid = port.gids.empty() ? tp::gid_from_ipv4(port.ipv4) : port.gids.front();
    addressing_.src_mac = port.mac;
    if (type == tp::QpType::UD) {
        // UD has no path: its messages may be as large as the port's MTU.
        if (const auto mtu = tp::path_mtu_for_ethernet_mtu(port.eth_mtu))
            transport_.attributes().mtu = *mtu;
        attr_.path_mtu = static_cast<uint32_t>(transport_.attributes().mtu);
    }
}

EngineQp::~EngineQp() {
    if (QpSchedule* schedule = context_.schedule())
        schedule->forget(*this);
    if (grant_page_)
        grant_page_->release(grant_slot_);
}

void EngineQp::note_state() {
    const tp::QpState state = transport_.state();
    if (state == noted_state_)
        return;
    noted_state_ = state;
    if (ring_)
        ring_->engine_state.store(static_cast<uint32_t>(state), std::memory_order_release);
    // A responder takes requests in RTR, RTS and SQD (10.3.1); in any other state its
    // grants end, as an HCA would NAK what arrives.
    if (grant_page_ && state != tp::QpState::Rtr && state != tp::QpState::Rts &&
        state != tp::QpState::Sqd)
        grant_page_->revoke(grant_slot_);
    if (state != tp::QpState::Rts && state != tp::QpState::Sqd)
        placement_granted_ = false;
}

void EngineQp::activate() {
    if (QpSchedule* schedule = context_.schedule())
        schedule->activate(*this);
}

uint64_t EngineQp::engine_bytes() const {
    return ring_memory_.bytes() + uint64_t{caps_.max_send_wr} * sizeof(tp::SendWqe) +
           uint64_t{caps_.max_recv_wr} * sizeof(tp::RecvWqe);
}

int EngineQp::create_ring(uint32_t doorbell_slot) {
    const uint32_t sq_slot =
        (sizeof(di::SendWqeHeader) +
         std::max(caps_.max_send_sge * sizeof(di::WireSge) + di::kSendGatherRoom,
                  size_t{caps_.max_inline_data}) +
         63) /
        64 * 64;
    const uint32_t rq_slot =
        (sizeof(di::RecvWqeHeader) + caps_.max_recv_sge * sizeof(di::WireSge) + 63) / 64 * 64;
    const uint64_t sq_offset = sizeof(di::QpRingHeader);
    const uint64_t rq_offset = sq_offset + uint64_t{sq_slot} * caps_.max_send_wr;
    // A QP on an SRQ has no receive slots (max_recv_wr 0).
    const uint64_t rings_end = rq_offset + uint64_t{rq_slot} * caps_.max_recv_wr;
    if (int err = ring_memory_.create("softhca-qp", rings_end))
        return err;
    ring_ = new (ring_memory_.data()) di::QpRingHeader{};
    ring_->magic = di::kQpRingMagic;
    ring_->version = di::kQpRingVersion;
    ring_->sq_slots = caps_.max_send_wr;
    ring_->sq_slot_size = sq_slot;
    ring_->rq_slots = caps_.max_recv_wr;
    ring_->rq_slot_size = rq_slot;
    ring_->sq_offset = sq_offset;
    ring_->rq_offset = rq_offset;
    ring_->doorbell_slot = doorbell_slot;
    doorbell_slot_ = doorbell_slot;
    sq_slot_size_ = sq_slot;
    rq_slot_size_ = rq_slot;
    sq_offset_ = sq_offset;
    rq_offset_ = rq_offset;
    return 0;
}

int EngineQp::modify(const di::ModifyQpRequest& request, const PortInfo& port,
                     tp::Nanoseconds now) {
    using namespace tp::qp_attr;
    const uint32_t mask = request.attr_mask;
    const di::QpAttributes& a = request.attr;
    const tp::QpState current = transport_.state();
    if ((mask & kState) && a.qp_state > static_cast<uint32_t>(tp::QpState::Error))
        return EINVAL;
    if ((mask & kCurState) && a.cur_qp_state != static_cast<uint32_t>(current))
        return EINVAL;
    const tp::QpState next = mask & kState ? static_cast<tp::QpState>(a.qp_state) : current;
    if (!tp::modify_qp_allowed(type_, current, next, mask))
        return EINVAL;
    if (mask & ~(kState | kCurState | kEnSqdAsyncNotify | kAccessFlags | kPkeyIndex | kPort |
                 kQkey | kAv | kPathMtu | kTimeout | kRetryCnt | kRnrRetry | kRqPsn |
                 kMaxQpRdAtomic | kMinRnrTimer | kSqPsn | kMaxDestRdAtomic | kDestQpn))
        return EOPNOTSUPP; // alternate paths, rate limits, ...

    // Values (IBTA 11.2.5.2): each must be one the device supports.
    // IBV_ACCESS_ON_DEMAND is taken too and means nothing for a QP (programs pass their
    // MRs' flags; the kernel drivers take it as well).
    const uint32_t remote_rights = tp::access::kLocalWrite | tp::access::kRemoteWrite |
                                   tp::access::kRemoteRead | tp::access::kRemoteAtomic |
                                   di::kAccessOnDemand;
    if (((mask & kPort) && a.port_num != 1) || ((mask & kPkeyIndex) && a.pkey_index != 0) ||
        ((mask & kAccessFlags) && (a.qp_access_flags & ~remote_rights)) ||
        ((mask & kPathMtu) && (a.path_mtu < 1 || a.path_mtu > 5)) ||
        ((mask & kTimeout) && a.timeout > 31) || ((mask & kRetryCnt) && a.retry_cnt > 7) ||
        ((mask & kRnrRetry) && a.rnr_retry > 7) ||
        ((mask & kMinRnrTimer) && a.min_rnr_timer > 31) ||
        ((mask & kMaxQpRdAtomic) && a.max_rd_atomic > QpLimits::kMaxRdAtomic) ||
        ((mask & kMaxDestRdAtomic) && a.max_dest_rd_atomic > QpLimits::kMaxRdAtomic) ||
        ((mask & kDestQpn) && a.dest_qp_num > tp::kPsnMask))
        return EINVAL;
    if (mask & kPathMtu) {
        const auto active = tp::path_mtu_for_ethernet_mtu(port.eth_mtu);
        if (!active || a.path_mtu > static_cast<uint32_t>(*active))
            return EINVAL; // larger than the port can carry
    }
    tp::Gid dgid{};
    const tp::Gid* sgid = nullptr;
    if (mask & kAv) {
        std::memcpy(dgid.data(), a.dgid, 16);
        // RoCE needs a GRH (A17.3.1) whose source is a GID of the port of the
        // destination's family (gid_table.hpp).
        sgid = source_gid_for(port.gids, a.sgid_index, dgid);
        if (!a.is_global || !sgid || (a.ah_port_num && a.ah_port_num != 1))
            return EINVAL;
    }

    tp::QpConfig& r = transport_.attributes();
    if (mask & kQkey)
        r.qkey = attr_.qkey = a.qkey;
    if (mask & kAccessFlags) {
        r.access = a.qp_access_flags;
        attr_.qp_access_flags = a.qp_access_flags;
    }
    if (mask & kPathMtu) {
        r.mtu = static_cast<tp::PathMtu>(a.path_mtu);
        attr_.path_mtu = a.path_mtu;
    }
    if (mask & kDestQpn) {
        r.dest_qp = a.dest_qp_num;
        attr_.dest_qp_num = a.dest_qp_num;
    }
    if ((mask & (kAv | kDestQpn)) && type_ != tp::QpType::UD) {
        // A connection's UDP source port: from its flow label, or from both QP numbers.
        const uint32_t flow = attr_.flow_label ? attr_.flow_label
                                               : tp::flow_label_for_qps(qp_num_, attr_.dest_qp_num);
        addressing_.udp_src_port = tp::udp_source_port_for_flow(flow);
    }
    if (mask & kRqPsn) {
        r.rq_psn = a.rq_psn & tp::kPsnMask;
        attr_.rq_psn = r.rq_psn;
    }
    if (mask & kSqPsn) {
        r.sq_psn = a.sq_psn & tp::kPsnMask;
        attr_.sq_psn = r.sq_psn;
    }
    if (mask & kTimeout)
        r.timeout = attr_.timeout = a.timeout;
    if (mask & kRetryCnt)
        r.retry_cnt = attr_.retry_cnt = a.retry_cnt;
    if (mask & kRnrRetry)
        r.rnr_retry = attr_.rnr_retry = a.rnr_retry;
    if (mask & kMinRnrTimer)
        r.min_rnr_timer = attr_.min_rnr_timer = a.min_rnr_timer;
    if (mask & kMaxQpRdAtomic)
        r.max_rd_atomic = attr_.max_rd_atomic = a.max_rd_atomic;
    if (mask & kMaxDestRdAtomic)
        r.max_dest_rd_atomic = attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
    if (mask & kPort)
        attr_.port_num = a.port_num;
    if (mask & kEnSqdAsyncNotify)
        attr_.en_sqd_async_notify = a.en_sqd_async_notify;
    if (mask & kAv) {
        std::memcpy(attr_.dgid, a.dgid, 16);
        attr_.is_global = 1;
        attr_.sgid_index = a.sgid_index;
        // The route's hop limit, as the kernel resolves the path (roce_path.hpp); the
        // attributes report what the wire carries, as ibv_query_qp does on Linux.
        attr_.hop_limit = tp::wire_hop_limit(dgid, a.hop_limit, route_hop_limit());
        attr_.traffic_class = a.traffic_class;
        attr_.flow_label = a.flow_label & tp::kFlowLabelMask;
        attr_.sl = a.sl;
        attr_.ah_port_num = 1;
        addressing_.src_gid = *sgid;
        addressing_.dst_gid = dgid;
        addressing_.hop_limit = static_cast<uint8_t>(attr_.hop_limit);
        addressing_.traffic_class = a.traffic_class;
        addressing_.flow_label = attr_.flow_label;
    }
    if (next == tp::QpState::Reset && current != tp::QpState::Reset && ring_) {
        // RESET empties both work queues (10.3.1): what was posted is discarded. The ring
        // says RESET before sq_completed passes what was discarded (engine_state).
        ring_->engine_state.store(static_cast<uint32_t>(tp::QpState::Reset),
                                  std::memory_order_release);
        sq_pulled_ = ring_->sq_producer.load(std::memory_order_acquire);
        rq_pulled_ = ring_->rq_producer.load(std::memory_order_acquire);
        ring_->sq_completed.store(sq_pulled_, std::memory_order_release);
        ring_->rq_completed.store(rq_pulled_, std::memory_order_release);
    }
    if (mask & kState)
        transport_.set_state(next, now);
    if ((mask & kAccessFlags) && grant_page_)
        grant_page_->revoke(grant_slot_); // granted under the old rights
    note_state();
    attr_.qp_state = static_cast<uint32_t>(transport_.state());
    activate(); // RTS with requests already posted, SQD back to RTS, new timers...
    return 0;
}

void EngineQp::query(di::QueryQpReply& reply) const {
    reply.attr = attr_;
    reply.attr.qp_state = static_cast<uint32_t>(transport_.state());
    reply.attr.cur_qp_state = reply.attr.qp_state;
    reply.attr.sq_draining = transport_.send_queue_draining() ? 1 : 0;
    reply.caps = caps_;
    reply.sq_sig_all = sq_sig_all_;
}

bool EngineQp::pull_work(tp::Nanoseconds now, bool& left_in_ring) {
    (void)now;
    bool any = false;
    left_in_ring = false;
    const uint64_t sq_producer = ring_->sq_producer.load(std::memory_order_acquire);
    while (sq_pulled_ != sq_producer && sq_producer - sq_pulled_ <= caps_.max_send_wr) {
        const uint8_t* slot = ring_slot(true, sq_pulled_);
        di::SendWqeHeader h;
        std::memcpy(&h, slot, sizeof(h));
        tp::SendWqe* slot_wqe = transport_.prepare_send();
        if (!slot_wqe) {
            left_in_ring = true; // the transport's queue is full: the rest waits there
            break;
        }
        // Filled in place: only the fields, SGEs and bytes the request has.
        tp::SendWqe& w = *slot_wqe;
        w.wr_id = h.wr_id;
        w.opcode = static_cast<tp::WrOpcode>(h.opcode);
        w.signaled = sq_sig_all_ || (h.flags & di::kSendSignaled);
        w.fence = h.flags & di::kSendFence;
        w.solicited = h.flags & di::kSendSolicited;
        w.inline_data = h.flags & di::kSendInline;
        w.imm_data = h.imm_data;
        // The transport honours it on RC only; a WRITE with immediate also needs a grant.
        w.placed = (h.flags & di::kSendPlaced) &&
                   (w.opcode != tp::WrOpcode::RdmaWriteWithImm || placement_granted_);
        w.remote_addr = h.remote_addr;
        w.rkey = h.rkey;
        w.compare_add = h.compare_add;
        w.swap = h.swap;
        w.remote_qpn = h.remote_qpn & tp::kPsnMask;
        w.remote_qkey = h.remote_qkey;
        w.remote_srqn = h.remote_srqn;
        std::memcpy(w.av.dgid.data(), h.dgid, 16);
        w.av.flow_label = h.flow_label;
        w.av.hop_limit = h.hop_limit;
        w.av.traffic_class = h.traffic_class;
        w.av.sl = h.sl;
        w.av.sgid_index = h.sgid_index;
        w.bind = {h.bind_mw_handle, h.rkey,        h.bind_mr_lkey,
                  h.bind_access,    h.remote_addr, h.compare_add};
        if (h.opcode > static_cast<uint8_t>(tp::WrOpcode::SendWithInvalidate)) {
            // Not an operation of ours (the provider refuses them): invalidating rkey 0,
            // which no window has, completes it with LOC_QP_OP_ERR.
            w.opcode = tp::WrOpcode::LocalInvalidate;
            w.rkey = 0;
        }
        // The provider validated the request; the engine clamps, never trusts, sizes.
        if (w.inline_data) {
            w.length = std::min(h.length, caps_.max_inline_data);
            std::memcpy(w.inline_bytes.data(), slot + sizeof(h), w.length);
        } else {
            w.num_sge = std::min<uint32_t>(h.num_sge, caps_.max_send_sge);
            w.length = read_sges(slot + sizeof(h), w.num_sge, w.sge);
            if (w.opcode == tp::WrOpcode::AtomicCompareSwap ||
                w.opcode == tp::WrOpcode::AtomicFetchAdd)
                w.length = 8;
            else if (h.flags & di::kSendGathered)
                take_gathered(slot, w);
        }
        transport_.post_prepared_send();
        ++sq_pulled_;
        any = true;
    }
    const uint64_t rq_producer = ring_->rq_producer.load(std::memory_order_acquire);
    while (caps_.max_recv_wr && rq_pulled_ != rq_producer &&
           rq_producer - rq_pulled_ <= caps_.max_recv_wr) {
        const uint8_t* slot = ring_slot(false, rq_pulled_);
        di::RecvWqeHeader h;
        std::memcpy(&h, slot, sizeof(h));
        tp::RecvWqe* r = transport_.prepare_recv();
        if (!r) {
            left_in_ring = true;
            break;
        }
        r->wr_id = h.wr_id;
        r->num_sge = std::min<uint32_t>(h.num_sge, caps_.max_recv_sge);
        r->length = read_sges(slot + sizeof(h), r->num_sge, r->sge);
        transport_.post_prepared_recv();
        ++rq_pulled_;
        any = true;
    }
    return any;
}

void EngineQp::take_gathered(const uint8_t* slot, tp::SendWqe& w) const {
    // The payload follows the SGEs (kSendGathered). Only what fits in the slot and only
    // for operations that carry the SGEs' bytes; otherwise the memory is read as usual.
    // The SGEs stay: the transport checks them as it would before reading (10.7.3.1).
    const size_t at = sizeof(di::SendWqeHeader) + size_t{w.num_sge} * sizeof(di::WireSge);
    if (!di::may_gather(static_cast<uint8_t>(w.opcode)) || at > sq_slot_size_ ||
        w.length > sq_slot_size_ - at || w.length > w.inline_bytes.size())
        return;
    std::memcpy(w.inline_bytes.data(), slot + at, w.length);
    w.inline_data = true;
}

const uint8_t* EngineQp::ring_slot(bool send, uint64_t index) const {
    // From the engine's own copy of the layout: the provider can write the shared
    // header, so nothing there may steer where the engine reads.
    const auto* base = static_cast<const uint8_t*>(ring_memory_.data());
    return send ? base + sq_offset_ + (index & (caps_.max_send_wr - 1)) * sq_slot_size_
                : base + rq_offset_ + (index & (caps_.max_recv_wr - 1)) * rq_slot_size_;
}

void EngineQp::deferred_memory_fault() {
    transport_.memory_fault();
    activate(); // the fatal NAK it owes
}

void EngineQp::push_completion(CompletionQueue* cq, const tp::Completion& c) {
    if (!cq)
        return; // an XRC SRQ destroyed under a message in progress
    // Queued writes land before the completion that reports them is visible; one that
    // could not land fails its completion (the QP fails at the next safe point).
    ProcessMemory::flush_writes_now();
    tp::WcStatus status = c.status;
    ProcessMemory& written = binding_.srq ? binding_.srq->memory() : memory_;
    if (written.take_write_fault() && status == tp::WcStatus::Success)
        status = tp::WcStatus::LocalProtectionError;
    di::CompletionEntry e{};
    e.wr_id = c.wr_id;
    e.status = static_cast<uint32_t>(status);
    e.opcode = static_cast<uint32_t>(c.opcode);
    e.byte_len = c.byte_len;
    e.imm_data = c.imm_data;
    e.qp_num = c.qp_num;
    e.src_qp = c.src_qp;
    e.wc_flags = (c.with_imm ? kIbvWcWithImm : 0) | (c.with_grh ? kIbvWcGrh : 0) |
                 (c.with_invalidate ? kIbvWcWithInv : 0);
    if (c.with_invalidate)
        e.imm_data = c.invalidated_rkey; // ibv_wc's invalidated_rkey shares imm_data

    e.sl = c.sl;
    e.network_header = c.network_header == tp::NetworkHeader::Ipv4   ? di::kNetworkHeaderIpv4
                       : c.network_header == tp::NetworkHeader::Ipv6 ? di::kNetworkHeaderIpv6
                                                                     : di::kNetworkHeaderNone;
    e.pkey_index = c.pkey_index;
    static_assert(di::kEntryStagedBytes == tp::kStagedReceiveBytes);
    if (c.staged_length && c.staged_length <= tp::kStagedReceiveBytes &&
        status == tp::WcStatus::Success) {
        e.staged_length = c.staged_length; // in the entry (stage_receive)
        e.staged_addr = c.staged_addr;
        std::memcpy(e.staged, c.staged.data(), e.staged_length);
    }
    if (cq->timestamps)
        e.completion_ns = monotonic_ns(); // the card's free-running clock
    if (cq->ring.push(e)) {
        // Completion events (11.4.2.2): written by the card, whether or not the
        // application is polling. A receive completion is solicited when the message's
        // last packet had the SE bit; any error completion counts as solicited. A CQ
        // without a channel has nowhere to send events: its arm is not even read.
        const bool solicited = c.solicited || c.status != tp::WcStatus::Success;
        if (cq->channel.attached() && cq->ring.take_notification(solicited) &&
            cq->channel.signal(cq->user_handle))
            cq->ring.count_event();
    } else {
        // CQ overrun (11.4.2.1): the completion is lost and the CQ reports an error.
        ++cq_overruns_;
        if (!cq->overrun_reported) {
            cq->overrun_reported = true;
            context_.raise_event(cq->user_handle, di::kEventCqErr);
        }
    }
}

void EngineQp::send_completion(const tp::Completion& c) {
    note_state();
    push_completion(binding_.send_cq, c);
}

void EngineQp::recv_completion(const tp::Completion& c) {
    note_state();
    // The request's slot is free before its completion is visible: an application that
    // posts again on seeing it must find room. An SRQ's slots free as requests are taken.
    EngineSrq* srq = type_ == tp::QpType::XrcRecv
                         ? context_.find_xrc_srq(c.srq_num, binding_.xrc_domain)
                         : binding_.srq;
    if (srq)
        srq->sync();
    else if (type_ != tp::QpType::XrcRecv)
        ring_->rq_completed.fetch_add(1, std::memory_order_release);
    // An XRC target completes into the CQ of the SRQ the message named (Annex A14).
    push_completion(
        type_ == tp::QpType::XrcRecv ? (srq ? srq->xrc_cq() : nullptr) : binding_.recv_cq, c);
}

tp::ReceiveQueue* EngineQp::xrc_srq(uint32_t srqn) {
    EngineSrq* srq = context_.find_xrc_srq(srqn, binding_.xrc_domain);
    return srq ? &srq->queue() : nullptr;
}

void EngineQp::send_wqe_retired() {
    note_state();
    ring_->sq_completed.fetch_add(1, std::memory_order_release);
}

void EngineQp::communication_established() {
    context_.raise_qp_event(*this, user_handle_, di::kEventCommEst);
}

void EngineQp::send_queue_drained() {
    if (attr_.en_sqd_async_notify)
        context_.raise_event(user_handle_, di::kEventSqDrained);
}

void EngineQp::last_wqe_reached() {
    context_.raise_qp_event(*this, user_handle_, di::kEventQpLastWqeReached);
}

void EngineQp::qp_error(tp::WcStatus cause, bool detected_by_responder) {
    note_state();
    if (!detected_by_responder)
        return; // the requester's error is in the failed request's completion
    // Affiliated asynchronous errors (11.6.3.1): what the responder found.
    const uint32_t event = cause == tp::WcStatus::RemoteInvalidRequestError ? di::kEventQpReqErr
                           : cause == tp::WcStatus::RemoteAccessError       ? di::kEventQpAccessErr
                                                                            : di::kEventQpFatal;
    context_.raise_qp_event(*this, user_handle_, event);
}

} // namespace softhca::engine
