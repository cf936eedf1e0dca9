#include "qp_counter_sets.hpp"

#include "qp_hw_counters.hpp"
#include "softhca/device_interface/control.hpp"

#include <cerrno>

namespace softhca::engine {

namespace di = device_interface;
namespace tp = transport;

namespace {

// Whether two processes are one user's, as status shows a user its own.
bool same_user(const QpCounterSets::Owner& a, const QpCounterSets::Owner& b) {
    return a.uid == b.uid && a.pidns == b.pidns;
}

// What a QP counted from `then` to `now`, added to `sum` (the hw counters' fields).
void add_since(tp::QpCounters& sum, const tp::QpCounters& now, const tp::QpCounters& then) {
    for (const QpHwCounter& c : kQpHwCounters)
        sum.*c.value += now.*c.value - then.*c.value;
}

} // namespace

tp::QpCounters QpCounterSets::counted(const Counter& counter, const Lookup& live) {
    tp::QpCounters sum = counter.left;
    for (const auto& [qpn, at_bind] : counter.qps)
        if (const tp::QpCounters* now = live(qpn))
            add_since(sum, *now, at_bind);
    return sum;
}

int QpCounterSets::set_auto(size_t device, uint32_t mask) {
    Port& port = ports_[device];
    if (mask & ~(di::kCounterMaskQpType | di::kCounterMaskPid))
        return EINVAL;
    if (mask == 0) {
        // Off: manual while counters remain, as the kernel leaves it.
        port.mode = port.counters.empty() ? Mode::None : Mode::Manual;
        port.mask = 0;
        return 0;
    }
    if (port.mode == Mode::Auto && port.mask == mask)
        return 0;
    if (!port.counters.empty())
        return EBUSY; // "Modifying auto mode is not allowed when there is a bound QP"
    port.mode = Mode::Auto;
    port.mask = mask;
    return 0;
}

QpCounterSets::Counter& QpCounterSets::make_counter(Port& port, uint32_t qpn, tp::QpType type,
                                                    const Owner& owner, const tp::QpCounters& now) {
    while (port.counters.count(port.next_id))
        ++port.next_id; // ids wrap after 2^32 counters: skip those still in use
    Counter& counter = port.counters[port.next_id];
    counter.id = port.next_id++;
    counter.mode = port.mode == Mode::Auto ? Mode::Auto : Mode::Manual;
    counter.mask = port.mode == Mode::Auto ? port.mask : 0;
    counter.qp_type = type;
    counter.owner = owner;
    counter.qps[qpn] = now;
    port.counter_of_qp[qpn] = counter.id;
    return counter;
}

void QpCounterSets::qp_ready(size_t device, uint32_t qpn, tp::QpType type, const Owner& owner,
                             const tp::QpCounters& now) {
    Port& port = ports_[device];
    if (port.mode != Mode::Auto || port.counter_of_qp.count(qpn))
        return;
    for (auto& [id, counter] : port.counters) {
        if (!same_user(counter.owner, owner))
            continue;
        if ((port.mask & di::kCounterMaskQpType) && counter.qp_type != type)
            continue;
        if ((port.mask & di::kCounterMaskPid) && counter.owner.pid != owner.pid)
            continue;
        counter.qps[qpn] = now;
        port.counter_of_qp[qpn] = id;
        return;
    }
    make_counter(port, qpn, type, owner, now);
}

int QpCounterSets::bind(size_t device, uint32_t qpn, tp::QpType type, const Owner& owner,
                        const tp::QpCounters& now, bool new_counter, uint32_t counter_id,
                        uint32_t& bound_to) {
    Port& port = ports_[device];
    if (port.mode == Mode::Auto)
        return EINVAL;
    if (!new_counter && !port.counters.count(counter_id))
        return ENOENT;
    if (port.counter_of_qp.count(qpn))
        return EINVAL; // bound already
    if (new_counter) {
        bound_to = make_counter(port, qpn, type, owner, now).id;
        port.mode = Mode::Manual;
        return 0;
    }
    Counter& counter = port.counters[counter_id];
    if (!same_user(counter.owner, owner))
        return EINVAL; // its counts would show one user another's
    counter.qps[qpn] = now;
    port.counter_of_qp[qpn] = counter_id;
    bound_to = counter_id;
    return 0;
}

int QpCounterSets::unbind(size_t device, uint32_t qpn, uint32_t counter_id,
                          const tp::QpCounters& now) {
    Port& port = ports_[device];
    const auto it = port.counter_of_qp.find(qpn);
    if (it == port.counter_of_qp.end() || it->second != counter_id || port.mode != Mode::Manual)
        return EINVAL;
    leave(port, qpn, now);
    return 0;
}

void QpCounterSets::qp_destroyed(size_t device, uint32_t qpn, const tp::QpCounters& last) {
    if (device < ports_.size() && ports_[device].counter_of_qp.count(qpn))
        leave(ports_[device], qpn, last);
}

void QpCounterSets::qp_reset(size_t device, uint32_t qpn, const tp::QpCounters& last) {
    if (device >= ports_.size())
        return;
    Port& port = ports_[device];
    const auto it = port.counter_of_qp.find(qpn);
    if (it == port.counter_of_qp.end())
        return;
    Counter& counter = port.counters.at(it->second);
    tp::QpCounters& at_bind = counter.qps.at(qpn);
    add_since(counter.left, last, at_bind);
    at_bind = {};
}

void QpCounterSets::leave(Port& port, uint32_t qpn, const tp::QpCounters& now) {
    const uint32_t id = port.counter_of_qp.at(qpn);
    port.counter_of_qp.erase(qpn);
    Counter& counter = port.counters.at(id);
    add_since(counter.left, now, counter.qps.at(qpn));
    counter.qps.erase(qpn);
    if (!counter.qps.empty())
        return;
    port.counters.erase(id); // its last QP left
    if (port.counters.empty() && port.mode == Mode::Manual)
        port.mode = Mode::None;
}

} // namespace softhca::engine
