// Fuzz target: a MAD that arrives on QP1. The CM MAD parser must refuse what is not a CM
// Send of 256 bytes; every accessor of what it accepts reads inside the MAD, and the MAD
// re-encodes to the same bytes.
#include "softhca/transport/cm_messages.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

namespace tp = softhca::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::vector<uint8_t> payload(data, data + size);
    tp::CmMad mad;
    if (tp::parse_cm_mad(payload.data(), payload.size(), mad) != tp::MadError::None)
        return 0;
    if (size < sizeof(mad) || std::memcmp(&mad, payload.data(), sizeof(mad)) != 0)
        std::abort();
    // Every message's fields, whatever the attribute says it is.
    const auto& req = mad.as<tp::CmReq>();
    volatile uint64_t sink = req.service_id() + req.local_comm_id() + req.starting_psn() +
                             req.local_qpn() + req.responder_resources();
    const auto& rep = mad.as<tp::CmRep>();
    sink = sink + rep.local_qpn() + rep.starting_psn() + rep.remote_comm_id();
    const auto& rej = mad.as<tp::CmRej>();
    sink = sink + rej.reason() + rej.rejected_info_length();
    (void)sink;
    return 0;
}
