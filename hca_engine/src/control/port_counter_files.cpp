#include "port_counter_files.hpp"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <fcntl.h>
#include <iterator>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace softhca::engine {
namespace {

constexpr uint64_t kLifespanReadEveryNs = 1'000'000'000; // `lifespan` is looked at each second
constexpr uint32_t kMaxLifespanMs = 10'000;

// Replaces `path` whole: a reader opens either the old file or the new one.
void write_whole(const std::string& path, const char* text, size_t length) {
    const std::string beside = path + ".new";
    const int fd = ::open(beside.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
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
}

// What each file shows, from the port's counters.
struct CounterFile {
    const char* name;
    uint64_t (*value)(const PortCounters&);
};
using K = const PortCounters&;
constexpr CounterFile kFiles[] = {
    // PortCounters (IBTA 16.1.3.5) and PortCountersExtended, as ib_core's sysfs names them.
    // Data counts octets in units of 4 (PortXmitData, PortRcvData).
    {"counters/port_xmit_data", [](K k) { return k.tx_bytes / 4; }},
    {"counters/port_rcv_data", [](K k) { return k.rx_bytes / 4; }},
    {"counters/port_xmit_packets", [](K k) { return k.tx_packets; }},
    {"counters/port_rcv_packets", [](K k) { return k.rx_packets; }},
    // Packets received with errors: a bad ICRC, bad lengths or checksums.
    {"counters/port_rcv_errors", [](K k) { return k.rx_bad_icrc + k.rx_malformed; }},
    // Packets the port could not send (its queue was full).
    {"counters/port_xmit_discards", [](K k) { return k.tx_dropped; }},
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
    {"hw_counters/sent_pkts", [](K k) { return k.tx_packets; }},
    {"hw_counters/rcvd_pkts", [](K k) { return k.rx_packets; }},
    // mlx5's congestion-control counters: ECN-marked RoCE packets received, CNPs sent for
    // them, CNPs received and acted on.
    {"hw_counters/np_ecn_marked_roce_packets", [](K k) { return k.rx_ecn_ce; }},
    {"hw_counters/np_cnp_sent", [](K k) { return k.tx_cnps; }},
    {"hw_counters/rp_cnp_handled", [](K k) { return k.rx_cnps; }},
    // softhca's own: drops by cause, PFC frames.
    {"hw_counters/rcvd_icrc_err", [](K k) { return k.rx_bad_icrc; }},
    {"hw_counters/rcvd_malformed", [](K k) { return k.rx_malformed; }},
    {"hw_counters/rcvd_no_qp", [](K k) { return k.rx_no_qp; }},
    {"hw_counters/rcvd_wrong_source", [](K k) { return k.rx_wrong_source; }},
    {"hw_counters/sent_dropped", [](K k) { return k.tx_dropped; }},
    {"hw_counters/cnp_send_dropped", [](K k) { return k.tx_cnps_dropped; }},
    {"hw_counters/rx_pfc_frames", [](K k) { return k.rx_pfc_frames; }},
    {"hw_counters/tx_pfc_frames", [](K k) { return k.tx_pfc_frames; }},
};

} // namespace

std::vector<std::pair<std::string, uint64_t>> PortCounterFiles::values(const PortCounters& k) {
    std::vector<std::pair<std::string, uint64_t>> out;
    for (const CounterFile& file : kFiles)
        out.emplace_back(file.name, file.value(k));
    return out;
}

PortCounterFiles::PortCounterFiles(std::vector<Target> targets) {
    for (Target& target : targets) {
        make_dir(target.port_dir + "/counters");
        make_dir(target.port_dir + "/hw_counters");
        Shown shown{std::move(target), {}, {}};
        for (const CounterFile& file : kFiles) {
            shown.paths.push_back(shown.target.port_dir + "/" + file.name);
            shown.values.push_back(0);
            write_number(shown.paths.back(), 0);
        }
        // Writable by root, as the kernel's (0644).
        const std::string lifespan = shown.target.port_dir + "/hw_counters/lifespan";
        write_number(lifespan, kDefaultLifespanMs);
        ::chmod(lifespan.c_str(), 0644);
        shown_.push_back(std::move(shown));
    }
}

void PortCounterFiles::read_lifespan(Shown& shown) {
    char text[16] = {};
    const std::string path = shown.target.port_dir + "/hw_counters/lifespan";
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
    const uint64_t lifespan_ns = static_cast<uint64_t>(ms) * 1'000'000ull;
    if (lifespan_ns == shown.lifespan_ns)
        return;
    // The next publication counts from the last one with the new lifespan, either way.
    shown.lifespan_ns = lifespan_ns;
    shown.next_ns = shown.published_ns + lifespan_ns;
}

void PortCounterFiles::publish(uint64_t now_ns, PortSet& ports) {
    const bool read_lifespans = now_ns >= next_lifespan_read_ns_;
    if (read_lifespans)
        next_lifespan_read_ns_ = now_ns + kLifespanReadEveryNs;
    next_ns_ = UINT64_MAX;
    for (Shown& shown : shown_) {
        if (read_lifespans)
            read_lifespan(shown);
        if (now_ns >= shown.next_ns) {
            const PortCounters& counters = ports.counters(shown.target.port_index);
            for (size_t i = 0; i < std::size(kFiles); ++i) {
                const uint64_t value = kFiles[i].value(counters);
                if (value == shown.values[i])
                    continue;
                write_number(shown.paths[i], value);
                shown.values[i] = value;
            }
            shown.published_ns = now_ns;
            shown.next_ns = now_ns + shown.lifespan_ns;
        }
        next_ns_ = std::min(next_ns_, shown.next_ns);
    }
}

} // namespace softhca::engine
