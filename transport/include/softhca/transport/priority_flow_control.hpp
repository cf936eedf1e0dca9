// Priority-based flow control (IEEE 802.1Qbb, PFC) for ports to foreign peers (issue 14),
// sans I/O: the frame, a port's paused priorities as its peer's frames set them, and
// when the port itself asks its peer to pause.
//
// The frame: to the MAC control group 01:80:C2:00:00:01, EtherType 0x8808, opcode 0x0101,
// a class-enable vector (bit p: the time for priority p is valid) and eight pause times in
// quanta of 512 bit times at the link's rate; 0 resumes at once (XON). Padded to 60.
//
// A frame's priority is its 802.1Q tag's PCP when it has one (the SL, --priority-tag),
// otherwise its DSCP's top three bits (DSCP >> 3, the usual DSCP-to-priority map of a
// RoCE NIC that trusts DSCP).
//
// Asking: the engine receives in rounds; a round that took the most it may and left more
// waiting means the port's receive queue is filling faster than it drains. The port then
// pauses the priorities of what it received in that round (XOFF, the longest pause),
// renews the pause at half its length while the backlog lasts, and resumes them (XON)
// after the first round that emptied the queue.
//
// PFC is enabled per priority (802.1Q clause 36, set as `dcb pfc set dev DEV prio-pfc
// all:off 3:on` or mlnx_qos --pfc set it; usually only RoCE's lossless priority): a frame's
// pause times for other priorities are ignored, and the port asks its peer to pause only
// enabled ones.
//
// The port has one receive queue for every priority, where a NIC has a buffer per
// priority: a backlog is the whole queue's, so a flood of a priority without PFC keeps the
// enabled priorities it took paused too (their frames are taken in as slowly).
#pragma once

#include "softhca/transport/roce_address.hpp"

#include <array>
#include <cstddef>
#include <cstdint>

namespace softhca::transport {

constexpr uint16_t kMacControlEtherType = 0x8808;
constexpr uint16_t kPfcOpcode = 0x0101;
constexpr MacAddress kPfcMac = {0x01, 0x80, 0xc2, 0x00, 0x00, 0x01};
constexpr size_t kPfcFrameBytes = 60; // 14 + 2 + 2 + 16, padded to the minimum
constexpr uint16_t kPfcMaxQuanta = 0xffff;
constexpr uint32_t kPfcQuantumBits = 512;

struct PfcFrame {
    uint8_t enable = 0; // bit p: quanta[p] is valid
    std::array<uint16_t, 8> quanta{};
};

// A frame's priority (0..7): the priority tag's PCP, or its DSCP's top three bits.
constexpr uint8_t frame_priority(int8_t tag_pcp, uint8_t traffic_class) {
    return tag_pcp >= 0 ? static_cast<uint8_t>(tag_pcp & 7)
                        : static_cast<uint8_t>(traffic_class >> 5);
}

// Writes a PFC frame from `source` (kPfcFrameBytes at `out`); returns its length.
size_t write_pfc_frame(uint8_t* out, const MacAddress& source, const PfcFrame& frame);
// Whether `data` is a MAC control frame (EtherType 0x8808, untagged), and if it is a PFC
// frame, its content in `out` (false for other MAC control, e.g. 802.3x PAUSE, or short).
bool is_mac_control_frame(const uint8_t* data, size_t length);
bool parse_pfc_frame(const uint8_t* data, size_t length, PfcFrame& out);

// The priorities a port's peer paused: a frame sets, for each enabled priority, the end of
// its pause (now + quanta at the line rate; 0 quanta ends it).
class PfcPauses {
  public:
    // `enabled`: bit p set when PFC is enabled for priority p (its pauses are honoured).
    explicit PfcPauses(uint8_t enabled = 0xff) : enabled_(enabled) {}
    void on_frame(const PfcFrame& frame, uint64_t now, double line_rate_bps);
    bool paused(uint8_t priority, uint64_t now) const { return now < until_[priority & 7]; }
    // Bit p set: priority p paused at `now`.
    uint8_t paused_mask(uint64_t now) const;
    // When the earliest pause in effect at `now` ends, or UINT64_MAX.
    uint64_t next_resume(uint64_t now) const;

  private:
    uint8_t enabled_;
    std::array<uint64_t, 8> until_{};
};

// When a port asks its peer to pause (see the file's comment).
class PfcRequester {
  public:
    // `enabled`: the priorities it may ask to pause (those PFC is enabled for).
    explicit PfcRequester(uint8_t enabled = 0xff) : enabled_(enabled) {}
    // After a receive round at `now`: `backlogged` when it left frames waiting,
    // `priorities` the bit mask of what it received (those not enabled are never asked
    // for). True with `out` set when a frame should go (XOFF for newly paused priorities
    // and renewals, XON to resume).
    bool after_round(bool backlogged, uint8_t priorities, uint64_t now, double line_rate_bps,
                     PfcFrame& out);
    uint8_t paused() const { return paused_; }

  private:
    uint8_t enabled_;
    uint8_t paused_ = 0;    // priorities we asked to pause
    uint64_t renew_at_ = 0; // when the pause should be renewed
};

} // namespace softhca::transport
