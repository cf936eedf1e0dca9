#include "engine_config.hpp"

#include "gid_table.hpp"
#include "softhca/device_interface/registration.hpp"
#include "softhca/transport/roce_address.hpp"
#include "softhca/transport/roce_path.hpp"

#include <algorithm>
#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace softhca::engine {

const char* engine_usage() {
    return "usage: softhca-engine --run-dir DIR --provider-prefix PATH [--prefix NAME]\n"
           "                      [--mtu BYTES] [--memory-mb MB] [--driver-dir DIR]\n"
           "                      [--cdev-dir DIR] [--port DEVARGS@ADDR[,ADDR...][%NETDEV]]...\n"
           "                      [--faults drop=P,dup=P,reorder=P,corrupt=P,seed=N]\n"
           "                      [--pcap PATH_PREFIX]\n"
           "                      [--shape rate_mbps=R,delay_us=D,queue_kb=Q]\n"
           "                      [--ecn kmin_kb=K,kmax_kb=K,pmax=P]\n"
           "                      [--dcqcn on|g=G,k_us=K,t_us=T,b=B,f=F,ai_mbps=A,hai_mbps=H,"
           "min_mbps=M]\n"
           "                      [--cnp-interval-us US] [--threads N]\n"
           "                      [--fabric leaf-spine|fat-tree|rail:KEY=VALUE,...]\n"
           "                      [--vl-arbitration [PORT@]high=VL:W,..;low=VL:W,..;limit=N]\n"
           "                      [--sl-to-vl [PORT@]SL:VL,...]\n"
           "                      [--link-credits on|buffer_kb=K,refresh_us=U]\n"
           "                      [--traffic-class TCLASS] [--priority-tag]\n"
           "                      [--pfc] [--pfc-priorities P[,P...]]\n"
           "                      [--limits KEY=N,...]  (KEY: context_ or user_ with qps,\n"
           "                                cqs, srqs, mrs, pds, mws, dm_kb, attachments, mb;\n"
           "                                user_connections, user_cm_files, user_cm_ids)\n"
           "DEVARGS is a DPDK device, or udp for a kernel UDP socket (io_uring) bound to\n"
           "the addresses.\n"
           "Without --port: two devices wired back to back inside the engine,\n"
           "198.18.0.1 and 198.18.0.2. With --fabric: a device per endpoint of a fabric\n"
           "of switches inside the engine, 198.19.0.1 onward.\n";
}

