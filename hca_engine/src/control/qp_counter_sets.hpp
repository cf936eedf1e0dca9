// Per-QP counters (`rdma statistic qp`), as the kernel's rdma_counter keeps them
// (drivers/infiniband/core/counters.c) for a device that has them:
//
// - A port's mode is none (no counter), auto or manual. Auto (`rdma statistic qp set link
//   DEV/1 auto type on`) binds every QP that reaches INIT to a counter of QPs alike: of
//   its type (kCounterMaskQpType), of its process (kCounterMaskPid), made for the first
//   such QP. Manual (`rdma statistic qp bind ... lqpn N [cntn M]`) binds one QP to a new
//   counter or to an existing one; unbind takes it off again.
// - A counter counts, in the hw counters' names (qp_hw_counters.hpp), what its QPs did
//   while bound to it; a QP that leaves (unbound, destroyed) leaves its share behind. A
//   counter goes with its last QP, and a manual port with no counter left is none again.
// - Auto mode may be turned on only while the port has no counter (EBUSY); turned off with
//   counters left the port is manual.
// - Unlike the kernel's, a counter never holds QPs of two users (two accounts, or two PID
//   namespaces): its counts and QP numbers are shown to its user (status_document.cpp),
//   so auto mode keeps users apart and a manual bind across users is EINVAL.
//
// The control path keeps it, under the world; no per-packet cost: a counter's values are
// summed from its QPs' own counts when status asks.
#pragma once

#include "softhca/transport/queue_pair.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <sys/types.h>
#include <unordered_map>
#include <vector>

namespace softhca::engine {

class QpCounterSets {
  public:
    enum class Mode : uint8_t { None, Auto, Manual }; // the kernel's rdma_nl_counter_mode
    // The process of the QP that made a counter, as status shows and filters it.
    struct Owner {
        pid_t pid = 0;
        uid_t uid = 0;
        ino_t pidns = 0;
        pid_t ns_pid = 0; // its PID in its own namespace
        std::string command;
    };
    struct Counter {
        uint32_t id = 0;
        // Auto (with the port's mask when made: its QPs share those criteria) or manual;
        // it keeps them when the port's mode changes, as the kernel's counters do.
        Mode mode = Mode::Manual;
        uint32_t mask = 0;
        transport::QpType qp_type = transport::QpType::RC; // the QP that made it
        Owner owner;
        std::map<uint32_t, transport::QpCounters> qps; // bound: their counts when bound
        transport::QpCounters left;                    // what QPs that left counted here
    };
    // The live counts of a QP of the device, null when there is no such QP.
    using Lookup = std::function<const transport::QpCounters*(uint32_t qpn)>;

    void set_device_count(size_t count) { ports_.resize(count); }
    Mode mode(size_t device) const { return ports_[device].mode; }
    uint32_t mask(size_t device) const { return ports_[device].mask; }
    const std::map<uint32_t, Counter>& counters(size_t device) const {
        return ports_[device].counters;
    }
    // What a counter counted: its QPs' counts since they were bound, and what left.
    static transport::QpCounters counted(const Counter& counter, const Lookup& live);

    // `auto type on|off`: 0 or EINVAL (an unknown mask bit) or EBUSY (counters exist).
    int set_auto(size_t device, uint32_t mask);
    // A QP of the device reached INIT: in auto mode it joins a counter of QPs alike.
    void qp_ready(size_t device, uint32_t qpn, transport::QpType type, const Owner& owner,
                  const transport::QpCounters& now);
    // `bind`: to counter `counter_id`, or to a new counter when `new_counter`; its id in
    // `bound_to`. EINVAL in auto mode, for a QP bound already or another user's counter,
    // ENOENT for no such counter.
    int bind(size_t device, uint32_t qpn, transport::QpType type, const Owner& owner,
             const transport::QpCounters& now, bool new_counter, uint32_t counter_id,
             uint32_t& bound_to);
    // `unbind`: EINVAL unless the port is manual and the QP is bound to `counter_id`.
    int unbind(size_t device, uint32_t qpn, uint32_t counter_id, const transport::QpCounters& now);
    // A QP destroyed: it leaves its counter, if any.
    void qp_destroyed(size_t device, uint32_t qpn, const transport::QpCounters& last);
    // A QP moved to RESET, which zeroes its counts (`last`: them before): what it counted
    // while bound stays with its counter, and it counts from zero on.
    void qp_reset(size_t device, uint32_t qpn, const transport::QpCounters& last);

  private:
    struct Port {
        Mode mode = Mode::None;
        uint32_t mask = 0;
        uint32_t next_id = 0;
        std::map<uint32_t, Counter> counters;
        std::unordered_map<uint32_t, uint32_t> counter_of_qp;
    };
    Counter& make_counter(Port& port, uint32_t qpn, transport::QpType type, const Owner& owner,
                          const transport::QpCounters& now);
    void leave(Port& port, uint32_t qpn, const transport::QpCounters& now);
    std::vector<Port> ports_;
};

} // namespace softhca::engine
