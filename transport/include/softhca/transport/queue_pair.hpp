// A queue pair of any transport service (IBTA chapter 9), sans I/O. It takes work
// requests, packets and the time; it produces packets (pulled with transmit()),
// completions and memory accesses (through the sinks it was given) and a timer deadline.
//
// Like Linux rxe it keeps one sub-state per role:
//   requester  work requests -> request packets (segmentation, PSNs, retransmission)
//   completer  ACKs, NAKs, read responses and atomic ACKs -> send completions
//   responder  request packets -> memory, receive completions, ACK/NAK and responses
// The service decides which of those rules apply: RC uses them all; UC (9.8) sends
// without acknowledgements and drops a message with a lost packet; UD (9.8) sends
// single-packet messages to the address in each work request, checked by Q_Key; XRC
// (Annex A14) is RC with the target's SRQ named in each request (XRCETH).
#pragma once

#include "softhca/transport/ib_packet.hpp"
#include "softhca/transport/memory_access.hpp"
#include "softhca/transport/path_mtu.hpp"
#include "softhca/transport/qp_state.hpp"
#include "softhca/transport/receive_queue.hpp"
#include "softhca/transport/work_requests.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace softhca::transport {

// Where completions and QP-level events go.
class CompletionSink {
  public:
    virtual ~CompletionSink() = default;
    virtual void send_completion(const Completion& completion) = 0;
    virtual void recv_completion(const Completion& completion) = 0;
    // One send queue entry finished (signaled or not), oldest first.
    virtual void send_wqe_retired() = 0;
    // The QP entered the error state by itself (a transport error), detected by the
    // responder (an affiliated asynchronous error, 11.6.3) or by the requester (whose
    // error the failing work request's completion reports).
    virtual void qp_error(WcStatus cause, bool detected_by_responder) = 0;
    // The first packet arrived while the QP was in RTR (communication established,
    // 11.6.3.1).
    virtual void communication_established() {}
    // In SQD, every request started before the drain has completed (11.6.3.1).
    virtual void send_queue_drained() {}
    // A QP on a shared receive queue is in the error state and will take no more
    // receive requests from it (11.6.3.1, last WQE reached).
    virtual void last_wqe_reached() {}
};

struct QpConfig {
    uint32_t dest_qp = 0;
    uint32_t qkey = 0; // UD: the Q_Key received messages must carry
    PathMtu mtu = PathMtu::Mtu1024;
    uint32_t sq_psn = 0;            // first PSN the requester sends
    uint32_t rq_psn = 0;            // first PSN the responder expects
    uint8_t timeout = 14;           // local ACK timeout: 4.096 us * 2^timeout, 0 = infinite
    uint8_t retry_cnt = 7;          // transport retries
    uint8_t rnr_retry = 7;          // RNR retries, 7 = infinite
    uint8_t min_rnr_timer = 12;     // RNR NAK timer code we send (9.7.5.2.8)
    uint8_t max_rd_atomic = 1;      // reads/atomics we may have outstanding
    uint8_t max_dest_rd_atomic = 1; // reads/atomics we accept outstanding
    uint32_t access = 0;            // remote rights the QP grants (access::kRemote*)
    uint16_t pkey = 0xffff;
};

struct QpCounters {
    uint64_t packets_sent = 0;
    uint64_t packets_received = 0;
    uint64_t retransmitted_packets = 0;
    uint64_t timeouts = 0;
    uint64_t naks_sent = 0;
    uint64_t naks_received = 0;
    uint64_t rnr_naks_sent = 0;
    uint64_t rnr_naks_received = 0;
    uint64_t duplicates = 0;
    uint64_t out_of_sequence = 0;
    uint64_t dropped = 0;                // packets that could not be processed in the current state
    uint64_t qkey_violations = 0;        // UD messages with another Q_Key, dropped
    uint64_t dropped_messages = 0;       // UC/UD messages dropped whole (lost packet, no WQE...)
    uint64_t sequence_naks_received = 0; // NAKs for a PSN sequence error (9.7.5.2.2)
    uint64_t retries_exceeded = 0;       // requests failed with retry_cnt spent
    uint64_t rnr_retries_exceeded = 0;   // requests failed with rnr_retry spent
    uint64_t retries = 0; // go-back-N retries started: a local ACK timeout, a sequence-error
                          // NAK, a missing read response (not an RNR NAK's wait)
    uint64_t sends_completed = 0;    // SEND requests completed, in error too (not flushed)
    uint64_t receives_completed = 0; // receive WQEs completed successfully
    uint64_t placed_messages = 0;    // RDMA WRITEs and READs the initiator placed itself
    uint64_t placed_bytes = 0;       // their bytes

