// Communication Management datagrams (IBTA Vol 1, chapter 12 and 13.4): the 24-byte
// common MAD header (13.4.3) and the CM messages of 12.6 (REQ, MRA, REJ, REP, RTU, DREQ,
// DREP, SIDR_REQ, SIDR_REP) as views over the 232 bytes that follow it. Every field has
// a big-endian accessor at the byte and bit offset of IBTA's tables 106-120; bit offsets
// count from the most significant bit of a byte, as the tables do.
//
// On RoCE these MADs travel on QP1 (the GSI QP) as UD SEND-only packets with Q_Key
// 0x80010000 (13.5.1), P_Key 0xFFFF, and are always 256 bytes.
#pragma once

#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/roce_address.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace softhca::transport {

constexpr size_t kMadBytes = 256;
constexpr size_t kMadHeaderBytes = 24;
constexpr size_t kCmDataBytes = kMadBytes - kMadHeaderBytes; // 232
constexpr uint32_t kGsiQp = 1;
constexpr uint32_t kGsiQkey = 0x80010000; // IBTA 13.5.1 (the well-known GSI Q_Key)
constexpr uint8_t kMadBaseVersion = 1;
constexpr uint8_t kMgmtClassCm = 0x07;
constexpr uint8_t kCmClassVersion = 2;
constexpr uint8_t kMadMethodSend = 0x03;

// Attribute ids of the CM messages (IBTA 12.6, table 103 / 16.7).
enum class CmAttribute : uint16_t {
    ClassPortInfo = 0x0001,
    Req = 0x0010,
    Mra = 0x0011,
    Rej = 0x0012,
    Rep = 0x0013,
    Rtu = 0x0014,
    Dreq = 0x0015,
    Drep = 0x0016,
    SidrReq = 0x0017,
    SidrRep = 0x0018,
    Lap = 0x0019,
    Apr = 0x001a,
};

// The common MAD header (IBTA 13.4.3, table 145).
struct MadHeader {
    uint8_t b[kMadHeaderBytes];
    uint8_t base_version() const { return b[0]; }
    uint8_t mgmt_class() const { return b[1]; }
    uint8_t class_version() const { return b[2]; }
    uint8_t method() const { return b[3]; }
    uint16_t status() const { return load_be16(b + 4); }
    uint64_t transaction_id() const { return load_be64(b + 8); }
    uint16_t attribute_id() const { return load_be16(b + 16); }
    uint32_t attribute_modifier() const { return load_be32(b + 20); }
    void set(uint8_t mgmt_class, uint8_t class_version, uint8_t method, uint64_t tid,
             uint16_t attribute_id) {
        std::memset(b, 0, sizeof(b));
        b[0] = kMadBaseVersion;
        b[1] = mgmt_class;
        b[2] = class_version;
        b[3] = method;
        store_be64(b + 8, tid);
        store_be16(b + 16, attribute_id);
    }
};
static_assert(sizeof(MadHeader) == kMadHeaderBytes);

// Base for the message views: field access by IBTA (byte, bit) position.
struct CmData {
    uint8_t b[kCmDataBytes];

  protected:
    // `width` bits starting `bit` bits below the most significant bit of byte `at`.
    uint8_t bits(size_t at, unsigned bit, unsigned width) const {
        return static_cast<uint8_t>((b[at] >> (8 - bit - width)) & ((1u << width) - 1));
    }
    void set_bits(size_t at, unsigned bit, unsigned width, unsigned value) {
        const unsigned shift = 8 - bit - width;
        const unsigned mask = ((1u << width) - 1) << shift;
        b[at] = static_cast<uint8_t>((b[at] & ~mask) | ((value << shift) & mask));
    }
    Gid gid(size_t at) const {
        Gid g;
        std::memcpy(g.data(), b + at, g.size());
        return g;
    }
    void set_gid(size_t at, const Gid& g) { std::memcpy(b + at, g.data(), g.size()); }
};

