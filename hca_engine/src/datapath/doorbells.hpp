// The engine's side of one context's doorbell page (device_interface/doorbell_page.hpp):
// the shared page, which QP or SRQ each slot belongs to, and the slots still free.
// Control path: assign and release. Data path: take the rung slots (Datapath::poll),
// ring a slot again for a queue whose ring still holds work, and arm before sleeping.
#pragma once

#include "shared_memory.hpp"
#include "softhca/device_interface/doorbell_page.hpp"

#include <bit>
#include <cstdint>
#include <vector>

namespace softhca::engine {

class EngineQp;
class EngineSrq;

// Empties the doorbell pipes that are readable in `pipes`, an epoll set of contexts'
// doorbell pipes (the control server keeps one per device): called by the thread that
// serves those devices, once it has woken up for them.
void drain_doorbell_pipes(int pipes);

class Doorbells {
  public:
    // Creates and maps the page; throws std::system_error when it cannot.
    Doorbells();
    Doorbells(const Doorbells&) = delete;
    Doorbells& operator=(const Doorbells&) = delete;

    int share() const { return memory_.share(); } // SharedMemory::share
    size_t bytes() const { return memory_.bytes(); }

    // A free slot for the queue, or kNoDoorbellSlot when every one is taken (the page
    // has room for a device's every QP and SRQ, so only a bug gets there).
    uint32_t assign(EngineQp* qp) { return assign(Target{qp, nullptr}); }
    uint32_t assign(EngineSrq* srq) { return assign(Target{nullptr, srq}); }
    // The queue is gone: its slot is free again (a bit still set there makes the slot's
    // next queue be looked at once for nothing).
    void release(uint32_t slot);

    // Rings `slot` from the engine: looked at again next round.
    void ring(uint32_t slot) { device_interface::ring_doorbell_slot(*page_, slot); }
    // Before sleeping: the next post writes the context's doorbell pipe.
    void arm() { page_->armed.store(1); }
    // Whether any bit is set (the look once more after arming).
    bool any_rung() const;

    // Calls qp_rung(EngineQp&, slot) or srq_rung(EngineSrq&, slot) for every slot rung
    // since the last call, and clears it. A rung slot with no queue is ignored.
    template <typename QpRung, typename SrqRung> void take(QpRung&& qp_rung, SrqRung&& srq_rung) {
        using device_interface::kDoorbellSummaryWords;
        for (uint32_t s = 0; s < kDoorbellSummaryWords; ++s) {
            if (page_->summary[s].load() == 0)
                continue;
            for (uint64_t words = page_->summary[s].exchange(0); words; words &= words - 1) {
                const uint32_t w = s * 64 + static_cast<uint32_t>(std::countr_zero(words));
                if (w >= device_interface::kDoorbellWords)
                    break;
                for (uint64_t bits = page_->words[w].exchange(0); bits; bits &= bits - 1) {
                    const uint32_t slot = w * 64 + static_cast<uint32_t>(std::countr_zero(bits));
                    if (slot >= targets_.size())
                        continue; // never given to a queue
                    const Target& t = targets_[slot];
                    if (t.qp)
                        qp_rung(*t.qp, slot);
                    else if (t.srq)
                        srq_rung(*t.srq, slot);
                }
            }
        }
    }

  private:
    struct Target {
        EngineQp* qp;
        EngineSrq* srq;
    };
    uint32_t assign(Target target);

    SharedMemory memory_;
    device_interface::DoorbellPage* page_ = nullptr;
    // By slot, as far as the highest slot ever given: it grows with the context's queues
    // (a context that makes few costs a few bytes, not the page's every slot).
    std::vector<Target> targets_;
    std::vector<uint32_t> free_; // slots given before and released, the next to give last
};

} // namespace softhca::engine
