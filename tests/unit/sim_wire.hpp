// A simulated wire and host memory for transport tests: no I/O, deterministic from a
// seed. The wire drops, duplicates, delays (and so reorders) and can corrupt packets.
#pragma once

#include "softhca/transport/ib_packet.hpp"
#include "softhca/transport/memory_access.hpp"
#include "softhca/transport/queue_pair.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

namespace sim {

using namespace softhca::transport;

// Registered memory of one simulated host: regions addressed by key.
class HostMemory : public MemoryAccess {
  public:
    struct Region {
        std::vector<uint8_t> bytes;
        uint64_t addr = 0;
        uint32_t rights = 0;
    };

    // Registers `size` bytes at a made-up address; returns the key (lkey == rkey).
    uint32_t add_region(size_t size, uint32_t rights) {
        const uint32_t key = next_key_++ * 256 + 7;
        Region r;
        r.bytes.assign(size, 0);
        r.addr = 0x10000000ull * (regions_.size() + 1);
        r.rights = rights;
        regions_[key] = std::move(r);
        return key;
    }
    Region& region(uint32_t key) { return regions_.at(key); }
    uint8_t* at(uint32_t key, uint64_t addr) {
        Region& r = regions_.at(key);
        return r.bytes.data() + (addr - r.addr);
    }

    MemoryStatus check(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                       uint64_t length) override {
        (void)remote;
        auto it = regions_.find(key);
        if (it == regions_.end())
            return MemoryStatus::BadKey;
        const Region& r = it->second;
        if ((r.rights & rights) != rights)
            return MemoryStatus::NoAccess;
        if (addr < r.addr || addr + length > r.addr + r.bytes.size() || addr + length < addr)
            return MemoryStatus::OutOfRange;
        return MemoryStatus::Ok;
    }
    MemoryStatus read(uint32_t key, bool remote, uint32_t rights, uint64_t addr, void* dst,
                      uint32_t length) override {
        if (MemoryStatus s = check(key, remote, rights, addr, length); s != MemoryStatus::Ok)
            return s;
        std::memcpy(dst, at(key, addr), length);
        return MemoryStatus::Ok;
    }
    MemoryStatus write(uint32_t key, bool remote, uint32_t rights, uint64_t addr, const void* src,
                       uint32_t length) override {
        if (MemoryStatus s = check(key, remote, rights, addr, length); s != MemoryStatus::Ok)
            return s;
        std::memcpy(at(key, addr), src, length);
        return MemoryStatus::Ok;
    }
    MemoryStatus atomic(uint32_t rkey, uint64_t addr, bool compare_swap, uint64_t compare_add,
                        uint64_t swap, uint64_t& original) override {
        if (MemoryStatus s = check(rkey, true, access::kRemoteAtomic, addr, 8);
            s != MemoryStatus::Ok)
            return s;
        uint64_t value;
        std::memcpy(&value, at(rkey, addr), 8);
        original = value;
        if (compare_swap)
            value = value == compare_add ? swap : value;
        else
            value += compare_add;
        std::memcpy(at(rkey, addr), &value, 8);
        return MemoryStatus::Ok;
    }

    // Windows, simply: a bind makes `new_rkey` a region of its own over the bound bytes
    // (a copy: the tests only check the rkey's life), an invalidation removes it.
    MemoryStatus bind_window(const WindowBind& bind) override {
        if (!regions_.count(bind.mr_lkey))
            return MemoryStatus::BadKey;
        Region r;
        r.bytes.assign(bind.length, 0);
        r.addr = bind.addr;
        r.rights = bind.access;
        regions_[bind.new_rkey] = std::move(r);
        return MemoryStatus::Ok;
    }
    MemoryStatus invalidate(uint32_t rkey, bool remote) override {
        if (!regions_.erase(rkey))
            return MemoryStatus::BadKey;
        invalidated.push_back({rkey, remote});
        return MemoryStatus::Ok;
    }
    std::vector<std::pair<uint32_t, bool>> invalidated; // (rkey, remote) in order

