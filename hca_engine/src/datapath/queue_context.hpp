// The context a queue belongs to, as its QPs and SRQs need it: the keys their memory
// accesses name (MemoryKeys), where their async events go, the XRC SRQs of their domain
// and the data path's schedule. The control room's resource tables
// (control/resource_tables.hpp: ContextResources) implement it.
#pragma once

#include "memory_regions.hpp"
#include "queue_directory.hpp"

#include <cstdint>

namespace softhca::engine {

class EngineQp;
class EngineSrq;

class QueueContext : public MemoryKeys {
  public:
    // An async event (device_interface/async_event.hpp) of the element `element` (the
    // application's handle of a CQ, QP or SRQ) to this context.
    virtual void raise_event(uint64_t element, uint32_t event_type) const = 0;
    // An event of QP `qp` (made here, element `creator_handle`): to this context and, for
    // an XRC target, to every context that opened it, each with its own handle, as the
    // kernel does for shared QPs.
    virtual void raise_qp_event(const EngineQp& qp, uint64_t creator_handle,
                                uint32_t event_type) const = 0;
    // The XRC SRQ numbered `srqn` in XRC domain `domain` on this context's device,
    // whichever context made it; nullptr if none.
    virtual EngineSrq* find_xrc_srq(uint32_t srqn, uint32_t domain) const = 0;
    // The data path, told of QPs that have something to do or go away; null when none.
    virtual QpSchedule* schedule() const = 0;

  protected:
    QueueContext() = default;
    ~QueueContext() = default;
};

} // namespace softhca::engine
