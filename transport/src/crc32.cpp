#include "softhca/transport/crc32.hpp"

#include <array>

namespace softhca::transport {

namespace {

// Eight tables let the loop consume eight bytes per step.
constexpr std::array<std::array<uint32_t, 256>, 8> make_crc_tables() {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k)
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
        for (size_t k = 1; k < 8; ++k)
            t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    return t;
}
constexpr auto kCrcTables = make_crc_tables();

Crc32Function installed = crc32_portable;

} // namespace

uint32_t crc32_portable(uint32_t crc, const uint8_t* p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        const uint32_t lo =
            crc ^ (static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                   static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
        const uint32_t hi = static_cast<uint32_t>(p[4]) | static_cast<uint32_t>(p[5]) << 8 |
                            static_cast<uint32_t>(p[6]) << 16 | static_cast<uint32_t>(p[7]) << 24;
        crc = kCrcTables[7][lo & 0xff] ^ kCrcTables[6][(lo >> 8) & 0xff] ^
              kCrcTables[5][(lo >> 16) & 0xff] ^ kCrcTables[4][lo >> 24] ^
              kCrcTables[3][hi & 0xff] ^ kCrcTables[2][(hi >> 8) & 0xff] ^
              kCrcTables[1][(hi >> 16) & 0xff] ^ kCrcTables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    for (size_t i = 0; i < n; ++i)
        crc = kCrcTables[0][(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

void set_crc32(Crc32Function function) {
    installed = function ? function : crc32_portable;
}

uint32_t crc32(uint32_t crc, const uint8_t* data, size_t length) {
    return installed(crc, data, length);
}

} // namespace softhca::transport
