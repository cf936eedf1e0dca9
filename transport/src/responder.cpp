// Responder (IBTA 9.7.5.1 for RC): validates request packets, executes them against
// memory and completes receives. RC takes them in PSN order and answers with ACK/NAK,
// read responses and atomic ACKs; UC and UD answer nothing and drop what they cannot
// execute.
#include "softhca/transport/psn.hpp"
#include "softhca/transport/queue_pair.hpp"

#include <algorithm>
#include <cstring>

namespace softhca::transport {

namespace {
// The largest message this device allows (the port's max_msg_sz): 2^31 bytes.
constexpr uint32_t kMaxMessageBytes = 1u << 31;
} // namespace

uint8_t QueuePair::ack_syndrome() const {
    // ACKs carry end-to-end credits: the receive WQEs still available (9.7.7.2); a QP
    // on a shared receive queue has no credits of its own and sends "invalid" (31).
    if (has_srq())
        return aeth::kAck | aeth::kValueMask;
    return aeth::kAck | credit_code(own_rq_.size());
}

void QueuePair::reject(uint8_t nak_syndrome, uint32_t psn) {
    if (reliable())
        responder_nak(nak_syndrome, psn, true);
    else
        drop_message();
}

void QueuePair::drop_message() {
    resp_.in_progress = OpKind::Invalid; // the rest of this message is dropped as it comes
    ++counters_.dropped_messages;
}

bool QueuePair::select_xrc_srq(const IbPacket& packet, uint32_t psn) {
    // Annex A14: the XRCETH names an XRC SRQ, which must be of the target's XRC domain.
    // It receives a send and supplies the protection domain remote access is checked in.
    const uint32_t srqn = packet.xrceth ? packet.xrceth->srqn() : 0;
    ReceiveQueue* srq = srqs_ && packet.xrceth ? srqs_->xrc_srq(srqn) : nullptr;
    if (!srq) {
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        return false;
    }
    rq_ = srq;
    resp_.xrc_srqn = srqn;
    return true;
}

void QueuePair::forget_srq(ReceiveQueue& srq) {
    if (rq_ != &srq)
        return;
    // A message in progress into it cannot complete: its later packets find no SRQ
    // memory, and replays of reads from it are not served.
    rq_ = &own_rq_;
    resp_.in_progress = OpKind::Invalid;
    for (auto& r : resp_.resources) {
        if (r.memory == &srq.memory()) {
            set_response_active(r, false);
            r = ResponderResource{};
        }
    }
}

void QueuePair::set_response_active(ResponderResource& r, bool active) {
    if (r.active != active) {
        if (active)
            ++resp_.active_responses;
        else
            --resp_.active_responses;
    }
    r.active = active;
}

QueuePair::ResponderResource& QueuePair::next_resource() {
    ResponderResource& r = resp_.resources[resp_.resource_next++ % resp_.resources.size()];
    set_response_active(r, false);
    r = ResponderResource{};
    return r;
}

bool QueuePair::payload_length_valid(const IbPacket& packet) const {
    // Payload sizes (9.7.5.1.4): first and middle packets are exactly one path MTU,
    // last and only packets at most one.
    const OpcodeInfo& info = *packet.info;
    if (!info.payload)
        return true;
    const uint32_t mtu = path_mtu_bytes(attr_.mtu);
    const bool full = info.position == Position::First || info.position == Position::Middle;
    return !((full && packet.payload_length != mtu) || packet.payload_length > mtu ||
             (info.position == Position::Last && packet.payload_length == 0));
}

bool QueuePair::take_recv() {
    if (resp_.recv_taken)
        return true; // UC: kept from a message that was dropped
    if (rq_->empty())
        return false;
    resp_.recv = rq_->front();
    rq_->pop();
    resp_.recv_taken = true;
    return true;
}

void QueuePair::responder_nak(uint8_t syndrome, uint32_t psn, bool fatal) {
    resp_.ack_pending = true;
    resp_.ack_psn = psn;
    resp_.ack_syndrome_override = syndrome;
    if ((syndrome & aeth::kTypeMask) == aeth::kRnrNak)
        ++counters_.rnr_naks_sent;
    else
        ++counters_.naks_sent;
    if (fatal) {
        resp_.error_after_nak = true;
        switch (syndrome & aeth::kValueMask) {
        case aeth::kNakRemoteAccessError:
            resp_.nak_error_cause = WcStatus::RemoteAccessError;
            break;
        case aeth::kNakInvalidRequest:
            resp_.nak_error_cause = WcStatus::RemoteInvalidRequestError;
            break;
        default:
            resp_.nak_error_cause = WcStatus::RemoteOperationError;
            break;
        }
    }
}

void QueuePair::requests_placed() {
    if (state_ == QpState::Rtr && !established_) {
        established_ = true;
        sink_.communication_established();
    }
}

void QueuePair::on_request(const IbPacket& packet, Nanoseconds now) {
    (void)now;
    if (state_ != QpState::Rtr && state_ != QpState::Rts && state_ != QpState::Sqd) {
        ++counters_.dropped;
        return;
    }
    if (resp_.error_after_nak) {
        ++counters_.dropped; // the connection is ending; nothing more is accepted
        return;
    }
    if (state_ == QpState::Rtr && !established_) {
        established_ = true;
        sink_.communication_established();
    }
    const uint32_t psn = packet.bth->psn();
    const int32_t diff = psn_diff(psn, resp_.epsn);
    if (diff < 0) {
        ++counters_.duplicates;
        on_duplicate_request(packet);
        return;
    }
    if (diff > 0) {
        // 9.7.5.1.2: a gap. NAK once with the PSN expected, then drop until it comes. A
        // gap behind a request just answered with an RNR NAK (the requests pipelined
        // after it) is that RNR NAK's consequence: the RNR NAK, not yet sent, stands,
        // or the requester would retry at once instead of waiting and counting its RNR
        // retries (9.7.5.2.8).
        ++counters_.out_of_sequence;
        const bool rnr_pending = resp_.ack_pending && resp_.ack_psn == resp_.epsn &&
                                 (resp_.ack_syndrome_override & aeth::kTypeMask) == aeth::kRnrNak;
        if (!resp_.nak_sequence_sent && !rnr_pending) {
            resp_.nak_sequence_sent = true;
            responder_nak(aeth::kNak | aeth::kNakPsnSequenceError, resp_.epsn, false);
        }
        return;
    }
    resp_.nak_sequence_sent = false;
    if (service_ == Service::XRC && resp_.in_progress == OpKind::Invalid &&
        !select_xrc_srq(packet, psn))
        return;

    // 9.7.5.1.3: a packet must continue the message in progress, or start a
    // new one when none is; anything else is an invalid request.
    const OpcodeInfo& info = *packet.info;
    if (resp_.in_progress != OpKind::Invalid) {
        if (info.kind != resp_.in_progress || info.starts_message()) {
            responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
            return;
        }
    } else if (!info.starts_message()) {
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        return;
    }
    if (!payload_length_valid(packet)) {
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        return;
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
        resp_.epsn = psn_add(resp_.epsn, 1);
        if (packet.bth->ack_req()) {
            resp_.ack_pending = true;
            resp_.ack_psn = psn;
            resp_.ack_syndrome_override = 0;
        }
    }
}

void QueuePair::complete_recv(const IbPacket& packet, uint32_t byte_len,
                              NetworkHeader network_header, bool staged) {
    Completion c;
    c.wr_id = resp_.recv.wr_id;
    c.status = WcStatus::Success;
    c.opcode = packet.info->kind == OpKind::Write ? WcOpcode::RecvRdmaWithImm : WcOpcode::Recv;
    ++counters_.receives_completed;
    c.byte_len = byte_len;
    c.qp_num = qp_num_;
    c.src_qp = attr_.dest_qp;
    c.solicited = packet.bth->solicited();
    if (packet.imm) {
        c.with_imm = true;
        std::memcpy(&c.imm_data, packet.imm->b, 4);
    }
    if (packet.deth) {
        c.src_qp = packet.deth->src_qp();
        c.with_grh = true;
    }
    c.network_header = network_header;
    c.sl = packet.sl;
    if (packet.ieth) {
        c.with_invalidate = true;
        c.invalidated_rkey = packet.ieth->rkey();
    }
    c.srq_num = resp_.xrc_srqn;
    if (staged) {
        c.staged_length = packet.payload_length;
        c.staged_addr = resp_.small_staged_place;
        std::memcpy(c.staged.data(), packet.payload, packet.payload_length);
    }
    resp_.recv_taken = false;
    sink_.recv_completion(c);
}

bool QueuePair::stage_receive(const IbPacket& packet) {
    // A SEND in one packet, small, all of it for the first SGE of its receive, into
    // memory the MemoryAccess would rather not write now (it checks the lkey, local
    // write and bounds, 10.7.3.1, as a write would).
    const uint32_t length = packet.payload_length;
    return packet.info->starts_message() && packet.info->ends_message() && length &&
           length <= kStagedReceiveBytes && resp_.recv.num_sge &&
           resp_.recv.sge[0].length >= length &&
           rq_->memory().stages_receive(resp_.recv.sge[0].lkey, resp_.recv.sge[0].addr, length,
                                        resp_.small_staged_place);
}

void QueuePair::memory_fault() {
    if (state_ == QpState::Error)
        return;
    // 10.7.3.1, as for a write that fails at once: a receive the message in progress was
    // filling completes with a local protection error; the NAK names the last request
    // accepted.
    const uint32_t psn = psn_add(resp_.epsn, -1);
    if (resp_.recv_taken)
        fail_receive(WcStatus::LocalProtectionError, aeth::kNakRemoteOperationalError, psn);
    else if (reliable())
        responder_nak(aeth::kNak | aeth::kNakRemoteOperationalError, psn, true);
    else
        enter_error(WcStatus::LocalAccessError, true);
}

void QueuePair::fail_receive(WcStatus status, uint8_t nak_code, uint32_t psn) {
    // A receive request that cannot hold the message completes in error and the QP
    // enters the error state (10.7.3.1); RC tells the requester with a NAK first.
    Completion c;
    c.wr_id = resp_.recv.wr_id;
    c.status = status;
    c.opcode = WcOpcode::Recv;
    c.qp_num = qp_num_;
    c.src_qp = attr_.dest_qp;
    c.srq_num = resp_.xrc_srqn;
    resp_.recv_taken = false;
    sink_.recv_completion(c);
    resp_.in_progress = OpKind::Invalid;
    if (reliable())
        responder_nak(aeth::kNak | nak_code, psn, true);
    else
        enter_error(status);
}

bool QueuePair::accept_send(const IbPacket& packet, uint32_t psn) {
    const OpcodeInfo& info = *packet.info;
    if (info.starts_message()) {
        if (!take_recv()) {
            // No receive WQE: receiver not ready (9.7.5.1.6). The RC requester retries;
            // UC drops the message.
            if (reliable())
                responder_nak(aeth::kRnrNak | (attr_.min_rnr_timer & aeth::kValueMask), psn, false);
            else
                drop_message();
            return false;
        }
        resp_.message_offset = 0;
    }
    const RecvWqe& wqe = resp_.recv;
    if (resp_.message_offset + packet.payload_length > wqe.length) {
        // The message does not fit the receive buffers: local length error here, and
        // an invalid request for the requester (9.7.5.1.7, 10.7.3.1).
        fail_receive(WcStatus::LocalLengthError, aeth::kNakInvalidRequest, psn);
        return false;
    }
    const bool staged = stage_receive(packet);
    MemoryStatus written = MemoryStatus::Ok;
    if (packet.payload_length && !staged)
        written = scatter(rq_->memory(), wqe.sge.data(), wqe.num_sge, resp_.message_offset,
                          packet.payload, packet.payload_length);
    if (written == MemoryStatus::Gone) {
        ++counters_.dropped; // as if the QP were already destroyed: nothing answers
        return false;
    }
    if (written != MemoryStatus::Ok) {
        // A bad lkey or buffer in the receive WQE (10.7.3.1).
        fail_receive(WcStatus::LocalProtectionError, aeth::kNakRemoteOperationalError, psn);
        return false;
    }
    resp_.message_offset += packet.payload_length;
    if (info.ends_message()) {
        if (packet.payload_length && !staged)
            rq_->memory().end_message();
        // SEND with Invalidate (9.4.1.1, 10.6.7.2.2): the rkey in the IETH stops granting
        // access before the receive completes. One that is not a valid window of ours
        // fails the message as an invalid request (9.7.5.1.7).
        if (packet.ieth &&
            responder_memory().invalidate(packet.ieth->rkey(), true) != MemoryStatus::Ok) {
            fail_receive(WcStatus::RemoteInvalidRequestError, aeth::kNakInvalidRequest, psn);
            return false;
        }
        resp_.in_progress = OpKind::Invalid;
        resp_.msn = (resp_.msn + 1) & kPsnMask;
        complete_recv(packet, resp_.message_offset, NetworkHeader::None, staged);
    } else {
        resp_.in_progress = OpKind::Send;
    }
    return true;
}

bool QueuePair::accept_write(const IbPacket& packet, uint32_t psn) {
    const OpcodeInfo& info = *packet.info;
    if (info.starts_message()) {
        const uint32_t length = packet.reth->dma_length();
        if (length > kMaxMessageBytes) {
            reject(aeth::kNak | aeth::kNakInvalidRequest, psn);
            return false;
        }
        // 9.7.5.1.3 / 10.6.3: the QP must grant remote write and, unless the length is
        // zero, the rkey must cover the whole range with remote write rights. (UC drops
        // the message silently.)
        if (!(attr_.access & access::kRemoteWrite) ||
            (length && responder_memory().check(packet.reth->rkey(), true, access::kRemoteWrite,
                                                packet.reth->va(), length) != MemoryStatus::Ok)) {
            reject(aeth::kNak | aeth::kNakRemoteAccessError, psn);
            return false;
        }
        // A WRITE with immediate whose bytes the initiator placed (single copy) is one
        // packet with none: the RETH's length is the message's.
        const bool placed = packet.placed && packet.imm && info.position == Position::Only;
        if (placed                            ? packet.payload_length != 0
            : info.position == Position::Only ? packet.payload_length != length
                                              : length <= packet.payload_length) {
            reject(aeth::kNak | aeth::kNakInvalidRequest, psn);
            return false;
        }
        resp_.write_va = packet.reth->va();
        resp_.write_rkey = packet.reth->rkey();
        resp_.write_remaining = placed ? 0 : length;
        resp_.write_length = length;
    } else if (packet.payload_length > resp_.write_remaining ||
               (info.ends_message() && packet.payload_length != resp_.write_remaining)) {
        reject(aeth::kNak | aeth::kNakInvalidRequest, psn);
        return false;
    }
    // With immediate data the last packet consumes a receive WQE: take it first, so
    // an RNR NAK leaves nothing half done (9.7.5.1.6).
    if (info.ends_message() && packet.imm && !take_recv()) {
        if (reliable()) {
            responder_nak(aeth::kRnrNak | (attr_.min_rnr_timer & aeth::kValueMask), psn, false);
            resp_.in_progress = info.starts_message() ? OpKind::Invalid : OpKind::Write;
        } else {
            drop_message();
        }
        return false;
    }
    const MemoryStatus written =
        packet.payload_length
            ? responder_memory().write(resp_.write_rkey, true, access::kRemoteWrite, resp_.write_va,
                                       packet.payload, packet.payload_length)
            : MemoryStatus::Ok;
    if (written == MemoryStatus::Gone) {
        ++counters_.dropped;
        return false;
    }
    if (written != MemoryStatus::Ok) {
        resp_.in_progress = OpKind::Invalid;
        reject(aeth::kNak | aeth::kNakRemoteAccessError, psn);
        return false;
    }
    resp_.write_va += packet.payload_length;
    resp_.write_remaining -= packet.payload_length;
    if (info.ends_message()) {
        if (packet.payload_length)
            responder_memory().end_message();
        resp_.in_progress = OpKind::Invalid;
        resp_.msn = (resp_.msn + 1) & kPsnMask;
        if (packet.imm)
            complete_recv(packet, resp_.write_length);
    } else {
        resp_.in_progress = OpKind::Write;
    }
    return true;
}

bool QueuePair::accept_read(const IbPacket& packet, uint32_t psn) {
    const uint32_t length = packet.reth->dma_length();
    if (length > kMaxMessageBytes) {
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        return false;
    }
    if (!(attr_.access & access::kRemoteRead) ||
        (length && responder_memory().check(packet.reth->rkey(), true, access::kRemoteRead,
                                            packet.reth->va(), length) != MemoryStatus::Ok)) {
        responder_nak(aeth::kNak | aeth::kNakRemoteAccessError, psn, true);
        return false;
    }
    uint32_t active = 0; // replays of duplicates do not count: the requester is done with them
    for (const auto& r : resp_.resources)
        active += r.active && !r.replay;
    if (active >= std::max<uint32_t>(1, attr_.max_dest_rd_atomic)) {
        // More reads/atomics outstanding than we accept (9.7.5.1.5).
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true);
        return false;
    }
    const uint32_t mtu = path_mtu_bytes(attr_.mtu);
    ResponderResource& r = next_resource();
    r.read = true;
    r.memory = &responder_memory();
    r.first_psn = psn;
    r.packets = std::max<uint32_t>(1, (length + mtu - 1) / mtu);
    r.va = packet.reth->va();
    r.rkey = packet.reth->rkey();
    r.length = length;
    set_response_active(r, true);
    resp_.epsn = psn_add(resp_.epsn, r.packets);
    resp_.msn = (resp_.msn + 1) & kPsnMask;
    return true;
}

