#include "port_counter_files.hpp"

#include "qp_hw_counters.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <iterator>
#include <sys/resource.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace softhca::engine {
namespace {

constexpr uint64_t kLifespanReadEveryNs = 1'000'000'000; // `lifespan` is looked at each second
constexpr uint32_t kMaxLifespanMs = 10'000;
// Below this the files would be rewritten on nearly every turn of the main loop under
// traffic: a shorter lifespan (the kernel allows 0) counts as this.
constexpr uint32_t kMinLifespanMs = 5;

// Replaces `path` whole: a reader opens either the old file or the new one.
// Replaces `path` whole: a reader opens either the old file or the new one. The file
// beside it is made afresh and never followed (the tree is root's; should a folder of
// it be writable by others, no link there can turn the write elsewhere).
void write_whole(const std::string& path, const char* text, size_t length) {
    const std::string beside = path + ".new";
    ::unlink(beside.c_str());
    const int fd =
        ::open(beside.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
    if (fd < 0)
        return; // the tree was removed under us (softhca down): nothing to show
    const bool written = ::write(fd, text, length) == static_cast<ssize_t>(length);
    ::close(fd);
    if (!written || ::rename(beside.c_str(), path.c_str()) != 0)
        ::unlink(beside.c_str());
}

void write_number(const std::string& path, uint64_t value) {
    char text[24];
    char* end = std::to_chars(text, text + sizeof(text) - 1, value).ptr;
    *end++ = '\n';
    write_whole(path, text, static_cast<size_t>(end - text));
}

void make_dir(const std::string& path) {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
        throw std::system_error(errno, std::generic_category(), "mkdir " + path);
    // A folder, not a link to one.
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        throw std::system_error(errno, std::generic_category(), "not a folder: " + path);
    ::close(fd);
}

// What a port's files are made from: its own counters and its device's QPs' (summed over
// the QPs alive and those destroyed).
struct Counts {
    const PortCounters& port;
    const transport::QpCounters& qps;
};

// What each file shows.
struct CounterFile {
    const char* name;
    uint64_t (*value)(const Counts&);
};
using K = const Counts&;
constexpr CounterFile kFiles[] = {
    // PortCounters (IBTA 16.1.3.5) and PortCountersExtended, as ib_core's sysfs names them.
    // Data counts octets in units of 4 (PortXmitData, PortRcvData).
    {"counters/port_xmit_data", [](K k) { return k.port.tx_bytes / 4; }},
    {"counters/port_rcv_data", [](K k) { return k.port.rx_bytes / 4; }},
    {"counters/port_xmit_packets", [](K k) { return k.port.tx_packets; }},
    {"counters/port_rcv_packets", [](K k) { return k.port.rx_packets; }},
    // Packets received with errors: a bad ICRC, bad lengths or checksums.
    {"counters/port_rcv_errors", [](K k) { return k.port.rx_bad_icrc + k.port.rx_malformed; }},
    // Packets the port could not send (its queue was full).
    {"counters/port_xmit_discards", [](K k) { return k.port.tx_dropped; }},
    // A software port has no physical layer, link integrity or buffer overrun to fail.
    {"counters/symbol_error", [](K) { return uint64_t{0}; }},
    {"counters/link_error_recovery", [](K) { return uint64_t{0}; }},
    {"counters/link_downed", [](K) { return uint64_t{0}; }},
    {"counters/port_rcv_remote_physical_errors", [](K) { return uint64_t{0}; }},
    {"counters/port_rcv_switch_relay_errors", [](K) { return uint64_t{0}; }},
    {"counters/port_xmit_constraint_errors", [](K) { return uint64_t{0}; }},
    {"counters/port_rcv_constraint_errors", [](K) { return uint64_t{0}; }},
    {"counters/local_link_integrity_errors", [](K) { return uint64_t{0}; }},
    {"counters/excessive_buffer_overrun_errors", [](K) { return uint64_t{0}; }},
    {"counters/VL15_dropped", [](K) { return uint64_t{0}; }},
    // Linux rxe's hw counters with the same meaning.
    {"hw_counters/sent_pkts", [](K k) { return k.port.tx_packets; }},
    {"hw_counters/rcvd_pkts", [](K k) { return k.port.rx_packets; }},
    // mlx5's congestion-control counters: ECN-marked RoCE packets received, CNPs sent for
    // them, CNPs received and acted on.
    {"hw_counters/np_ecn_marked_roce_packets", [](K k) { return k.port.rx_ecn_ce; }},
    {"hw_counters/np_cnp_sent", [](K k) { return k.port.tx_cnps; }},
    {"hw_counters/rp_cnp_handled", [](K k) { return k.port.rx_cnps; }},
    // softhca's own: drops by cause, PFC frames.
    {"hw_counters/rcvd_icrc_err", [](K k) { return k.port.rx_bad_icrc; }},
    {"hw_counters/rcvd_malformed", [](K k) { return k.port.rx_malformed; }},
    {"hw_counters/rcvd_no_qp", [](K k) { return k.port.rx_no_qp; }},
    {"hw_counters/rcvd_wrong_source", [](K k) { return k.port.rx_wrong_source; }},
    {"hw_counters/sent_dropped", [](K k) { return k.port.tx_dropped; }},
    {"hw_counters/cnp_send_dropped", [](K k) { return k.port.tx_cnps_dropped; }},
    {"hw_counters/rx_pfc_frames", [](K k) { return k.port.rx_pfc_frames; }},
    {"hw_counters/tx_pfc_frames", [](K k) { return k.port.tx_pfc_frames; }},
};
// Then the device's QPs' counters, summed (qp_hw_counters.hpp), in hw_counters/.
constexpr size_t kFileCount = std::size(kFiles) + std::size(kQpHwCounters);

std::string file_name(size_t i) {
    return i < std::size(kFiles)
               ? std::string(kFiles[i].name)
               : "hw_counters/" + std::string(kQpHwCounters[i - std::size(kFiles)].name);
}

uint64_t file_value(size_t i, const Counts& counts) {
    return i < std::size(kFiles) ? kFiles[i].value(counts)
                                 : counts.qps.*(kQpHwCounters[i - std::size(kFiles)].value);
}

} // namespace

PortCounterFiles::PortCounterFiles(std::vector<Target> targets)
    : lifespan_ns_(std::make_unique<std::atomic<uint64_t>[]>(targets.size())) {
    for (size_t t = 0; t < targets.size(); ++t) {
        make_dir(targets[t].port_dir + "/counters");
        make_dir(targets[t].port_dir + "/hw_counters");
        Written w{std::move(targets[t]), {}, {}, {}, kDefaultLifespanMs};
        for (size_t i = 0; i < kFileCount; ++i) {
            w.paths.push_back(w.target.port_dir + "/" + file_name(i));
            write_number(w.paths.back(), 0);
        }
        w.values.assign(kFileCount, 0);
        w.fresh.assign(kFileCount, 0);
        // Writable by root, as the kernel's (0644).
        const std::string lifespan = w.target.port_dir + "/hw_counters/lifespan";
        write_number(lifespan, kDefaultLifespanMs);
        ::chmod(lifespan.c_str(), 0644);
        lifespan_ns_[t].store(kDefaultLifespanMs * 1'000'000ull);
        shown_.push_back({0, 0, std::vector<uint64_t>(kFileCount, 0)});
        handed_.emplace_back(kFileCount, 0);
        handed_new_.push_back(0);
        written_.push_back(std::move(w));
    }
    writer_ = std::thread([this] { run_writer(); });
}

PortCounterFiles::~PortCounterFiles() {
    {
        std::lock_guard<std::mutex> hold(lock_);
        stop_ = true;
    }
    wake_.notify_one();
    writer_.join();
}

void PortCounterFiles::collect(uint64_t now_ns, PortSet& ports,
                               const std::function<transport::QpCounters(size_t)>& qp_counters) {
    if (lifespan_changed_.exchange(false)) // the next collection counts from the last one
        for (size_t t = 0; t < shown_.size(); ++t)
            shown_[t].next_ns = shown_[t].published_ns + lifespan_ns_[t].load();
    bool collected = false;
    next_ns_ = UINT64_MAX;
    for (size_t t = 0; t < shown_.size(); ++t) {
        Shown& shown = shown_[t];
        if (now_ns >= shown.next_ns) {
            const Target& target = written_[t].target; // set before the writer started
            const transport::QpCounters qps = qp_counters(target.device_index);
            const Counts counts{ports.counters(target.port_index), qps};
            for (size_t i = 0; i < kFileCount; ++i)
                shown.snapshot[i] = file_value(i, counts);
            shown.published_ns = now_ns;
            shown.next_ns = now_ns + lifespan_ns_[t].load();
            collected = true;
        }
        next_ns_ = std::min(next_ns_, shown.next_ns);
    }
    if (!collected)
        return;
    {
        // The writer holds this only to take the counts, never while it writes.
        std::lock_guard<std::mutex> hold(lock_);
        for (size_t t = 0; t < shown_.size(); ++t) {
            if (shown_[t].published_ns != now_ns)
                continue;
            handed_[t] = shown_[t].snapshot; // same size: no allocation
            handed_new_[t] = 1;
        }
    }
    wake_.notify_one();
}

void PortCounterFiles::read_lifespan(size_t index) {
    Written& w = written_[index];
    char text[16] = {};
    const std::string path = w.target.port_dir + "/hw_counters/lifespan";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return;
    struct stat st {};
    // Only a regular file of the tree (root's: the folder is root's and 0755).
    const ssize_t n =
        ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? ::read(fd, text, sizeof(text) - 1) : -1;
    ::close(fd);
    uint32_t ms = 0;
    if (n <= 0 || std::from_chars(text, text + n, ms).ec != std::errc() || ms > kMaxLifespanMs)
        return; // the kernel refuses what it cannot parse and keeps the old value
    ms = std::max(ms, kMinLifespanMs);
    if (ms == w.lifespan_ms)
        return;
    w.lifespan_ms = ms;
    lifespan_ns_[index].store(static_cast<uint64_t>(ms) * 1'000'000ull);
    lifespan_changed_.store(true);
}

void PortCounterFiles::run_writer() {
    // Below the data paths: it only ever costs the engine's spare time.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
    auto next_lifespan_read = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> hold(lock_);
    while (!stop_) {
        wake_.wait_until(hold, next_lifespan_read);
        if (stop_)
            break;
        std::vector<size_t> to_write;
        for (size_t t = 0; t < written_.size(); ++t) {
            if (!handed_new_[t])
                continue;
            written_[t].fresh = handed_[t]; // same size: no allocation
            handed_new_[t] = 0;
            to_write.push_back(t);
        }
        hold.unlock();
        for (size_t t : to_write) {
            Written& w = written_[t];
            for (size_t i = 0; i < w.fresh.size(); ++i) {
                if (w.fresh[i] == w.values[i])
                    continue;
                write_number(w.paths[i], w.fresh[i]);
                w.values[i] = w.fresh[i];
            }
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= next_lifespan_read) {
            for (size_t t = 0; t < written_.size(); ++t)
                read_lifespan(t);
            next_lifespan_read = now + std::chrono::nanoseconds(kLifespanReadEveryNs);
        }
        hold.lock();
    }
}

} // namespace softhca::engine