    // Sums (a device's QPs, those destroyed and those alive).
    QpCounters& operator+=(const QpCounters& o) {
        packets_sent += o.packets_sent;
        packets_received += o.packets_received;
        retransmitted_packets += o.retransmitted_packets;
        timeouts += o.timeouts;
        naks_sent += o.naks_sent;
        naks_received += o.naks_received;
        rnr_naks_sent += o.rnr_naks_sent;
        rnr_naks_received += o.rnr_naks_received;
        duplicates += o.duplicates;
        out_of_sequence += o.out_of_sequence;
        dropped += o.dropped;
        qkey_violations += o.qkey_violations;
        dropped_messages += o.dropped_messages;
        sequence_naks_received += o.sequence_naks_received;
        retries_exceeded += o.retries_exceeded;
        rnr_retries_exceeded += o.rnr_retries_exceeded;
        retries += o.retries;
        sends_completed += o.sends_completed;
        receives_completed += o.receives_completed;
        placed_messages += o.placed_messages;
        placed_bytes += o.placed_bytes;
        return *this;
    }
};
static_assert(sizeof(QpCounters) == 21 * sizeof(uint64_t), "operator+= sums every counter");

// Time in nanoseconds, from any fixed origin.
using Nanoseconds = uint64_t;
constexpr Nanoseconds kNoDeadline = UINT64_MAX;

// The requester's ACK cadence and window (RC, XRC). A long message asks for an ACK
// every kAckReqEvery packets, not only on its last (9.7.5.2.1 leaves when to set AckReq
// to the requester), so the local ACK timer restarts as the message progresses and a
// message that takes longer to send than the timeout does not time out; a
// retransmission starts from the first packet not acknowledged. At most
// kMaxUnackedPackets PSNs are outstanding (Linux rxe: 64 and 128).
constexpr uint32_t kAckReqEvery = 64;
constexpr uint32_t kMaxUnackedPackets = 256;

// RNR NAK timer codes to nanoseconds (IBTA 9.7.5.2.8, table 45).
Nanoseconds rnr_timer_ns(uint8_t code);
// Local ACK timeout exponent to nanoseconds (4.096 us * 2^exp), 0 = no timeout.
Nanoseconds ack_timeout_ns(uint8_t exponent);
// The AETH credit code for a number of available receive WQEs (9.7.7.2, table 46),
// and back (code 31, "invalid", means no limit: UINT32_MAX).
uint8_t credit_code(uint32_t available);
uint32_t credits_for_code(uint8_t code);

class QueuePair {
  public:
    QueuePair(uint32_t qp_num, Service service, uint32_t sq_depth, uint32_t rq_depth,
              MemoryAccess& memory, CompletionSink& sink);

    // Receive from a shared receive queue instead of the QP's own (before any use).
    void use_srq(ReceiveQueue& srq) { rq_ = &srq; }
    // XRC target: each message's XRCETH names its SRQ, found here.
    void use_srq_directory(SrqDirectory& srqs) { srqs_ = &srqs; }
    // XRC target: `srq` is being destroyed; nothing may refer to it any more.
    void forget_srq(ReceiveQueue& srq);
    bool has_srq() const { return rq_ != &own_rq_ || service_ == Service::XRC; }

    uint32_t qp_num() const { return qp_num_; }
    Service service() const { return service_; }
    QpState state() const { return state_; }
    // In SQD with started requests still outstanding (ibv_query_qp's sq_draining).
    bool send_queue_draining() const { return state_ == QpState::Sqd && !drain_reported_; }
    QpConfig& attributes() { return attr_; }
    const QpConfig& attributes() const { return attr_; }
    const QpCounters& counters() const { return counters_; }
    // The PSN the requester sends next and the one the responder expects next (what
    // ibv_query_qp's sq_psn and rq_psn report on rxe once the QP runs).
    uint32_t requester_psn() const { return req_.next_psn; }
    uint32_t responder_psn() const { return resp_.epsn; }

    // Applies a state change already validated with modify_qp_allowed(). Entering RTR
    // loads rq_psn, entering RTS loads sq_psn; entering ERR flushes every work request.
    void set_state(QpState state, Nanoseconds now);

