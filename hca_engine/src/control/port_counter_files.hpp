// The port counters in the device tree, where the tools users already have read them
// (node_exporter's infiniband collector, monitoring scripts, `cat`):
//   ports/N/counters/     the IBTA's PortCounters names (PMA attributes, IBTA 16.1.3.5 and
//                         PortCountersExtended), data in 4-byte words as the kernel gives
//                         them; error counters a software port cannot have read 0;
//   ports/N/hw_counters/  Linux rxe's names where the meaning is the same (sent_pkts,
//                         rcvd_pkts, and over the device's QPs duplicate_request,
//                         out_of_seq_request, rcvd_rnr_err, send_rnr_err), mlx5's for
//                         congestion control (np_ecn_marked_roce_packets, np_cnp_sent,
//                         rp_cnp_handled) and the ACK timer (local_ack_timeout_err),
//                         softhca's own drops by cause and QP counters, and
//                         `lifespan`: how many milliseconds a value may be old (10 by
//                         default, as the kernel's; root may write it, up to 10000 as
//                         the kernel allows, and below 5 it counts as 5; a value the
//                         kernel would refuse is ignored).
// The engine keeps these counts anyway (PortCounters, QpCounters); the main loop copies them into
// the files at most once per lifespan, only those that changed, each file replaced whole (written
// beside it and renamed) so that a reader never sees half a number. Nothing is done per packet, and
// an idle engine writes nothing: after the traffic stops the last values are written when the loop
// next wakes (at most its idle wake later).
#pragma once

#include "ports.hpp"
#include "softhca/transport/queue_pair.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
        size_t device_index = 0; // whose QPs' counters it shows
    };
    static constexpr uint32_t kDefaultLifespanMs = 10;

    // Creates the two folders and every file (zeros) and `lifespan`, and starts the
    // writer. Throws std::system_error when a folder cannot be made.
    explicit PortCounterFiles(std::vector<Target> targets);
    ~PortCounterFiles();
    PortCounterFiles(const PortCounterFiles&) = delete;
    PortCounterFiles& operator=(const PortCounterFiles&) = delete;

    // Whether collect() has something to do (cheap: a comparison and a load).
    bool due(uint64_t now_ns) const {
        return now_ns >= next_ns_ || lifespan_changed_.load(std::memory_order_relaxed);
    }
    // Copies the counts of the ports whose lifespan is over (the ports' counters and,
    // through `qp_counters`, a device's QPs' summed) and hands them to the writer: under
    // the world, no I/O. The writer (a thread of its own, at low priority) writes the
    // files whose value changed and reads `lifespan` each second: a file system that
    // takes milliseconds to replace a file holds no data path.
    void collect(uint64_t now_ns, PortSet& ports,
                 const std::function<transport::QpCounters(size_t)>& qp_counters);

  private:
    // The main loop's part of a shown port.
    struct Shown {
        uint64_t published_ns = 0; // when its counts were last collected
        uint64_t next_ns = 0;
        std::vector<uint64_t> snapshot;
    };
    // The writer's part.
    struct Written {
        Target target;
        std::vector<std::string> paths; // each file's, in the table's order
        std::vector<uint64_t> values;   // as last written
        std::vector<uint64_t> fresh;    // taken from the hand-over, to write
        uint32_t lifespan_ms = kDefaultLifespanMs;
    };
    void run_writer();
    void read_lifespan(size_t index);

    std::vector<Shown> shown_;     // the main loop's
    std::vector<Written> written_; // the writer's
    // A shown port's lifespan, set by the writer, read by the main loop.
    std::unique_ptr<std::atomic<uint64_t>[]> lifespan_ns_;
    std::atomic<bool> lifespan_changed_{false};
    uint64_t next_ns_ = 0;

    // The hand-over: the last counts collected for each port, and which are new.
    std::mutex lock_;
    std::condition_variable wake_;
    std::vector<std::vector<uint64_t>> handed_;
    std::vector<char> handed_new_;
    bool stop_ = false;
    std::thread writer_;
};

} // namespace softhca::engine
