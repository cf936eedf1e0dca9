// RC completer (IBTA 9.7.5.2, 9.7.6): ACKs, NAKs, read responses and atomic ACKs
// coming back to the requester; retires send work requests in order and completes
// them.
#include "softhca/transport/psn.hpp"
#include "softhca/transport/queue_pair.hpp"

#include <algorithm>
#include <cstring>

namespace softhca::transport {

namespace {

WcOpcode completion_opcode(WrOpcode opcode) {
    switch (opcode) {
    case WrOpcode::RdmaWrite:
    case WrOpcode::RdmaWriteWithImm:
        return WcOpcode::RdmaWrite;
    case WrOpcode::Send:
    case WrOpcode::SendWithImm:
    case WrOpcode::SendWithInvalidate:
        return WcOpcode::Send;
    case WrOpcode::RdmaRead:
        return WcOpcode::RdmaRead;
    case WrOpcode::AtomicCompareSwap:
        return WcOpcode::CompareSwap;
    case WrOpcode::AtomicFetchAdd:
        return WcOpcode::FetchAdd;
    case WrOpcode::BindMemoryWindow:
        return WcOpcode::BindMemoryWindow;
    case WrOpcode::LocalInvalidate:
        return WcOpcode::LocalInvalidate;
    }
    return WcOpcode::Send;
}

} // namespace

void QueuePair::retire_completed() {
    while (sq_head_ != sq_tail_) {
        SendEntry& entry = sq_at(sq_head_);
        if (!entry.started || !entry.acked)
            break;
        Completion c;
        c.wr_id = entry.wqe.wr_id;
        c.status = WcStatus::Success;
        c.opcode = completion_opcode(entry.wqe.opcode);
        c.byte_len = entry.wqe.length;
        c.qp_num = qp_num_;
        const bool signaled = entry.wqe.signaled;
        counters_.sends_completed += c.opcode == WcOpcode::Send;
        if (req_.sq_send == sq_head_)
            ++req_.sq_send;
        ++sq_head_;
        // The slot is free before the completion is seen: an application that posts
        // again on seeing it must find room (as many outstanding as max_send_wr).
        sink_.send_wqe_retired();
        if (signaled)
            sink_.send_completion(c);
    }
    check_drained();
}

void QueuePair::complete_send_error(SendEntry& entry, WcStatus status) {
    // The failing request completes with its error, then everything after it flushes
    // (10.7.3.1: errors always generate a completion, signaled or not).
    Completion c;
    c.wr_id = entry.wqe.wr_id;
    c.status = status;
    c.opcode = completion_opcode(entry.wqe.opcode);
    c.qp_num = qp_num_;
    // Earlier requests that were acknowledged retire normally first; earlier ones still
    // unacknowledged cannot complete any more and flush.
    retire_completed();
    // RC enters the error state before the failing request retires: whoever sees it
    // retired (the ring's sq_completed) sees the QP in error with it, never a QP still in
    // RTS that went past a failure (a provider waiting to place a request behind it).
    const bool entering_error = reliable() && state_ != QpState::Error;
    if (reliable())
        state_ = QpState::Error;
    while (sq_head_ != sq_tail_) {
        SendEntry& head = sq_at(sq_head_);
        Completion done = c;
        if (&head != &entry) {
            done.wr_id = head.wqe.wr_id;
            done.status = WcStatus::WrFlushError;
            done.opcode = completion_opcode(head.wqe.opcode);
        } else {
            // rxe's rdma_sends counts a SEND that completes in error too (not the
            // requests flushed after it).
            counters_.sends_completed += done.opcode == WcOpcode::Send;
        }
        ++sq_head_;
        sink_.send_wqe_retired();
        sink_.send_completion(done);
        if (&head == &entry)
            break;
    }
    if (entering_error)
        report_error_and_flush(status, false);
    else if (!reliable())
        enter_send_queue_error(); // UC/UD: SQE, receives continue (10.3.1)
}

void QueuePair::reset_retry_counts() {
    // Progress (an ACK or response that acknowledges something new) gives both retry
    // budgets back: they count consecutive failures, not failures over the QP's life
    // (9.7.5.2.8 for RNR NAKs, 9.7.6.1.3 for timeouts).
    comp_.retry_left = attr_.retry_cnt;
    comp_.rnr_left = attr_.rnr_retry;
}

void QueuePair::handle_ack_psn(uint32_t psn, Nanoseconds now) {
    // Any newly acknowledged PSN is forward progress, even inside a long message: the
    // retry budget is for a silent peer, not a slow one (9.7.6.1.3).
    bool progress = false;
    if (psn_diff(psn, comp_.acked_psn) > 0 && psn_diff(psn, req_.next_psn) < 0) {
        comp_.acked_psn = psn;
        reset_retry_counts();
        arm_retry_timer(now);
    }
    for (uint32_t i = sq_head_; i != sq_tail_; ++i) {
        SendEntry& entry = sq_at(i);
        if (!entry.started)
            break;
        const uint32_t last = psn_add(entry.first_psn, entry.packets - 1);
        if (psn_diff(psn, last) < 0)
            break;
        if (entry.acked)
            continue;
        if (!entry.acked && consumes_recv(entry.wqe) && req_.outstanding_consuming)
            --req_.outstanding_consuming;
        if (is_read_or_atomic(entry.wqe)) {
            // An ACK beyond an unanswered read or atomic: its response was lost
            // (implicit NAK, 9.7.5.2.1); ask again from what is missing.
            ++counters_.out_of_sequence;
            const uint32_t missing = psn_add(entry.first_psn, entry.received_packets);
            if (!comp_.gap_rewound || comp_.gap_psn != missing) {
                comp_.gap_rewound = true;
                comp_.gap_psn = missing;
                ++counters_.retries;
                rewind_to(missing);
            }
            break;
        }
        entry.acked = true;
        progress = true;
    }
    if (progress) {
        reset_retry_counts();
        retire_completed();
        restart_retry_timer(now);
    }
}

void QueuePair::on_response(const IbPacket& packet, Nanoseconds now) {
    if (state_ != QpState::Rts && state_ != QpState::Sqd) {
        ++counters_.dropped;
        return;
    }
    switch (packet.info->kind) {
    case OpKind::Ack: {
        const uint8_t syndrome = packet.aeth->syndrome();
        const uint32_t psn = packet.bth->psn();
        if ((syndrome & aeth::kTypeMask) == aeth::kAck) {
            handle_ack_psn(psn, now);
            update_credits(syndrome);
        } else
            on_nak(psn, syndrome, now);
        break;
    }
    case OpKind::ReadResponse:
        on_read_response(packet, now);
        break;
    case OpKind::AtomicAck:
        on_atomic_ack(packet, now);
        break;
    default:
        ++counters_.dropped;
        break;
    }
}

void QueuePair::on_nak(uint32_t psn, uint8_t syndrome, Nanoseconds now) {
    // Everything before the NAKed PSN was received (9.7.5.2.2).
    handle_ack_psn(psn_add(psn, -1), now);
    if (state_ == QpState::Error)
        return;
    SendEntry* target = nullptr;
    for (uint32_t i = sq_head_; i != sq_tail_; ++i) {
        SendEntry& entry = sq_at(i);
        if (!entry.started)
            break;
        const int32_t into = psn_diff(psn, entry.first_psn);
        if (into >= 0 && into < static_cast<int32_t>(entry.packets)) {
            target = &entry;
            break;
        }
    }
    if (!target) {
        ++counters_.dropped; // a NAK for nothing outstanding: stale, ignore
        return;
    }
    if ((syndrome & aeth::kTypeMask) == aeth::kRnrNak) {
        ++counters_.rnr_naks_received;
        if (retries_exhausted(WcStatus::RnrRetryExceededError))
            return;
        req_.rnr_wait_until = now + rnr_timer_ns(syndrome & aeth::kValueMask);
        comp_.retry_deadline = kNoDeadline;
        rewind_to(psn);
        return;
    }
    ++counters_.naks_received;
    switch (syndrome & aeth::kValueMask) {
    case aeth::kNakPsnSequenceError:
        ++counters_.sequence_naks_received;
        // The responder saw a gap and names the PSN it expects (9.7.5.2.2). Only
        // timeouts count against retry_cnt: a NAK proves the peer is alive.
        ++counters_.retries;
        rewind_to(psn);
        break;
    case aeth::kNakInvalidRequest:
        complete_send_error(*target, WcStatus::RemoteInvalidRequestError);
        break;
    case aeth::kNakRemoteAccessError:
        complete_send_error(*target, WcStatus::RemoteAccessError);
        break;
    default: // remote operational error, invalid RD request, reserved codes
        complete_send_error(*target, WcStatus::RemoteOperationError);
        break;
    }
}

QueuePair::SendEntry* QueuePair::oldest_unanswered(uint32_t& index) {
    for (index = sq_head_; index != sq_tail_; ++index) {
        SendEntry& entry = sq_at(index);
        if (!entry.started)
            break;
        if (is_read_or_atomic(entry.wqe) && !entry.acked)
            return &entry;
    }
    return nullptr;
}

void QueuePair::restart_retry_timer(Nanoseconds now) {
    // The timer runs for what is still unacknowledged and stops when nothing is.
    comp_.retry_deadline = kNoDeadline;
    if (sq_head_ != sq_tail_ && sq_at(sq_head_).started)
        arm_retry_timer(now);
}

void QueuePair::on_read_response(const IbPacket& packet, Nanoseconds now) {
    // The oldest unanswered read is the one these responses belong to (9.7.5.2.5).
    uint32_t index = 0;
    SendEntry* read = oldest_unanswered(index);
    if (!read || read->wqe.opcode != WrOpcode::RdmaRead) {
        ++counters_.dropped;
        return;
    }
    const uint32_t expected = psn_add(read->first_psn, read->received_packets);
    const int32_t diff = psn_diff(packet.bth->psn(), expected);
    if (diff < 0) {
        ++counters_.duplicates;
        return;
    }
    if (diff > 0) {
        // A response went missing or is late: ask again from the first one not
        // received, once per gap (the local ACK timeout covers a lost re-request).
        ++counters_.out_of_sequence;
        if (!comp_.gap_rewound || comp_.gap_psn != expected) {
            comp_.gap_rewound = true;
            comp_.gap_psn = expected;
            ++counters_.retries;
            rewind_to(expected);
        }
        return;
    }
    comp_.gap_rewound = false;
    // A read response implicitly acknowledges every earlier request (9.7.5.2.5).
    if (index != sq_head_)
        handle_ack_psn(psn_add(read->first_psn, -1), now);
    const uint32_t mtu = path_mtu_bytes(attr_.mtu);
    const uint32_t k = read->received_packets;
    const uint32_t offset = k * mtu;
    const uint32_t want = std::min(mtu, read->wqe.length - std::min(read->wqe.length, offset));
    const bool last = k + 1 == read->packets;
    if (packet.payload_length != want || packet.info->ends_message() != last) {
        complete_send_error(*read, WcStatus::BadResponseError);
        return;
    }
    if (want && scatter(memory_, read->wqe.sge.data(), read->wqe.num_sge, offset, packet.payload,
                        want) != MemoryStatus::Ok) {
        complete_send_error(*read, WcStatus::LocalProtectionError);
        return;
    }
    if (want && last)
        memory_.end_message();
    ++read->received_packets;
    reset_retry_counts();
    arm_retry_timer(now);
    if (last)
        finish_read_or_atomic(*read, now);
}

void QueuePair::finish_read_or_atomic(SendEntry& entry, Nanoseconds now) {
    entry.acked = true;
    --req_.outstanding_rd_atomic;
    reset_retry_counts();
    handle_ack_psn(comp_.acked_psn, now); // later requests an earlier ACK already covered
    retire_completed();
    restart_retry_timer(now);
}

void QueuePair::on_atomic_ack(const IbPacket& packet, Nanoseconds now) {
    uint32_t index = 0;
    SendEntry* atomic = oldest_unanswered(index);
    if (!atomic || atomic->wqe.opcode == WrOpcode::RdmaRead ||
        packet.bth->psn() != atomic->first_psn) {
        ++counters_.duplicates;
        return;
    }
    if (index != sq_head_)
        handle_ack_psn(psn_add(atomic->first_psn, -1), now);
    uint8_t original[8];
    const uint64_t value = packet.atomic_ack->original();
    std::memcpy(original, &value, 8); // the requester's memory holds host order
    if (scatter(memory_, atomic->wqe.sge.data(), atomic->wqe.num_sge, 0, original, 8) !=
        MemoryStatus::Ok) {
        complete_send_error(*atomic, WcStatus::LocalProtectionError);
        return;
    }
    finish_read_or_atomic(*atomic, now);
}

} // namespace softhca::transport