// REQ (IBTA 12.6.5, table 106).
struct CmReq : CmData {
    static constexpr size_t kPrivateDataOffset = 140;
    static constexpr size_t kPrivateDataBytes = 92;
    uint32_t local_comm_id() const { return load_be32(b + 0); }
    uint64_t service_id() const { return load_be64(b + 8); }
    uint64_t local_ca_guid() const { return load_be64(b + 16); }
    uint32_t local_qkey() const { return load_be32(b + 28); }
    uint32_t local_qpn() const { return load_be24(b + 32); }
    uint8_t responder_resources() const { return b[35]; }
    uint32_t local_eecn() const { return load_be24(b + 36); }
    uint8_t initiator_depth() const { return b[39]; }
    uint8_t remote_cm_response_timeout() const { return bits(43, 0, 5); }
    uint8_t transport_service_type() const { return bits(43, 5, 2); } // 0 RC, 1 UC, 3 XRC
    bool end_to_end_flow_control() const { return bits(43, 7, 1); }
    uint32_t starting_psn() const { return load_be24(b + 44); }
    uint8_t local_cm_response_timeout() const { return bits(47, 0, 5); }
    uint8_t retry_count() const { return bits(47, 5, 3); }
    uint16_t partition_key() const { return load_be16(b + 48); }
    uint8_t path_mtu() const { return bits(50, 0, 4); }
    bool rdc_exists() const { return bits(50, 4, 1); }
    uint8_t rnr_retry_count() const { return bits(50, 5, 3); }
    uint8_t max_cm_retries() const { return bits(51, 0, 4); }
    bool srq() const { return bits(51, 4, 1); }
    uint8_t extended_transport_type() const { return bits(51, 5, 3); }
    uint16_t primary_local_lid() const { return load_be16(b + 52); }
    uint16_t primary_remote_lid() const { return load_be16(b + 54); }
    Gid primary_local_gid() const { return gid(56); }
    Gid primary_remote_gid() const { return gid(72); }
    uint32_t primary_flow_label() const { return load_be32(b + 88) >> 12; }
    uint8_t primary_packet_rate() const { return bits(91, 2, 6); }
    uint8_t primary_traffic_class() const { return b[92]; }
    uint8_t primary_hop_limit() const { return b[93]; }
    uint8_t primary_sl() const { return bits(94, 0, 4); }
    bool primary_subnet_local() const { return bits(94, 4, 1); }
    uint8_t primary_local_ack_timeout() const { return bits(95, 0, 5); }
    const uint8_t* private_data() const { return b + kPrivateDataOffset; }

    void set_local_comm_id(uint32_t v) { store_be32(b + 0, v); }
    void set_service_id(uint64_t v) { store_be64(b + 8, v); }
    void set_local_ca_guid(uint64_t v) { store_be64(b + 16, v); }
    void set_local_qkey(uint32_t v) { store_be32(b + 28, v); }
    void set_local_qpn(uint32_t v) { store_be24(b + 32, v); }
    void set_responder_resources(uint8_t v) { b[35] = v; }
    void set_initiator_depth(uint8_t v) { b[39] = v; }
    void set_remote_cm_response_timeout(uint8_t v) { set_bits(43, 0, 5, v); }
    void set_transport_service_type(uint8_t v) { set_bits(43, 5, 2, v); }
    void set_end_to_end_flow_control(bool v) { set_bits(43, 7, 1, v); }
    void set_starting_psn(uint32_t v) { store_be24(b + 44, v); }
    void set_local_cm_response_timeout(uint8_t v) { set_bits(47, 0, 5, v); }
    void set_retry_count(uint8_t v) { set_bits(47, 5, 3, v); }
    void set_partition_key(uint16_t v) { store_be16(b + 48, v); }
    void set_path_mtu(uint8_t v) { set_bits(50, 0, 4, v); }
    void set_rnr_retry_count(uint8_t v) { set_bits(50, 5, 3, v); }
    void set_max_cm_retries(uint8_t v) { set_bits(51, 0, 4, v); }
    void set_srq(bool v) { set_bits(51, 4, 1, v); }
    void set_primary_local_lid(uint16_t v) { store_be16(b + 52, v); }
    void set_primary_remote_lid(uint16_t v) { store_be16(b + 54, v); }
    void set_primary_local_gid(const Gid& g) { set_gid(56, g); }
    void set_primary_remote_gid(const Gid& g) { set_gid(72, g); }
    void set_primary_flow_label(uint32_t v) {
        store_be32(b + 88, (v << 12) | (load_be32(b + 88) & 0xfff));
    }
    void set_primary_packet_rate(uint8_t v) { set_bits(91, 2, 6, v); }
    void set_primary_traffic_class(uint8_t v) { b[92] = v; }
    void set_primary_hop_limit(uint8_t v) { b[93] = v; }
    void set_primary_sl(uint8_t v) { set_bits(94, 0, 4, v); }
    void set_primary_subnet_local(bool v) { set_bits(94, 4, 1, v); }
    void set_primary_local_ack_timeout(uint8_t v) { set_bits(95, 0, 5, v); }
    uint8_t* private_data() { return b + kPrivateDataOffset; }
};