namespace {

// DEVARGS@ADDRESSES or DEVARGS@ADDRESSES%NETDEV, ADDRESSES one IPv4 address and IPv6
// addresses in any order, separated by commas
bool parse_port(std::string_view text, PortConfig& port, std::string& error) {
    auto at = text.rfind('@');
    if (at == std::string_view::npos || at == 0) {
        error = "--port needs DEVARGS@ADDRESS, got '" + std::string(text) + "'";
        return false;
    }
    port.devargs = std::string(text.substr(0, at));
    std::string_view addr = text.substr(at + 1);
    if (port.devargs.find_first_of(" \t\n") != std::string::npos) {
        error = "--port devargs must not contain white space";
        return false;
    }
    if (auto pct = addr.find('%'); pct != std::string_view::npos) {
        port.netdev = std::string(addr.substr(pct + 1));
        addr = addr.substr(0, pct);
    }
    if (port.netdev.empty()) {
        // PMDs bound to a kernel interface name it in their devargs (af_packet, af_xdp).
        if (auto iface = port.devargs.find("iface="); iface != std::string::npos)
            port.netdev =
                port.devargs.substr(iface + 6, port.devargs.find(',', iface) - (iface + 6));
    }
    // Each address is IPv4 (at most one) or IPv6; the link-local IPv6 address comes from
    // the MAC, as on any Ethernet interface.
    for (bool more = !addr.empty(); more;) {
        const size_t comma = addr.find(',');
        const std::string one(addr.substr(0, comma));
        more = comma != std::string_view::npos;
        addr = more ? addr.substr(comma + 1) : std::string_view();
        if (auto ip = transport::parse_ipv4(one)) {
            if (port.ipv4 || !*ip) {
                error = "--port takes one IPv4 address (not 0.0.0.0), got '" + one + "'";
                return false;
            }
            port.ipv4 = *ip;
            continue;
        }
        transport::Gid gid{};
        if (inet_pton(AF_INET6, one.c_str(), gid.data()) != 1) {
            error = "bad IPv4 or IPv6 address '" + one + "'";
            return false;
        }
        const bool unspecified = gid == transport::Gid{};
        if (unspecified || transport::gid_is_multicast(gid) || transport::gid_is_link_local(gid) ||
            transport::gid_is_ipv4_mapped(gid) || (gid[0] == 0 && gid[15] == 1)) {
            error = "'" + one +
                    "' cannot be a port's IPv6 address (the link-local one comes "
                    "from the MAC)";
            return false;
        }
        if (port.ipv6.size() + 2 >= kMaxGids) {
            error = "--port takes at most " + std::to_string(kMaxGids - 2) + " IPv6 addresses";
            return false;
        }
        port.ipv6.push_back(gid);
    }
    if (!port.ipv4 && port.ipv6.empty()) {
        error = "--port needs DEVARGS@ADDRESS[,ADDRESS...], got '" + std::string(text) + "'";
        return false;
    }
    return true;
}

// "3" or "0,3": a bit mask of priorities 0..7, none twice (digits at the even places,
// commas between them).
bool parse_priority_list(std::string_view text, uint8_t& mask) {
    mask = 0;
    if (text.size() % 2 == 0)
        return false; // empty, or a comma at an end
    for (size_t i = 0; i < text.size(); i += 2) {
        const int priority = text[i] - '0';
        if (priority < 0 || priority > 7 || (mask >> priority) & 1 ||
            (i + 1 < text.size() && text[i + 1] != ','))
            return false;
        mask = static_cast<uint8_t>(mask | 1u << priority);
    }
    return true;
}

bool parse_number(const char* text, uint32_t min, uint32_t max, uint32_t& out) {
    char* end = nullptr;
    unsigned long value = std::strtoul(text, &end, 10);
    if (!*text || *end || value < min || value > max)
        return false;
    out = static_cast<uint32_t>(value);
    return true;
}

// "PORT@VALUE" names one port (PORT, digits); anything else is every port's VALUE.
std::string port_selector(const std::string& text, std::optional<size_t>& port) {
    const size_t at = text.find('@');
    if (at == std::string::npos || at == 0 || text.find_first_not_of("0123456789") != at || at > 4)
        return text;
    port = std::stoul(text.substr(0, at));
    return text.substr(at + 1);
}

// An option's "[PORT@]TABLE" (--vl-arbitration, --sl-to-vl): the table, read by
// Table::parse, into one port's entry of `by_port` or into `every_port`.
template <typename Table>
bool parse_port_table(std::string_view option, const std::string& value, Table& every_port,
                      std::map<size_t, Table>& by_port, std::string& error) {
    std::optional<size_t> port;
    const std::string text = port_selector(value, port);
    Table table;
    if (std::string e = Table::parse(text, table); !e.empty()) {
        error = std::string(option) + ": " + e;
        return false;
    }
    (port ? by_port[*port] : every_port) = table;
    return true;
}

// Whether every port `by_port` names is one of the `port_count` ports.
template <typename Table>
bool ports_exist(std::string_view option, const std::map<size_t, Table>& by_port, size_t port_count,
                 std::string& error) {
    for (const auto& [port, table] : by_port)
        if (port >= port_count) {
            error = std::string(option) + ": there is no port " + std::to_string(port);
            return false;
        }
    return true;
}
} // namespace