bool QueuePair::accept_atomic(const IbPacket& packet, uint32_t psn) {
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
            ? responder_memory().atomic(a.rkey(), a.va(), compare_swap,
                                        compare_swap ? a.compare() : a.swap_add(), a.swap_add(),
                                        original)
            : MemoryStatus::NoAccess;
    if (done == MemoryStatus::Gone) {
        ++counters_.dropped;
        return false;
    }
    if (done == MemoryStatus::Misaligned) {
        responder_nak(aeth::kNak | aeth::kNakInvalidRequest, psn, true); // 9.4.5
        return false;
    }
    if (done != MemoryStatus::Ok) {
        responder_nak(aeth::kNak | aeth::kNakRemoteAccessError, psn, true);
        return false;
    }
    ResponderResource& r = next_resource();
    r.read = false;
    r.first_psn = psn;
    r.packets = 1;
    r.atomic_original = original;
    set_response_active(r, true);
    resp_.epsn = psn_add(resp_.epsn, 1);
    resp_.msn = (resp_.msn + 1) & kPsnMask;
    return true;
}

void QueuePair::on_duplicate_request(const IbPacket& packet) {
    const uint32_t psn = packet.bth->psn();
    switch (packet.info->kind) {
    case OpKind::ReadRequest:
    case OpKind::CompareSwap:
    case OpKind::FetchAdd:
        // 9.7.5.1.5: a duplicate read is executed again from the PSN it names; a
        // duplicate atomic is answered from the saved result, never executed twice.
        for (auto& r : resp_.resources) {
            const int32_t into = psn_diff(psn, r.first_psn);
            if (r.packets && into >= 0 && into < static_cast<int32_t>(r.packets) &&
                r.read == (packet.info->kind == OpKind::ReadRequest)) {
                r.next_packet = static_cast<uint32_t>(into);
                r.replay = r.replay || !r.active;
                set_response_active(r, true);
                return;
            }
        }
        ++counters_.dropped; // too old to replay
        return;
    default:
        // A duplicate send or write: acknowledge again what we have (9.7.5.1.1).
        resp_.ack_pending = true;
        resp_.ack_psn = psn_add(resp_.epsn, -1);
        resp_.ack_syndrome_override = 0;
        return;
    }
}

