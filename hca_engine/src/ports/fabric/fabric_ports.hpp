// The ports of a fabric inside the engine (--fabric): one device per endpoint (a host's
// NIC), each port's frames crossing the fabric of fabric.hpp (its links, queues and
// switches, in simulated time) to the endpoint whose MAC they are sent to. Broadcasts and
// multicasts (ARP, Neighbor Discovery, multicast groups) reach every other endpoint at once,
// as a fabric's control plane would answer them. A NIC's queue holds its senders back when
// full (PortInfo::holds_senders_back), as a NIC's send queue waits for its link.
#pragma once

#include "fabric.hpp"
#include "port_config.hpp"
#include "ports.hpp"

#include <memory>
#include <vector>

namespace softhca::engine {

class FabricPortSet final : public PortSet, private fabric::FabricSink {
  public:
    FabricPortSet(const PortsConfig& config, const fabric::FabricSpec& spec);

    std::vector<size_t> refresh_links() override { return {}; }
    bool set_admin_state(size_t index, bool up) override;
    size_t receive(size_t index, RxFrame* frames, size_t max) override;
    void release(void* handle) override;
    bool tx_alloc(size_t index, TxFrame& frame) override;
    void tx_queue(size_t index, TxFrame& frame, uint32_t length) override;
    void tx_abort(TxFrame& frame) override;
    size_t flush() override;
    uint64_t next_tx_release() const override { return fabric_->next_event(); }
    bool tx_room(size_t index, uint8_t vl, uint32_t bytes) override;
    FabricStatus fabric_status() override;
    int set_fabric_link(const std::string& a, const std::string& b, bool up) override;

    const fabric::Fabric& fabric() const { return *fabric_; }
    // Each endpoint's host's network namespace (netns=1), for the status.
    void set_host_namespaces(std::vector<std::string> names) { namespaces_ = std::move(names); }
    // Frames of the pool not free and not waiting in a receive queue (tests).
    size_t frames_in_fabric() const;

  private:
    void deliver(uint32_t endpoint, uint32_t frame) override;
    void drop(uint32_t frame) override;
    uint32_t copy(uint32_t frame, uint8_t*& data) override;
    uint8_t* frame_data(uint32_t f) { return pool_.data() + size_t{f} * frame_bytes_; }
    static void* handle_of(uint32_t f) { return reinterpret_cast<void*>(uintptr_t{f} + 1); }
    static uint32_t index_of(void* handle) {
        return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(handle) - 1);
    }
    uint32_t endpoint_of_mac(const uint8_t* mac) const;

    // A receive queue: a ring of frame indices as large as the pool (never full).
    struct RxRing {
        std::vector<uint32_t> slots;
        size_t head = 0, count = 0;
    };
    uint32_t frame_bytes_ = 0;
    std::vector<uint8_t> pool_;
    std::vector<uint32_t> lengths_;
    std::vector<uint32_t> free_;
    std::vector<RxRing> rx_;
    size_t delivered_since_flush_ = 0;
    std::unique_ptr<fabric::Fabric> fabric_;
    std::vector<std::string> namespaces_;
};

} // namespace softhca::engine
