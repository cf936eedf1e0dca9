// A QP's congestion control under DCQCN (the engine's --dcqcn), kept by the
// data path beside the QP's transport. One QP plays two of DCQCN's roles:
//   notification point: its responder received requests marked Congestion Experienced;
//     it sends its peer a CNP for them, at most one per interval (CnpLimiter);
//   reaction point: its requester's rate, cut by the CNPs its peer sends and recovering
//     by DCQCN's timers and byte counter (DcqcnRate), and the pacing of its packets at
//     that rate (RatePacer).
#pragma once

#include "softhca/transport/congestion_control.hpp"

#include <algorithm>
#include <cstdint>

namespace softhca::engine {

struct QpCongestion {
    QpCongestion(const transport::DcqcnParameters& parameters, double line_rate_bps,
                 uint64_t cnp_interval_ns)
        : notification(cnp_interval_ns), rate(parameters, line_rate_bps) {}

    // Pacing lets a QP send ahead of its rate by this much (a burst of about 16 KiB, at
    // most 1 ms): the engine sends in rounds, and a QP allowed one packet a round would be
    // held far below its rate whenever a round takes longer than a packet's time.
    static uint64_t pacing_slack_ns(double rate_bps) {
        return std::min<uint64_t>(1'000'000, static_cast<uint64_t>(16384 * 8e9 / rate_bps));
    }
    bool may_send(uint64_t now) const {
        return !rate.limited() || pacer.next_allowed() <= now + pacing_slack_ns(rate.rate_bps());
    }
    // When a QP held by its pace may send again.
    uint64_t paced_until() const {
        const uint64_t slack = pacing_slack_ns(rate.rate_bps());
        return pacer.next_allowed() > slack ? pacer.next_allowed() - slack : 0;
    }
    void sent(uint32_t bytes, uint64_t now) {
        rate.on_sent(bytes, now);
        if (rate.limited())
            pacer.sent(bytes, rate.rate_bps(), now);
    }

    transport::CnpLimiter notification;
    transport::DcqcnRate rate;
    transport::RatePacer pacer;
    uint64_t ce_received = 0;      // requests that arrived marked
    uint64_t cnps_sent = 0;        // to the peer, for them
    uint64_t cnps_received = 0;    // from the peer: rate cuts
    uint64_t paced = 0;            // times the QP had to wait for its pace
    uint64_t wake_at = UINT64_MAX; // held by its pace until then
};

} // namespace softhca::engine
