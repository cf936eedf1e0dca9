#include "dpdk_ports.hpp"

#include "clock.hpp"
#include "gid_table.hpp"
#include "kernel_interface.hpp"
#include "softhca/transport/path_mtu.hpp"
#include "softhca/transport/priority_flow_control.hpp"

#include <rte_bus_vdev.h>
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <unistd.h>
#include <utility>

namespace softhca::engine {

namespace {
constexpr uint16_t kRxDescriptors = 1024;
constexpr uint16_t kTxDescriptors = 1024;
constexpr unsigned kPoolMbufs = 4095;
constexpr uint16_t kBurst = 32;

// Locally administered unicast MACs for the built-in wire: 02:53:48:xx:yy:NN.
transport::MacAddress builtin_mac(uint32_t instance_tag, size_t index) {
    return {0x02,
            0x53,
            0x48,
            static_cast<uint8_t>(instance_tag >> 8),
            static_cast<uint8_t>(instance_tag),
            static_cast<uint8_t>(index + 1)};
}

// The value of `key` in DPDK device arguments ("net_af_packet0,iface=veth0,..."), or "".
std::string devargs_value(const std::string& devargs, const std::string& key) {
    size_t at = devargs.find(',');
    while (at != std::string::npos) {
        const size_t end = devargs.find(',', at + 1);
        const std::string pair = devargs.substr(at + 1, end - at - 1);
        if (pair.starts_with(key + "="))
            return pair.substr(key.size() + 1);
        at = end;
    }
    return "";
}

// The XDP program of af_xdp ports (xdp/roce_redirect.bpf.c): beside the engine's binary,
// where the build and the package put it. Throws when it is not there: the PMD's own
// program would take all the interface's traffic from the kernel.
std::string roce_redirect_program() {
    char self[4096] = {};
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    std::string path = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
    path = path.substr(0, path.rfind('/') + 1) + "softhca-roce-redirect.bpf.o";
    if (access(path.c_str(), R_OK) != 0)
        throw std::runtime_error("af_xdp port: no XDP program at " + path +
                                 " (built when clang is installed; or give xdp_prog=PATH)");
    return path;
}

// Whether a PMD binds an existing kernel interface (the kernel owns its MTU and link).
bool on_kernel_interface(const std::string& devargs) {
    return devargs.starts_with("net_af_packet") || devargs.starts_with("net_af_xdp");
}

// The largest Ethernet MTU a RoCE frame needs: a 4096-byte path MTU over IPv6 (the
// largest path MTU, IBTA 9.6.1.1, under the larger IP header) and its headers.
constexpr uint32_t kLargestRoceMtu = 4096 + transport::kRoceV2IpOverhead + 20;
// An af_packet ring frame (TPACKET_V2) holds the kernel's header (the packet starts 64
// bytes in, TPACKET_ALIGN(TPACKET2_HDRLEN)) and one Ethernet frame with a VLAN tag.
constexpr uint32_t kAfPacketFrameOverhead = 64 + 18;

// What the engine makes of a --port before the EAL sees it.
struct PortPlan {
    std::string devargs;     // with our defaults for the PMD
    uint32_t kernel_mtu = 0; // the kernel interface's MTU (af_packet, af_xdp), or 0
    uint32_t ring_frame = 0; // af_packet: the size of its ring frames, what an mbuf must hold
};

// A port's devargs with our defaults for PMDs whose own ones lose traffic, and what the
// port learns from its kernel interface. af_packet: its ring frames (2048 bytes by
// default) must hold the largest frame of the port's MTU (--mtu, or the interface's if
// less) — the kernel truncates a longer received frame, and the PMD drops a longer one to
// send — so they are the power of two that holds a RoCE frame of the MTU (8 KiB for jumbo
// frames); its receive ring (512 frames) overflows under the burst of one 64 KiB UC
// message, which nothing resends, so it has 4096 frames of 2 KiB, or 2048 of 8 KiB
// (16 MiB a ring); a block holds whole frames; and the qdisc is bypassed (the default of
// the PMD, said here so it holds). What the devargs say themselves wins, and the
// defaults added follow a frame size they give (a number of bytes, 2048 or more).
// af_xdp: softhca's XDP program, on an interface with one receive queue.
PortPlan plan_port(const PortConfig& port, uint32_t configured_mtu) {
    const std::string& devargs = port.devargs;
    PortPlan plan{devargs};
    if (!on_kernel_interface(devargs))
        return plan;
    const std::string iface = devargs_value(devargs, "iface");
    plan.kernel_mtu = kernel_interface_mtu(iface);
    if (devargs.starts_with("net_af_xdp")) {
        // The port's socket is on queue 0; RSS would spread RoCE flows (each QP has its
        // own UDP source port) over the others, where the kernel drops them.
        if (const uint32_t queues = kernel_interface_rx_queues(iface);
            queues > 1 && devargs_value(devargs, "queue_count").empty())
            throw std::runtime_error("af_xdp port: " + iface + " has " + std::to_string(queues) +
                                     " receive queues and the port reads queue 0 only: " +
                                     "`ethtool -L " + iface + " combined 1` (or rx 1) first");
        if (devargs_value(devargs, "xdp_prog").empty())
            plan.devargs += ",xdp_prog=" + roce_redirect_program();
        return plan;
    }
    const uint32_t mtu =
        plan.kernel_mtu ? std::min(configured_mtu, plan.kernel_mtu) : configured_mtu;
    uint32_t frame = 2048;
    while (frame < kAfPacketFrameOverhead + std::min(mtu, kLargestRoceMtu))
        frame *= 2;
    if (const std::string given = devargs_value(devargs, "framesz"); !given.empty()) {
        char* end = nullptr;
        const unsigned long bytes = std::strtoul(given.c_str(), &end, 10);
        if (*end != '\0' || bytes < 2048 || bytes > (1u << 20))
            throw std::runtime_error("af_packet port: framesz=" + given +
                                     " is not a number of bytes from 2048 to 1 MiB");
        frame = static_cast<uint32_t>(bytes);
    } else {
        plan.devargs += ",framesz=" + std::to_string(frame);
    }
    plan.ring_frame = frame;
    if (devargs_value(devargs, "blocksz").empty())
        plan.devargs +=
            ",blocksz=" +
            std::to_string(std::max<uint32_t>(frame, static_cast<uint32_t>(sysconf(_SC_PAGESIZE))));
    if (devargs_value(devargs, "framecnt").empty())
        plan.devargs += ",framecnt=" + std::to_string(frame > 4096 ? 2048 : 4096);
    if (devargs_value(devargs, "qdisc_bypass").empty())
        plan.devargs += ",qdisc_bypass=1";
    return plan;
}

// A port DPDK made from devargs (--port, or add_port): its addresses as configured, its
// MAC as the PMD reports it.
PortInfo named_port(uint16_t id, const PortConfig& port) {
    PortInfo info;
    info.dpdk_port = id;
    info.devargs = port.devargs;
    info.ipv4 = port.ipv4;
    info.ipv6 = port.ipv6;
    info.netdev = port.netdev;
    rte_ether_addr mac{};
    rte_eth_macaddr_get(id, &mac);
    for (int b = 0; b < 6; ++b)
        info.mac[static_cast<size_t>(b)] = mac.addr_bytes[b];
    return info;
}

} // namespace

struct DpdkPortSet::Dpdk {
    std::vector<rte_mempool*> pools;
    std::vector<rte_ring*> rings;
    struct TxQueue {
        rte_mbuf* burst[kBurst];
        uint16_t count = 0;
        rte_mbuf* held = nullptr;          // a frame the fault injector sends late
        CongestionPoint<rte_mbuf*> link;   // the shaped link, when configured
        transport::PfcPauses pauses;       // what the peer paused (--pfc)
        transport::PfcRequester requester; // what we ask the peer to pause
        rte_mbuf* pfc_frame = nullptr;     // the buffer of the next PFC frame we send
    };
    std::vector<TxQueue> tx;
    bool eal_up = false;
    PortsConfig config;                  // what every port is made with
    unsigned links_added = 0;            // ports added at run time (add_port)
    std::vector<std::string> vdev_names; // by port: the vdev add_port made, else empty
};

DpdkPortSet::DpdkPortSet(const PortsConfig& config) : dpdk_(std::make_unique<Dpdk>()) {
    dpdk_->config = config;
    dpdk_->tx.reserve(kMaxPorts);
    dpdk_->pools.reserve(kMaxPorts);
    const std::string file_prefix = "softhca-" + config.prefix + "-" + std::to_string(getpid());
    const std::string memory = std::to_string(config.memory_mb);
    // No hugepages, no shared config, no PCI scan (--in-memory cannot be combined with
    // --no-huge, so each engine gets its own --file-prefix instead).
    std::vector<std::string> args = {
        "softhca-engine", "--no-huge",     "-m",        memory,        "--no-shconf", "--no-pci",
        "--no-telemetry", "--file-prefix", file_prefix, "--log-level", "*:warning"};
    // DPDK's drivers that are plugins (the mempool ops, most PMDs) come from where DPDK
    // was installed; a folder carried to a host without DPDK (tools/gpu-bundle.sh) names
    // its own with SOFTHCA_DPDK_PLUGINS.
    if (const char* plugins = std::getenv("SOFTHCA_DPDK_PLUGINS"); plugins && *plugins) {
        args.push_back("-d");
        args.push_back(plugins);
    }
    std::vector<PortPlan> plans; // one per --port, in order
    for (const auto& port : config.ports) {
        plans.push_back(plan_port(port, config.eth_mtu));
        if (is_pci_devargs(port.devargs)) {
            // A real NIC: let the EAL scan just that PCI device.
            std::erase(args, std::string("--no-pci"));
            args.push_back("-a");
        } else {
            args.push_back("--vdev");
        }
        args.push_back(plans.back().devargs);
    }
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0)
        throw std::runtime_error(std::string("DPDK EAL init failed: ") + rte_strerror(rte_errno));
    dpdk_->eal_up = true;

