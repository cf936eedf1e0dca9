// Requester (IBTA 9.7.4, 9.7.6, 9.8): turns send work requests into request packets,
// segmented by the path MTU, with PSNs; on RC resends from a PSN on NAK or timeout. UC
// and UD requests are done once their last packet is sent.
#include "softhca/transport/psn.hpp"
#include "softhca/transport/queue_pair.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace softhca::transport {

bool QueuePair::is_read_or_atomic(const SendWqe& wqe) const {
    return wqe.opcode == WrOpcode::RdmaRead || wqe.opcode == WrOpcode::AtomicCompareSwap ||
           wqe.opcode == WrOpcode::AtomicFetchAdd;
}

bool QueuePair::is_local_operation(const SendWqe& wqe) const {
    return wqe.opcode == WrOpcode::BindMemoryWindow || wqe.opcode == WrOpcode::LocalInvalidate ||
           is_placed(wqe);
}

bool QueuePair::is_placed(const SendWqe& wqe) const {
    return wqe.placed && service_ == Service::RC &&
           (wqe.opcode == WrOpcode::RdmaWrite || wqe.opcode == WrOpcode::RdmaRead);
}

bool QueuePair::is_placed_with_immediate(const SendWqe& wqe) const {
    return wqe.placed && service_ == Service::RC && wqe.opcode == WrOpcode::RdmaWriteWithImm;
}

bool QueuePair::run_local_operation(SendEntry& entry) {
    // Binding a memory window and invalidating an rkey act on this HCA's own tables, in
    // send queue order (10.6.7.3, 10.6.7.2.2 / 11.4.1.1); they take no PSN and send
    // nothing, and complete after the requests before them.
    const SendWqe& wqe = entry.wqe;
    entry.packets = 0;
    entry.first_psn = req_.next_psn;
    entry.next_packet = 0;
    entry.received_packets = 0;
    entry.started = true;
    if (is_placed(wqe)) {
        // The initiator moved the bytes itself, with the rights the kernel gives it over
        // the responder's process, after the engine checked the rkey (a grant): nothing
        // goes on the wire, and the request completes after those before it.
        ++counters_.placed_messages;
        counters_.placed_bytes += wqe.length;
        entry.acked = true;
        return true;
    }
    const bool bind = wqe.opcode == WrOpcode::BindMemoryWindow;
    const MemoryStatus s =
        bind ? memory_.bind_window(wqe.bind) : memory_.invalidate(wqe.rkey, false);
    if (s != MemoryStatus::Ok) {
        complete_send_error(entry, bind ? WcStatus::MemoryWindowBindError
                                        : WcStatus::LocalQpOperationError);
        return false;
    }
    entry.acked = true;
    return true;
}

