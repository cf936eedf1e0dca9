// The data path's part of DCQCN: the notification point (CNPs for requests
// that arrive marked Congestion Experienced) and the reaction point (a CNP cuts the rate
// of the QP it names; transmit() paces the QP at that rate). Marking is the congestion
// point's, at a shaped port's queue (congestion_point.hpp).
#include "datapath.hpp"

#include "engine_qp.hpp"
#include "softhca/transport/roce_frame.hpp"
#include "softhca/transport/service_levels.hpp"

namespace softhca::engine {

namespace tp = transport;

QpCongestion* Datapath::congestion_of(EngineQp& qp) {
    if (!congestion_.enabled || qp.type() == tp::QpType::UD)
        return nullptr;
    auto& state = qp.congestion();
    if (!state) {
        const PortInfo& port = ports_.info(devices_[qp.device()].port_index);
        state.emplace(congestion_.dcqcn, port.line_rate_bps(), congestion_.cnp_interval_ns);
    }
    return &*state;
}

void Datapath::notify_congestion(size_t port, EngineQp& qp, uint64_t now) {
    QpCongestion* cc = congestion_of(qp);
    if (!cc)
        return;
    PortCounters& counters = ports_.counters(port);
    ++counters.rx_ecn_ce;
    ++cc->ce_received;
    // RoCEv2 A17.9.2: at most one CNP per QP in the interval, however many marked packets.
    if (!cc->notification.should_send(now))
        return;
    bool local = false;
    TxFrame frame;
    if (!resolve_destination(qp, port, now, local) || local || !ports_.tx_alloc(port, frame)) {
        ++counters.tx_cnps_dropped;
        return;
    }
    // The CNP travels in the flow's traffic class and VL, not ECN-capable itself.
    const PortInfo& info = ports_.info(port);
    frame.vl = info.sl_to_vl.vl(qp.sl());
    tp::FrameAddressing addressing = qp.addressing();
    addressing.traffic_class = tp::with_ecn(addressing.traffic_class, tp::Ecn::NotEct);
    tp::write_cnp(frame.data + tp::roce_header_bytes(addressing), qp.transport().attributes().pkey,
                  qp.transport().attributes().dest_qp);
    const size_t length = tp::finish_roce_frame(frame.data, addressing, tp::kCnpBytes,
                                                next_ipv4_id(info), sent_icrc(info));
    ports_.tx_queue(port, frame, static_cast<uint32_t>(length));
    ++counters.tx_cnps;
    ++cc->cnps_sent;
}

void Datapath::react_to_cnp(size_t port, EngineQp& qp, uint64_t now) {
    ++ports_.counters(port).rx_cnps;
    if (QpCongestion* cc = congestion_of(qp)) {
        ++cc->cnps_received;
        cc->rate.on_cnp(now);
    }
}

} // namespace softhca::engine
