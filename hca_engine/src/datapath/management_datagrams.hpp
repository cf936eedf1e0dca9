// The GSI QP (QP1) of each port, as the engine's communication manager sees it: MADs
// in and out as UD SEND-only packets with the GSI Q_Key (IBTA 13.5.1). The data path
// carries them (Datapath implements MadSender and hands QP1's packets to a
// MadReceiver); the CM never touches a frame.
#pragma once

#include "softhca/transport/cm_messages.hpp"
#include "softhca/transport/roce_address.hpp"

#include <cstddef>
#include <cstdint>

namespace softhca::engine {

// Where a MAD came from, or goes to (the transport's, which the IB CM uses too).
using MadPeer = transport::MadPeer;

class MadReceiver {
  public:
    virtual ~MadReceiver() = default;
    // A datagram that reached QP1 of `port` with the GSI Q_Key; `length` bytes of MAD.
    virtual void receive_mad(size_t port, const MadPeer& from, const uint8_t* mad, size_t length,
                             uint64_t now) = 0;
};

class MadSender {
  public:
    virtual ~MadSender() = default;
    // Queues one 256-byte MAD from QP1 of `port`. False when it cannot leave now: the
    // peer's MAC is still being resolved (an ARP request went out), the link is down
    // or the port's queue is full. The CM's retransmission covers these.
    virtual bool send_mad(size_t port, const MadPeer& to, const transport::CmMad& mad,
                          uint64_t now) = 0;
    // Whether the peer's MAC is known; asks for it (ARP or ND) when not.
    virtual bool neighbor_resolved(size_t port, const transport::Gid& peer, uint64_t now) = 0;
};

} // namespace softhca::engine
