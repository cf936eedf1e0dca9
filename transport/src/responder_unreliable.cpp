// The responder's way in for the unacknowledged services: UC checks
// only that packets continue the message in progress, UD checks the Q_Key and
// delivers single-packet messages behind a GRH. Execution (receive buffers, RDMA
// WRITE) is shared with RC in responder.cpp; nothing here answers the requester.
#include "softhca/transport/psn.hpp"
#include "softhca/transport/queue_pair.hpp"

#include <array>

namespace softhca::transport {

namespace {

bool accepts_requests(QpState state) {
    return state == QpState::Rtr || state == QpState::Rts || state == QpState::Sqd ||
           state == QpState::Sqe;
}

} // namespace

void QueuePair::on_unacknowledged_request(const IbPacket& packet) {
    if (!accepts_requests(state_) || !packet.info->request) {
        ++counters_.dropped;
        return;
    }
    if (state_ == QpState::Rtr && !established_) {
        established_ = true;
        sink_.communication_established();
    }
    const uint32_t psn = packet.bth->psn();
    if (psn_diff(psn, resp_.epsn) < 0) {
        // Behind what was already taken: a stale or duplicated packet. Nothing resends
        // on UC, so it cannot belong to the message in progress; leave that alone.
        ++counters_.duplicates;
        return;
    }
    if (psn != resp_.epsn) {
        // A packet is missing. The message in progress cannot complete and is
        // dropped; its receive request stays for the next message. Any PSN may start
        // a new message.
        ++counters_.out_of_sequence;
        if (resp_.in_progress != OpKind::Invalid)
            drop_message();
    }
    resp_.epsn = psn_add(psn, 1);
    const OpcodeInfo& info = *packet.info;
    if (resp_.in_progress != OpKind::Invalid &&
        (info.kind != resp_.in_progress || info.starts_message()))
        drop_message(); // the last packet of the message in progress never came
    if (resp_.in_progress == OpKind::Invalid && !info.starts_message()) {
        ++counters_.dropped; // the rest of a message already dropped
        return;
    }
    if (!payload_length_valid(packet)) {
        drop_message();
        return;
    }
    if (info.kind == OpKind::Send)
        accept_send(packet, psn);
    else if (info.kind == OpKind::Write)
        accept_write(packet, psn);
    else
        drop_message();
}

void QueuePair::on_ud_request(const IbPacket& packet, const uint8_t* grh) {
    if (!accepts_requests(state_) || !packet.deth) {
        ++counters_.dropped;
        return;
    }
    // Q_Key check: a datagram whose Q_Key differs from the QP's is silently dropped.
    if (packet.deth->qkey() != attr_.qkey) {
        ++counters_.qkey_violations;
        return;
    }
    // A UD message is one packet of at most the path MTU; without a receive request
    // it is dropped (UD has no RNR).
    if (packet.payload_length > path_mtu_bytes(attr_.mtu) || !take_recv()) {
        ++counters_.dropped_messages;
        return;
    }
    const uint32_t psn = packet.bth->psn();
    const uint32_t byte_len = kGrhBytes + packet.payload_length;
    if (byte_len > resp_.recv.length) {
        fail_receive(WcStatus::LocalLengthError, 0, psn);
        return;
    }
    // ibv_post_recv(3): the first 40 bytes of the buffer receive the GRH, the data
    // follows.
    static constexpr std::array<uint8_t, kGrhBytes> kNoGrh{};
    MemoryStatus written = scatter(rq_->memory(), resp_.recv.sge.data(), resp_.recv.num_sge, 0,
                                   grh ? grh : kNoGrh.data(), kGrhBytes);
    if (written == MemoryStatus::Ok && packet.payload_length)
        written = scatter(rq_->memory(), resp_.recv.sge.data(), resp_.recv.num_sge, kGrhBytes,
                          packet.payload, packet.payload_length);
    if (written == MemoryStatus::Gone) {
        ++counters_.dropped;
        return;
    }
    if (written != MemoryStatus::Ok) {
        fail_receive(WcStatus::LocalProtectionError, 0, psn);
        return;
    }
    rq_->memory().end_message();
    // An IPv6 header fills the GRH area; an IPv4 one its second half (A17.4.5.2).
    complete_recv(packet, byte_len,
                  !grh                 ? NetworkHeader::None
                  : (grh[0] >> 4) == 6 ? NetworkHeader::Ipv6
                                       : NetworkHeader::Ipv4);
}

} // namespace softhca::transport
