// A queue pair inside the engine: the shared-memory work queues the provider fills,
// the transport's state machine that executes them (RC, UC or UD), the memory it
// reaches, and the completion queues it reports to. One per ibv_qp.
#pragma once

#include "cq_ring_owner.hpp"
#include "engine_srq.hpp"
#include "grant_page.hpp"
#include "process_memory.hpp"
#include "qp_congestion.hpp"
#include "shared_memory.hpp"
#include "softhca/device_interface/control.hpp"
#include "softhca/device_interface/doorbell_page.hpp"
#include "softhca/device_interface/qp_ring.hpp"
#include "softhca/transport/psn.hpp"
#include "softhca/transport/qp_state.hpp"
#include "softhca/transport/queue_pair.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <cstdint>
#include <memory>
#include <optional>

namespace softhca::engine {

struct CompletionQueue;
class QueueContext;
struct PortInfo;

// Device-wide limits for queue pairs.
struct QpLimits {
    static constexpr uint32_t kMaxQp = 16384;
    static constexpr uint32_t kMaxQpWr = 16384;
    static constexpr uint32_t kMaxSge = transport::kMaxSge;
    static constexpr uint32_t kMaxInline = transport::kMaxInlineData;
    static constexpr uint32_t kMaxRdAtomic =
        128; // as Linux rxe: responder state is cheap in software
};

// What a QP is bound to at creation. An XRC initiator has no receive side, an XRC
// target no PD, no CQs and no queues of its own: it receives into the SRQs of its XRC
// domain, whose CQs its completions go to.
struct QpBinding {
    uint32_t pd_handle = 0;
    CompletionQueue* send_cq = nullptr;
    CompletionQueue* recv_cq = nullptr;
    EngineSrq* srq = nullptr;
    uint32_t xrcd_handle = 0; // XRC target: the context's handle of its domain
    uint32_t xrc_domain = 0;  // XRC target: the domain (KeySpace id)
};

// What the data path keeps about a QP to schedule it (Datapath): whether it is on the
// active list, and the deadline of its entry in the timer heap.
struct QpScheduling {
    bool active = false;
    uint64_t timer_at = UINT64_MAX;
};

class EngineQp : public transport::CompletionSink,
                 public transport::SrqDirectory,
                 public MemoryFaultListener {
  public:
    EngineQp(uint32_t handle, uint32_t qp_num, transport::QpType type, size_t device,
             QueueContext& context, const QpBinding& binding, const device_interface::QpCaps& caps,
             bool sq_sig_all, uint64_t user_handle, const PortInfo& port);
    ~EngineQp() override;
    EngineQp(const EngineQp&) = delete;
    EngineQp& operator=(const EngineQp&) = delete;

    // Creates the shared work queues, whose bit in the context's doorbell page is
    // `doorbell_slot`; returns 0 or an errno.
    int create_ring(uint32_t doorbell_slot);
    uint32_t doorbell_slot() const { return doorbell_slot_; }
    int share_ring() const { return ring_memory_.share(); } // SharedMemory::share
    // What it costs the engine: its ring and the transport's state per work request.
    uint64_t engine_bytes() const;
    size_t ring_bytes() const { return ring_memory_.bytes(); }
    const device_interface::QpCaps& caps() const { return caps_; }

    // ibv_modify_qp and ibv_query_qp, validated as the IBTA and the verbs say.
    int modify(const device_interface::ModifyQpRequest& request, const PortInfo& port,
               transport::Nanoseconds now);
    void query(device_interface::QueryQpReply& reply) const;

    // Data path: takes newly posted work requests off the shared rings. Returns true
    // when there were any. `left_in_ring` tells whether some were left there because
    // the transport's queue was full (the QP is looked at again next round).
    bool pull_work(transport::Nanoseconds now, bool& left_in_ring);

    transport::QueuePair& transport() { return transport_; }
    const transport::QueuePair& transport() const { return transport_; }
    uint32_t handle() const { return handle_; }
    uint32_t qp_num() const { return qp_num_; }
    // The UDP source port of a QP without a path of its own (UD, QP1): per-QP entropy.
    static uint16_t ud_source_port(uint32_t qp_num) {
        return static_cast<uint16_t>(0xc000 | (qp_num & 0x3fff));
    }
    size_t device() const { return device_; }
    const QpBinding& binding() const { return binding_; }
    EngineSrq* srq() const { return binding_.srq; }
    transport::QpType type() const { return type_; }
    const transport::FrameAddressing& addressing() const { return addressing_; }
    // The service level of its path (the primary address vector's `sl`).
    uint8_t sl() const { return attr_.sl; }
    transport::FrameAddressing& addressing() { return addressing_; }
    uint64_t cq_overruns() const { return cq_overruns_; }
    QpScheduling& scheduling() { return scheduling_; }
    // Its DCQCN state (qp_congestion.hpp), made by the data path when the engine runs it.
    std::optional<QpCongestion>& congestion() { return congestion_; }
    const std::optional<QpCongestion>& congestion() const { return congestion_; }

    // transport::CompletionSink
    void send_completion(const transport::Completion& completion) override;
    void recv_completion(const transport::Completion& completion) override;
    void send_wqe_retired() override;
    void qp_error(transport::WcStatus cause, bool detected_by_responder) override;
    void communication_established() override;
    void send_queue_drained() override;
    void last_wqe_reached() override;

    // MemoryFaultListener: queued writes into this QP's memory failed.
    void deferred_memory_fault() override;

    // Single copy (device_interface/grant_page.hpp): the context whose QP this is, the
    // word of its grant page that grants on it name (set at its first grant), and
    // whether that slot is already set.
    QueueContext& context() const { return context_; }
    uint32_t grant_slot() const { return grant_slot_; }
    void set_grant_slot(GrantPage& page, uint32_t slot) {
        grant_page_ = &page;
        grant_slot_ = slot;
    }
    // This QP, as a requester in RTS, was granted an rkey: a WRITE with immediate it
    // posts as placed may then go as one packet without payload. Until then (and once it
    // leaves RTS and SQD) the engine reads such a request's bytes itself: a client's
    // claim alone never completes another process's receive.
    void note_granted() { placement_granted_ = true; }

    // transport::SrqDirectory (XRC targets)
    transport::ReceiveQueue* xrc_srq(uint32_t srqn) override;

  private:
    void push_completion(CompletionQueue* cq, const transport::Completion& completion);
    const uint8_t* ring_slot(bool send, uint64_t index) const;
    void take_gathered(const uint8_t* slot, transport::SendWqe& w) const;
    // Puts the QP on the data path's active list (a change it could not see arrive).
    void activate();
    // Publishes the transport's state in the ring (QpRingHeader::engine_state) and, when
    // the QP no longer accepts requests, revokes the grants on it. Called wherever the
    // state may have changed, before the change is reported.
    void note_state();

    uint32_t handle_;
    uint32_t qp_num_;
    transport::QpType type_;
    size_t device_;
    QpBinding binding_;
    device_interface::QpCaps caps_;
    bool sq_sig_all_;
    uint64_t user_handle_;
    QueueContext& context_;
    ProcessMemory memory_;
    transport::QueuePair transport_;
    device_interface::QpAttributes attr_{}; // as last set, for query
    transport::FrameAddressing addressing_;
    SharedMemory ring_memory_;
    device_interface::QpRingHeader* ring_ = nullptr;
    uint32_t sq_slot_size_ = 0, rq_slot_size_ = 0;
    uint64_t sq_offset_ = 0, rq_offset_ = 0;
    uint32_t doorbell_slot_ = device_interface::kNoDoorbellSlot;
    uint64_t sq_pulled_ = 0;
    uint64_t rq_pulled_ = 0;
    uint64_t cq_overruns_ = 0;
    QpScheduling scheduling_;
    std::optional<QpCongestion> congestion_;
    GrantPage* grant_page_ = nullptr;
    uint32_t grant_slot_ = device_interface::kNoGrantSlot;
    bool placement_granted_ = false;
    transport::QpState noted_state_ = transport::QpState::Reset;
};

} // namespace softhca::engine