std::optional<EngineConfig> parse_engine_args(int argc, char** argv, std::string& error) {
    EngineConfig config;
    bool lanes_given = false; // --vl-arbitration or --sl-to-vl
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) {
                error = std::string(arg) + " needs a value";
                return nullptr;
            }
            return argv[++i];
        };
        const char* v = nullptr;
        if (arg == "--run-dir" && (v = value()))
            config.run_dir = v;
        else if (arg == "--provider-prefix" && (v = value()))
            config.provider_prefix = v;
        else if (arg == "--prefix" && (v = value()))
            config.prefix = v;
        else if (arg == "--driver-dir" && (v = value()))
            config.driver_dir = v;
        else if (arg == "--cdev-dir" && (v = value()))
            config.cdev_dir = v;
        else if (arg == "--mtu" && (v = value())) {
            if (!parse_number(v, 576, 9600, config.eth_mtu)) {
                error = "--mtu must be 576..9600";
                return std::nullopt;
            }
        } else if (arg == "--memory-mb" && (v = value())) {
            if (!parse_number(v, 64, 65536, config.memory_mb)) {
                error = "--memory-mb must be 64..65536";
                return std::nullopt;
            }
        } else if (arg == "--pcap" && (v = value())) {
            config.pcap_prefix = v;
        } else if (arg == "--fabric" && (v = value())) {
            if (!(config.fabric = fabric::parse_fabric_spec(v, error)))
                return std::nullopt;
        } else if (arg == "--faults" && (v = value())) {
            auto faults = parse_fault_config(v, error);
            if (!faults)
                return std::nullopt;
            config.faults = *faults;
        } else if (arg == "--shape" && (v = value())) {
            auto shaper = parse_shaper_config(v, error);
            if (!shaper)
                return std::nullopt;
            config.congestion_point.shaper = *shaper;
        } else if (arg == "--ecn" && (v = value())) {
            transport::EcnMarkingParameters ecn;
            if (std::string e =
                    transport::EcnMarkingParameters::parse(std::string(v) == "on" ? "" : v, ecn);
                !e.empty()) {
                error = "--ecn: " + e;
                return std::nullopt;
            }
            config.congestion_point.ecn_marking = ecn;
        } else if (arg == "--dcqcn" && (v = value())) {
            if (std::string e = transport::DcqcnParameters::parse(std::string(v) == "on" ? "" : v,
                                                                  config.dcqcn_parameters);
                !e.empty()) {
                error = "--dcqcn: " + e;
                return std::nullopt;
            }
            config.dcqcn = true;
        } else if (arg == "--vl-arbitration" && (v = value())) {
            lanes_given = true;
            if (!parse_port_table(arg, v, config.congestion_point.arbitration,
                                  config.arbitration_by_port, error))
                return std::nullopt;
        } else if (arg == "--sl-to-vl" && (v = value())) {
            lanes_given = true;
            if (!parse_port_table(arg, v, config.sl_to_vl, config.sl_to_vl_by_port, error))
                return std::nullopt;
        } else if (arg == "--link-credits" && (v = value())) {
            transport::LinkCreditParameters credits;
            if (std::string e = transport::LinkCreditParameters::parse(v, credits); !e.empty()) {
                error = "--link-credits: " + e;
                return std::nullopt;
            }
            config.congestion_point.credit_buffer_bytes = credits.buffer_bytes;
            config.congestion_point.credit_refresh_ns = credits.refresh_ns;
        } else if (arg == "--limits" && (v = value())) {
            if (std::string e = ResourceLimits::parse(v, config.limits); !e.empty()) {
                error = "--limits: " + e;
                return std::nullopt;
            }
        } else if (arg == "--pfc") {
            config.pfc = true;
        } else if (arg == "--pfc-priorities" && (v = value())) {
            // The priorities PFC is enabled for (implies --pfc), as `dcb pfc set dev DEV
            // prio-pfc all:off 3:on` or mlnx_qos --pfc enable them; the others are neither
            // honoured nor asked for. Given twice, the last list counts.
            if (!parse_priority_list(v, config.pfc_priorities)) {
                error = "--pfc-priorities must be a list of priorities 0..7, such as 3 or 0,3";
                return std::nullopt;
            }
            config.pfc = true;
        } else if (arg == "--priority-tag") {
            config.priority_tag = true;
        } else if (arg == "--traffic-class" && (v = value())) {
            uint32_t tclass = 0;
            if (!parse_number(v, 0, 255, tclass)) {
                error = "--traffic-class must be 0..255 (DSCP << 2 | ECN)";
                return std::nullopt;
            }
            config.traffic_class = static_cast<int>(tclass);
        } else if (arg == "--cnp-interval-us" && (v = value())) {
            uint32_t us = 0;
            if (!parse_number(v, 0, 1'000'000, us)) {
                error = "--cnp-interval-us must be 0..1000000";
                return std::nullopt;
            }
            config.cnp_interval_ns = uint64_t{us} * 1000;
        } else if (arg == "--threads" && (v = value())) {
            if (!parse_number(v, 1, 64, config.datapath_threads)) {
                error = "--threads must be 1..64";
                return std::nullopt;
            }
        } else if (arg == "--port" && (v = value())) {
            PortConfig port;
            if (!parse_port(v, port, error))
                return std::nullopt;
            config.ports.push_back(port);
        } else {
            if (error.empty())
                error = "unknown argument '" + std::string(arg) + "'";
            return std::nullopt;
        }
    }
    size_t udp_ports = 0;
    for (const PortConfig& port : config.ports)
        udp_ports += port.is_kernel_udp();
    // Lossless: a queue per VL whose limit holds the senders back. Without --shape, one
    // with no rate and room for twice what the far end grants.
    CongestionPointConfig& point = config.congestion_point;
    if (point.credit_buffer_bytes && !point.shaper.queue_limit_bytes)
        point.shaper.queue_limit_bytes =
            std::max<uint64_t>(2ull * point.credit_buffer_bytes, 65536);
    // With a fabric, --ecn marks at its switches' queues (unless its spec says how).
    if (config.fabric && config.congestion_point.ecn_marking && !config.fabric->ecn)
        config.fabric->ecn = config.congestion_point.ecn_marking;
    if (config.congestion_point.ecn_marking && !config.congestion_point.shaper.enabled() &&
        !config.fabric) {
        error = "--ecn marks on a shaped link's queue: give --shape too";
        return std::nullopt;
    }
    if (lanes_given && !config.congestion_point.shaper.enabled()) {
        error = "--vl-arbitration and --sl-to-vl arbitrate a shaped link's queues: give --shape "
                "too";
        return std::nullopt;
    }
    // A port named must exist: the built-in wire has two, else one per --port.
    const size_t port_count = config.ports.empty() ? 2 : config.ports.size();
    if (!ports_exist("--vl-arbitration", config.arbitration_by_port, port_count, error) ||
        !ports_exist("--sl-to-vl", config.sl_to_vl_by_port, port_count, error))
        return std::nullopt;
    // SL 0 carries every QP that names no other, and the CM's MADs: on every port its VL
    // must be sent.
    for (size_t port = 0; port < port_count; ++port)
        if (const uint8_t vl0 = config.sl_to_vl_for(port).vl(0);
            !config.arbitration_for(port).serves(vl0)) {
            error = "--vl-arbitration: VL " + std::to_string(vl0) + " (SL 0's) is in neither " +
                    "table of port " + std::to_string(port) +
                    ", so nothing on SL 0 would ever be sent";
            return std::nullopt;
        }
    if (udp_ports && config.pfc) {
        error = "--pfc and --pfc-priorities are for DPDK ports (the kernel owns a UDP socket's "
                "link)";
        return std::nullopt;
    }
    if (config.pfc && config.congestion_point.credit_buffer_bytes) {
        error = "--pfc and --pfc-priorities are for ports to foreign peers; between softhca "
                "ports --link-credits "
                "already makes the link lossless: give one of them";
        return std::nullopt;
    }
    if (udp_ports && config.priority_tag) {
        error = "--priority-tag is for DPDK ports (a kernel UDP socket sends no Ethernet "
                "header of ours)";
        return std::nullopt;
    }
    if (udp_ports && config.congestion_point.credit_buffer_bytes) {
        error = "--link-credits is for DPDK ports between softhca engines (the built-in wire, "
                "memif, af_packet)";
        return std::nullopt;
    }
    if (udp_ports && config.congestion_point.shaper.enabled()) {
        error = "--shape is for DPDK ports (the built-in wire, memif, af_packet)";
        return std::nullopt;
    }
    if (config.fabric) {
        // The fabric's switches queue, mark and shape on their own links (its spec says
        // how); what --port, --shape and the rest would add sits at a port of another kind.
        const char* other = !config.ports.empty()                         ? "--port"
                            : config.congestion_point.shaper.enabled()    ? "--shape"
                            : config.congestion_point.credit_buffer_bytes ? "--link-credits"
                            : config.pfc                                  ? "--pfc"
                            : config.priority_tag                         ? "--priority-tag"
                            : lanes_given ? "--vl-arbitration or --sl-to-vl"
                                          : nullptr;
        if (other) {
            error = std::string("--fabric makes its own ports and links: ") + other +
                    " cannot be given with it";
            return std::nullopt;
        }
    }
    if (udp_ports && udp_ports != config.ports.size()) {
        error = "udp ports and DPDK ports cannot share an instance: run them in two (--prefix)";
        return std::nullopt;
    }
    if (config.datapath_threads == 0)
        if (const char* threads = std::getenv("SOFTHCA_ENGINE_THREADS");
            threads && *threads && !parse_number(threads, 1, 64, config.datapath_threads)) {
            error = "SOFTHCA_ENGINE_THREADS must be 1..64";
            return std::nullopt;
        }
    if (config.run_dir.empty() || config.provider_prefix.empty()) {
        error = "--run-dir and --provider-prefix are required";
        return std::nullopt;
    }
    if (!device_interface::valid_instance_prefix(config.prefix)) {
        error = "--prefix must be 1..32 characters of [a-z0-9_]";
        return std::nullopt;
    }
    return config;
}

size_t datapath_threads_for(const EngineConfig& config, size_t port_count, size_t cores) {
    const size_t wanted = config.datapath_threads ? size_t{config.datapath_threads} : cores / 4;
    return std::clamp<size_t>(wanted, 1, std::max<size_t>(port_count, 1));
}

} // namespace softhca::engine