    const uint32_t tag = static_cast<uint32_t>(getpid()) & 0xffff;
    std::vector<PortInfo> wanted;
    if (config.ports.empty()) {
        // The built-in wire: port 0 transmits into ring a->b, which port 1 receives.
        const std::string base = "shw" + std::to_string(getpid());
        rte_ring* ab = rte_ring_create((base + "ab").c_str(), 4096, SOCKET_ID_ANY,
                                       RING_F_SP_ENQ | RING_F_SC_DEQ);
        rte_ring* ba = rte_ring_create((base + "ba").c_str(), 4096, SOCKET_ID_ANY,
                                       RING_F_SP_ENQ | RING_F_SC_DEQ);
        if (!ab || !ba)
            throw std::runtime_error("cannot create the built-in wire rings");
        dpdk_->rings = {ab, ba};
        int p0 = rte_eth_from_rings((base + "p0").c_str(), &ba, 1, &ab, 1, SOCKET_ID_ANY);
        int p1 = rte_eth_from_rings((base + "p1").c_str(), &ab, 1, &ba, 1, SOCKET_ID_ANY);
        if (p0 < 0 || p1 < 0)
            throw std::runtime_error("cannot create the built-in wire ports");
        for (int i = 0; i < 2; ++i) {
            PortInfo info;
            info.dpdk_port = static_cast<uint16_t>(i == 0 ? p0 : p1);
            info.ipv4 = (198u << 24) | (18u << 16) | static_cast<uint32_t>(i + 1);
            info.mac = builtin_mac(tag, static_cast<size_t>(i));
            wanted.push_back(info);
        }
    } else {
        for (const auto& port : config.ports) {
            std::string name = port.devargs.substr(0, port.devargs.find(','));
            uint16_t id = 0;
            if (rte_eth_dev_get_port_by_name(name.c_str(), &id) != 0)
                throw std::runtime_error("DPDK has no port named '" + name + "' (devargs '" +
                                         port.devargs + "')");
            wanted.push_back(named_port(id, port));
        }
    }

