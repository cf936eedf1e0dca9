// Wire-codec layer: the engine's vectorised CRC-32 (ISA-L) is the transport's portable
// one, byte for byte, at every length and split point, and the Soft-RoCE captures'
// ICRCs come out right with either installed.
#include "fast_crc32.hpp"
#include "pcap_reader.hpp"
#include "softhca/transport/crc32.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

using namespace softhca;

TEST_CASE("ISA-L's CRC-32 equals the portable CRC-32 at every length and split") {
    std::mt19937 random(7);
    std::vector<uint8_t> data(9000);
    for (auto& byte : data)
        byte = static_cast<uint8_t>(random());
    // The check value of CRC-32/ISO-HDLC ("123456789").
    const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    CHECK(transport::crc32_portable(0, check, 9) == 0xcbf43926u);
    CHECK(engine::fast_crc32(0, check, 9) == 0xcbf43926u);
    for (size_t length : {0, 1, 3, 7, 8, 15, 16, 63, 64, 65, 255, 256, 1024, 4096, 4133, 9000}) {
        INFO("length " << length);
        const uint32_t expected = transport::crc32_portable(0, data.data(), length);
        CHECK(engine::fast_crc32(0, data.data(), length) == expected);
        const size_t split = length / 3;
        CHECK(engine::fast_crc32(engine::fast_crc32(0, data.data(), split), data.data() + split,
                                 length - split) == expected);
    }
}

TEST_CASE("captured ICRCs verify with the vectorised CRC installed, and only right ones") {
    const auto frames = read_pcap(std::string(SOFTHCA_VECTORS_DIR) + "/rxe-rc-3pct-loss.pcap");
    REQUIRE(!frames.empty());
    engine::install_fast_crc32();
    size_t good = 0;
    for (const auto& f : frames) {
        transport::ParsedFrame parsed;
        good += transport::parse_roce_frame(f.bytes.data(), f.bytes.size(), parsed) ==
                transport::FrameError::None;
        auto corrupted = f.bytes;
        corrupted.back() ^= 1; // the ICRC's last byte
        CHECK(transport::parse_roce_frame(corrupted.data(), corrupted.size(), parsed) ==
              transport::FrameError::BadIcrc);
    }
    transport::set_crc32(nullptr); // back to the portable one for the other tests
    CHECK(good == frames.size());
}