size_t QueuePair::build_response(uint8_t* buffer, size_t capacity) {
    // Responses go out in PSN order: read responses and atomic ACKs of accepted
    // requests first, then the ACK/NAK, which covers later PSNs.
    const size_t count = resp_.active_responses ? resp_.resources.size() : 0;
    for (size_t n = 0, at = count ? resp_.resource_next % count : 0; n < count;
         ++n, at = at + 1 == count ? 0 : at + 1) {
        ResponderResource& r = resp_.resources[at];
        if (!r.active)
            continue;
        const uint32_t psn = psn_add(r.first_psn, r.next_packet);
        if (!r.read) {
            const OpcodeInfo& info = opcode_info(wire_opcode(op::kAtomicAck));
            const HeaderOffsets o = header_offsets(info);
            if (o.payload > capacity)
                return 0;
            reinterpret_cast<Bth*>(buffer)->set(wire_opcode(op::kAtomicAck), false, 0, attr_.pkey,
                                                attr_.dest_qp, false, psn);
            reinterpret_cast<Aeth*>(buffer + o.aeth)->set(ack_syndrome(), resp_.msn);
            reinterpret_cast<AtomicAckEth*>(buffer + o.atomic_ack)->set(r.atomic_original);
            set_response_active(r, false);
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
        const OpcodeInfo& info = opcode_info(wire_opcode(code));
        const HeaderOffsets o = header_offsets(info);
        const uint32_t pad = (4 - payload % 4) % 4;
        if (o.payload + payload + pad > capacity)
            return 0;
        reinterpret_cast<Bth*>(buffer)->set(wire_opcode(code), false, static_cast<uint8_t>(pad),
                                            attr_.pkey, attr_.dest_qp, false, psn);
        if (info.has(header_flag::kAeth))
            reinterpret_cast<Aeth*>(buffer + o.aeth)->set(ack_syndrome(), resp_.msn);
        if (!r.tag)
            r.tag = kResponseTagBit | uint64_t{qp_num_} << 32 | ++resp_.response_tags;
        const Sge source{r.va, r.length, r.rkey};
        const MemoryStatus read =
            payload ? r.memory->read_message(r.tag, true, access::kRemoteRead, &source, 1, r.length,
                                             offset, buffer + o.payload, payload)
                    : MemoryStatus::Ok;
        if (read == MemoryStatus::Gone) {
            set_response_active(r, false);
            return 0;
        }
        if (read != MemoryStatus::Ok) {
            // The memory went away under an accepted read.
            set_response_active(r, false);
            responder_nak(aeth::kNak | aeth::kNakRemoteAccessError, psn, true);
            return 0;
        }
        if (pad)
            std::memset(buffer + o.payload + payload, 0, pad);
        if (++r.next_packet == r.packets) {
            set_response_active(r, false);
            r.memory->forget_message(r.tag);
        }
        return o.payload + payload + pad;
    }
    if (!resp_.ack_pending)
        return 0;
    const OpcodeInfo& info = opcode_info(wire_opcode(op::kAck));
    const HeaderOffsets o = header_offsets(info);
    if (o.payload > capacity)
        return 0;
    const uint8_t syndrome =
        resp_.ack_syndrome_override ? resp_.ack_syndrome_override : ack_syndrome();
    reinterpret_cast<Bth*>(buffer)->set(wire_opcode(op::kAck), false, 0, attr_.pkey, attr_.dest_qp,
                                        false, resp_.ack_psn);
    reinterpret_cast<Aeth*>(buffer + o.aeth)->set(syndrome, resp_.msn);
    resp_.ack_pending = false;
    resp_.ack_syndrome_override = 0;
    if (resp_.error_after_nak) {
        resp_.error_after_nak = false;
        enter_error(resp_.nak_error_cause, true);
    }
    return o.payload;
}

} // namespace softhca::transport