    for (size_t i = 0; i < wanted.size(); ++i) {
        const PortPlan plan = i < plans.size() ? plans[i] : PortPlan{};
        bring_up(wanted[i], plan.kernel_mtu, plan.ring_frame);
    }
}

void DpdkPortSet::bring_up(PortInfo& info, uint32_t kernel_mtu, uint32_t ring_frame) {
    const PortsConfig& config = dpdk_->config;
    const size_t index = ports_.size();
    const uint16_t id = info.dpdk_port;
    rte_eth_dev_info dev_info{};
    if (rte_eth_dev_info_get(id, &dev_info) != 0)
        throw std::runtime_error("cannot query DPDK port " + std::to_string(id));
    info.pmd = dev_info.driver_name ? dev_info.driver_name : "?";
    info.max_eth_mtu = dev_info.max_mtu;
    info.eth_mtu = std::min<uint32_t>(config.eth_mtu, dev_info.max_mtu);
    if (kernel_mtu) {
        // The interface's MTU is the link's: the port follows it and never changes it.
        info.max_eth_mtu = std::min(info.max_eth_mtu, kernel_mtu);
        info.eth_mtu = std::min(info.eth_mtu, kernel_mtu);
    }
    if (info.devargs.starts_with("net_af_xdp")) {
        // The kernel keeps the interface's ARP and ND (the XDP program passes them).
        info.kernel_neighbors = true;
        info.kernel_ifindex = static_cast<int>(dev_info.if_index);
    }
    // Never more than af_packet's ring frames hold (devargs may have made them small).
    if (ring_frame && ring_frame - kAfPacketFrameOverhead < kLargestRoceMtu)
        info.eth_mtu = std::min(info.eth_mtu, ring_frame - kAfPacketFrameOverhead);
    info.gids = build_gid_table(info.ipv4, info.ipv6, info.mac);

    // An mbuf holds the largest frame of the MTU, and never less than the default data
    // room: PMDs size their own receive buffers from it (af_packet needs 2016 bytes for
    // its default 2048-byte ring frames, whatever the MTU).
    const uint32_t frame =
        std::max<uint32_t>({info.eth_mtu + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN,
                            RTE_MBUF_DEFAULT_DATAROOM, dev_info.min_rx_bufsize, ring_frame});
    const std::string pool_name = "shp" + std::to_string(getpid()) + "_" + std::to_string(id);
    rte_mempool* pool = rte_pktmbuf_pool_create(
        pool_name.c_str(), kPoolMbufs, 256, 0,
        static_cast<uint16_t>(std::min<uint32_t>(frame + RTE_PKTMBUF_HEADROOM, 65535)),
        static_cast<int>(rte_socket_id()));
    if (!pool)
        throw std::runtime_error("cannot create the packet pool for port " + std::to_string(id) +
                                 ": " + rte_strerror(rte_errno));
    // Kept with the port from here on, so that a port that fails to come up is freed
    // whole (add_port).
    dpdk_->pools.push_back(pool);

    rte_eth_conf conf{};
    if (rte_eth_dev_configure(id, 1, 1, &conf) != 0 ||
        rte_eth_rx_queue_setup(id, 0, kRxDescriptors, rte_eth_dev_socket_id(id), nullptr, pool) !=
            0 ||
        rte_eth_tx_queue_setup(id, 0, kTxDescriptors, rte_eth_dev_socket_id(id), nullptr) != 0) {
        std::string why = "cannot configure DPDK port " + std::to_string(id);
        if (info.devargs.starts_with("net_af_xdp") && kernel_mtu > dev_info.max_mtu)
            why += " (af_xdp: XDP takes frames of up to a page, so the interface's MTU must "
                   "be at most " +
                   std::to_string(dev_info.max_mtu) + "; it is " + std::to_string(kernel_mtu) + ")";
        throw std::runtime_error(why);
    }
    if (info.devargs.empty()) {
        rte_ether_addr mac{};
        for (int b = 0; b < 6; ++b)
            mac.addr_bytes[b] = info.mac[static_cast<size_t>(b)];
        rte_eth_dev_default_mac_addr_set(id, &mac);
    } else if (!on_kernel_interface(info.devargs)) {
        // Best effort: a PMD may refuse an MTU change.
        rte_eth_dev_set_mtu(id, static_cast<uint16_t>(info.eth_mtu));
        uint16_t mtu = 0;
        if (rte_eth_dev_get_mtu(id, &mtu) == 0 && mtu)
            info.eth_mtu = mtu;
    }
    if (rte_eth_dev_start(id) != 0)
        throw std::runtime_error("cannot start DPDK port " + std::to_string(id));
    rte_eth_link link{};
    rte_eth_link_get_nowait(id, &link);
    info.link_up = link.link_status == RTE_ETH_LINK_UP;
    info.link_speed_mbps = link.link_speed;
    info.faults = FaultInjector(config.faults, index);
    info.congestion_point = config.congestion_point;
    info.sl_to_vl = config.sl_to_vl_for(index);
    info.global_traffic_class = config.traffic_class;
    info.priority_tag = config.priority_tag;
    info.pfc = config.pfc;
    info.pfc_priorities = config.pfc_priorities;
    info.capture = config.capture_for(index);
    // The built-in wire's rings are this engine's own: ICRC offload unless a capture
    // or the fault injector sees the frames, or SOFTHCA_WIRE_ICRC=1 asks for it.
    const char* wire_icrc = std::getenv("SOFTHCA_WIRE_ICRC");
    info.in_engine_wire = info.devargs.empty();
    info.icrc_offload = info.in_engine_wire && !info.capture && !info.faults.enabled() &&
                        !(wire_icrc && std::string(wire_icrc) == "1");
    Dpdk::TxQueue& queue = dpdk_->tx.emplace_back();
    queue.pauses = transport::PfcPauses(config.pfc_priorities);
    queue.requester = transport::PfcRequester(config.pfc_priorities);
    if (config.congestion_point.shaper.enabled()) {
        CongestionPointConfig point = config.congestion_point;
        point.arbitration = config.arbitration_for(index); // the port's own, if it has them
        info.congestion_point = point;
        queue.link = CongestionPoint<rte_mbuf*>(point, config.faults.seed * 31 + index);
    }
    ports_.push_back(info);
}

