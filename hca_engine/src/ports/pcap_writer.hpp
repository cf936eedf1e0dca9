// Writes the frames a port sends to a classic libpcap file (Ethernet link type), for
// Wireshark and for checking our own packets with the codec's tests. Off by default;
// buffered through stdio, so a capture costs no system call per packet.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace softhca::engine {

class PcapWriter {
  public:
    PcapWriter() = default;
    ~PcapWriter();
    PcapWriter(const PcapWriter&) = delete;
    PcapWriter& operator=(const PcapWriter&) = delete;

    // Opens (truncates) the file and writes the global header. Returns false on failure.
    bool open(const std::string& path);
    bool is_open() const { return file_ != nullptr; }
    void write(const uint8_t* frame, uint32_t length, uint64_t time_ns);

  private:
    std::FILE* file_ = nullptr;
};

} // namespace softhca::engine