// MRA (12.6.6, table 107).
struct CmMra : CmData {
    uint32_t local_comm_id() const { return load_be32(b + 0); }
    uint32_t remote_comm_id() const { return load_be32(b + 4); }
    uint8_t message_mraed() const { return bits(8, 0, 2); } // 0 REQ, 1 REP, 2 LAP
    uint8_t service_timeout() const { return bits(9, 0, 5); }
    void set_local_comm_id(uint32_t v) { store_be32(b + 0, v); }
    void set_remote_comm_id(uint32_t v) { store_be32(b + 4, v); }
    void set_message_mraed(uint8_t v) { set_bits(8, 0, 2, v); }
    void set_service_timeout(uint8_t v) { set_bits(9, 0, 5, v); }
};

// REJ (12.6.7, table 108); reasons in table 109.
struct CmRej : CmData {
    static constexpr size_t kPrivateDataOffset = 84;
    static constexpr size_t kPrivateDataBytes = 148;
    static constexpr size_t kAriBytes = 72;
    uint32_t local_comm_id() const { return load_be32(b + 0); }
    uint32_t remote_comm_id() const { return load_be32(b + 4); }
    uint8_t message_rejected() const { return bits(8, 0, 2); } // 0 REQ, 1 REP, 2 other
    uint8_t rejected_info_length() const { return bits(9, 0, 7); }
    uint16_t reason() const { return load_be16(b + 10); }
    const uint8_t* ari() const { return b + 12; }
    const uint8_t* private_data() const { return b + kPrivateDataOffset; }
    void set_local_comm_id(uint32_t v) { store_be32(b + 0, v); }
    void set_remote_comm_id(uint32_t v) { store_be32(b + 4, v); }
    void set_message_rejected(uint8_t v) { set_bits(8, 0, 2, v); }
    void set_rejected_info_length(uint8_t v) { set_bits(9, 0, 7, v); }
    void set_reason(uint16_t v) { store_be16(b + 10, v); }
    uint8_t* private_data() { return b + kPrivateDataOffset; }
};

enum class CmRejectReason : uint16_t {
    NoQp = 1,
    NoResources = 2,
    Timeout = 3, // IBTA table 109: "Timeout"
    InvalidCommId = 5,
    InvalidCommInstance = 6,
    InvalidServiceId = 8,
    InvalidTransportType = 9,
    StaleConnection = 10,
    InvalidGid = 12,
    ConsumerDefined = 28,
    InvalidMtu = 26,
    InsufficientRespResources = 27,
    InvalidRnrRetry = 25,
};