long DpdkPortSet::add_port(const PortConfig& port, std::string& why) {
    if (ports_.size() >= kMaxPorts) {
        why = "the engine has " + std::to_string(kMaxPorts) + " ports";
        return -ENOSPC;
    }
    // An af_packet port on the interface, with a vdev name of its own.
    const std::string name = "net_af_packet_link" + std::to_string(++dpdk_->links_added);
    PortPlan plan;
    try {
        plan =
            plan_port({name + ",iface=" + port.netdev, 0, {}, port.netdev}, dpdk_->config.eth_mtu);
    } catch (const std::exception& e) {
        why = e.what();
        return -EINVAL;
    }
    const std::string args = plan.devargs.substr(plan.devargs.find(',') + 1);
    if (const int rc = rte_vdev_init(name.c_str(), args.c_str()); rc != 0) {
        why = "DPDK could not make an af_packet port on " + port.netdev + ": " + rte_strerror(-rc);
        return rc < 0 ? rc : -EIO;
    }
    uint16_t id = 0;
    if (rte_eth_dev_get_port_by_name(name.c_str(), &id) != 0) {
        rte_vdev_uninit(name.c_str());
        why = "DPDK made no port named " + name;
        return -EIO;
    }
    PortInfo info = named_port(id, port);
    info.devargs = plan.devargs;
    const size_t pools = dpdk_->pools.size();
    try {
        bring_up(info, plan.kernel_mtu, plan.ring_frame);
    } catch (const std::exception& e) {
        why = e.what();
        rte_eth_dev_stop(id);
        rte_eth_dev_close(id);
        rte_vdev_uninit(name.c_str());
        if (dpdk_->pools.size() > pools) {
            rte_mempool_free(dpdk_->pools.back());
            dpdk_->pools.pop_back();
        }
        return -EIO;
    }
    dpdk_->vdev_names.resize(ports_.size());
    dpdk_->vdev_names.back() = name;
    return static_cast<long>(ports_.size() - 1);
}