bool QueuePair::start_entry(SendEntry& entry) {
    const SendWqe& wqe = entry.wqe;
    const bool rd_atomic = is_read_or_atomic(wqe);
    const uint32_t mtu = path_mtu_bytes(attr_.mtu);
    if (!reliable()) {
        // UC carries sends and writes, UD sends only (9.2 table 38); a UD message is
        // a single packet, so it may not exceed the path MTU.
        const bool allowed = service_ == Service::UD ? wqe.opcode == WrOpcode::Send ||
                                                           wqe.opcode == WrOpcode::SendWithImm
                                                     : !rd_atomic;
        if (!allowed || (service_ == Service::UD && wqe.length > mtu)) {
            entry.started = true;
            complete_send_error(entry, allowed ? WcStatus::LocalLengthError
                                               : WcStatus::LocalQpOperationError);
            return false;
        }
    }
    // Fence (10.8.3.3): wait for every earlier read and atomic to complete.
    if (wqe.fence && req_.outstanding_rd_atomic > 0)
        return false;
    if (is_local_operation(wqe))
        return run_local_operation(entry);
    // 9.7.4.1.4: no more outstanding reads/atomics than the responder accepts.
    if (rd_atomic && req_.outstanding_rd_atomic >= std::max<uint32_t>(1, attr_.max_rd_atomic))
        return false;
    // 9.7.7.2: a message that needs a receive WQE waits for credit; with none at all,
    // one message may still go when nothing is outstanding, to learn the credit count.
    const bool consuming = reliable() && consumes_recv(wqe);
    if (consuming && req_.outstanding_consuming > 0 && req_.outstanding_consuming >= req_.credits)
        return false;
    const bool atomic =
        wqe.opcode == WrOpcode::AtomicCompareSwap || wqe.opcode == WrOpcode::AtomicFetchAdd;
    // A WRITE with immediate whose bytes are placed: one packet, for the receive it
    // consumes and its completion, in PSN order with the rest.
    const bool placed = is_placed_with_immediate(wqe);
    entry.packets = atomic || placed ? 1 : std::max<uint32_t>(1, (wqe.length + mtu - 1) / mtu);
    if (placed) {
        ++counters_.placed_messages;
        counters_.placed_bytes += wqe.length;
    }
    entry.first_psn = req_.next_psn;
    entry.next_packet = 0;
    entry.received_packets = 0;
    entry.started = true;
    req_.next_psn = psn_add(req_.next_psn, entry.packets);
    if (rd_atomic)
        ++req_.outstanding_rd_atomic;
    if (consuming)
        ++req_.outstanding_consuming;
    return true;
}

bool QueuePair::consumes_recv(const SendWqe& wqe) {
    return wqe.opcode == WrOpcode::Send || wqe.opcode == WrOpcode::SendWithImm ||
           wqe.opcode == WrOpcode::SendWithInvalidate || wqe.opcode == WrOpcode::RdmaWriteWithImm;
}

void QueuePair::update_credits(uint8_t syndrome) {
    if ((syndrome & aeth::kTypeMask) != aeth::kAck)
        return;
    req_.credits = credits_for_code(syndrome & aeth::kValueMask); // invalid (31): unlimited
}

namespace {

// The request opcodes of each work request by where a packet falls in its message (9.2
// table 38), indexed by WrOpcode. Reads and atomics are one request packet; local
// operations send nothing and never get here.
struct RequestCodes {
    uint8_t first, middle, last, only;
};
constexpr RequestCodes kRequestCodes[] = {
    {op::kWriteFirst, op::kWriteMiddle, op::kWriteLast, op::kWriteOnly},       // RdmaWrite
    {op::kWriteFirst, op::kWriteMiddle, op::kWriteLastImm, op::kWriteOnlyImm}, // ..WithImm
    {op::kSendFirst, op::kSendMiddle, op::kSendLast, op::kSendOnly},           // Send
    {op::kSendFirst, op::kSendMiddle, op::kSendLastImm, op::kSendOnlyImm},     // SendWithImm
    {op::kReadRequest, op::kReadRequest, op::kReadRequest, op::kReadRequest},  // RdmaRead
    {op::kCompareSwap, op::kCompareSwap, op::kCompareSwap, op::kCompareSwap},  // CompareSwap
    {op::kFetchAdd, op::kFetchAdd, op::kFetchAdd, op::kFetchAdd},              // FetchAdd
    {op::kSendOnly, op::kSendOnly, op::kSendOnly, op::kSendOnly},              // LocalInvalidate
    {op::kSendOnly, op::kSendOnly, op::kSendOnly, op::kSendOnly},              // BindMemoryWindow
    {op::kSendFirst, op::kSendMiddle, op::kSendLastInv, op::kSendOnlyInv},     // SendWithInvalidate
};
static_assert(std::size(kRequestCodes) == static_cast<size_t>(WrOpcode::SendWithInvalidate) + 1);

uint8_t request_opcode(WrOpcode opcode, uint32_t packet, uint32_t packets) {
    const size_t row = static_cast<size_t>(opcode);
    if (row >= std::size(kRequestCodes))
        return op::kSendOnly;
    const RequestCodes& codes = kRequestCodes[row];
    return packets == 1            ? codes.only
           : packet == 0           ? codes.first
           : packet + 1 == packets ? codes.last
                                   : codes.middle;
}

} // namespace

