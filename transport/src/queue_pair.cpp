// Queue pair: construction, state changes, posting, the transmit schedule, timers
// and flushing. The roles live in requester.cpp, completer.cpp, responder.cpp.
#include "softhca/transport/queue_pair.hpp"

#include "softhca/transport/psn.hpp"

#include <algorithm>

namespace softhca::transport {

Nanoseconds rnr_timer_ns(uint8_t code) {
    // IBTA 9.7.5.2.8 table 45, in units of 10 microseconds; code 0 is 655.36 ms.
    static constexpr uint32_t k10us[32] = {65536, 1,    2,    3,     4,     6,     8,     12,
                                           16,    24,   32,   48,    64,    96,    128,   192,
                                           256,   384,  512,  768,   1024,  1536,  2048,  3072,
                                           4096,  6144, 8192, 12288, 16384, 24576, 32768, 49152};
    return Nanoseconds{k10us[code & 31]} * 10000;
}

Nanoseconds ack_timeout_ns(uint8_t exponent) {
    if (exponent == 0)
        return kNoDeadline;
    return Nanoseconds{4096} << std::min<uint8_t>(exponent, 31);
}

namespace {
// IBTA 9.7.7.2 table 46: AETH credit code n stands for this many credits.
constexpr uint32_t kCreditsForCode[31] = {
    0,   1,   2,   3,   4,    6,    8,    12,   16,   24,   32,   48,    64,    96,    128,  192,
    256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768};
} // namespace

uint8_t credit_code(uint32_t available) {
    uint8_t code = 0;
    while (code < 30 && kCreditsForCode[code + 1] <= available)
        ++code;
    return code;
}

uint32_t credits_for_code(uint8_t code) {
    return code >= 31 ? UINT32_MAX : kCreditsForCode[code];
}

QueuePair::QueuePair(uint32_t qp_num, Service service, uint32_t sq_depth, uint32_t rq_depth,
                     MemoryAccess& memory, CompletionSink& sink)
    : qp_num_(qp_num), service_(service), memory_(memory), sink_(sink),
      sq_(std::max<uint32_t>(sq_depth, 1)), own_rq_(rq_depth, memory), rq_(&own_rq_) {}

void QueuePair::set_state(QpState state, Nanoseconds now) {
    (void)now;
    const QpState old = state_;
    state_ = state;
    switch (state) {
    case QpState::Reset:
        sq_head_ = sq_tail_ = 0;
        req_ = {};
        comp_ = {};
        resp_ = {};
        own_rq_.clear(); // an SRQ keeps what was posted to it
        last_wqe_reported_ = false;
        memory_.forget_message(MemoryAccess::kEveryMessage);
        counters_ = {};
        break;
    case QpState::Rtr:
        if (old != QpState::Rtr) {
            established_ = false;
            resp_.epsn = attr_.rq_psn & kPsnMask;
            resp_.msn = 0;
            resp_.nak_sequence_sent = false;
            // Keep more answered resources than may be outstanding, so duplicates of
            // recent reads and atomics can still be replayed (9.7.5.1.5).
            resp_.resources.assign(std::max<size_t>(16, attr_.max_dest_rd_atomic), {});
            resp_.resource_next = 0;
            resp_.active_responses = 0;
        }
        break;
    case QpState::Sqd:
        drain_reported_ = false;
        check_drained();
        break;
    case QpState::Rts:
        established_ = true; // a QP moved to RTS by the application needs no event
        if (old == QpState::Rtr) {
            req_.next_psn = attr_.sq_psn & kPsnMask;
            comp_.acked_psn = psn_add(req_.next_psn, -1);
            comp_.retry_left = attr_.retry_cnt;
            comp_.rnr_left = attr_.rnr_retry;
            req_.credits = UINT32_MAX;
            req_.outstanding_consuming = 0;
        }
        break;
    case QpState::Error:
        flush_all();
        break;
    default:
        break;
    }
}

bool QueuePair::post_send(const SendWqe& wqe) {
    SendWqe* slot = prepare_send();
    if (!slot)
        return false;
    *slot = wqe;
    post_prepared_send();
    return true;
}

SendWqe* QueuePair::prepare_send() {
    if (sq_tail_ - sq_head_ >= sq_.size())
        return nullptr;
    SendEntry& entry = sq_at(sq_tail_);
    static_cast<SendProgress&>(entry) = {};
    static_cast<SendWqeFields&>(entry.wqe) = {};
    return &entry.wqe;
}

void QueuePair::post_prepared_send() {
    ++sq_tail_;
    if (state_ == QpState::Error)
        flush_all();
    else if (state_ == QpState::Sqe)
        flush_send_queue();
}

bool QueuePair::post_recv(const RecvWqe& wqe) {
    RecvWqe* slot = prepare_recv();
    if (!slot)
        return false;
    *slot = wqe;
    post_prepared_recv();
    return true;
}

RecvWqe* QueuePair::prepare_recv() {
    return has_srq() ? nullptr : own_rq_.prepare_post();
}

void QueuePair::post_prepared_recv() {
    own_rq_.post_prepared();
    if (state_ == QpState::Error)
        flush_all();
}

void QueuePair::receive(const IbPacket& packet, Nanoseconds now, const uint8_t* grh) {
    ++counters_.packets_received;
    // P_Key check (10.9.3): the low 15 bits must match; mismatches are silently dropped.
    if (packet.info->service != service_ ||
        (packet.bth->pkey() & 0x7fff) != (attr_.pkey & 0x7fff)) {
        ++counters_.dropped;
        return;
    }
    if (service_ == Service::UD)
        on_ud_request(packet, grh);
    else if (service_ == Service::UC)
        on_unacknowledged_request(packet);
    else if (packet.info->request)
        on_request(packet, now);
    else
        on_response(packet, now);
}

bool QueuePair::wants_transmit(Nanoseconds now) const {
    if (state_ == QpState::Reset || state_ == QpState::Init || state_ == QpState::Error)
        return false;
    if (resp_.ack_pending)
        return true;
    if (resp_.active_responses)
        return true;
    return requester_has_work(now);
}

size_t QueuePair::transmit(uint8_t* buffer, size_t capacity, Nanoseconds now,
                           const AddressVector** destination) {
    if (state_ == QpState::Reset || state_ == QpState::Init || state_ == QpState::Error)
        return 0;
    // The responder and the requester are two engines of the QP (rxe's resp and req tasks,
    // an HCA's send and response schedulers), and their PSNs are independent sequences:
    // they take turns, the responder kResponderTurn packets, then the requester one, so a
    // long READ response does not hold back this QP's own requests. A rank of an
    // all-to-all answers its peer's RDMA READ and reads from that peer on one QP;
    // answering first halved what the pair moved over a rate-limited link.
    const auto respond = [&]() -> size_t {
        const size_t n = build_response(buffer, capacity);
        if (n) {
            ++counters_.packets_sent;
            ++resp_.run;
        }
        return n;
    };
    if (resp_.run < kResponderTurn || !requester_has_work(now))
        if (const size_t n = respond())
            return n;
    resp_.run = 0;
    if (const size_t n = transmit_request(buffer, capacity, now, destination))
        return n;
    // The requester may have ended the connection (a local error): nothing more leaves.
    return state_ == QpState::Error ? 0 : respond();
}

size_t QueuePair::transmit_request(uint8_t* buffer, size_t capacity, Nanoseconds now,
                                   const AddressVector** destination) {
    if (!requester_has_work(now))
        return 0;
    while (req_.sq_send != sq_tail_ && state_ != QpState::Error) {
        SendEntry& entry = sq_at(req_.sq_send);
        if (!entry.started) {
            if (state_ == QpState::Sqd || !start_entry(entry))
                return 0;
            if (entry.packets == 0) { // a local operation, done: it completes in order
                ++req_.sq_send;
                retire_completed();
                continue;
            }
        }
        const bool more = is_read_or_atomic(entry.wqe) ? entry.next_packet == 0
                                                       : entry.next_packet < entry.packets;
        if (!more) {
            ++req_.sq_send;
            continue;
        }
        if (reliable() && !within_window(entry))
            return 0; // wait for ACKs
        const size_t n = build_request(entry, buffer, capacity);
        if (n) {
            if (destination)
                *destination = &entry.wqe.av;
            ++counters_.packets_sent;
            if (reliable() && comp_.retry_deadline == kNoDeadline)
                arm_retry_timer(now);
        }
        return n;
    }
    return 0;
}

Nanoseconds QueuePair::next_deadline() const {
    Nanoseconds deadline = comp_.retry_deadline;
    if (req_.rnr_wait_until && req_.sq_send != sq_tail_)
        deadline = std::min(deadline, req_.rnr_wait_until);
    return deadline;
}

void QueuePair::arm_retry_timer(Nanoseconds now) {
    const Nanoseconds timeout = ack_timeout_ns(attr_.timeout);
    comp_.retry_deadline = timeout == kNoDeadline ? kNoDeadline : now + timeout;
}

void QueuePair::on_timer(Nanoseconds now) {
    if (now >= req_.rnr_wait_until)
        req_.rnr_wait_until = 0;
    if (now < comp_.retry_deadline || state_ == QpState::Error)
        return;
    comp_.retry_deadline = kNoDeadline;
    // Local ACK timeout (9.7.6.1.3): resend from the oldest unacknowledged request.
    for (uint32_t i = sq_head_; i != sq_tail_; ++i) {
        SendEntry& entry = sq_at(i);
        if (!entry.started)
            break;
        if (entry.acked)
            continue;
        ++counters_.timeouts;
        if (retries_exhausted(WcStatus::RetryExceededError))
            return;
        uint32_t from = psn_add(entry.first_psn, entry.received_packets);
        // Packets of a message already acknowledged need not go again.
        const uint32_t last = psn_add(entry.first_psn, entry.packets - 1);
        if (!is_read_or_atomic(entry.wqe) && psn_diff(comp_.acked_psn, from) >= 0 &&
            psn_diff(comp_.acked_psn, last) < 0)
            from = psn_add(comp_.acked_psn, 1);
        ++counters_.retries;
        rewind_to(from);
        return;
    }
}

bool QueuePair::retries_exhausted(WcStatus status) {
    uint32_t& left = status == WcStatus::RnrRetryExceededError ? comp_.rnr_left : comp_.retry_left;
    if (status == WcStatus::RnrRetryExceededError && attr_.rnr_retry == 7)
        return false; // 7 means retry for ever (9.7.5.2.8)
    if (left == 0) {
        ++(status == WcStatus::RnrRetryExceededError ? counters_.rnr_retries_exceeded
                                                     : counters_.retries_exceeded);
        complete_send_error(sq_at(sq_head_), status);
        return true;
    }
    --left;
    return false;
}

void QueuePair::check_drained() {
    // Drained: nothing started is still waiting for its acknowledgement or response
    // (requests not yet started stay queued until the QP returns to RTS).
    if (state_ != QpState::Sqd || drain_reported_)
        return;
    for (uint32_t i = sq_head_; i != sq_tail_; ++i)
        if (sq_at(i).started)
            return;
    drain_reported_ = true;
    sink_.send_queue_drained();
}

void QueuePair::enter_error(WcStatus cause, bool detected_by_responder) {
    if (state_ == QpState::Error)
        return;
    state_ = QpState::Error;
    report_error_and_flush(cause, detected_by_responder);
}

void QueuePair::report_error_and_flush(WcStatus cause, bool detected_by_responder) {
    // The error is reported first; flushing follows (and, on an SRQ, LAST_WQE_REACHED).
    sink_.qp_error(cause, detected_by_responder);
    flush_all();
}

void QueuePair::enter_send_queue_error() {
    if (state_ == QpState::Error || state_ == QpState::Sqe)
        return;
    state_ = QpState::Sqe;
    flush_send_queue();
}

void QueuePair::flush_send_queue() {
    // 10.7.2.3 / 11.4.1.1: every outstanding send request completes with a flush error,
    // signaled or not.
    for (; sq_head_ != sq_tail_; ++sq_head_) {
        const SendWqe& wqe = sq_at(sq_head_).wqe;
        Completion c;
        c.wr_id = wqe.wr_id;
        c.status = WcStatus::WrFlushError;
        c.qp_num = qp_num_;
        sink_.send_wqe_retired();
        sink_.send_completion(c);
    }
    req_.sq_send = sq_head_;
    req_.outstanding_rd_atomic = 0;
    req_.outstanding_consuming = 0;
    comp_.retry_deadline = kNoDeadline;
}

void QueuePair::flush_all() {
    // In the error state receives flush too: the one a message was filling first, then
    // the QP's own queue. An SRQ's requests stay for its other QPs.
    flush_send_queue();
    memory_.forget_message(MemoryAccess::kEveryMessage);
    Completion c;
    c.status = WcStatus::WrFlushError;
    c.opcode = WcOpcode::Recv;
    c.qp_num = qp_num_;
    c.srq_num = resp_.xrc_srqn;
    if (resp_.recv_taken) {
        c.wr_id = resp_.recv.wr_id;
        resp_.recv_taken = false;
        sink_.recv_completion(c);
    }
    if (!has_srq()) {
        for (; !own_rq_.empty(); own_rq_.pop()) {
            c.wr_id = own_rq_.front().wr_id;
            sink_.recv_completion(c);
        }
    } else if (!last_wqe_reported_) {
        last_wqe_reported_ = true;
        sink_.last_wqe_reached();
    }
    resp_.in_progress = OpKind::Invalid;
}

} // namespace softhca::transport
