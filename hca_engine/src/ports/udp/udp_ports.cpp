#include "udp_ports.hpp"

#include "udp_port_uring.hpp"

#include "environment.hpp"
#include "gid_table.hpp"
#include "kernel_interface.hpp"
#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <arpa/inet.h>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <ifaddrs.h>
#include <liburing.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <netpacket/packet.h>
#include <stdexcept>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>

namespace softhca::engine {

namespace tp = transport;
using namespace udp_port;

namespace {

[[noreturn]] void fail(const std::string& what, int error) {
    throw std::runtime_error(what + ": " + std::strerror(error));
}

// The kernel interface that holds an address: its name, MAC, MTU and index.
struct Interface {
    std::string name;
    tp::MacAddress mac{};
    uint32_t mtu = 1500;
};

bool same_address(const sockaddr* a, const tp::Gid& gid) {
    if (a->sa_family == AF_INET)
        return tp::gid_is_ipv4_mapped(gid) &&
               std::memcmp(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr, gid.data() + 12,
                           4) == 0;
    if (a->sa_family == AF_INET6)
        return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, gid.data(), 16) ==
               0;
    return false;
}

Interface interface_of(const tp::Gid& address) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0)
        fail("getifaddrs", errno);
    Interface found;
    for (ifaddrs* i = list; i; i = i->ifa_next)
        if (i->ifa_addr && same_address(i->ifa_addr, address))
            found.name = i->ifa_name;
    // An IPv4 address inside a local subnet (127.0.0.2 on lo's 127.0.0.0/8) is local too.
    for (ifaddrs* i = list; i && found.name.empty(); i = i->ifa_next)
        if (i->ifa_addr && i->ifa_netmask && i->ifa_addr->sa_family == AF_INET &&
            tp::gid_is_ipv4_mapped(address) && (i->ifa_flags & IFF_LOOPBACK)) {
            const uint32_t own =
                ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
            const uint32_t mask =
                ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
            if (((own ^ tp::load_be32(address.data() + 12)) & mask) == 0)
                found.name = i->ifa_name;
        }
    for (ifaddrs* i = list; i && !found.name.empty(); i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_PACKET && found.name == i->ifa_name) {
            const auto* link = reinterpret_cast<const sockaddr_ll*>(i->ifa_addr);
            if (link->sll_halen == 6)
                std::memcpy(found.mac.data(), link->sll_addr, 6);
        }
    freeifaddrs(list);
    if (found.name.empty()) {
        char text[INET6_ADDRSTRLEN] = "?";
        if (tp::gid_is_ipv4_mapped(address))
            inet_ntop(AF_INET, address.data() + 12, text, sizeof(text));
        else
            inet_ntop(AF_INET6, address.data(), text, sizeof(text));
        throw std::runtime_error(
            std::string("udp port: no interface of this network namespace has ") + text);
    }
    if (const uint32_t mtu = kernel_interface_mtu(found.name))
        found.mtu = mtu;
    if (found.mac == tp::MacAddress{}) {
        // The loopback interface has no MAC: a locally administered one from the address,
        // for the node GUID.
        found.mac = {0x02, 0x55, 0x44, address[13], address[14], address[15]};
    }
    return found;
}

bool interface_running(const std::string& name, int ioctl_fd) {
    ifreq request{};
    std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
    if (ioctl(ioctl_fd, SIOCGIFFLAGS, &request) != 0)
        return false;
    return (request.ifr_flags & IFF_UP) && (request.ifr_flags & IFF_RUNNING);
}

void set_option(int fd, int level, int name, int value, const char* what) {
    if (setsockopt(fd, level, name, &value, sizeof(value)) != 0)
        fail(std::string("udp port: ") + what, errno);
}

} // namespace

