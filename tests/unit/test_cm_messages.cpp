// CM MAD codec against the Linux kernel's own rdma_cm traffic (tests/vectors/rxe-cm-*):
// every MAD on QP1 parses, the fields read as the capture's README says, and each
// message re-encoded from what was read is the same 256 bytes.
#include "pcap_reader.hpp"
#include "softhca/transport/cm_messages.hpp"
#include "softhca/transport/ib_packet.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace tp = softhca::transport;

namespace {

std::vector<tp::CmMad> cm_mads(const std::string& name) {
    std::vector<tp::CmMad> mads;
    for (const auto& frame : read_pcap(std::string(SOFTHCA_VECTORS_DIR) + "/" + name)) {
        tp::ParsedFrame parsed;
        if (tp::parse_roce_frame(frame.bytes.data(), frame.bytes.size(), parsed) !=
            tp::FrameError::None)
            continue;
        tp::IbPacket packet;
        REQUIRE(tp::parse_ib_packet(parsed.ib, parsed.ib_length, packet) == tp::PacketError::None);
        if (packet.bth->dest_qp() != tp::kGsiQp)
            continue;
        REQUIRE(packet.deth);
        CHECK(packet.deth->qkey() == tp::kGsiQkey);
        CHECK(packet.deth->src_qp() == tp::kGsiQp);
        tp::CmMad mad;
        REQUIRE(tp::parse_cm_mad(packet.payload, packet.payload_length, mad) == tp::MadError::None);
        mads.push_back(mad);
    }
    return mads;
}

tp::CmMad header_only(const tp::CmMad& from) {
    tp::CmMad mad{};
    mad.header.set(from.header.mgmt_class(), from.header.class_version(), from.header.method(),
                   from.header.transaction_id(), from.header.attribute_id());
    return mad;
}

// Each message rebuilt through the setters from what the getters read.
tp::CmMad reencode(const tp::CmMad& in) {
    tp::CmMad out = header_only(in);
    switch (static_cast<tp::CmAttribute>(in.header.attribute_id())) {
    case tp::CmAttribute::Req: {
        const auto& r = in.as<tp::CmReq>();
        auto& w = out.as<tp::CmReq>();
        w.set_local_comm_id(r.local_comm_id());
        w.set_service_id(r.service_id());
        w.set_local_ca_guid(r.local_ca_guid());
        w.set_local_qkey(r.local_qkey());
        w.set_local_qpn(r.local_qpn());
        w.set_responder_resources(r.responder_resources());
        w.set_initiator_depth(r.initiator_depth());
        w.set_remote_cm_response_timeout(r.remote_cm_response_timeout());
        w.set_transport_service_type(r.transport_service_type());
        w.set_end_to_end_flow_control(r.end_to_end_flow_control());
        w.set_starting_psn(r.starting_psn());
        w.set_local_cm_response_timeout(r.local_cm_response_timeout());
        w.set_retry_count(r.retry_count());
        w.set_partition_key(r.partition_key());
        w.set_path_mtu(r.path_mtu());
        w.set_rnr_retry_count(r.rnr_retry_count());
        w.set_max_cm_retries(r.max_cm_retries());
        w.set_srq(r.srq());
        w.set_primary_local_lid(r.primary_local_lid());
        w.set_primary_remote_lid(r.primary_remote_lid());
        w.set_primary_local_gid(r.primary_local_gid());
        w.set_primary_remote_gid(r.primary_remote_gid());
        w.set_primary_flow_label(r.primary_flow_label());
        w.set_primary_packet_rate(r.primary_packet_rate());
        w.set_primary_traffic_class(r.primary_traffic_class());
        w.set_primary_hop_limit(r.primary_hop_limit());
        w.set_primary_sl(r.primary_sl());
        w.set_primary_subnet_local(r.primary_subnet_local());
        w.set_primary_local_ack_timeout(r.primary_local_ack_timeout());
        std::memcpy(w.private_data(), r.private_data(), tp::CmReq::kPrivateDataBytes);
        break;
    }
    case tp::CmAttribute::Rep: {
        const auto& r = in.as<tp::CmRep>();
        auto& w = out.as<tp::CmRep>();
        w.set_local_comm_id(r.local_comm_id());
        w.set_remote_comm_id(r.remote_comm_id());
        w.set_local_qkey(r.local_qkey());
        w.set_local_qpn(r.local_qpn());
        w.set_starting_psn(r.starting_psn());
        w.set_responder_resources(r.responder_resources());
        w.set_initiator_depth(r.initiator_depth());
        w.set_target_ack_delay(r.target_ack_delay());
        w.set_failover_accepted(r.failover_accepted());
        w.set_end_to_end_flow_control(r.end_to_end_flow_control());
        w.set_rnr_retry_count(r.rnr_retry_count());
        w.set_srq(r.srq());
        w.set_local_ca_guid(r.local_ca_guid());
        std::memcpy(w.private_data(), r.private_data(), tp::CmRep::kPrivateDataBytes);
        break;
    }
    case tp::CmAttribute::Rtu:
    case tp::CmAttribute::Drep: {
        const auto& r = in.as<tp::CmRtu>();
        auto& w = out.as<tp::CmRtu>();
        w.set_local_comm_id(r.local_comm_id());
        w.set_remote_comm_id(r.remote_comm_id());
        std::memcpy(w.private_data(), r.private_data(), tp::CmRtu::kPrivateDataBytes);
        break;
    }
    case tp::CmAttribute::Dreq: {
        const auto& r = in.as<tp::CmDreq>();
        auto& w = out.as<tp::CmDreq>();
        w.set_local_comm_id(r.local_comm_id());
        w.set_remote_comm_id(r.remote_comm_id());
        w.set_remote_qpn(r.remote_qpn());
        std::memcpy(w.private_data(), r.private_data(), tp::CmDreq::kPrivateDataBytes);
        break;
    }
    case tp::CmAttribute::Rej: {
        const auto& r = in.as<tp::CmRej>();
        auto& w = out.as<tp::CmRej>();
        w.set_local_comm_id(r.local_comm_id());
        w.set_remote_comm_id(r.remote_comm_id());
        w.set_message_rejected(r.message_rejected());
        w.set_rejected_info_length(r.rejected_info_length());
        w.set_reason(r.reason());
        std::memcpy(w.b + 12, r.ari(), tp::CmRej::kAriBytes);
        std::memcpy(w.private_data(), r.private_data(), tp::CmRej::kPrivateDataBytes);
        break;
    }
    case tp::CmAttribute::SidrReq: {
        const auto& r = in.as<tp::CmSidrReq>();
        auto& w = out.as<tp::CmSidrReq>();
        w.set_request_id(r.request_id());
        w.set_partition_key(r.partition_key());
        w.set_service_id(r.service_id());
        std::memcpy(w.private_data(), r.private_data(), tp::CmSidrReq::kPrivateDataBytes);
        break;
    }
    case tp::CmAttribute::SidrRep: {
        const auto& r = in.as<tp::CmSidrRep>();
        auto& w = out.as<tp::CmSidrRep>();
        w.set_request_id(r.request_id());
        w.set_status(r.status());
        w.set_qpn(r.qpn());
        w.set_service_id(r.service_id());
        w.set_qkey(r.qkey());
        std::memcpy(w.private_data(), r.private_data(), tp::CmSidrRep::kPrivateDataBytes);
        break;
    }
    default:
        FAIL("unexpected attribute " << in.header.attribute_id());
    }
    return out;
}

std::map<uint16_t, int> attributes(const std::vector<tp::CmMad>& mads) {
    std::map<uint16_t, int> count;
    for (const auto& m : mads)
        ++count[m.header.attribute_id()];
    return count;
}

uint16_t id(tp::CmAttribute a) {
    return static_cast<uint16_t>(a);
}

} // namespace

