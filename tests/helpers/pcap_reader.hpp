// Reads the frames of a classic libpcap file (the format of tests/vectors).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

struct PcapFrame {
    std::vector<uint8_t> bytes;
};

inline std::vector<PcapFrame> read_pcap(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), {});
    std::vector<PcapFrame> frames;
    if (file.size() < 24)
        return frames;
    uint32_t magic;
    std::memcpy(&magic, file.data(), 4);
    if (magic != 0xa1b2c3d4u && magic != 0xa1b23c4du)
        return frames;
    size_t offset = 24;
    while (offset + 16 <= file.size()) {
        uint32_t captured;
        std::memcpy(&captured, file.data() + offset + 8, 4);
        offset += 16;
        if (offset + captured > file.size())
            break;
        frames.push_back(
            {std::vector<uint8_t>(file.begin() + static_cast<long>(offset),
                                  file.begin() + static_cast<long>(offset + captured))});
        offset += captured;
    }
    return frames;
}