size_t QueuePair::build_request(SendEntry& entry, uint8_t* buffer, size_t capacity) {
    const SendWqe& wqe = entry.wqe;
    const uint32_t mtu = path_mtu_bytes(attr_.mtu);
    const bool rd_atomic = is_read_or_atomic(wqe);
    // A read resumes after the response packets already received (9.7.6.1.2).
    const uint32_t packet = rd_atomic ? entry.received_packets : entry.next_packet;
    const uint8_t code = request_opcode(wqe.opcode, packet, entry.packets);
    const uint8_t opcode = wire_opcode(code);
    const OpcodeInfo& info = opcode_info(opcode);
    const HeaderOffsets o = header_offsets(info);

    const bool placed = is_placed_with_immediate(wqe);
    uint32_t payload = 0;
    if (info.payload && !placed) {
        const uint32_t offset = packet * mtu;
        payload = std::min(mtu, wqe.length - std::min(wqe.length, offset));
    }
    const uint32_t pad = (4 - payload % 4) % 4;
    const size_t length = o.payload + payload + pad;
    if (length > capacity)
        return 0;

    const bool last = info.ends_message();
    auto* bth = reinterpret_cast<Bth*>(buffer);
    // Only RC and XRC ask for acknowledgements: on the last packet of a message
    // (9.7.5.2.1), on every read and atomic, and every kAckReqEvery packets.
    const bool ack_req =
        reliable() && (last || rd_atomic || req_.packets_since_ack_req + 1 >= kAckReqEvery);
    req_.packets_since_ack_req = ack_req ? 0 : req_.packets_since_ack_req + 1;
    bth->set(opcode, wqe.solicited && last, static_cast<uint8_t>(pad), attr_.pkey,
             service_ == Service::UD ? wqe.remote_qpn : attr_.dest_qp, ack_req,
             psn_add(entry.first_psn, packet));
    if (placed)
        bth->set_placed_by_initiator();
    if (info.has(header_flag::kXrceth))
        reinterpret_cast<Xrceth*>(buffer + o.xrceth)->set(wqe.remote_srqn);
    if (info.has(header_flag::kDeth)) {
        // A Q_Key with the high bit set means "use the QP's own Q_Key" (the IBTA's rule
        // for privileged Q_Keys).
        const uint32_t qkey = wqe.remote_qkey & 0x80000000u ? attr_.qkey : wqe.remote_qkey;
        reinterpret_cast<Deth*>(buffer + o.deth)->set(qkey, qp_num_);
    }
    if (info.has(header_flag::kReth)) {
        auto* reth = reinterpret_cast<Reth*>(buffer + o.reth);
        if (wqe.opcode == WrOpcode::RdmaRead)
            reth->set(wqe.remote_addr + uint64_t{packet} * mtu, wqe.rkey,
                      wqe.length - std::min(wqe.length, packet * mtu));
        else
            reth->set(wqe.remote_addr, wqe.rkey, wqe.length);
    }
    if (info.has(header_flag::kAtomicEth)) {
        auto* atomic = reinterpret_cast<AtomicEth*>(buffer + o.atomic);
        if (wqe.opcode == WrOpcode::AtomicCompareSwap)
            atomic->set(wqe.remote_addr, wqe.rkey, wqe.swap, wqe.compare_add);
        else
            atomic->set(wqe.remote_addr, wqe.rkey, wqe.compare_add, 0);
    }
    if (info.has(header_flag::kImmDt))
        std::memcpy(buffer + o.imm, &wqe.imm_data, 4);
    if (info.has(header_flag::kIeth))
        reinterpret_cast<Ieth*>(buffer + o.ieth)->set(wqe.rkey);
    if (payload) {
        uint8_t* data = buffer + o.payload;
        const uint32_t offset = packet * mtu;
        // Bytes taken at post time (inline or gathered): their SGEs are checked when the
        // first packet is built, as a read would check them.
        if (wqe.inline_data) {
            const uint8_t* posted = wqe.inline_bytes.data();
            if (offset == 0 && !gathered_sges_valid(wqe)) {
                complete_send_error(entry, WcStatus::LocalProtectionError);
                return 0;
            }
            std::memcpy(data, posted + offset, payload);
        } else if (memory_.read_message(message_tag(entry), false, 0, wqe.sge.data(), wqe.num_sge,
                                        wqe.length, offset, data, payload) != MemoryStatus::Ok) {
            // A bad lkey or an SGE outside its MR: local protection error (10.7.3.1).
            complete_send_error(entry, WcStatus::LocalProtectionError);
            return 0;
        }
    }
    if (pad)
        std::memset(buffer + o.payload + payload, 0, pad);
    entry.next_packet = rd_atomic ? entry.packets : entry.next_packet + 1;
    if (payload && !wqe.inline_data && entry.next_packet == entry.packets)
        memory_.forget_message(message_tag(entry));
    if (!reliable() && entry.next_packet == entry.packets) {
        // Nothing acknowledges UC or UD: the request is complete once sent.
        entry.acked = true;
        retire_completed();
    }
    return length;
}