TEST_CASE("CM MADs of the kernel's rdma_cm parse and re-encode byte for byte", "[cm][vectors]") {
    for (const char* name : {"rxe-cm-rping.pcap", "rxe-cm-reject.pcap", "rxe-cm-udaddy.pcap",
                             "rxe-cm-ucmatose-2conn.pcap"}) {
        INFO(name);
        const auto mads = cm_mads(name);
        REQUIRE(!mads.empty());
        for (const auto& mad : mads) {
            INFO("attribute " << mad.header.attribute_id());
            const tp::CmMad again = reencode(mad);
            CHECK(std::memcmp(&again, &mad, sizeof(mad)) == 0);
        }
    }
}

TEST_CASE("rping's connection as the kernel sent it", "[cm][vectors]") {
    const auto mads = cm_mads("rxe-cm-rping.pcap");
    auto count = attributes(mads);
    CHECK(count[id(tp::CmAttribute::Req)] == 1);
    CHECK(count[id(tp::CmAttribute::Rep)] == 1);
    CHECK(count[id(tp::CmAttribute::Rtu)] == 1);
    CHECK(count[id(tp::CmAttribute::Dreq)] == 1);
    CHECK(count[id(tp::CmAttribute::Drep)] == 1);
    CHECK(count[id(tp::CmAttribute::Mra)] == 0);
    const tp::CmMad* req = nullptr;
    const tp::CmMad* rep = nullptr;
    for (const auto& m : mads) {
        if (m.header.attribute_id() == id(tp::CmAttribute::Req))
            req = &m;
        if (m.header.attribute_id() == id(tp::CmAttribute::Rep))
            rep = &m;
    }
    REQUIRE(req);
    REQUIRE(rep);
    const auto& r = req->as<tp::CmReq>();
    CHECK(r.service_id() == tp::rdma_cm_service_id(0x0106, 7174));
    CHECK(r.service_id() == 0x0000000001061c06ull);
    CHECK(r.transport_service_type() == 0);
    CHECK(r.partition_key() == 0xffff);
    CHECK(r.primary_local_lid() == 0xffff);
    CHECK(r.primary_remote_lid() == 0xffff);
    CHECK(tp::gid_is_ipv4_mapped(r.primary_local_gid()));
    CHECK(r.max_cm_retries() == 15);
    CHECK(r.remote_cm_response_timeout() == 20);
    CHECK(r.local_cm_response_timeout() == 20);
    tp::CmaHeader cma;
    std::memcpy(&cma, r.private_data(), sizeof(cma));
    CHECK(cma.cma_version() == 0);
    CHECK(cma.ip_version() == 4);
    CHECK(cma.dst_ipv4() == 0xc6120902); // 198.18.9.2, the listener
    CHECK(cma.src_ipv4() == 0xc6120903);
    const auto& p = rep->as<tp::CmRep>();
    CHECK(p.remote_comm_id() == r.local_comm_id());
    CHECK(rep->header.transaction_id() == req->header.transaction_id());
}

