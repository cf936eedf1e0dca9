// A simulated wire under the engine's own data path: two ports joined back to back, as
// the built-in wire joins its two DPDK ports, implemented on the port interface
// (ports.hpp) with no I/O. Transmitted frames pass the engine's FaultInjector (drop,
// duplicate, hold one back behind the next, corrupt past the UDP header) exactly as on
// a DPDK port, and wait in the peer's receive queue until the data path takes them.
// Frames come from a fixed pool: an exhausted pool refuses tx_alloc, as a mempool does.
#pragma once

#include "gid_table.hpp"
#include "ports.hpp"

#include <cstring>
#include <deque>
#include <functional>
#include <vector>

namespace sim {

class SimulatedPortSet final : public softhca::engine::PortSet {
  public:
    static constexpr uint32_t kFrameBytes = 2048;
    static constexpr size_t kFrames = 4096;
    static constexpr size_t kWireFrames = 2048; // frames a receive queue holds; more drop

    explicit SimulatedPortSet(const softhca::engine::FaultConfig& faults, uint32_t eth_mtu = 1500)
        : pool_(kFrames * kFrameBytes), lengths_(kFrames, 0) {
        for (size_t i = 0; i < kFrames; ++i)
            free_.push_back(kFrames - 1 - i);
        for (uint32_t i = 0; i < 2; ++i) {
            softhca::engine::PortInfo info;
            info.pmd = "simulated";
            info.ipv4 = (198u << 24) | (18u << 16) | (i + 1); // 198.18.0.1 and .2
            info.mac = {0x02, 0x53, 0x49, 0x4d, 0x00, static_cast<uint8_t>(i + 1)};
            // 2001:2::1 and ::2 (the IPv6 benchmarking range, RFC 5180)
            info.ipv6 = {{0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                          static_cast<uint8_t>(i + 1)}};
            info.gids = softhca::engine::build_gid_table(info.ipv4, info.ipv6, info.mac);
            info.eth_mtu = info.max_eth_mtu = eth_mtu;
            info.link_up = true;
            info.faults = softhca::engine::FaultInjector(faults, i);
            ports_.push_back(info);
        }
        tx_.resize(2);
        rx_.resize(2);
        held_.assign(2, kNone);
    }

    std::vector<size_t> refresh_links() override { return {}; }

    bool set_admin_state(size_t index, bool up) override {
        ports_[index].admin_up = up;
        const bool changed = ports_[index].link_up != up;
        ports_[index].link_up = up;
        return changed;
    }

    size_t receive(size_t index, softhca::engine::RxFrame* frames, size_t max) override {
        size_t n = 0;
        auto& queue = rx_[index];
        while (n < max && !queue.empty()) {
            const size_t f = queue.front();
            queue.pop_front();
            frames[n++] = {frame(f), lengths_[f], handle_of(f)};
            ports_[index].counters.rx_bytes += lengths_[f];
        }
        ports_[index].counters.rx_packets += n;
        return n;
    }

    void release(void* handle) override { free_.push_back(index_of(handle)); }

    bool tx_alloc(size_t index, softhca::engine::TxFrame& out) override {
        (void)index;
        if (free_.empty())
            return false;
        const size_t f = free_.back();
        free_.pop_back();
        out = {frame(f), kFrameBytes, handle_of(f)};
        return true;
    }

    void tx_abort(softhca::engine::TxFrame& out) override {
        release(out.handle);
        out.handle = nullptr;
    }

    void tx_queue(size_t index, softhca::engine::TxFrame& out, uint32_t length) override {
        const size_t f = index_of(out.handle);
        out.handle = nullptr;
        lengths_[f] = length;
        ports_[index].counters.tx_bytes += length;
        softhca::engine::FaultInjector& faults = ports_[index].faults;
        if (!faults.enabled()) {
            tx_[index].push_back(f);
            return;
        }
        const softhca::engine::FaultDecision d = faults.decide(length, 14 + 20 + 8);
        if (d.drop) {
            free_.push_back(f);
            return;
        }
        if (d.corrupt_at >= 0)
            frame(f)[d.corrupt_at] ^= 0x5a;
        if (d.duplicate && !free_.empty()) {
            const size_t copy = free_.back();
            free_.pop_back();
            std::memcpy(frame(copy), frame(f), length);
            lengths_[copy] = length;
            tx_[index].push_back(copy);
        }
        if (d.hold && held_[index] == kNone) {
            held_[index] = f; // goes out after the next frame
            return;
        }
        tx_[index].push_back(f);
        if (held_[index] != kNone) {
            tx_[index].push_back(held_[index]);
            held_[index] = kNone;
        }
    }

    // A cut wire: every frame sent is lost.
    bool cut = false;
    // Sees every frame the wire delivers (from port `from`), as a capture would.
    std::function<void(size_t from, const uint8_t* frame, uint32_t length)> tap;

    size_t flush() override { return flush_port(0) + flush_port(1); }
    // Each port's queue on its own, as the engine's data paths take them when each serves
    // one port (datapath_threads.hpp; the tests poll them one after the other).
    size_t flush_port(size_t i) override {
        size_t sent = 0;
        auto& peer = rx_[1 - i];
        for (size_t f : tx_[i]) {
            if (cut) {
                free_.push_back(f);
                continue;
            }
            if (peer.size() >= kWireFrames) {
                free_.push_back(f); // the wire is full: a drop, as on a NIC
                ++ports_[i].counters.tx_dropped;
                continue;
            }
            if (tap)
                tap(i, frame(f), lengths_[f]);
            peer.push_back(f);
            ++ports_[i].counters.tx_packets;
            ++sent;
        }
        tx_[i].clear();
        return sent;
    }
    bool ports_serve_threads() const override { return true; }

    // A frame from elsewhere on the wire (a foreign host, an attacker) arrives at `index`.
    void deliver(size_t index, const uint8_t* data, uint32_t length) {
        if (free_.empty() || length > kFrameBytes)
            return;
        const size_t f = free_.back();
        free_.pop_back();
        std::memcpy(frame(f), data, length);
        lengths_[f] = length;
        rx_[index].push_back(f);
    }

    // Both ports as the built-in wire without captures or faults: ICRCs offloaded.
    void offload_icrc() {
        for (auto& info : ports_)
            info.icrc_offload = true;
    }

    const softhca::engine::FaultInjector& faults(size_t index) const {
        return ports_[index].faults;
    }
    // Frames of the pool not given back: 0 when nothing leaked (a held frame and the
    // frames waiting on the wire count as in use).
    size_t frames_in_use() const {
        size_t waiting = rx_[0].size() + rx_[1].size() + tx_[0].size() + tx_[1].size();
        for (size_t h : held_)
            waiting += h != kNone;
        return kFrames - free_.size() - waiting;
    }

  private:
    static constexpr size_t kNone = SIZE_MAX;
    uint8_t* frame(size_t f) { return pool_.data() + f * kFrameBytes; }
    static void* handle_of(size_t f) { return reinterpret_cast<void*>(f + 1); }
    static size_t index_of(void* handle) { return reinterpret_cast<size_t>(handle) - 1; }

    std::vector<uint8_t> pool_;
    std::vector<uint32_t> lengths_;
    std::vector<size_t> free_;
    std::vector<std::vector<size_t>> tx_; // queued, not yet flushed
    std::vector<std::deque<size_t>> rx_;  // on the wire to this port
    std::vector<size_t> held_;
};

} // namespace sim
