// The port counters in the device tree, where the tools users already have read them
// (node_exporter's infiniband collector, monitoring scripts, `cat`):
//   ports/N/counters/     the IBTA's PortCounters names (PMA attributes, IBTA 16.1.3.5 and
//                         PortCountersExtended), data in 4-byte words as the kernel gives
//                         them; error counters a software port cannot have read 0;
//   ports/N/hw_counters/  Linux rxe's names where the meaning is the same (sent_pkts,
//                         rcvd_pkts), mlx5's for congestion control (np_ecn_marked_roce_packets,
//                         np_cnp_sent, rp_cnp_handled), softhca's own drops by cause, and
//                         `lifespan`: how many milliseconds a value may be old (10 by
//                         default, as the kernel's; root may write it, up to 10000 as
//                         the kernel allows; a value the kernel would refuse is ignored).
// The engine keeps these counts anyway (PortCounters); the main loop copies them into the
// files at most once per lifespan, only those that changed, each file replaced whole
// (written beside it and renamed) so that a reader never sees half a number. Nothing is
// done per packet, and an idle engine writes nothing: after the traffic stops the last
// values are written when the loop next wakes (at most its idle wake later).
#pragma once

#include "ports.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace softhca::engine {

class PortCounterFiles {
  public:
    // A port directory of a device tree (.../class/infiniband/DEV/ports/1) that shows the
    // counters of the engine's port `port_index`. A port may be shown in several trees
    // (a fabric host's view has its own).
    struct Target {
        std::string port_dir;
        size_t port_index = 0;
    };
    static constexpr uint32_t kDefaultLifespanMs = 10;

    // Creates the two folders and every file (zeros) and `lifespan`. Throws
    // std::system_error when a folder cannot be made.
    explicit PortCounterFiles(std::vector<Target> targets);

    // Whether a publication may be due (cheap: one comparison).
    bool due(uint64_t now_ns) const { return now_ns >= next_ns_; }
    // Writes the files whose value changed since they were last written. Reads the ports'
    // counters: under the world.
    void publish(uint64_t now_ns, PortSet& ports);

    // What one file shows, by name, for a port's counters (for the tests).
    static std::vector<std::pair<std::string, uint64_t>> values(const PortCounters& counters);

  private:
    struct Shown {
        Target target;
        std::vector<std::string> paths; // each file's, in the order of values()
        std::vector<uint64_t> values;   // as last written
        uint64_t lifespan_ns = kDefaultLifespanMs * 1'000'000ull;
        uint64_t published_ns = 0; // when the files were last looked at
        uint64_t next_ns = 0;
    };
    void read_lifespan(Shown& shown);

    std::vector<Shown> shown_;
    uint64_t next_ns_ = 0;
    uint64_t next_lifespan_read_ns_ = 0;
};

} // namespace softhca::engine