TEST_CASE("a REQ nobody listens for is answered with REJ invalid service id", "[cm][vectors]") {
    const auto mads = cm_mads("rxe-cm-reject.pcap");
    const tp::CmMad* req = nullptr;
    const tp::CmMad* rej = nullptr;
    for (const auto& m : mads) {
        if (m.header.attribute_id() == id(tp::CmAttribute::Req))
            req = &m;
        if (m.header.attribute_id() == id(tp::CmAttribute::Rej))
            rej = &m;
    }
    REQUIRE(req);
    REQUIRE(rej);
    CHECK(req->as<tp::CmReq>().service_id() == 0x0000000001061f3full);
    const auto& j = rej->as<tp::CmRej>();
    CHECK(j.reason() == static_cast<uint16_t>(tp::CmRejectReason::InvalidServiceId));
    CHECK(j.remote_comm_id() == req->as<tp::CmReq>().local_comm_id());
    CHECK(j.message_rejected() == 0);
}

TEST_CASE("udaddy's SIDR exchange", "[cm][vectors]") {
    const auto mads = cm_mads("rxe-cm-udaddy.pcap");
    const tp::CmMad* rep = nullptr;
    for (const auto& m : mads)
        if (m.header.attribute_id() == id(tp::CmAttribute::SidrRep))
            rep = &m;
    REQUIRE(rep);
    const auto& s = rep->as<tp::CmSidrRep>();
    CHECK(s.status() == 0);
    CHECK(s.qpn() == 0x11);
    CHECK(s.qkey() == 0x01234567);
    CHECK((s.service_id() >> 16) == 0x0111);
}

TEST_CASE("CM MAD checks refuse what is not a CM Send of 256 bytes", "[cm]") {
    tp::CmMad mad{};
    mad.header.set(tp::kMgmtClassCm, tp::kCmClassVersion, tp::kMadMethodSend, 1,
                   id(tp::CmAttribute::Req));
    tp::CmMad out;
    const auto* bytes = reinterpret_cast<const uint8_t*>(&mad);
    CHECK(tp::parse_cm_mad(bytes, sizeof(mad), out) == tp::MadError::None);
    CHECK(tp::parse_cm_mad(bytes, sizeof(mad) - 1, out) == tp::MadError::Truncated);
    CHECK(tp::parse_cm_mad(nullptr, sizeof(mad), out) == tp::MadError::Truncated);
    tp::CmMad bad = mad;
    bad.header.b[1] = 0x01; // subnet management
    CHECK(tp::parse_cm_mad(reinterpret_cast<const uint8_t*>(&bad), sizeof(bad), out) ==
          tp::MadError::NotCm);
    bad = mad;
    bad.header.b[2] = 1;
    CHECK(tp::parse_cm_mad(reinterpret_cast<const uint8_t*>(&bad), sizeof(bad), out) ==
          tp::MadError::BadVersion);
    bad = mad;
    bad.header.b[3] = 0x01; // Get
    CHECK(tp::parse_cm_mad(reinterpret_cast<const uint8_t*>(&bad), sizeof(bad), out) ==
          tp::MadError::BadMethod);
    bad = mad;
    tp::store_be16(bad.header.b + 16, 0x0042);
    CHECK(tp::parse_cm_mad(reinterpret_cast<const uint8_t*>(&bad), sizeof(bad), out) ==
          tp::MadError::UnknownAttribute);
}
