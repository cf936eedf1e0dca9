// The engine's ports on DPDK ethdevs, one per device; with dpdk_ports.cpp the only
// place DPDK appears. The default is a back-to-back pair joined by two rte_rings (the
// built-in wire); any other PMD is named by its device arguments. Transmitted frames
// pass the port's fault injector and capture (--faults, --pcap).
#pragma once

#include "port_config.hpp"
#include "ports.hpp"

#include <memory>

struct rte_mbuf;

namespace softhca::engine {

class DpdkPortSet final : public PortSet {
  public:
    // Initialises the DPDK EAL without hugepages and brings every configured port up.
    // Throws std::runtime_error with a readable message on failure.
    explicit DpdkPortSet(const PortsConfig& config);
    ~DpdkPortSet() override;

    std::vector<size_t> refresh_links() override;
    bool set_admin_state(size_t index, bool up) override;
    size_t receive(size_t index, RxFrame* frames, size_t max) override;
    void release(void* handle) override;
    bool tx_alloc(size_t index, TxFrame& frame) override;
    void tx_queue(size_t index, TxFrame& frame, uint32_t length) override;
    void tx_abort(TxFrame& frame) override;
    size_t flush() override;
    uint64_t next_tx_release() const override;
    // Each port is its own: its pool (multi-producer, multi-consumer, so the frames a
    // port receives from another thread's port go back from here), its transmit queue
    // and shaped link, its side of the built-in wire's single-producer rings.
    size_t flush_port(size_t index) override;
    uint64_t next_tx_release_on(size_t index) const override;
    bool awaiting_credits_on(size_t index, uint64_t now) const override;
    bool ports_serve_threads() const override { return true; }
    bool tx_room(size_t index, uint8_t vl, uint32_t bytes) override;
    bool awaiting_credits(uint64_t now) const override;
    bool tx_paused(size_t index, uint8_t priority, uint64_t now) override;
    void after_receive_round(size_t index, bool backlogged, uint8_t priorities,
                             uint64_t now) override;
    // `rdma link add`: a net_af_packet port on the interface, as --port would make one.
    long add_port(const PortConfig& port, std::string& why) override;
    void remove_port(size_t index) override;

  private:
    // Configures and starts port `info.dpdk_port` (its pool, queues, MTU, transmitter)
    // and appends it; `kernel_mtu` and `ring_frame` as its plan says (af_packet, af_xdp).
    void bring_up(PortInfo& info, uint32_t kernel_mtu, uint32_t ring_frame);
    // Writes a frame the port sends to its capture, if it has one.
    void capture(size_t index, const ::rte_mbuf* m);
    // flush(): the port's flow-control frame, when link-level credits want one sent.
    template <typename SendBurst> void send_flow_control(size_t index, SendBurst& send_burst);
    struct Dpdk;
    std::unique_ptr<Dpdk> dpdk_;
};

} // namespace softhca::engine
