// The CRC-32 of Ethernet and gzip (IEEE 802.3 polynomial, reflected), which the RoCEv2
// ICRC uses (Annex A17.4.2). The transport carries a portable implementation and lets
// its user install a faster one (the engine installs ISA-L's vectorised CRC), so the
// transport itself needs nothing but the standard library.
//
// Both follow zlib's convention: crc32(0, data, n) is the CRC of data, and
// crc32(crc32(0, a, n), b, m) is the CRC of a followed by b.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softhca::transport {

using Crc32Function = uint32_t (*)(uint32_t crc, const uint8_t* data, size_t length);

// Slicing by 8 over eight tables: about a byte per cycle.
uint32_t crc32_portable(uint32_t crc, const uint8_t* data, size_t length);

// The implementation in use (crc32_portable until set_crc32 installs another). Set it
// once at start-up, before any packet is built or parsed.
void set_crc32(Crc32Function function);
uint32_t crc32(uint32_t crc, const uint8_t* data, size_t length);

} // namespace softhca::transport
