// RC responder (IBTA 9.7.5.1): validates request packets in PSN order, executes them
// against memory, completes receives, and answers with ACK/NAK, read responses and
// atomic ACKs.
#include "softhca/transport/psn.hpp"
#include "softhca/transport/rc_qp.hpp"

#include <algorithm>
#include <cstring>

namespace softhca::transport {

namespace {
// The largest message this device allows (the port's max_msg_sz): 2^31 bytes.
constexpr uint32_t kMaxMessageBytes = 1u << 31;
} // namespace

uint8_t RcQueuePair::ack_syndrome() const {
    // ACKs carry end-to-end credits: the receive WQEs still available (9.7.7.2).
    return aeth::kAck | credit_code(rq_tail_ - rq_head_);
}

void RcQueuePair::responder_nak(uint8_t syndrome, uint32_t psn, bool fatal) {
    ack_pending_ = true;
    ack_psn_ = psn;
    ack_syndrome_override_ = syndrome;
    if ((syndrome & aeth::kTypeMask) == aeth::kRnrNak)
        ++counters_.rnr_naks_sent;
    else
        ++counters_.naks_sent;
    if (fatal) {
        error_after_nak_ = true;
        switch (syndrome & aeth::kValueMask) {
        case aeth::kNakRemoteAccessError:
            nak_error_cause_ = WcStatus::RemoteAccessError;
            break;
        case aeth::kNakInvalidRequest:
            nak_error_cause_ = WcStatus::RemoteInvalidRequestError;
            break;
        default:
            nak_error_cause_ = WcStatus::RemoteOperationError;
            break;
        }
    }
}

void RcQueuePair::on_request(const IbPacket& packet, Nanoseconds now) {
    (void)now;
    if (state_ != QpState::Rtr && state_ != QpState::Rts && state_ != QpState::Sqd) {
        ++counters_.dropped;
        return;
    }
    if (error_after_nak_) {
        ++counters_.dropped; // the connection is ending; nothing more is accepted
        return;
    }
    if (state_ == QpState::Rtr && !established_) {
        established_ = true;
        sink_.communication_established();
    }
    const uint32_t psn = packet.bth->psn();
    const int32_t diff = psn_diff(psn, epsn_);
    if (diff < 0) {
        ++counters_.duplicates;
        on_duplicate_request(packet);
        return;
    }
    if (diff > 0) {
        // 9.7.5.1.2: a gap. NAK once with the PSN expected, then drop until it comes.
        ++counters_.out_of_sequence;
        if (!nak_sequence_sent_) {
            nak_sequence_sent_ = true;
            responder_nak(aeth::kNak | aeth::kNakPsnSequenceError, epsn_, false);
        }
        return;
    }
    nak_sequence_sent_ = false;

    // 9.7.5.1.3: a packet must continue the message in progress, or start a
    // new one when none is; anything else is an invalid request.
    const OpcodeInfo& info = *packet.info;
    if (in_progress_ != OpKind::Invalid) {
        if (info.kind != in_progress_ || info.starts_message()) {
            responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
            return;
        }
    } else if (!info.starts_message()) {
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        return;
    }
    // Payload sizes (9.7.5.1.4): first and middle packets are exactly one path
    // MTU, last and only packets at most one.
    const uint32_t mtu = path_mtu_bytes(attr_.mtu);
    if (info.payload) {
        const bool full = info.position == Position::First || info.position == Position::Middle;
        if ((full && packet.payload_length != mtu) || packet.payload_length > mtu ||
            (info.position == Position::Last && packet.payload_length == 0)) {
            responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
            return;
        }
    }

    bool accepted = false;
    switch (info.kind) {
    case OpKind::Send:
        accepted = accept_send(packet, psn);
        break;
    case OpKind::Write:
        accepted = accept_write(packet, psn);
        break;
    case OpKind::ReadRequest:
        accepted = accept_read(packet, psn);
        break;
    case OpKind::CompareSwap:
    case OpKind::FetchAdd:
        accepted = accept_atomic(packet, psn);
        break;
    default:
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        break;
    }
    if (!accepted)
        return;
    if (info.kind == OpKind::Send || info.kind == OpKind::Write) {
        epsn_ = psn_add(epsn_, 1);
        if (packet.bth->ack_req()) {
            ack_pending_ = true;
            ack_psn_ = psn;
            ack_syndrome_override_ = 0;
        }
    }
}

bool RcQueuePair::consume_recv(const IbPacket& packet, uint32_t byte_len) {
    RecvWqe& wqe = rq_[rq_head_ % rq_.size()];
    Completion c;
    c.wr_id = wqe.wr_id;
    c.status = WcStatus::Success;
    c.opcode = packet.info->kind == OpKind::Write ? WcOpcode::RecvRdmaWithImm : WcOpcode::Recv;
    c.byte_len = byte_len;
    c.qp_num = qp_num_;
    c.src_qp = attr_.dest_qp;
    if (packet.imm) {
        c.with_imm = true;
        std::memcpy(&c.imm_data, packet.imm->b, 4);
    }
    ++rq_head_;
    recv_taken_ = false;
    sink_.recv_completion(c);
    return true;
}

void RcQueuePair::fail_receive(WcStatus status, uint8_t nak_code, uint32_t psn) {
    const RecvWqe& wqe = rq_[rq_head_ % rq_.size()];
    Completion c;
    c.wr_id = wqe.wr_id;
    c.status = status;
    c.opcode = WcOpcode::Recv;
    c.qp_num = qp_num_;
    c.src_qp = attr_.dest_qp;
    ++rq_head_;
    recv_taken_ = false;
    sink_.recv_completion(c);
    in_progress_ = OpKind::Invalid;
    responder_nak(aeth::kNak | nak_code, psn, true);
}

bool RcQueuePair::accept_send(const IbPacket& packet, uint32_t psn) {
    const OpcodeInfo& info = *packet.info;
    if (info.starts_message()) {
        if (rq_head_ == rq_tail_) {
            // No receive WQE: receiver not ready (9.7.5.1.6). The requester retries.
            responder_nak(aeth::kRnrNak | (attr_.min_rnr_timer & aeth::kValueMask), psn, false);
            return false;
        }
        recv_taken_ = true;
        message_offset_ = 0;
    }
    RecvWqe& wqe = rq_[rq_head_ % rq_.size()];
    if (message_offset_ + packet.payload_length > wqe.length) {
        // The message does not fit the receive buffers: local length error here, and
        // an invalid request for the requester (9.7.5.1.7, 10.7.3.1).
        fail_receive(WcStatus::LocalLengthError, aeth::kNakInvalidRequest, psn);
        return false;
    }
    const MemoryStatus written =
        packet.payload_length ? scatter(memory_, wqe.sge.data(), wqe.num_sge, message_offset_,
                                        packet.payload, packet.payload_length)
                              : MemoryStatus::Ok;
    if (written == MemoryStatus::Gone) {
        ++counters_.dropped; // as if the QP were already destroyed: nothing answers
        return false;
    }
    if (written != MemoryStatus::Ok) {
        // A bad lkey or buffer in the receive WQE (10.7.3.1).
        fail_receive(WcStatus::LocalProtectionError, aeth::kNakRemoteOperationalError, psn);
        return false;
    }
    message_offset_ += packet.payload_length;
    if (info.ends_message()) {
        in_progress_ = OpKind::Invalid;
        msn_ = (msn_ + 1) & kPsnMask;
        consume_recv(packet, message_offset_);
    } else {
        in_progress_ = OpKind::Send;
    }
    return true;
}

bool RcQueuePair::accept_write(const IbPacket& packet, uint32_t psn) {
    const OpcodeInfo& info = *packet.info;
    if (info.starts_message()) {
        const uint32_t length = packet.reth->dma_length();
        if (length > kMaxMessageBytes) {
            responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
            return false;
        }
        // 9.7.5.1.3 / 10.6.3: the QP must grant remote write and, unless the length is
        // zero, the rkey must cover the whole range with remote write rights.
        if (!(attr_.access & access::kRemoteWrite) ||
            (length && memory_.check(packet.reth->rkey(), true, access::kRemoteWrite,
                                     packet.reth->va(), length) != MemoryStatus::Ok)) {
            responder_nak(aeth::kNak | aeth::kNakRemoteAccessError, psn, true);
            return false;
        }
        if (info.position == Position::Only ? packet.payload_length != length
                                            : length <= packet.payload_length) {
            responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
            return false;
        }
        write_va_ = packet.reth->va();
        write_rkey_ = packet.reth->rkey();
        write_remaining_ = length;
        write_length_ = length;
    } else if (packet.payload_length > write_remaining_ ||
               (info.ends_message() && packet.payload_length != write_remaining_)) {
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        return false;
    }
    // With immediate data the last packet consumes a receive WQE: check it first, so
    // an RNR NAK leaves nothing half done (9.7.5.1.6).
    if (info.ends_message() && packet.imm && rq_head_ == rq_tail_) {
        responder_nak(aeth::kRnrNak | (attr_.min_rnr_timer & aeth::kValueMask), psn, false);
        in_progress_ = info.starts_message() ? OpKind::Invalid : OpKind::Write;
        return false;
    }
    const MemoryStatus written =
        packet.payload_length ? memory_.write(write_rkey_, true, access::kRemoteWrite, write_va_,
                                              packet.payload, packet.payload_length)
                              : MemoryStatus::Ok;
    if (written == MemoryStatus::Gone) {
        ++counters_.dropped;
        return false;
    }
    if (written != MemoryStatus::Ok) {
        in_progress_ = OpKind::Invalid;
        responder_nak(aeth::kNak | aeth::kNakRemoteAccessError, psn, true);
        return false;
    }
    write_va_ += packet.payload_length;
    write_remaining_ -= packet.payload_length;
    if (info.ends_message()) {
        in_progress_ = OpKind::Invalid;
        msn_ = (msn_ + 1) & kPsnMask;
        if (packet.imm)
            consume_recv(packet, write_length_);
    } else {
        in_progress_ = OpKind::Write;
    }
    return true;
}

bool RcQueuePair::accept_read(const IbPacket& packet, uint32_t psn) {
    const uint32_t length = packet.reth->dma_length();
    if (length > kMaxMessageBytes) {
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        return false;
    }
    if (!(attr_.access & access::kRemoteRead) ||
        (length && memory_.check(packet.reth->rkey(), true, access::kRemoteRead, packet.reth->va(),
                                 length) != MemoryStatus::Ok)) {
        responder_nak(aeth::kNak | aeth::kNakRemoteAccessError, psn, true);
        return false;
    }
    uint32_t active = 0; // replays of duplicates do not count: the requester is done with them
    for (const auto& r : resources_)
        active += r.active && !r.replay;
    if (active >= std::max<uint32_t>(1, attr_.max_dest_rd_atomic)) {
        // More reads/atomics outstanding than we accept (9.7.5.1.5).
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        return false;
    }
    const uint32_t mtu = path_mtu_bytes(attr_.mtu);
    ResponderResource& r = resources_[resource_next_++ % resources_.size()];
    r = ResponderResource{};
    r.read = true;
    r.first_psn = psn;
    r.packets = std::max<uint32_t>(1, (length + mtu - 1) / mtu);
    r.va = packet.reth->va();
    r.rkey = packet.reth->rkey();
    r.length = length;
    r.active = true;
    epsn_ = psn_add(epsn_, r.packets);
    msn_ = (msn_ + 1) & kPsnMask;
    return true;
}

bool RcQueuePair::accept_atomic(const IbPacket& packet, uint32_t psn) {
    const AtomicEth& a = *packet.atomic;
    if (a.va() % 8 != 0) {
        // Atomics need a naturally aligned 8-byte address (9.4.5).
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        return false;
    }
    uint64_t original = 0;
    const bool compare_swap = packet.info->kind == OpKind::CompareSwap;
    const MemoryStatus done =
        attr_.access & access::kRemoteAtomic
            ? memory_.atomic(a.rkey(), a.va(), compare_swap,
                             compare_swap ? a.compare() : a.swap_add(), a.swap_add(), original)
            : MemoryStatus::NoAccess;
    if (done == MemoryStatus::Gone) {
        ++counters_.dropped;
        return false;
    }
    if (done != MemoryStatus::Ok) {
        responder_nak(aeth::kNak | aeth::kNakRemoteAccessError, psn, true);
        return false;
    }
    ResponderResource& r = resources_[resource_next_++ % resources_.size()];
    r = ResponderResource{};
    r.read = false;
    r.first_psn = psn;
    r.packets = 1;
    r.atomic_original = original;
    r.active = true;
    epsn_ = psn_add(epsn_, 1);
    msn_ = (msn_ + 1) & kPsnMask;
    return true;
}

void RcQueuePair::on_duplicate_request(const IbPacket& packet) {
    const uint32_t psn = packet.bth->psn();
    switch (packet.info->kind) {
    case OpKind::ReadRequest:
    case OpKind::CompareSwap:
    case OpKind::FetchAdd:
        // 9.7.5.1.5: a duplicate read is executed again from the PSN it names; a
        // duplicate atomic is answered from the saved result, never executed twice.
        for (auto& r : resources_) {
            const int32_t into = psn_diff(psn, r.first_psn);
            if (r.packets && into >= 0 && into < static_cast<int32_t>(r.packets) &&
                r.read == (packet.info->kind == OpKind::ReadRequest)) {
                r.next_packet = static_cast<uint32_t>(into);
                r.replay = r.replay || !r.active;
                r.active = true;
                return;
            }
        }
        ++counters_.dropped; // too old to replay
        return;
    default:
        // A duplicate send or write: acknowledge again what we have (9.7.5.1.1).
        ack_pending_ = true;
        ack_psn_ = psn_add(epsn_, -1);
        ack_syndrome_override_ = 0;
        return;
    }
}

size_t RcQueuePair::build_response(uint8_t* buffer, size_t capacity) {
    // Responses go out in PSN order: read responses and atomic ACKs of accepted
    // requests first, then the ACK/NAK, which covers later PSNs.
    const size_t count = resources_.size();
    for (size_t n = 0; n < count; ++n) {
        ResponderResource& r = resources_[(resource_next_ + n) % count];
        if (!r.active)
            continue;
        const uint32_t psn = psn_add(r.first_psn, r.next_packet);
        if (!r.read) {
            const OpcodeInfo& info = opcode_info(op::rc(op::kAtomicAck));
            const HeaderOffsets o = header_offsets(info);
            if (o.payload > capacity)
                return 0;
            reinterpret_cast<Bth*>(buffer)->set(op::rc(op::kAtomicAck), false, 0, attr_.pkey,
                                                attr_.dest_qp, false, psn);
            reinterpret_cast<Aeth*>(buffer + o.aeth)->set(ack_syndrome(), msn_);
            reinterpret_cast<AtomicAckEth*>(buffer + o.atomic_ack)->set(r.atomic_original);
            r.active = false;
            return o.payload;
        }
        const uint32_t mtu = path_mtu_bytes(attr_.mtu);
        const uint32_t k = r.next_packet;
        const uint32_t offset = k * mtu;
        const uint32_t payload = std::min(mtu, r.length - std::min(r.length, offset));
        uint8_t code = r.packets == 1       ? op::kReadResponseOnly
                       : k == 0             ? op::kReadResponseFirst
                       : k + 1 == r.packets ? op::kReadResponseLast
                                            : op::kReadResponseMiddle;
        const OpcodeInfo& info = opcode_info(op::rc(code));
        const HeaderOffsets o = header_offsets(info);
        const uint32_t pad = (4 - payload % 4) % 4;
        if (o.payload + payload + pad > capacity)
            return 0;
        reinterpret_cast<Bth*>(buffer)->set(op::rc(code), false, static_cast<uint8_t>(pad),
                                            attr_.pkey, attr_.dest_qp, false, psn);
        if (info.has(header_flag::kAeth))
            reinterpret_cast<Aeth*>(buffer + o.aeth)->set(ack_syndrome(), msn_);
        const MemoryStatus read = payload ? memory_.read(r.rkey, true, access::kRemoteRead,
                                                         r.va + offset, buffer + o.payload, payload)
                                          : MemoryStatus::Ok;
        if (read == MemoryStatus::Gone) {
            r.active = false;
            return 0;
        }
        if (read != MemoryStatus::Ok) {
            // The memory went away under an accepted read.
            r.active = false;
            responder_nak(aeth::kNak | aeth::kNakRemoteAccessError, psn, true);
            return 0;
        }
        if (pad)
            std::memset(buffer + o.payload + payload, 0, pad);
        if (++r.next_packet == r.packets)
            r.active = false;
        return o.payload + payload + pad;
    }
    if (!ack_pending_)
        return 0;
    const OpcodeInfo& info = opcode_info(op::rc(op::kAck));
    const HeaderOffsets o = header_offsets(info);
    if (o.payload > capacity)
        return 0;
    const uint8_t syndrome = ack_syndrome_override_ ? ack_syndrome_override_ : ack_syndrome();
    reinterpret_cast<Bth*>(buffer)->set(op::rc(op::kAck), false, 0, attr_.pkey, attr_.dest_qp,
                                        false, ack_psn_);
    reinterpret_cast<Aeth*>(buffer + o.aeth)->set(syndrome, msn_);
    ack_pending_ = false;
    ack_syndrome_override_ = 0;
    if (error_after_nak_) {
        error_after_nak_ = false;
        enter_error(nak_error_cause_, true);
    }
    return o.payload;
}

} // namespace softhca::transport