void DpdkPortSet::remove_port(size_t index) {
    flush_port(index);
    auto& queue = dpdk_->tx[index];
    if (queue.held)
        rte_pktmbuf_free(std::exchange(queue.held, nullptr));
    if (queue.pfc_frame)
        rte_pktmbuf_free(std::exchange(queue.pfc_frame, nullptr));
    CongestionPointCounters ignored;
    queue.link.release(UINT64_MAX, ignored, [](rte_mbuf* m) { rte_pktmbuf_free(m); });
    for (uint16_t k = 0; k < queue.count; ++k)
        rte_pktmbuf_free(queue.burst[k]);
    queue.count = 0;
    const uint16_t id = ports_[index].dpdk_port;
    rte_eth_dev_stop(id);
    rte_eth_dev_close(id);
    if (index < dpdk_->vdev_names.size() && !dpdk_->vdev_names[index].empty())
        rte_vdev_uninit(dpdk_->vdev_names[index].c_str());
    // Every frame of the port's pool is back: its receive queue is closed, and the data
    // path gives back what it received within the round it took it.
    rte_mempool_free(std::exchange(dpdk_->pools[index], nullptr));
    mark_removed(index);
}

DpdkPortSet::~DpdkPortSet() {
    for (auto& queue : dpdk_->tx) {
        if (queue.held)
            rte_pktmbuf_free(queue.held);
        if (queue.pfc_frame)
            rte_pktmbuf_free(queue.pfc_frame);
        CongestionPointCounters ignored;
        queue.link.release(UINT64_MAX, ignored, [](rte_mbuf* m) { rte_pktmbuf_free(m); });
    }
    flush();
    for (const auto& info : ports_) {
        if (info.removed)
            continue;
        rte_eth_dev_stop(info.dpdk_port);
        rte_eth_dev_close(info.dpdk_port);
    }
    if (dpdk_->eal_up)
        rte_eal_cleanup();
}