    // Set: small receives travel with their completions, as the engine's private memory.
    bool stage_receives = false;
    bool stages_receive(uint32_t lkey, uint64_t addr, uint32_t length, uint64_t& place) override {
        place = addr;
        return stage_receives &&
               check(lkey, false, access::kLocalWrite, addr, length) == MemoryStatus::Ok;
    }

  private:
    std::map<uint32_t, Region> regions_;
    uint32_t next_key_ = 1;
};

// An unsignaled work request whose one SGE is the first `length` bytes of region `key`.
inline SendWqe one_sge_request(uint64_t wr_id, WrOpcode opcode, HostMemory& memory, uint32_t key,
                               uint32_t length) {
    SendWqe w;
    w.wr_id = wr_id;
    w.opcode = opcode;
    w.length = length;
    w.num_sge = 1;
    w.sge[0] = {memory.region(key).addr, length, key};
    return w;
}

// A receive work request whose one SGE is `length` bytes at `offset` in region `key`.
inline RecvWqe one_sge_receive(uint64_t wr_id, HostMemory& memory, uint32_t key, uint32_t length,
                               uint64_t offset = 0) {
    RecvWqe r;
    r.wr_id = wr_id;
    r.num_sge = 1;
    r.length = length;
    r.sge[0] = {memory.region(key).addr + offset, length, key};
    return r;
}

class Recorder : public CompletionSink {
  public:
    std::vector<Completion> sends, recvs;
    uint32_t retired = 0;
    std::vector<WcStatus> errors;
    std::vector<bool> errors_by_responder;
    int established = 0;
    int drained = 0;
    int last_wqe = 0;
    void communication_established() override { ++established; }
    void last_wqe_reached() override { ++last_wqe; }
    void send_queue_drained() override { ++drained; }
    void send_completion(const Completion& c) override { sends.push_back(c); }
    void recv_completion(const Completion& c) override { recvs.push_back(c); }
    void send_wqe_retired() override { ++retired; }
    void qp_error(WcStatus cause, bool by_responder) override {
        errors.push_back(cause);
        errors_by_responder.push_back(by_responder);
    }
};

struct WireFaults {
    double drop = 0, duplicate = 0, corrupt = 0;
    Nanoseconds max_delay = 2000; // random delay per packet: reordering
};

// Two endpoints joined by a lossy wire; each side has one QP of the given service.
class Link {
  public:
    struct Side {
        HostMemory memory;
        Recorder sink;
        QueuePair qp;
        Side(uint32_t qpn, uint32_t depth, Service service)
            : qp(qpn, service, depth, depth, memory, sink) {}
    };

    Link(uint64_t seed, WireFaults faults, uint32_t depth = 64, Service service = Service::RC)
        : rng_(seed), faults_(faults), a_(std::make_unique<Side>(0x11, depth, service)),
          b_(std::make_unique<Side>(0x22, depth, service)) {}

    Side& a() { return *a_; }
    Side& b() { return *b_; }
    Nanoseconds now() const { return now_; }
    uint64_t rejected_frames = 0; // failed the ICRC or framing checks

    // Brings both QPs to RTS, connected to each other.
    void connect(PathMtu mtu, uint32_t access_flags, uint8_t max_rd_atomic = 4,
                 uint8_t rnr_retry = 7) {
        auto setup = [&](Side& s, Side& peer, uint32_t sq_psn, uint32_t rq_psn) {
            QpConfig& at = s.qp.attributes();
            at.dest_qp = peer.qp.qp_num();
            at.mtu = mtu;
            at.sq_psn = sq_psn;
            at.rq_psn = rq_psn;
            at.timeout = 4; // ~65 us: fast simulated retries
            at.retry_cnt = 7;
            at.rnr_retry = rnr_retry;
            at.min_rnr_timer = 1;
            at.max_rd_atomic = max_rd_atomic;
            at.max_dest_rd_atomic = max_rd_atomic;
            at.access = access_flags;
            at.qkey = 0x1111;
            s.qp.set_state(QpState::Init, now_);
            s.qp.set_state(QpState::Rtr, now_);
            s.qp.set_state(QpState::Rts, now_);
        };
        // PSNs near the wrap so 24-bit arithmetic is exercised.
        setup(*a_, *b_, 0xfffff0, 0xffffe0);
        setup(*b_, *a_, 0xffffe0, 0xfffff0);
    }

