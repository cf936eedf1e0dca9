// Where the data path finds the queues it serves: every device's QPs by number (where an
// arriving packet finds its QP), SRQs and multicast groups, and every context's doorbell
// page. The control room keeps it (control/resource_tables.hpp: KeySpace is one) as
// contexts create and destroy queues; the data path only reads it, and tells the control
// room nothing but through QpSchedule.
#pragma once

#include "doorbells.hpp"
#include "multicast_groups.hpp"
#include "ports.hpp"
#include "qp_number_table.hpp"

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace softhca::engine {

class EngineQp;
class EngineSrq;

// The data path's schedule of QPs (Datapath): told when a QP may have something to do
// that the data path did not see arrive (a state change, a deferred memory fault) and
// when a QP goes away, so that it never refers to a destroyed one.
class QpSchedule {
  public:
    virtual ~QpSchedule() = default;
    virtual void activate(EngineQp& qp) = 0;
    virtual void forget(EngineQp& qp) = 0;
};

struct QueueDirectory {
    uint32_t qps = 0; // QPs on every device
    // The QPs of each device by number, for the data path's per-packet lookup (no hash).
    std::vector<QpNumberTable> qp_numbers_by_device;
    // device index -> SRQ number -> SRQ (the data path pulls their rings; XRC finds
    // them by number)
    std::vector<std::unordered_map<uint32_t, EngineSrq*>> srqs_by_device;
    std::vector<MulticastGroups> mcast_by_device;
    // Every open context's doorbell page, by device: where the data path learns which
    // work queues have new requests (each data-path thread reads its devices' pages).
    std::vector<std::vector<Doorbells*>> doorbell_pages_by_device;
    QpSchedule* schedule = nullptr; // the data path, while there is one
    // Sizes the per-device tables; devices added at run time grow them (kMaxPorts at
    // most, room kept from the start: what points into them stays valid).
    void set_device_count(size_t count) {
        qp_numbers_by_device.reserve(kMaxPorts);
        srqs_by_device.reserve(kMaxPorts);
        mcast_by_device.reserve(kMaxPorts);
        doorbell_pages_by_device.reserve(kMaxPorts);
        qp_numbers_by_device.resize(count);
        srqs_by_device.resize(count);
        mcast_by_device.resize(count);
        doorbell_pages_by_device.resize(count);
    }
};

} // namespace softhca::engine