    // Work requests. Return false when the queue is full (or, for receives, when the
    // QP uses an SRQ). In the error state the request completes at once with
    // WR_FLUSH_ERR (and sends do in SQE too).
    bool post_send(const SendWqe& wqe);
    bool post_recv(const RecvWqe& wqe);
    // The same in place, with no copy of a whole request (the engine's data path): the
    // next free entry, its fields reset and its SGEs and inline bytes left as they were
    // (fill what num_sge and length say), or nullptr when the queue is full (for
    // receives, also when the QP uses an SRQ); then post_prepared_send/recv() posts it.
    SendWqe* prepare_send();
    void post_prepared_send();
    RecvWqe* prepare_recv();
    void post_prepared_recv();
    uint32_t send_queue_used() const { return sq_tail_ - sq_head_; }

    // One packet from the peer (dest QP already matched to this QP). `grh` is the
    // 40-byte GRH a UD receive delivers in front of the data (for RoCEv2 over IPv4,
    // 20 bytes of zeros and the IPv4 header, as ibv_init_ah_from_wc reads it).
    void receive(const IbPacket& packet, Nanoseconds now, const uint8_t* grh = nullptr);
    // Requests will reach this responder without packets: placed in its memory by the
    // requester itself (SendWqe::placed). In RTR the first one establishes the
    // connection, as its first packet would (COMM_EST, 11.6.3.1).
    void requests_placed();

    // Builds the next packet to send into `buffer` (BTH onwards, pad included, no
    // ICRC) and returns its length, or 0 when there is nothing to send now. For UD,
    // `destination` is set to the address vector of the packet's work request (valid
    // until the next post_send); connected services send to the QP's own path. The
    // responder (read responses, ACKs) and the requester take turns.
    size_t transmit(uint8_t* buffer, size_t capacity, Nanoseconds now,
                    const AddressVector** destination = nullptr);

    // UD: the address vector of the next request to send, or nullptr (connected
    // services, or nothing to send).
    const AddressVector* next_destination() const {
        return service_ == Service::UD && req_.sq_send != sq_tail_
                   ? &sq_[req_.sq_send % sq_.size()].wqe.av
                   : nullptr;
    }

    // True when transmit() may produce something without new input.
    bool wants_transmit(Nanoseconds now) const;

    // Memory this QP wrote turned out not to be writable after all (its user queues
    // writes and does them later): the data is lost. As when a write fails at once, a
    // receive the message in progress was filling completes with a local protection
    // error, RC answers with a fatal NAK (remote operational error) instead of the ACK,
    // and the QP enters the error state.
    void memory_fault();

    Nanoseconds next_deadline() const;
    void on_timer(Nanoseconds now);

  private:
    // ---- requester / completer: the send queue ----
    // The progress of an entry (everything but its request), reset when it is reused.
    struct SendProgress {
        uint32_t first_psn = 0;
        uint32_t packets = 0;     // PSNs the message occupies
        uint32_t next_packet = 0; // next packet to (re)send, 0..packets (read: 0 or packets)
        bool started = false;
        bool acked = false;            // sends/writes: covered by an ACK; reads/atomics: answered
        uint32_t received_packets = 0; // read response packets received in order
    };
    struct SendEntry : SendProgress {
        SendWqe wqe;
    };
    SendEntry& sq_at(uint32_t index) { return sq_[index % sq_.size()]; }
    // Names an entry's message to MemoryAccess::read_message: its send queue position
    // and first PSN, unique among outstanding requests. Read responses carry
    // kResponseTagBit, the QP number (an XRC target's SRQ memory serves several QPs)
    // and a count.
    uint64_t message_tag(const SendEntry& entry) const {
        return static_cast<uint64_t>(&entry - sq_.data()) | uint64_t{entry.first_psn} << 24;
    }
    static constexpr uint64_t kResponseTagBit = 1ull << 63;
    bool reliable() const { return service_ == Service::RC || service_ == Service::XRC; }
    // An opcode of op:: (the low five bits) in this QP's service.
    uint8_t wire_opcode(uint8_t code) const {
        switch (service_) {
        case Service::UC:
            return op::uc(code);
        case Service::UD:
            return op::ud(code);
        case Service::XRC:
            return op::xrc(code);
        default:
            return op::rc(code);
        }
    }
    bool is_read_or_atomic(const SendWqe& wqe) const;
    bool start_entry(SendEntry& entry);
    bool is_local_operation(const SendWqe& wqe) const;
    // An RDMA WRITE or READ the initiator placed itself (SendWqe::placed), on RC: the
    // flag means nothing on another service.
    bool is_placed(const SendWqe& wqe) const;
    // An RDMA WRITE with immediate the initiator placed itself, on RC: one packet that
    // carries no payload.
    bool is_placed_with_immediate(const SendWqe& wqe) const;
    bool run_local_operation(SendEntry& entry);
    size_t build_request(SendEntry& entry, uint8_t* buffer, size_t capacity);
    size_t transmit_request(uint8_t* buffer, size_t capacity, Nanoseconds now,
                            const AddressVector** destination);
    bool requester_has_work(Nanoseconds now) const {
        return (state_ == QpState::Rts || state_ == QpState::Sqd) && now >= req_.rnr_wait_until &&
               req_.sq_send != sq_tail_;
    }
    void rewind_to(uint32_t psn);
    bool gathered_sges_valid(const SendWqe& wqe);
    bool within_window(const SendEntry& entry) const;
    void handle_ack_psn(uint32_t psn, Nanoseconds now); // everything up to psn is acked
    void reset_retry_counts(); // progress: both retry budgets are whole again
    void retire_completed();
    void complete_send_error(SendEntry& entry, WcStatus status);
    void on_response(const IbPacket& packet, Nanoseconds now);
    void on_read_response(const IbPacket& packet, Nanoseconds now);
    void on_atomic_ack(const IbPacket& packet, Nanoseconds now);
    void finish_read_or_atomic(SendEntry& entry, Nanoseconds now);
    void on_nak(uint32_t psn, uint8_t syndrome, Nanoseconds now);
    void arm_retry_timer(Nanoseconds now);
    void restart_retry_timer(Nanoseconds now);
    // The oldest started read or atomic still waiting for its response (and its index).
    SendEntry* oldest_unanswered(uint32_t& index);
    void update_credits(uint8_t syndrome);
    static bool consumes_recv(const SendWqe& wqe);
    bool retries_exhausted(WcStatus status);