// REP (12.6.8, table 110).
struct CmRep : CmData {
    static constexpr size_t kPrivateDataOffset = 36;
    static constexpr size_t kPrivateDataBytes = 196;
    uint32_t local_comm_id() const { return load_be32(b + 0); }
    uint32_t remote_comm_id() const { return load_be32(b + 4); }
    uint32_t local_qkey() const { return load_be32(b + 8); }
    uint32_t local_qpn() const { return load_be24(b + 12); }
    uint32_t starting_psn() const { return load_be24(b + 20); }
    uint8_t responder_resources() const { return b[24]; }
    uint8_t initiator_depth() const { return b[25]; }
    uint8_t target_ack_delay() const { return bits(26, 0, 5); }
    uint8_t failover_accepted() const { return bits(26, 5, 2); }
    bool end_to_end_flow_control() const { return bits(26, 7, 1); }
    uint8_t rnr_retry_count() const { return bits(27, 0, 3); }
    bool srq() const { return bits(27, 3, 1); }
    uint64_t local_ca_guid() const { return load_be64(b + 28); }
    const uint8_t* private_data() const { return b + kPrivateDataOffset; }
    void set_local_comm_id(uint32_t v) { store_be32(b + 0, v); }
    void set_remote_comm_id(uint32_t v) { store_be32(b + 4, v); }
    void set_local_qkey(uint32_t v) { store_be32(b + 8, v); }
    void set_local_qpn(uint32_t v) { store_be24(b + 12, v); }
    void set_starting_psn(uint32_t v) { store_be24(b + 20, v); }
    void set_responder_resources(uint8_t v) { b[24] = v; }
    void set_initiator_depth(uint8_t v) { b[25] = v; }
    void set_target_ack_delay(uint8_t v) { set_bits(26, 0, 5, v); }
    void set_failover_accepted(uint8_t v) { set_bits(26, 5, 2, v); }
    void set_end_to_end_flow_control(bool v) { set_bits(26, 7, 1, v); }
    void set_rnr_retry_count(uint8_t v) { set_bits(27, 0, 3, v); }
    void set_srq(bool v) { set_bits(27, 3, 1, v); }
    void set_local_ca_guid(uint64_t v) { store_be64(b + 28, v); }
    uint8_t* private_data() { return b + kPrivateDataOffset; }
};

// RTU (12.6.9, table 111) and DREP (12.6.11, table 113): comm ids and private data.
struct CmRtu : CmData {
    static constexpr size_t kPrivateDataOffset = 8;
    static constexpr size_t kPrivateDataBytes = 224;
    uint32_t local_comm_id() const { return load_be32(b + 0); }
    uint32_t remote_comm_id() const { return load_be32(b + 4); }
    const uint8_t* private_data() const { return b + kPrivateDataOffset; }
    void set_local_comm_id(uint32_t v) { store_be32(b + 0, v); }
    void set_remote_comm_id(uint32_t v) { store_be32(b + 4, v); }
    uint8_t* private_data() { return b + kPrivateDataOffset; }
};
using CmDrep = CmRtu;

// DREQ (12.6.10, table 112).
struct CmDreq : CmData {
    static constexpr size_t kPrivateDataOffset = 12;
    static constexpr size_t kPrivateDataBytes = 220;
    uint32_t local_comm_id() const { return load_be32(b + 0); }
    uint32_t remote_comm_id() const { return load_be32(b + 4); }
    uint32_t remote_qpn() const { return load_be24(b + 8); }
    const uint8_t* private_data() const { return b + kPrivateDataOffset; }
    void set_local_comm_id(uint32_t v) { store_be32(b + 0, v); }
    void set_remote_comm_id(uint32_t v) { store_be32(b + 4, v); }
    void set_remote_qpn(uint32_t v) { store_be24(b + 8, v); }
    uint8_t* private_data() { return b + kPrivateDataOffset; }
};

// SIDR_REQ (12.11.1, table 119).
struct CmSidrReq : CmData {
    static constexpr size_t kPrivateDataOffset = 16;
    static constexpr size_t kPrivateDataBytes = 216;
    uint32_t request_id() const { return load_be32(b + 0); }
    uint16_t partition_key() const { return load_be16(b + 4); }
    uint64_t service_id() const { return load_be64(b + 8); }
    const uint8_t* private_data() const { return b + kPrivateDataOffset; }
    void set_request_id(uint32_t v) { store_be32(b + 0, v); }
    void set_partition_key(uint16_t v) { store_be16(b + 4, v); }
    void set_service_id(uint64_t v) { store_be64(b + 8, v); }
    uint8_t* private_data() { return b + kPrivateDataOffset; }
};

// SIDR_REP (12.11.2, table 120); status values in table 121.
struct CmSidrRep : CmData {
    static constexpr size_t kPrivateDataOffset = 96;
    static constexpr size_t kPrivateDataBytes = 136;
    uint32_t request_id() const { return load_be32(b + 0); }
    uint8_t status() const { return b[4]; }
    uint8_t additional_info_length() const { return b[5]; }
    uint32_t qpn() const { return load_be24(b + 8); }
    uint64_t service_id() const { return load_be64(b + 12); }
    uint32_t qkey() const { return load_be32(b + 20); }
    const uint8_t* private_data() const { return b + kPrivateDataOffset; }
    void set_request_id(uint32_t v) { store_be32(b + 0, v); }
    void set_status(uint8_t v) { b[4] = v; }
    void set_qpn(uint32_t v) { store_be24(b + 8, v); }
    void set_service_id(uint64_t v) { store_be64(b + 12, v); }
    void set_qkey(uint32_t v) { store_be32(b + 20, v); }
    uint8_t* private_data() { return b + kPrivateDataOffset; }
};