std::vector<size_t> DpdkPortSet::refresh_links() {
    std::vector<size_t> changed;
    for (size_t i = 0; i < ports_.size(); ++i) {
        rte_eth_link link{};
        if (ports_[i].removed || rte_eth_link_get_nowait(ports_[i].dpdk_port, &link) != 0)
            continue;
        const bool up = link.link_status == RTE_ETH_LINK_UP && ports_[i].admin_up;
        if (up != ports_[i].link_up) {
            ports_[i].link_up = up;
            changed.push_back(i);
        }
        if (up)
            ports_[i].link_speed_mbps = link.link_speed;
    }
    return changed;
}

bool DpdkPortSet::set_admin_state(size_t index, bool up) {
    PortInfo& port = ports_[index];
    port.admin_up = up;
    if (up)
        rte_eth_dev_set_link_up(port.dpdk_port);
    else
        rte_eth_dev_set_link_down(port.dpdk_port);
    rte_eth_link link{};
    rte_eth_link_get_nowait(port.dpdk_port, &link);
    const bool link_up = up && link.link_status == RTE_ETH_LINK_UP;
    const bool changed = link_up != port.link_up;
    port.link_up = link_up;
    return changed;
}

size_t DpdkPortSet::receive(size_t index, RxFrame* frames, size_t max) {
    PortInfo& info = ports_[index];
    if (info.removed)
        return 0;
    rte_mbuf* burst[kBurst];
    const uint16_t n = rte_eth_rx_burst(info.dpdk_port, 0, burst,
                                        static_cast<uint16_t>(std::min<size_t>(max, kBurst)));
    size_t kept = 0;
    CongestionPoint<rte_mbuf*>& link = dpdk_->tx[index].link;
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = burst[i];
        info.counters.rx_bytes += rte_pktmbuf_pkt_len(m);
        const auto* data = rte_pktmbuf_mtod(m, const uint8_t*);
        if (info.pfc && transport::is_mac_control_frame(data, rte_pktmbuf_data_len(m))) {
            // The link's own (802.1Qbb): the peer pauses or resumes priorities.
            transport::PfcFrame pfc;
            if (transport::parse_pfc_frame(data, rte_pktmbuf_data_len(m), pfc)) {
                ++info.counters.rx_pfc_frames;
                const uint64_t now = monotonic_ns();
                dpdk_->tx[index].pauses.on_frame(pfc, now, info.line_rate_bps());
                info.pfc_paused_by_peer = dpdk_->tx[index].pauses.paused_mask(now);
            } else {
                ++info.counters.rx_unhandled; // another MAC control frame (802.3x PAUSE)
            }
            rte_pktmbuf_free(m);
            continue;
        }
        if (link.lossless() && transport::is_flow_control_frame(data, rte_pktmbuf_data_len(m))) {
            // The link's own: the peer's credits for our sender, its total for our receiver.
            transport::FlowControlPacket packets[transport::kCreditDataVls];
            const int count =
                transport::parse_flow_control_frame(data, rte_pktmbuf_data_len(m), packets);
            link.on_flow_control(monotonic_ns(), packets, count, info.congestion_point_counters);
            rte_pktmbuf_free(m);
            continue;
        }
        if (m->nb_segs != 1) {
            // Frames larger than one buffer are never RoCE of our MTU: drop them.
            ++info.counters.rx_malformed;
            rte_pktmbuf_free(m);
            continue;
        }
        frames[kept++] = {data, rte_pktmbuf_data_len(m), m};
    }
    info.counters.rx_packets += n;
    return kept;
}