    // ---- responder ----
    struct ResponderResource { // an accepted RDMA READ or atomic (9.7.5.1.5)
        bool read = true;
        uint32_t first_psn = 0;
        uint32_t packets = 0;
        uint32_t next_packet = 0; // next response packet to send
        uint64_t va = 0;
        uint32_t rkey = 0;
        uint32_t length = 0;
        uint64_t atomic_original = 0;
        MemoryAccess* memory = nullptr; // where a read's data comes from
        uint64_t tag = 0;               // names the read to memory.read_message (0: none yet)
        bool active = false;            // responses still to send
        bool replay = false;            // answering a duplicate request again
    };
    // A resource starts or stops having responses to send (active_responses follows).
    void set_response_active(ResponderResource& r, bool active);
    // The ring slot for a newly accepted read or atomic, emptied.
    ResponderResource& next_resource();
    void on_request(const IbPacket& packet, Nanoseconds now);
    // UC: in-sequence packets continue a message, a gap drops it.
    void on_unacknowledged_request(const IbPacket& packet);
    void on_ud_request(const IbPacket& packet, const uint8_t* grh);
    // A request that cannot be executed: a NAK on RC; UC and UD drop the message.
    void reject(uint8_t nak_syndrome, uint32_t psn);
    // UC/UD: the message in progress is dropped whole (its later packets with it).
    void drop_message();
    // Makes the oldest receive request the one the arriving message fills; false when
    // there is none.
    bool take_recv();
    bool payload_length_valid(const IbPacket& packet) const;
    // Memory remote requests reach: the QP's PD, or for an XRC target the PD of the
    // SRQ the message named.
    MemoryAccess& responder_memory() { return service_ == Service::XRC ? rq_->memory() : memory_; }
    // XRC target: makes the SRQ a new message names the one it uses; false (after a
    // NAK) when there is no such SRQ in the target's domain.
    bool select_xrc_srq(const IbPacket& packet, uint32_t psn);
    void on_duplicate_request(const IbPacket& packet);
    bool accept_send(const IbPacket& packet, uint32_t psn);
    bool accept_write(const IbPacket& packet, uint32_t psn);
    bool accept_read(const IbPacket& packet, uint32_t psn);
    bool accept_atomic(const IbPacket& packet, uint32_t psn);
    void responder_nak(uint8_t code, uint32_t psn, bool fatal);
    void complete_recv(const IbPacket& packet, uint32_t byte_len,
                       NetworkHeader network_header = NetworkHeader::None, bool staged = false);
    bool stage_receive(const IbPacket& packet);
    // The receive WQE in use fails: its error completion, a fatal NAK, the error state.
    void fail_receive(WcStatus status, uint8_t nak_code, uint32_t psn);
    size_t build_response(uint8_t* buffer, size_t capacity);
    uint8_t ack_syndrome() const;

