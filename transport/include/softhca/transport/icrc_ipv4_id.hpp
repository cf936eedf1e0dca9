// The ICRC of a RoCEv2 packet over IPv4 covers the IPv4 identification and the
// don't-fragment flag (A17.4.2), which a kernel UDP socket does not show its reader. A
// receiver that rebuilt the IPv4 header from what the socket tells (addresses, length)
// with identification 0 and DF set — what a kernel UDP socket sends — can still check
// the ICRC: the CRC is linear, so the difference between the ICRC carried and the one
// computed names the 17 unknown bits, if any value of them explains it. A corrupted
// packet passes only when its damage happens to look like an identification (a chance
// of 2^-15 instead of 2^-32); the Ethernet FCS and the UDP checksum stand in front.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softhca::transport {

// `computed` is the ICRC of a packet whose IPv4 header (at offset 0 of an IP packet of
// ip_length bytes without the ICRC) has identification 0 and DF set; `carried` the ICRC
// the packet came with. True when some identification and DF bit make the two agree;
// then `identification` and `dont_fragment` are those.
bool icrc_explained_by_ipv4_id(uint32_t computed, uint32_t carried, size_t ip_length,
                               uint16_t& identification, bool& dont_fragment);

// The ICRC of the same packet with its IPv4 identification changed from `from` to `to`
// (the CRC is linear: the change adds a term that depends only on the two values and the
// length). A kernel that segments one UDP GSO send numbers its datagrams 0, 1, 2, ...;
// a sender that built them all with identification 0 puts this ICRC in datagram k.
uint32_t icrc_for_ipv4_id(uint32_t icrc, size_t ip_length, uint16_t from, uint16_t to);

} // namespace softhca::transport