    // Advances time by `steps` microseconds, moving packets both ways.
    void run(uint64_t steps) {
        for (uint64_t i = 0; i < steps; ++i)
            step();
    }

    // Runs until `done()` holds or `limit` microseconds pass. Returns done().
    template <typename Done> bool run_until(Done done, uint64_t limit = 20'000'000) {
        for (uint64_t i = 0; i < limit && !done(); ++i)
            step();
        return done();
    }

  private:
    struct InFlight {
        bool to_b;
        std::vector<uint8_t> bytes;
    };

    // Every packet travels as a whole RoCEv2 frame, so the ICRC guards it as on a wire.
    void send_from(Side& s, bool to_b) {
        uint8_t buffer[4096 + 256];
        FrameAddressing addressing;
        addressing.src_gid = gid_from_ipv4(to_b ? 0xc6120001 : 0xc6120002);
        addressing.dst_gid = gid_from_ipv4(to_b ? 0xc6120002 : 0xc6120001);
        const size_t front = roce_header_bytes(addressing);
        for (int burst = 0; burst < 16; ++burst) {
            const size_t ib = s.qp.transmit(buffer + front, sizeof(buffer) - front - 4, now_);
            if (!ib)
                return;
            const size_t n = finish_roce_frame(buffer, addressing, ib);
            std::uniform_real_distribution<double> p(0, 1);
            if (p(rng_) < faults_.drop)
                continue;
            const int copies = p(rng_) < faults_.duplicate ? 2 : 1;
            for (int c = 0; c < copies; ++c) {
                std::uniform_int_distribution<Nanoseconds> delay(0, faults_.max_delay);
                InFlight f{to_b, {buffer, buffer + n}};
                if (p(rng_) < faults_.corrupt) {
                    std::uniform_int_distribution<size_t> where(0, n - 1);
                    f.bytes[where(rng_)] ^= 0x5a;
                }
                // Equal arrival times keep sending order: only the random delay reorders.
                wire_.emplace(now_ + 500 + delay(rng_), std::move(f));
            }
        }
    }

    void step() {
        now_ += 1000;
        send_from(*a_, true);
        send_from(*b_, false);
        while (!wire_.empty() && wire_.begin()->first <= now_) {
            InFlight f = std::move(wire_.begin()->second);
            wire_.erase(wire_.begin());
            ParsedFrame frame;
            if (parse_roce_frame(f.bytes.data(), f.bytes.size(), frame) != FrameError::None) {
                ++rejected_frames;
                continue;
            }
            IbPacket packet;
            if (parse_ib_packet(frame.ib, frame.ib_length, packet) != PacketError::None)
                continue;
            // The mark of a WRITE with immediate placed by its initiator, honoured as
            // the engine's built-in wire honours it.
            packet.placed = packet.bth->placed_by_initiator();
            Side& to = f.to_b ? *b_ : *a_;
            // A datagram's receive buffer gets the network header, as the engine does.
            uint8_t grh[kGrhBytes];
            if (packet.deth)
                grh_from_frame(frame, grh);
            if (packet.bth->dest_qp() == to.qp.qp_num())
                to.qp.receive(packet, now_, packet.deth ? grh : nullptr);
        }
        for (Side* s : {a_.get(), b_.get()})
            if (s->qp.next_deadline() <= now_)
                s->qp.on_timer(now_);
    }

    std::mt19937_64 rng_;
    WireFaults faults_;
    std::unique_ptr<Side> a_, b_;
    Nanoseconds now_ = 1'000'000;
    std::multimap<Nanoseconds, InFlight> wire_;
};

} // namespace sim