UdpPortSet::UdpPortSet(const PortsConfig& config) : uring_(std::make_unique<Uring>()) {
    Uring& u = *uring_;
    u.ioctl_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (u.ioctl_fd < 0)
        fail("udp port: socket", errno);
    io_uring_params params{};
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
    params.cq_entries = kCqEntries;
    if (int rc = io_uring_queue_init_params(kSqEntries, &u.ring, &params); rc < 0)
        fail("udp port: io_uring_queue_init (is io_uring allowed here?)", -rc);
    u.ring_up = true;
    u.eventfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (u.eventfd < 0 || io_uring_register_eventfd(&u.ring, u.eventfd) != 0)
        fail("udp port: io_uring eventfd", errno);

    // The provided buffers every socket's receives take from.
    u.rx_memory = std::make_unique_for_overwrite<uint8_t[]>(size_t{kRxBuffers} * kRxBufferBytes);
    u.copy_memory = std::make_unique_for_overwrite<uint8_t[]>(size_t{kRxCopies} * kFrameBytes);
    for (uint32_t i = kRxCopies; i-- > 0;)
        u.copies_free.push_back(i);
    u.buffers_bytes = kRxBuffers * sizeof(io_uring_buf);
    void* ring_memory =
        mmap(nullptr, u.buffers_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (ring_memory == MAP_FAILED)
        fail("udp port: buffer ring", errno);
    u.buffers = static_cast<io_uring_buf_ring*>(ring_memory);
    io_uring_buf_ring_init(u.buffers);
    io_uring_buf_reg registration{};
    registration.ring_addr = reinterpret_cast<uint64_t>(ring_memory);
    registration.ring_entries = kRxBuffers;
    registration.bgid = kBufferGroup;
    if (int rc = io_uring_register_buf_ring(&u.ring, &registration, 0); rc < 0)
        fail("udp port: io_uring_register_buf_ring", -rc);
    for (unsigned id = 0; id < kRxBuffers; ++id)
        io_uring_buf_ring_add(u.buffers, u.rx_buffer(id), kRxBufferBytes, static_cast<uint16_t>(id),
                              io_uring_buf_ring_mask(kRxBuffers), static_cast<int>(id));
    io_uring_buf_ring_advance(u.buffers, kRxBuffers);

    u.tx.resize(kTxSlots);
    for (unsigned i = kTxSlots; i-- > 0;)
        u.tx_free.push_back(i);
    u.runs.resize(kTxSlots); // a run holds one slot at least
    for (uint32_t i = kTxSlots; i-- > 0;)
        u.runs_free.push_back(i);
    u.config = config;
    u.pending.reserve(kMaxPorts);
    for (const PortConfig& port : config.ports)
        open_port(port);
    for (size_t i = 0; i < u.sockets.size(); ++i)
        u.arm(i);
    io_uring_submit(&u.ring);
    u.queued = 0;
}

void UdpPortSet::open_port(const PortConfig& port) {
    Uring& u = *uring_;
    const PortsConfig& config = u.config;
    static const bool gso = environment_switch_on("SOFTHCA_UDP_GSO");
    static const bool gro = environment_switch_on("SOFTHCA_UDP_GRO");
    const size_t index = ports_.size();
    PortInfo info;
    info.devargs = port.devargs;
    info.pmd = "kernel udp (io_uring)";
    info.kernel_udp = true;
    info.ipv4 = port.ipv4;
    info.ipv6 = port.ipv6;
    std::vector<tp::Gid> addresses;
    if (port.ipv4)
        addresses.push_back(tp::gid_from_ipv4(port.ipv4));
    addresses.insert(addresses.end(), port.ipv6.begin(), port.ipv6.end());
    const Interface interface = interface_of(addresses.front());
    info.netdev = port.netdev.empty() ? interface.name : port.netdev;
    info.mac = interface.mac;
    info.max_eth_mtu = interface.mtu;
    info.eth_mtu = std::min<uint32_t>(config.eth_mtu, interface.mtu);
    info.link_up = interface_running(interface.name, u.ioctl_fd);
    info.global_traffic_class = config.traffic_class;
    // The kernel owns the interface's link-local address: only the port's own.
    info.gids = build_gid_table(info.ipv4, info.ipv6, info.mac, false);
    info.faults = FaultInjector(config.faults, index);
    info.capture = config.capture_for(index);
    // The port's sockets, closed again if one of them cannot be made.
    std::vector<UdpSocket> made;
    struct CloseUnlessKept {
        std::vector<UdpSocket>& sockets;
        ~CloseUnlessKept() {
            for (const UdpSocket& s : sockets)
                ::close(s.fd);
        }
    } guard{made};
    std::array<int, 2> of_port{-1, -1};
    for (const tp::Gid& address : addresses) {
        UdpSocket s;
        s.port = index;
        s.address = address;
        s.ipv6 = !tp::gid_is_ipv4_mapped(address);
        s.fd = socket(s.ipv6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s.fd < 0)
            fail("udp port: socket", errno);
        made.push_back(s); // closed with the others on a failure below
        sockaddr_storage bound{};
        socklen_t bound_length = 0;
        if (s.ipv6) {
            auto* a = reinterpret_cast<sockaddr_in6*>(&bound);
            a->sin6_family = AF_INET6;
            a->sin6_port = htons(tp::kRoceV2UdpPort);
            std::memcpy(&a->sin6_addr, address.data(), 16);
            bound_length = sizeof(*a);
            set_option(s.fd, IPPROTO_IPV6, IPV6_V6ONLY, 1, "IPV6_V6ONLY");
            set_option(s.fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1, "IPV6_RECVHOPLIMIT");
            set_option(s.fd, IPPROTO_IPV6, IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS");
            set_option(s.fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO,
                       "IPV6_MTU_DISCOVER");
            // Linux rxe sends RoCEv2 over IPv6 with a zero UDP checksum (the ICRC
            // covers the packet); a plain socket would drop those.
            set_option(s.fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX");
        } else {
            auto* a = reinterpret_cast<sockaddr_in*>(&bound);
            a->sin_family = AF_INET;
            a->sin_port = htons(tp::kRoceV2UdpPort);
            std::memcpy(&a->sin_addr, address.data() + 12, 4);
            bound_length = sizeof(*a);
            set_option(s.fd, IPPROTO_IP, IP_RECVTTL, 1, "IP_RECVTTL");
            set_option(s.fd, IPPROTO_IP, IP_RECVTOS, 1, "IP_RECVTOS");
            // DF, and (unconnected) identification 0: what the ICRC was computed with.
            set_option(s.fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO, "IP_MTU_DISCOVER");
        }
        // GSO: the option is there (Linux 4.18); a send the kernel still refuses
        // turns it off for the socket (udp_port_io.cpp). GRO: runs arrive coalesced.
        int none = 0;
        s.gso = gso && setsockopt(s.fd, IPPROTO_UDP, UDP_SEGMENT, &none, sizeof(none)) == 0;
        int on = 1;
        if (gro)
            setsockopt(s.fd, IPPROTO_UDP, UDP_GRO, &on, sizeof(on));
        const int buffer_bytes = 8 << 20;
        if (setsockopt(s.fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof(int)) != 0)
            setsockopt(s.fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(int));
        if (setsockopt(s.fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer_bytes, sizeof(int)) != 0)
            setsockopt(s.fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(int));
        if (bind(s.fd, reinterpret_cast<sockaddr*>(&bound), bound_length) != 0)
            fail("udp port: bind to UDP port 4791 of " + info.netdev +
                     "'s address (another RoCE stack or instance there?)",
                 errno);
        s.receive_template.msg_namelen = kNameBytes;
        s.receive_template.msg_controllen = kControlBytes;
        of_port[s.ipv6 ? 1 : 0] = static_cast<int>(u.sockets.size() + made.size() - 1);
        made.back() = s;
    }
    u.socket_of_port.push_back(of_port);
    u.sockets.insert(u.sockets.end(), made.begin(), made.end());
    made.clear(); // kept
    ports_.push_back(info);
    u.pending.emplace_back().reserve(kRxBuffers);
    u.open_run.push_back(-1);
    u.pending_head.push_back(0);
    u.held.push_back(-1);
}

UdpPortSet::~UdpPortSet() {
    Uring& u = *uring_;
    if (u.ring_up)
        io_uring_queue_exit(&u.ring);
    for (const UdpSocket& s : u.sockets)
        if (s.fd >= 0)
            ::close(s.fd);
    if (u.buffers)
        munmap(u.buffers, u.buffers_bytes);
    if (u.eventfd >= 0)
        ::close(u.eventfd);
    if (u.ioctl_fd >= 0)
        ::close(u.ioctl_fd);
}

std::vector<int> UdpPortSet::wakeup_fds() const {
    return {uring_->eventfd};
}

long UdpPortSet::add_port(const PortConfig& port, std::string& why) {
    if (ports_.size() >= kMaxPorts) {
        why = "the engine has " + std::to_string(kMaxPorts) + " ports";
        return -ENOSPC;
    }
    Uring& u = *uring_;
    const size_t first_socket = u.sockets.size();
    try {
        PortConfig udp = port;
        udp.devargs = "udp";
        open_port(udp);
    } catch (const std::exception& e) {
        why = e.what();
        return -EIO;
    }
    for (size_t i = first_socket; i < u.sockets.size(); ++i)
        u.arm(i);
    io_uring_submit(&u.ring);
    u.queued = 0;
    return static_cast<long>(ports_.size() - 1);
}

void UdpPortSet::remove_port(size_t index) {
    Uring& u = *uring_;
    flush(); // what the port queued leaves first
    if (u.held[index] >= 0)
        u.tx_free.push_back(static_cast<uint32_t>(std::exchange(u.held[index], -1) & 0xffffffff));
    // Every socket of the port (one per address: an interface may have several IPv6
    // ones): its receive is cancelled, and what lands for it from here on goes back (reap).
    for (size_t socket = 0; socket < u.sockets.size(); ++socket) {
        UdpSocket& s = u.sockets[socket];
        if (s.port != index || s.closed)
            continue;
        s.closed = true;
        if (io_uring_sqe* entry = u.sqe()) {
            io_uring_prep_cancel64(entry, static_cast<uint64_t>(socket), 0);
            io_uring_sqe_set_data64(entry, kCancelTag);
        }
        ::close(std::exchange(s.fd, -1)); // the ring holds the file until its requests end
    }
    io_uring_submit(&u.ring);
    u.queued = 0;
    // Datagrams that landed and were never taken: their buffers go back.
    for (size_t k = u.pending_head[index]; k < u.pending[index].size(); ++k)
        u.give_buffer(u.pending[index][k].buffer);
    u.pending[index].clear();
    u.pending_head[index] = 0;
    mark_removed(index);
}

std::vector<size_t> UdpPortSet::refresh_links() {
    std::vector<size_t> changed;
    for (size_t i = 0; i < ports_.size(); ++i) {
        if (ports_[i].removed)
            continue;
        const bool up = ports_[i].admin_up && interface_running(ports_[i].netdev, uring_->ioctl_fd);
        if (up != ports_[i].link_up) {
            ports_[i].link_up = up;
            changed.push_back(i);
        }
    }
    return changed;
}

bool UdpPortSet::set_admin_state(size_t index, bool up) {
    // The kernel's interface is not ours to take down: the port stops using it.
    PortInfo& port = ports_[index];
    port.admin_up = up;
    const bool link_up = up && interface_running(port.netdev, uring_->ioctl_fd);
    const bool changed = link_up != port.link_up;
    port.link_up = link_up;
    return changed;
}

} // namespace softhca::engine
