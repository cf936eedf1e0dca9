// The engine's CRC-32 for the ICRC: ISA-L's crc32_gzip_refl, which folds with
// PCLMULQDQ (and AVX-512 VPCLMULQDQ where the CPU has it) at memory speed, instead of
// the transport's portable table loop. Same polynomial, same convention.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softhca::engine {

uint32_t fast_crc32(uint32_t crc, const uint8_t* data, size_t length);
// Makes the transport compute every ICRC with fast_crc32. Call once at start-up.
void install_fast_crc32();

} // namespace softhca::engine
