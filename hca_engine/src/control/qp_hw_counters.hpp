// The hw counters a QP's counts make, by name: rxe's names (mlx5's for the ACK timer)
// where the meaning is the same, then softhca's own. A port's hw_counters/ sum them over
// the device's QPs (port_counter_files.hpp); a per-QP counter (`rdma statistic qp`,
// qp_counter_sets.hpp) over the QPs bound to it.
#pragma once

#include "softhca/transport/queue_pair.hpp"

#include <cstdint>

namespace softhca::engine {

struct QpHwCounter {
    const char* name;
    uint64_t transport::QpCounters::*value;
};

using QC = transport::QpCounters;
inline constexpr QpHwCounter kQpHwCounters[] = {
    // Duplicate and out-of-sequence requests the responders saw, RNR NAKs received and
    // sent, sequence-error NAKs received, requests failed with their retries spent,
    // retries started, SENDs and receives completed, local ACK timeouts.
    {"duplicate_request", &QC::duplicates},
    {"out_of_seq_request", &QC::out_of_sequence},
    {"rcvd_rnr_err", &QC::rnr_naks_received},
    {"send_rnr_err", &QC::rnr_naks_sent},
    {"rcvd_seq_err", &QC::sequence_naks_received},
    {"retry_exceeded_err", &QC::retries_exceeded},
    {"retry_rnr_exceeded_err", &QC::rnr_retries_exceeded},
    {"completer_retry_err", &QC::retries},
    {"rdma_sends", &QC::sends_completed},
    {"rdma_recvs", &QC::receives_completed},
    {"local_ack_timeout_err", &QC::timeouts},
    // softhca's own.
    {"retransmitted_pkts", &QC::retransmitted_packets},
    {"sent_naks", &QC::naks_sent},
    {"rcvd_naks", &QC::naks_received},
    {"rcvd_qkey_err", &QC::qkey_violations},
    {"dropped_msgs", &QC::dropped_messages},
    // RDMA WRITEs and READs whose initiator copied the bytes itself (single copy): they
    // never cross the port, so its data and packet counters do not see them.
    {"placed_msgs", &QC::placed_messages},
    {"placed_bytes", &QC::placed_bytes},
};

} // namespace softhca::engine