void DpdkPortSet::release(void* handle) {
    rte_pktmbuf_free(static_cast<rte_mbuf*>(handle));
}

bool DpdkPortSet::tx_alloc(size_t index, TxFrame& frame) {
    rte_mempool* pool = dpdk_->pools[index];
    rte_mbuf* m = pool ? rte_pktmbuf_alloc(pool) : nullptr; // none: the port was removed
    if (!m)
        return false;
    frame.data = rte_pktmbuf_mtod(m, uint8_t*);
    frame.capacity = rte_pktmbuf_tailroom(m);
    frame.handle = m;
    return true;
}

void DpdkPortSet::tx_abort(TxFrame& frame) {
    rte_pktmbuf_free(static_cast<rte_mbuf*>(frame.handle));
    frame.handle = nullptr;
}

void DpdkPortSet::capture(size_t index, const rte_mbuf* m) {
    PcapWriter* capture = ports_[index].capture.get();
    if (!capture)
        return;
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    capture->write(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_pkt_len(m),
                   static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull +
                       static_cast<uint64_t>(ts.tv_nsec));
}

void DpdkPortSet::tx_queue(size_t index, TxFrame& frame, uint32_t length) {
    auto* m = static_cast<rte_mbuf*>(frame.handle);
    if (ports_[index].removed) { // no frame is allocated for one (tx_alloc): never so
        tx_abort(frame);
        return;
    }
    frame.handle = nullptr;
    const uint8_t vl = frame.vl;
    m->data_len = static_cast<uint16_t>(length);
    m->pkt_len = length;
    auto& queue = dpdk_->tx[index];
    auto enqueue = [&](rte_mbuf* mbuf) {
        ports_[index].counters.tx_bytes += rte_pktmbuf_pkt_len(mbuf);
        if (queue.link.enabled()) {
            // Into the shaped link's queue (marked there when congested); flush() sends
            // it when it has crossed the link.
            if (!queue.link.enqueue(mbuf, rte_pktmbuf_mtod(mbuf, uint8_t*),
                                    rte_pktmbuf_pkt_len(mbuf), monotonic_ns(), vl,
                                    ports_[index].congestion_point_counters))
                rte_pktmbuf_free(mbuf);
            return;
        }
        queue.burst[queue.count++] = mbuf;
        if (queue.count == kBurst)
            flush_port(index);
    };
    // The capture sees what the port sends: here, or with a shaped link where the frame
    // has crossed it (ECN marks and all; the fault injector's drops never get there).
    if (!queue.link.enabled())
        capture(index, m);
    FaultInjector& faults = ports_[index].faults;
    if (!faults.enabled()) {
        enqueue(m);
        return;
    }
    // Past the Ethernet, IP and UDP headers, so damage is the ICRC's to find.
    const FaultDecision d = faults.decide(length, 14 + 20 + 8);
    if (d.drop) {
        rte_pktmbuf_free(m);
        return;
    }
    if (d.corrupt_at >= 0)
        rte_pktmbuf_mtod(m, uint8_t*)[d.corrupt_at] ^= 0x5a;
    if (d.duplicate) {
        if (rte_mbuf* copy = rte_pktmbuf_alloc(dpdk_->pools[index])) {
            std::memcpy(rte_pktmbuf_append(copy, static_cast<uint16_t>(length)),
                        rte_pktmbuf_mtod(m, const uint8_t*), length);
            enqueue(copy);
        }
    }
    if (d.hold && !queue.held) {
        queue.held = m; // goes out after the next frame
        return;
    }
    enqueue(m);
    if (queue.held) {
        enqueue(queue.held);
        queue.held = nullptr;
    }
}

template <typename SendBurst> void DpdkPortSet::send_flow_control(size_t i, SendBurst& send_burst) {
    // After the frames just delivered, on the same in-order link: the total it carries
    // counts exactly those (link_flow_control.hpp).
    auto& queue = dpdk_->tx[i];
    uint8_t frame[transport::kLinkFlowControlFrameBytes];
    const size_t length = queue.link.flow_control_frame(monotonic_ns(), ports_[i].mac, frame,
                                                        ports_[i].congestion_point_counters);
    if (!length)
        return;
    rte_mbuf* m = rte_pktmbuf_alloc(dpdk_->pools[i]);
    if (!m)
        return; // sent again when a VL waits for credits (the refresh)
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(length)), frame, length);
    ports_[i].counters.tx_bytes += length;
    capture(i, m);
    queue.burst[queue.count++] = m;
    if (queue.count == kBurst)
        send_burst(i);
}

