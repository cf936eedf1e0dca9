#include "softhca/transport/cm_messages.hpp"

namespace softhca::transport {

MadError parse_cm_mad(const uint8_t* payload, size_t length, CmMad& out) {
    if (!payload || length != kMadBytes)
        return MadError::Truncated; // C13-8 (13.4.2): every MAD is exactly 256 bytes
    std::memcpy(&out, payload, kMadBytes);
    const MadHeader& h = out.header;
    if (h.mgmt_class() != kMgmtClassCm)
        return MadError::NotCm;
    if (h.base_version() != kMadBaseVersion || h.class_version() != kCmClassVersion)
        return MadError::BadVersion;
    if (h.method() != kMadMethodSend)
        return MadError::BadMethod; // 12.6.2: the CM sends every message with Send()
    switch (static_cast<CmAttribute>(h.attribute_id())) {
    case CmAttribute::Req:
    case CmAttribute::Mra:
    case CmAttribute::Rej:
    case CmAttribute::Rep:
    case CmAttribute::Rtu:
    case CmAttribute::Dreq:
    case CmAttribute::Drep:
    case CmAttribute::SidrReq:
    case CmAttribute::SidrRep:
        return MadError::None;
    default:
        return MadError::UnknownAttribute;
    }
}

} // namespace softhca::transport
