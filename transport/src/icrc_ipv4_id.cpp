#include "softhca/transport/icrc_ipv4_id.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace softhca::transport {

namespace {

constexpr uint32_t kPolynomial = 0xedb88320u; // reflected IEEE 802.3

// a(x) * b(x) modulo the CRC polynomial, in the reflected bit order (zlib's multmodp).
constexpr uint32_t multiply_mod_p(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (uint32_t m = 1u << 31; m; m >>= 1) {
        if (a & m)
            product ^= b;
        b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;
    }
    return product;
}

// x^(2^k) modulo p for k = 0..31.
constexpr std::array<uint32_t, 32> make_powers() {
    std::array<uint32_t, 32> powers{};
    uint32_t p = 1u << 30; // x^1
    for (auto& power : powers) {
        power = p;
        p = multiply_mod_p(p, p);
    }
    return powers;
}
constexpr auto kPowers = make_powers();

// x^(8n) modulo p: appending n zero bytes to a message multiplies its raw CRC by it.
uint32_t x_to_8n(size_t n) {
    uint32_t p = 1u << 31; // x^0
    for (unsigned k = 3; n; n >>= 1, ++k)
        if (n & 1)
            p = multiply_mod_p(kPowers[k & 31], p);
    return p;
}

// The raw CRC (no pre- or post-inversion) of three bytes — identification high, low,
// flags — that are zero but for one unknown bit: identification bits 0..15, then DF.
constexpr uint32_t raw_crc_of_bit(unsigned bit) {
    uint8_t bytes[3] = {0, 0, 0};
    if (bit < 16)
        bytes[bit < 8 ? 1 : 0] = static_cast<uint8_t>(1u << (bit % 8));
    else
        bytes[2] = 0x40; // don't fragment
    uint32_t crc = 0;
    for (uint8_t byte : bytes) {
        crc ^= byte;
        for (int i = 0; i < 8; ++i)
            crc = (crc & 1) ? (crc >> 1) ^ kPolynomial : crc >> 1;
    }
    return crc;
}

constexpr std::array<uint32_t, 17> make_bit_crcs() {
    std::array<uint32_t, 17> crcs{};
    for (unsigned bit = 0; bit < 17; ++bit)
        crcs[bit] = raw_crc_of_bit(bit);
    return crcs;
}
constexpr auto kBitCrcs = make_bit_crcs();

// The 17 unknown bits' effect on the ICRC of an IP packet of one length, reduced so
// that each row has a leading bit no other row has (Gaussian elimination over GF(2)).
// Two inputs of one length differ in their CRC by the raw CRC of their difference; the
// ICRC's input is 8 bytes of ones and then the IP packet, whose identification starts
// at its byte 4, so ip_length - 7 bytes follow the three unknown ones.
struct Basis {
    size_t ip_length = 0;
    unsigned rank = 0;
    uint32_t rows[17]{};
    uint32_t leads[17]{}; // each row's leading bit
    uint32_t which[17]{}; // the unknown bits each row combines
};

void reduce(Basis& basis, size_t ip_length) {
    basis = {};
    basis.ip_length = ip_length;
    const uint32_t shift = x_to_8n(ip_length - 7);
    uint32_t rows[17], which[17];
    for (unsigned bit = 0; bit < 17; ++bit) {
        rows[bit] = multiply_mod_p(shift, kBitCrcs[bit]);
        which[bit] = 1u << bit;
    }
    unsigned rank = 0;
    for (int lead = 31; lead >= 0 && rank < 17; --lead) {
        const uint32_t mask = 1u << lead;
        unsigned pivot = rank;
        while (pivot < 17 && !(rows[pivot] & mask))
            ++pivot;
        if (pivot == 17)
            continue;
        std::swap(rows[pivot], rows[rank]);
        std::swap(which[pivot], which[rank]);
        for (unsigned r = 0; r < 17; ++r)
            if (r != rank && (rows[r] & mask)) {
                rows[r] ^= rows[rank];
                which[r] ^= which[rank];
            }
        basis.leads[rank] = mask;
        ++rank;
    }
    basis.rank = rank;
    std::copy(rows, rows + 17, basis.rows);
    std::copy(which, which + 17, basis.which);
}

} // namespace

bool icrc_explained_by_ipv4_id(uint32_t computed, uint32_t carried, size_t ip_length,
                               uint16_t& identification, bool& dont_fragment) {
    if (ip_length < 20)
        return false;
    // Packets of one flow mostly have one length (the path MTU's): reduced once for it.
    thread_local Basis basis;
    if (basis.ip_length != ip_length)
        reduce(basis, ip_length);
    // The difference, with DF (set in `computed`'s header) counted as bit 16 flipped; a
    // fully reduced basis takes out each leading bit in any order, and what is left must
    // be zero.
    uint32_t target = computed ^ carried;
    uint32_t solution = 0;
    for (unsigned r = 0; r < basis.rank; ++r)
        if (target & basis.leads[r]) {
            target ^= basis.rows[r];
            solution ^= basis.which[r];
        }
    if (target != 0)
        return false;
    identification = static_cast<uint16_t>(solution & 0xffff);
    dont_fragment = !(solution & (1u << 16)); // bit 16 flips the DF the header had
    return true;
}

uint32_t icrc_for_ipv4_id(uint32_t icrc, size_t ip_length, uint16_t from, uint16_t to) {
    const uint16_t change = from ^ to;
    if (!change || ip_length < 20)
        return icrc;
    thread_local size_t shift_length = 0;
    thread_local uint32_t shift = 0;
    if (shift_length != ip_length) {
        shift = x_to_8n(ip_length - 7);
        shift_length = ip_length;
    }
    uint32_t raw = 0;
    for (unsigned bit = 0; bit < 16; ++bit)
        if (change & (1u << bit))
            raw ^= kBitCrcs[bit];
    return icrc ^ multiply_mod_p(shift, raw);
}

} // namespace softhca::transport