static_assert(sizeof(CmReq) == kCmDataBytes && sizeof(CmRep) == kCmDataBytes &&
              sizeof(CmRej) == kCmDataBytes && sizeof(CmMra) == kCmDataBytes &&
              sizeof(CmRtu) == kCmDataBytes && sizeof(CmDreq) == kCmDataBytes &&
              sizeof(CmSidrReq) == kCmDataBytes && sizeof(CmSidrRep) == kCmDataBytes);

// A whole CM MAD: the header and one message.
struct CmMad {
    MadHeader header;
    CmData data;
    template <typename Message> Message& as() { return *reinterpret_cast<Message*>(&data); }
    template <typename Message> const Message& as() const {
        return *reinterpret_cast<const Message*>(&data);
    }
};
static_assert(sizeof(CmMad) == kMadBytes);

// Where a MAD came from, or goes to: the peer port's GSI QP (QP1) on RoCE.
struct MadPeer {
    uint32_t ipv4 = 0; // the peer port's IPv4 address (0 for an IPv6 peer)
    Gid gid{};         // its address as on the wire: ::ffff:ipv4, or IPv6
    // Our address in the exchange: where the peer sent to, or what we send from (zeros:
    // the port's first address of the peer's family).
    Gid local{};
    uint32_t qpn = kGsiQp;
    uint16_t pkey = 0xffff;
};

enum class MadError : uint8_t {
    None,
    Truncated,  // not 256 bytes
    NotCm,      // another management class (answered by nobody here)
    BadVersion, // base or class version we do not speak
    BadMethod,  // CM messages are all SENDs (12.6.2)
    UnknownAttribute,
};

// Checks a received datagram's payload is a CM message we handle and copies it out.
MadError parse_cm_mad(const uint8_t* payload, size_t length, CmMad& out);

// The rdma_cm private-data header in REQ and SIDR_REQ (Linux `struct cma_hdr`,
// rdma-core's `struct cma_hdr`): version 0, IP version in the high nibble, the source
// port, and source and destination addresses (IPv4 in the last four bytes of each).
struct CmaHeader {
    static constexpr size_t kBytes = 36;
    uint8_t b[kBytes];
    uint8_t cma_version() const { return b[0]; }
    uint8_t ip_version() const { return b[1] >> 4; }
    uint16_t port() const { return load_be16(b + 2); }
    const uint8_t* src_addr() const { return b + 4; }
    const uint8_t* dst_addr() const { return b + 20; }
    uint32_t src_ipv4() const { return load_be32(b + 16); }
    uint32_t dst_ipv4() const { return load_be32(b + 32); }
    void set_ipv4(uint16_t src_port, uint32_t src, uint32_t dst) {
        std::memset(b, 0, sizeof(b));
        b[1] = 4 << 4;
        store_be16(b + 2, src_port);
        store_be32(b + 16, src);
        store_be32(b + 32, dst);
    }
    void set_ipv6(uint16_t src_port, const uint8_t (&src)[16], const uint8_t (&dst)[16]) {
        std::memset(b, 0, sizeof(b));
        b[1] = 6 << 4;
        store_be16(b + 2, src_port);
        std::memcpy(b + 4, src, 16);
        std::memcpy(b + 20, dst, 16);
    }
};
static_assert(sizeof(CmaHeader) == 36);

// rdma_cm service ids (IBTA Annex A11, "RDMA IP CM Service"): the port space (TCP
// 0x0106, UDP 0x0111, IB 0x013F, whose 0x01 is the annex's prefix) above the port.
constexpr uint64_t rdma_cm_service_id(uint16_t port_space, uint16_t port) {
    return static_cast<uint64_t>(port_space) << 16 | port;
}

} // namespace softhca::transport