size_t DpdkPortSet::flush() {
    size_t sent = 0;
    for (size_t i = 0; i < ports_.size(); ++i)
        sent += flush_port(i);
    return sent;
}

size_t DpdkPortSet::flush_port(size_t i) {
    if (ports_[i].removed)
        return 0;
    size_t sent = 0;
    auto& queue = dpdk_->tx[i];
    auto send_burst = [&](size_t port) {
        const uint16_t n = rte_eth_tx_burst(ports_[port].dpdk_port, 0, queue.burst, queue.count);
        for (uint16_t k = n; k < queue.count; ++k)
            rte_pktmbuf_free(queue.burst[k]); // the wire is full: a drop, as on a NIC
        ports_[port].counters.tx_packets += n;
        ports_[port].counters.tx_dropped += queue.count - n;
        sent += n;
        queue.count = 0;
    };
    if (queue.link.held())
        queue.link.release(monotonic_ns(), ports_[i].congestion_point_counters, [&](rte_mbuf* m) {
            capture(i, m);
            queue.burst[queue.count++] = m;
            if (queue.count == kBurst)
                send_burst(i);
        });
    if (queue.link.lossless())
        send_flow_control(i, send_burst);
    if (queue.count)
        send_burst(i);
    return sent;
}

bool DpdkPortSet::tx_room(size_t index, uint8_t vl, uint32_t bytes) {
    return dpdk_->tx[index].link.room(monotonic_ns(), vl, bytes); // asked of lossless ports
}

bool DpdkPortSet::tx_paused(size_t index, uint8_t priority, uint64_t now) {
    PortInfo& info = ports_[index];
    info.pfc_paused_by_peer = dpdk_->tx[index].pauses.paused_mask(now);
    return (info.pfc_paused_by_peer >> (priority & 7)) & 1;
}

void DpdkPortSet::after_receive_round(size_t index, bool backlogged, uint8_t priorities,
                                      uint64_t now) {
    PortInfo& info = ports_[index];
    if (info.removed)
        return;
    auto& queue = dpdk_->tx[index];
    // The frame's buffer first: the requester's state moves on only when there is a
    // buffer for its frame (an XON lost to an empty pool would leave the peer paused; one
    // the transmit queue refuses below is still lost, counted in tx_dropped).
    if (!queue.pfc_frame && !(queue.pfc_frame = rte_pktmbuf_alloc(dpdk_->pools[index])))
        return; // decided next round
    transport::PfcFrame pfc;
    if (!queue.requester.after_round(backlogged, priorities, now, info.line_rate_bps(), pfc))
        return;
    info.pfc_asked_peer = queue.requester.paused();
    rte_mbuf* m = std::exchange(queue.pfc_frame, nullptr);
    transport::write_pfc_frame(
        reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, transport::kPfcFrameBytes)), info.mac,
        pfc);
    capture(index, m);
    // Ahead of the data waiting in the burst: a pause is worth most when it is early.
    if (rte_eth_tx_burst(info.dpdk_port, 0, &m, 1) == 1) {
        ++info.counters.tx_pfc_frames;
        ++info.counters.tx_packets;
        info.counters.tx_bytes += transport::kPfcFrameBytes;
    } else {
        rte_pktmbuf_free(m);
        ++info.counters.tx_dropped;
    }
}

bool DpdkPortSet::awaiting_credits(uint64_t now) const {
    for (size_t i = 0; i < ports_.size(); ++i)
        if (awaiting_credits_on(i, now))
            return true;
    return false;
}

bool DpdkPortSet::awaiting_credits_on(size_t index, uint64_t now) const {
    return dpdk_->tx[index].link.awaiting_credits(now);
}

uint64_t DpdkPortSet::next_tx_release() const {
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < ports_.size(); ++i)
        next = std::min(next, next_tx_release_on(i));
    return next;
}

uint64_t DpdkPortSet::next_tx_release_on(size_t index) const {
    const auto& queue = dpdk_->tx[index];
    // The shaped link's next frame, or a paused priority that resumes.
    return std::min(queue.link.next_release(), queue.pauses.next_resume(monotonic_ns()));
}

} // namespace softhca::engine