bool QueuePair::within_window(const SendEntry& entry) const {
    // The window starts at the oldest PSN not yet acknowledged: the head of the send
    // queue unless everything sent is acknowledged (acked entries retire in order).
    const uint32_t next = psn_add(
        entry.first_psn, is_read_or_atomic(entry.wqe) ? entry.received_packets : entry.next_packet);
    uint32_t oldest = next;
    for (uint32_t i = sq_head_; i != sq_tail_; ++i) {
        const SendEntry& e = sq_[i % sq_.size()];
        if (!e.started)
            break;
        if (e.acked)
            continue;
        if (is_read_or_atomic(e.wqe)) {
            oldest = psn_add(e.first_psn, e.received_packets);
        } else {
            oldest = e.first_psn;
            if (psn_diff(comp_.acked_psn, e.first_psn) >= 0) // partly acknowledged
                oldest = psn_add(comp_.acked_psn, 1);
        }
        break;
    }
    return psn_diff(next, oldest) < static_cast<int32_t>(kMaxUnackedPackets);
}

bool QueuePair::gathered_sges_valid(const SendWqe& wqe) {
    // The bytes were copied at post time; the keys and bounds are checked now, as a read
    // would check them (10.7.3.1). Zero-length SGEs are not read, so not checked.
    if (wqe.num_sge == 0)
        return true; // inline data: nothing in memory
    MemoryPiece pieces[kMaxSge];
    const int count = split_pieces(wqe.sge.data(), wqe.num_sge, 0, wqe.length, pieces);
    if (count < 0)
        return false;
    for (int i = 0; i < count; ++i)
        if (memory_.check(pieces[i].key, false, 0, pieces[i].addr, pieces[i].length) !=
            MemoryStatus::Ok)
            return false;
    return true;
}

void QueuePair::rewind_to(uint32_t psn) {
    // Go back N (9.7.6.1): every started request from the one holding `psn` is sent
    // again with the PSNs it had.
    bool found = false;
    for (uint32_t i = sq_head_; i != sq_tail_; ++i) {
        SendEntry& entry = sq_at(i);
        if (!entry.started)
            break;
        const int32_t into = psn_diff(psn, entry.first_psn);
        if (!found && into >= 0 && into < static_cast<int32_t>(entry.packets)) {
            found = true;
            req_.sq_send = i;
            if (is_read_or_atomic(entry.wqe))
                entry.next_packet = 0;
            else
                entry.next_packet = static_cast<uint32_t>(into);
            ++counters_.retransmitted_packets;
        } else if (found) {
            entry.next_packet = 0;
        }
    }
}

} // namespace softhca::transport
