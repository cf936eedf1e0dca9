#include "softhca/transport/congestion_control.hpp"

#include "softhca/transport/headers.hpp"
#include "softhca/transport/opcodes.hpp"
#include "softhca/transport/settings_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace softhca::transport {

double EcnMarker::probability(uint64_t queue_bytes) const {
    if (queue_bytes < p_.kmin_bytes)
        return 0.0;
    if (queue_bytes >= p_.kmax_bytes || p_.kmax_bytes <= p_.kmin_bytes)
        return 1.0;
    return p_.pmax * static_cast<double>(queue_bytes - p_.kmin_bytes) /
           static_cast<double>(p_.kmax_bytes - p_.kmin_bytes);
}

bool EcnMarker::mark(uint64_t queue_bytes, double uniform) const {
    return uniform < probability(queue_bytes);
}

size_t write_cnp(uint8_t* ib, uint16_t pkey, uint32_t dest_qp) {
    auto* bth = reinterpret_cast<Bth*>(ib);
    bth->set(op::kCnp, false, 0, pkey, dest_qp, false, 0);
    ib[1] = 0;    // SE, MigReq, PadCount, TVer: all zero (A17.9.3)
    ib[4] = 0x40; // BECN
    std::memset(ib + sizeof(Bth), 0, kCnpBytes - sizeof(Bth));
    return kCnpBytes;
}

bool CnpLimiter::should_send(uint64_t now) {
    if (sent_any_ && now - last_ < interval_)
        return false;
    sent_any_ = true;
    last_ = now;
    return true;
}

std::string EcnMarkingParameters::parse(const std::string& text, EcnMarkingParameters& out) {
    EcnMarkingParameters p = out;
    std::string error = for_each_setting(text, [&](const std::string& key, double v) {
        if (key == "kmin_kb" && v < 4e6)
            p.kmin_bytes = static_cast<uint32_t>(v * 1024);
        else if (key == "kmax_kb" && v > 0 && v < 4e6)
            p.kmax_bytes = static_cast<uint32_t>(v * 1024);
        else if (key == "pmax" && v <= 1)
            p.pmax = v;
        else
            return false;
        return true;
    });
    if (error.empty() && p.kmax_bytes <= p.kmin_bytes)
        error = "kmax_kb must be above kmin_kb";
    if (error.empty())
        out = p;
    return error;
}

std::string DcqcnParameters::parse(const std::string& text, DcqcnParameters& out) {
    DcqcnParameters p = out;
    const std::string error = for_each_setting(text, [&](const std::string& key, double v) {
        if (key == "g" && v > 0 && v <= 1)
            p.g = v;
        else if (key == "k_us" && v > 0)
            p.alpha_update_ns = static_cast<uint64_t>(v * 1000);
        else if (key == "t_us" && v > 0)
            p.rate_increase_ns = static_cast<uint64_t>(v * 1000);
        else if (key == "b" && v >= 1)
            p.byte_counter = static_cast<uint64_t>(v);
        else if (key == "f")
            p.fast_recovery_steps = static_cast<unsigned>(v);
        else if (key == "ai_mbps")
            p.additive_increase_bps = v * 1e6;
        else if (key == "hai_mbps")
            p.hyper_increase_bps = v * 1e6;
        else if (key == "min_mbps" && v > 0)
            p.min_rate_bps = v * 1e6;
        else
            return false;
        return true;
    });
    if (error.empty())
        out = p;
    return error;
}

DcqcnRate::DcqcnRate(const DcqcnParameters& p, double line_rate_bps)
    : p_(p), line_(line_rate_bps), current_(line_rate_bps), target_(line_rate_bps) {}

void DcqcnRate::set_line_rate(double bps) {
    line_ = bps;
    current_ = std::min(current_, line_);
    target_ = std::min(target_, line_);
    if (!active_)
        current_ = target_ = line_;
}

void DcqcnRate::on_cnp(uint64_t now) {
    ++cnps_;
    // Alpha kept decaying while the rate machine rested at line rate: catch up.
    if (!active_ && cnps_ > 1 && now >= next_alpha_) {
        const uint64_t periods = (now - next_alpha_) / p_.alpha_update_ns + 1;
        alpha_ *= std::pow(1.0 - p_.g, static_cast<double>(periods));
    }
    // Cut: remember where we were, come down by alpha/2, and believe congestion more.
    target_ = current_;
    current_ = std::max(p_.min_rate_bps, current_ * (1.0 - alpha_ / 2.0));
    alpha_ = (1.0 - p_.g) * alpha_ + p_.g;
    active_ = true;
    // Increase starts over: timer, byte counter, their event counts; alpha's timer too.
    bytes_ = 0;
    timer_events_ = byte_events_ = 0;
    next_timer_ = now + p_.rate_increase_ns;
    next_alpha_ = now + p_.alpha_update_ns;
}

void DcqcnRate::increase() {
    const unsigned f = p_.fast_recovery_steps;
    const unsigned most = std::max(timer_events_, byte_events_);
    const unsigned least = std::min(timer_events_, byte_events_);
    if (most <= f) {
        // Fast recovery (the first F events): halfway back to the rate before the cut.
    } else if (least > f) {
        target_ += static_cast<double>(least - f) * p_.hyper_increase_bps; // hyper increase
    } else {
        target_ += p_.additive_increase_bps; // additive increase
    }
    target_ = std::min(target_, line_);
    current_ = std::min(line_, (target_ + current_) / 2.0);
    if (current_ >= line_ && target_ >= line_)
        active_ = false; // back at line rate: nothing left to recover
}

void DcqcnRate::on_sent(uint64_t bytes, uint64_t now) {
    if (!active_)
        return;
    bytes_ += bytes;
    while (active_ && bytes_ >= p_.byte_counter) {
        bytes_ -= p_.byte_counter;
        ++byte_events_;
        increase();
    }
    advance(now);
}

void DcqcnRate::advance(uint64_t now) {
    while (active_ && now >= std::min(next_alpha_, next_timer_)) {
        if (next_alpha_ <= next_timer_) {
            alpha_ = (1.0 - p_.g) * alpha_; // a period with no CNP
            next_alpha_ += p_.alpha_update_ns;
        } else {
            ++timer_events_;
            next_timer_ += p_.rate_increase_ns;
            increase();
        }
    }
}

uint64_t DcqcnRate::next_deadline() const {
    return active_ ? std::min(next_alpha_, next_timer_) : UINT64_MAX;
}

void RatePacer::sent(uint32_t bytes, double rate_bps, uint64_t now) {
    const double ns = static_cast<double>(bytes) * 8.0 * 1e9 / std::max(rate_bps, 1.0);
    next_ = std::max(next_, now) + static_cast<uint64_t>(ns);
}

} // namespace softhca::transport
