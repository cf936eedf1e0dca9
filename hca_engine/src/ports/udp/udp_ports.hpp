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
//
// Segmentation offload. A flush's datagrams to one destination of one size (a
// message's packets; the last may be shorter) leave as one run: one sendmsg with
// UDP_SEGMENT (GSO), up to 64 datagrams and 64 KiB in one trip through the kernel's
// stack, which cuts it into datagrams as late as it can (a NIC with UDP segmentation
// offload, else the last device without it). Datagram k of a run is numbered k in its
// IPv4 identification when cut, so the port gives it the ICRC of identification k. With
// UDP_GRO a run that arrives coalesced (over loopback, a veth or a bridge a GSO send
// arrives whole; a NIC's GRO coalesces) is one receive, its datagrams copied out behind
// headers of their own. Where the kernel refuses a GSO send the socket goes back to
// datagram by datagram. An af_packet port on the same virtual link receives an uncut run
// whole and drops it: turn the udp side's segmentation off on an interface on the way
// (`ethtool -K IF tx-udp-segmentation off`) or GSO off (SOFTHCA_UDP_GSO=0).
#pragma once

#include "port_config.hpp"
#include "ports.hpp"

#include <memory>
#include <sys/socket.h>

namespace softhca::engine {

struct Landed;

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
    // `rdma link add`: sockets on the interface's addresses, as --port udp@... makes them.
    long add_port(const PortConfig& port, std::string& why) override;
    void remove_port(size_t index) override;

  private:
    struct Uring;
    std::unique_ptr<Uring> uring_;
    // Opens port `port`'s sockets (not yet armed) and appends it. Throws as the
    // constructor does, with nothing of the port left open.
    void open_port(const PortConfig& port);
    // Takes every completion: received datagrams wait for receive(), sent runs free their
    // slots; receives that ended are started again.
    void reap();
    // Takes a received datagram or run (in landing buffer `id`, `bytes` long).
    void land(size_t socket, unsigned id, int bytes);
    // Rebuilds the Ethernet, IP and UDP headers of one received datagram so that they end
    // at `payload`; returns where the frame starts.
    uint8_t* rebuild_headers(const Landed& landed, uint8_t* payload, uint32_t length);
    // Hands a frame to the kernel as a datagram (the fault injector already had it): into
    // the port's open run when it continues it, else in a run of its own.
    void send_frame(size_t index, uint32_t slot, uint32_t length);
    // Opens a run for the port with one datagram (its payload in transmit slot `slot`).
    void start_run(size_t index, uint32_t slot, uint8_t* payload, uint32_t length,
                   const sockaddr_storage& to, int socket, uint8_t hop_limit,
                   uint8_t traffic_class);
    // Queues the port's open run as one sendmsg.
    void close_run(size_t index);
    // A run's sendmsg completed with `result`.
    void run_sent(uint32_t run, int result);
    void free_run(uint32_t run);
};

} // namespace softhca::engine