    // ---- state ----
    void enter_error(WcStatus cause, bool detected_by_responder = false);
    // What entering the error state does once the state is set: the async event, then
    // every queue flushed.
    void report_error_and_flush(WcStatus cause, bool detected_by_responder);
    // UC and UD: a send request failed; the send queue stops, receives go on (10.3.1).
    void enter_send_queue_error();
    void flush_send_queue();
    void check_drained();
    void flush_all();

    uint32_t qp_num_;
    Service service_;
    QpState state_ = QpState::Reset;
    QpConfig attr_;
    QpCounters counters_;
    MemoryAccess& memory_;
    CompletionSink& sink_;

    // The send queue: entries from sq_head_ (oldest not retired) to sq_tail_ (next
    // free); the requester transmits req_.sq_send.
    std::vector<SendEntry> sq_;
    uint32_t sq_head_ = 0;
    uint32_t sq_tail_ = 0;

    // Each role's state (rxe's qp->req, qp->comp, qp->resp). Entering RESET is one
    // assignment per role; RTR and RTS then load the PSNs (set_state).
    struct RequesterState {
        uint32_t sq_send = 0; // entry being transmitted
        uint32_t next_psn = 0;
        // Request packets sent since the last one that asked for an ACK (kAckReqEvery).
        uint32_t packets_since_ack_req = 0;
        uint32_t outstanding_rd_atomic = 0;
        // End-to-end credits (9.7.7.2): receive WQEs the responder last said it has
        // free, UINT32_MAX while unknown or unlimited; and our unacknowledged messages
        // that will each consume one there.
        uint32_t credits = UINT32_MAX;
        uint32_t outstanding_consuming = 0;
        Nanoseconds rnr_wait_until = 0; // an RNR NAK holds sending until then
    };
    struct CompleterState {
        uint32_t acked_psn = 0; // highest PSN the responder has acknowledged
        uint32_t retry_left = 0;
        uint32_t rnr_left = 0;
        Nanoseconds retry_deadline = kNoDeadline; // the local ACK timer
        bool gap_rewound = false; // already asked again for the responses from gap_psn
        uint32_t gap_psn = 0;
    };
    struct ResponderState {
        uint32_t run = 0;  // packets sent in a row while the requester waits (transmit)
        uint32_t epsn = 0; // next PSN the responder expects
        uint32_t msn = 0;  // messages completed by the responder (24 bits)
        bool nak_sequence_sent = false;
        OpKind in_progress = OpKind::Invalid; // multi-packet message being received
        uint32_t message_offset = 0;
        uint32_t xrc_srqn = 0;           // XRC target: the SRQ of the message in progress
        RecvWqe recv;                    // the receive request the message in progress fills
        bool recv_taken = false;         // recv belongs to the message in progress
        uint64_t small_staged_place = 0; // a message staged in its completion goes here
        uint64_t write_va = 0;
        uint32_t write_rkey = 0;
        uint32_t write_remaining = 0;
        uint32_t write_length = 0;
        std::vector<ResponderResource> resources;
        uint32_t resource_next = 0; // ring position for the next accepted read/atomic
        // Resources with responses still to send: the per-packet paths (build_response,
        // wants_transmit) look at the ring only when there are any.
        uint32_t active_responses = 0;
        uint32_t response_tags = 0; // read responses named to read_message so far
        // ACK/NAK waiting to be sent (one at a time: a newer ACK replaces an older one)
        bool ack_pending = false;
        uint32_t ack_psn = 0;
        uint8_t ack_syndrome_override = 0; // nonzero: a NAK or RNR NAK syndrome
        bool error_after_nak = false;      // the pending NAK ends the connection
        WcStatus nak_error_cause = WcStatus::Success;
    };
    RequesterState req_;
    CompleterState comp_;
    ResponderState resp_;
    // transmit(): the responder's packets in a row before the requester's turn.
    static constexpr uint32_t kResponderTurn = 16;

    ReceiveQueue own_rq_;
    ReceiveQueue* rq_; // own_rq_ or an SRQ
    SrqDirectory* srqs_ = nullptr;

    // Events reported once (11.6.3.1).
    bool last_wqe_reported_ = false; // LAST_WQE_REACHED
    bool established_ = false;       // COMM_EST
    bool drain_reported_ = false;    // SQ_DRAINED, for this SQD entry
};

} // namespace softhca::transport
