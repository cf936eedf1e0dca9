// RoCE congestion control, sans I/O (fed time in nanoseconds and events):
//   EcnMarker     the congestion point: RED-style marking of ECN Congestion Experienced
//                 by a transmit queue's depth (a switch's job; softhca's ports do it);
//   CnpLimiter    the notification point: at most one CNP (BTH opcode 0x81) per QP per
//                 interval for the ECN-marked packets it receives (RoCEv2 annex A17.9);
//   DcqcnRate     the reaction point: a requester's rate under DCQCN (Zhu et al.,
//                 "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015):
//                 cut on a CNP, then fast recovery, additive and hyper increase driven by
//                 a timer and a byte counter, alpha decaying while no CNP comes;
//   RatePacer     when a requester sending at a rate may send its next packet.
// Defaults: the paper's where it gives them (g = 1/256, K = 55 us, B = 10 MB, F = 5,
// R_AI = 40 Mb/s, RED Kmin 5 KB / Kmax 200 KB / Pmax 1%, a CNP per 50 us); the rate-
// increase timer T = 55 us and R_HAI = 10 x R_AI are ours. Each is configurable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace softhca::transport {

// RED on the instantaneous queue: nothing marked below kmin, all at or above kmax, in
// between with a probability rising linearly to pmax.
struct EcnMarkingParameters {
    uint32_t kmin_bytes = 5 * 1024;
    uint32_t kmax_bytes = 200 * 1024;
    double pmax = 0.01;
    // Parses "kmin_kb=5,kmax_kb=200,pmax=0.01" (any subset, over `out`). Returns an empty
    // string, or what is wrong.
    static std::string parse(const std::string& text, EcnMarkingParameters& out);
};

class EcnMarker {
  public:
    explicit EcnMarker(const EcnMarkingParameters& p = {}) : p_(p) {}
    // Whether a packet joining a queue of `queue_bytes` is marked; `uniform` is a random
    // number in [0, 1) (the caller's generator, so that tests are deterministic).
    bool mark(uint64_t queue_bytes, double uniform) const;
    double probability(uint64_t queue_bytes) const;
    const EcnMarkingParameters& parameters() const { return p_; }

  private:
    EcnMarkingParameters p_;
};

// RoCEv2's Congestion Notification Packet (A17.9.3): a BTH with opcode 0x81, the
// P_Key of the flow, the destination QP its requester (the QP whose packet was marked
// is the responder; the CNP goes to its peer), BECN set, PSN 0, then 16 reserved bytes.
constexpr size_t kCnpBytes = 12 + 16;
// Writes a CNP at `ib` (kCnpBytes). Returns kCnpBytes.
size_t write_cnp(uint8_t* ib, uint16_t pkey, uint32_t dest_qp);

class CnpLimiter {
  public:
    explicit CnpLimiter(uint64_t interval_ns = 50'000) : interval_(interval_ns) {}
    // A marked packet arrived for this QP at `now`: whether to send a CNP for it.
    bool should_send(uint64_t now);

  private:
    uint64_t interval_;
    uint64_t last_ = 0;
    bool sent_any_ = false;
};

struct DcqcnParameters {
    double g = 1.0 / 256;                     // alpha's gain
    uint64_t alpha_update_ns = 55'000;        // K: alpha decays every K without a CNP
    uint64_t rate_increase_ns = 55'000;       // T: the rate-increase timer
    uint64_t byte_counter = 10 * 1024 * 1024; // B: bytes per byte-counter event
    unsigned fast_recovery_steps = 5;         // F
    double additive_increase_bps = 40e6;      // R_AI
    double hyper_increase_bps = 400e6;        // R_HAI
    double min_rate_bps = 10e6;               // never below
    // Parses "g=0.004,k_us=55,t_us=55,b=10485760,f=5,ai_mbps=40,hai_mbps=400,min_mbps=10"
    // (any subset). Returns an empty string, or what is wrong.
    static std::string parse(const std::string& text, DcqcnParameters& out);
};

class DcqcnRate {
  public:
    DcqcnRate(const DcqcnParameters& p, double line_rate_bps);

    // A CNP for this QP arrived.
    void on_cnp(uint64_t now);
    // The requester sent `bytes` (the byte counter's events).
    void on_sent(uint64_t bytes, uint64_t now);
    // Runs the timers that are due by `now` (alpha decay, rate increase).
    void advance(uint64_t now);
    // The earliest time advance() has something to do, or UINT64_MAX (no CNP yet: the QP
    // sends at line rate and nothing runs).
    uint64_t next_deadline() const;

    double rate_bps() const { return current_; }
    double target_bps() const { return target_; }
    double alpha() const { return alpha_; }
    bool limited() const { return active_; }
    uint64_t cnps() const { return cnps_; }
    void set_line_rate(double bps);

  private:
    void increase(); // one rate-increase event
    DcqcnParameters p_;
    double line_;
    double current_, target_;
    double alpha_ = 1.0;
    bool active_ = false; // a CNP has come: the rate machine runs
    uint64_t next_alpha_ = 0, next_timer_ = 0;
    uint64_t bytes_ = 0; // since the last byte-counter event
    unsigned timer_events_ = 0, byte_events_ = 0;
    uint64_t cnps_ = 0;
};

// Paces a flow: a packet may leave at or after next_allowed(); sent() moves it on by the
// packet's time at the rate.
class RatePacer {
  public:
    uint64_t next_allowed() const { return next_; }
    bool may_send(uint64_t now) const { return now >= next_; }
    void sent(uint32_t bytes, double rate_bps, uint64_t now);

  private:
    uint64_t next_ = 0;
};

} // namespace softhca::transport
