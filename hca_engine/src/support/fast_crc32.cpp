#include "fast_crc32.hpp"

#include "softhca/transport/crc32.hpp"

#include <isa-l/crc.h>

namespace softhca::engine {

uint32_t fast_crc32(uint32_t crc, const uint8_t* data, size_t length) {
    // crc32_gzip_refl inverts on entry and exit, as zlib's crc32 does.
    return crc32_gzip_refl(crc, data, length);
}

void install_fast_crc32() {
    transport::set_crc32(fast_crc32);
}

} // namespace softhca::engine
