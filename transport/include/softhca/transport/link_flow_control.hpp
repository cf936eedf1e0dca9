// Link-level flow control between two softhca ports (issue 14; IBTA Vol 1, 7.9.4), sans
// I/O: one port's both ends of it, over every data VL, and the frame that carries the
// flow-control packets.
//
// The sender end keeps, per VL, a CreditSender (link_credits.hpp): a frame may start on
// the link only against credits, and its blocks count in FCTBS when it starts. The
// receiver end advertises FCCL = ABR + its buffer (CreditReceiver). RoCEv2 frames do not
// carry the VL, so the receiver cannot count a VL's blocks as they arrive; instead each
// flow-control packet brings the sender's FCTBS as of the frames that have reached the
// receiver's buffer (delivered: crossed the link and handed to it), sent after them on
// the same in-order link, and the receiver takes it as its ABR (7.9.4.2: a receiver sets
// ABR to a received FCTBS). By the time the receiver reads that packet it has taken every
// frame before it out of its buffer, so the limit it advertises back is ABR + the whole
// buffer: what the sender may have on the link and in the receiver's queue together.
// A receiver that falls behind reads the packet late and so grants late: backpressure.
//
// A port sends its packets (one per data VL, its FCTBS and its FCCL each) when its
// delivered FCTBS moved by a quarter of the peer's buffer (or all it sent was delivered),
// when its ABR changed, when asked (an Init packet wants an answer), and
// while a VL waits for credits, again every refresh interval: so a lost frame, or a peer
// that came up late, cannot stall a VL for good.
//
// The frame: Ethernet to a locally administered group address, the IEEE's local
// experimental EtherType 0x88B5 (never IPv4 or IPv6: no foreign RoCE peer can take it for
// a transport packet), a 4-byte softhca tag and version, then the packets.
#pragma once

#include "softhca/transport/link_credits.hpp"
#include "softhca/transport/roce_address.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace softhca::transport {

// VL 0-14 carry data; VL 15, management, is not flow controlled (7.9.4).
constexpr uint8_t kCreditDataVls = 15;
constexpr uint16_t kLinkFlowControlEtherType = 0x88b5;
constexpr MacAddress kLinkFlowControlMac = {0x03, 0x53, 0x48, 0x43, 0x41, 0x46};
constexpr uint32_t kLinkFlowControlMagic = 0x53484643; // "SHFC"
constexpr uint8_t kLinkFlowControlVersion = 1;
// Ethernet (14), magic (4), version (1), count (1), the packets (6 each); at least 60.
constexpr size_t kLinkFlowControlFrameBytes = 14 + 4 + 1 + 1 + 6 * size_t{kCreditDataVls};
static_assert(kLinkFlowControlFrameBytes >= 60);

// Whether a frame is a link flow-control frame (by its EtherType; its content is checked
// by parse_flow_control_frame).
bool is_flow_control_frame(const uint8_t* frame, size_t length);

// Writes a frame from `source` with `count` packets at `out` (kLinkFlowControlFrameBytes
// of room); returns its length.
size_t write_flow_control_frame(uint8_t* out, const MacAddress& source,
                                const FlowControlPacket* packets, size_t count);

// The packets of a flow-control frame into `out` (room for kCreditDataVls); the count,
// or -1 when the frame is not a well-formed one (magic, version, count, length). Each
// packet's CRC is the caller's to check.
int parse_flow_control_frame(const uint8_t* frame, size_t length, FlowControlPacket* out);

// `--link-credits`: the receive buffer each port grants per VL and how often a VL
// waiting for credits asks again. "on" takes the defaults.
struct LinkCreditParameters {
    uint32_t buffer_bytes = 64 * 1024;
    uint64_t refresh_ns = 1'000'000;
    // "buffer_kb=K,refresh_us=U" (any subset; K at most 128, 2048 blocks: C7-63's most);
    // an error message, or empty when `out` took the values.
    static std::string parse(const std::string& text, LinkCreditParameters& out);
};

class LinkCreditPort {
  public:
    // `buffer_bytes`: the receive buffer this port grants per VL (at most 2048 blocks).
    // `refresh_ns`: how often a VL waiting for credits asks again.
    LinkCreditPort(uint32_t buffer_bytes, uint64_t refresh_ns);

    // Sender end. Whether a frame of `bytes` may start on `vl` now.
    bool may_send(uint8_t vl, uint32_t bytes) const;
    // It started (its blocks count in FCTBS).
    void started(uint8_t vl, uint32_t bytes);
    // It reached the far end's buffer: the next packets carry it.
    void delivered(uint8_t vl, uint32_t bytes);
    // A VL has a frame waiting and no credits for it (from `now`), or no longer.
    void set_waiting(uint8_t vl, bool waiting, uint64_t now);

    // A packet from the peer: its FCCL is our sender's limit, its FCTBS our receiver's
    // ABR. False (and nothing changed) when its CRC fails or its VL carries no data.
    bool on_packet(const FlowControlPacket& packet);
    // A flow-control frame that was not well formed: counted with the bad packets.
    void malformed() { ++packets_bad_; }

    // Whether packets should go now: news, an answer owed, or a waiting VL's refresh due.
    bool wants_to_send(uint64_t now) const;
    // Fills one packet per data VL into `out` (kCreditDataVls) and notes them sent.
    // `init` asks the peer to answer (at start, and when refreshing).
    size_t make_packets(uint64_t now, FlowControlPacket* out);
    // When a waiting VL next asks again, or UINT64_MAX.
    uint64_t next_refresh() const;

    // Per VL, for status.
    struct VlState {
        uint16_t fctbs;      // blocks started on the link (12 bits)
        uint16_t fccl;       // the peer's last limit
        uint32_t available;  // blocks we may still start
        uint16_t abr;        // the peer's FCTBS as last received
        uint16_t advertised; // the limit we last sent
        uint64_t waits;      // times a frame found no credits
        bool waiting;        // a frame waits for credits now
    };
    VlState vl_state(uint8_t vl) const;
    uint32_t buffer_blocks() const { return buffer_blocks_; }
    uint64_t packets_sent() const { return packets_sent_; }
    uint64_t packets_received() const { return packets_received_; }
    uint64_t packets_bad() const { return packets_bad_; }

  private:
    struct Vl {
        CreditSender sender;
        CreditReceiver receiver{0};
        uint16_t delivered = 0;  // FCTBS of what reached the peer's buffer
        uint16_t reported = 0;   // delivered as last sent
        uint16_t advertised = 0; // FCCL as last sent
        uint64_t waits = 0;
        bool waiting = false;
    };
    uint32_t buffer_blocks_;
    uint64_t refresh_ns_;
    std::array<Vl, kCreditDataVls> vls_;
    bool answer_owed_ = true; // our first packets (Init) go at once
    bool asked_ = false;      // the next packets are Init
    uint64_t last_sent_ = 0;
    uint64_t packets_sent_ = 0;
    uint64_t packets_received_ = 0;
    uint64_t packets_bad_ = 0;
};

} // namespace softhca::transport
