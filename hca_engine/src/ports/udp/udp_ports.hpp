// The engine's ports on kernel UDP sockets (--port udp@ADDRESSES): RoCEv2 as UDP
// datagrams to port 4791 through the kernel's own network stack, which does ARP, ND and
// routing; for hosts where DPDK cannot or should not own the NIC (a laptop's Wi-Fi, a
// cloud VM's only interface, an unprivileged container). One socket per address, bound
// to it and port 4791.
//
// io_uring batches the I/O: each socket has one multishot recvmsg filling buffers from a
// provided-buffer ring, and sends are queued as SQEs and submitted once per flush, so
// the steady state makes no system call per packet. The data path still sees Ethernet
// frames: a received datagram gets Ethernet, IP and UDP headers rebuilt in front of it
// (in its buffer, where the recvmsg header was) from what the socket tells — addresses,
// hop limit, traffic class; the IPv4 identification it does not tell is left to the
// ICRC check (icrc_ipv4_id.hpp). A frame to send loses its headers again, its IP
// destination, hop limit and traffic class becoming the datagram's address and
// ancillary data. The kernel sends with the socket's port (4791) as UDP source, IPv4
// identification 0 and DF; the data path builds its frames so (PortInfo::kernel_udp),
// so that the ICRC it computed is the one the wire needs.
#pragma once

#include "port_config.hpp"
#include "ports.hpp"

#include <memory>

namespace softhca::engine {

class UdpPortSet final : public PortSet {
  public:
    // Opens the sockets and the ring. Throws std::runtime_error with a readable message
    // (an address no interface has, port 4791 taken, io_uring not allowed).
    explicit UdpPortSet(const PortsConfig& config);
    ~UdpPortSet() override;

    std::vector<size_t> refresh_links() override;
    bool set_admin_state(size_t index, bool up) override;
    size_t receive(size_t index, RxFrame* frames, size_t max) override;
    void release(void* handle) override;
    bool tx_alloc(size_t index, TxFrame& frame) override;
    void tx_queue(size_t index, TxFrame& frame, uint32_t length) override;
    void tx_abort(TxFrame& frame) override;
    size_t flush() override;
    std::vector<int> wakeup_fds() const override;

  private:
    struct Uring;
    std::unique_ptr<Uring> uring_;
    // Takes every completion: received datagrams become frames of their port, sent ones
    // free their slots; receives that ended are started again.
    void reap();
    // Turns a received datagram (in provided buffer `id`, `bytes` long) into a frame.
    void take_datagram(size_t socket, unsigned id, int bytes);
    // Hands a frame to the kernel as a datagram (the fault injector already had it).
    void send_frame(size_t index, uint32_t slot, uint32_t length);
};

} // namespace softhca::engine
