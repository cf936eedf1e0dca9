#include "pcap_writer.hpp"

namespace softhca::engine {

namespace {
struct GlobalHeader {
    uint32_t magic = 0xa1b2c3d4; // microsecond timestamps, host byte order
    uint16_t version_major = 2;
    uint16_t version_minor = 4;
    int32_t thiszone = 0;
    uint32_t sigfigs = 0;
    uint32_t snaplen = 65535;
    uint32_t linktype = 1; // Ethernet
};
static_assert(sizeof(GlobalHeader) == 24);

struct RecordHeader {
    uint32_t seconds;
    uint32_t microseconds;
    uint32_t captured;
    uint32_t original;
};
static_assert(sizeof(RecordHeader) == 16);
} // namespace

PcapWriter::~PcapWriter() {
    if (file_)
        std::fclose(file_);
}

bool PcapWriter::open(const std::string& path) {
    file_ = std::fopen(path.c_str(), "wbe");
    if (!file_)
        return false;
    const GlobalHeader header;
    return std::fwrite(&header, sizeof(header), 1, file_) == 1;
}

void PcapWriter::write(const uint8_t* frame, uint32_t length, uint64_t time_ns) {
    if (!file_)
        return;
    const RecordHeader record{static_cast<uint32_t>(time_ns / 1'000'000'000),
                              static_cast<uint32_t>(time_ns % 1'000'000'000 / 1000), length,
                              length};
    std::fwrite(&record, sizeof(record), 1, file_);
    std::fwrite(frame, 1, length, file_);
}

} // namespace softhca::engine
