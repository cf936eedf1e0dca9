#include "host_namespaces.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/magic.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace softhca::engine::fabric {

namespace {

[[noreturn]] void fail(int err, const std::string& what) {
    throw std::system_error(err, std::generic_category(), what);
}

// Runs `body` on a thread of its own: a network namespace is a thread's, so the engine's
// other threads never leave theirs. What `body` throws is thrown here.
void on_own_thread(const std::function<void()>& body) {
    std::exception_ptr error;
    std::thread([&] {
        try {
            body();
        } catch (...) {
            error = std::current_exception();
        }
    }).join();
    if (error)
        std::rethrow_exception(error);
}

// Runs `body` inside the network namespace open at `fd`.
void in_namespace(int fd, const std::string& name, const std::function<void()>& body) {
    on_own_thread([&] {
        if (::setns(fd, CLONE_NEWNET) != 0)
            fail(errno, "entering the network namespace " + name);
        body();
    });
}

// One rtnetlink request, built in place: the header, the fixed part, then attributes
// (nested ones closed by end_nest).
class Request {
  public:
    Request(uint16_t type, uint16_t flags) {
        header()->nlmsg_type = type;
        header()->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | NLM_F_ACK | flags);
        length_ = NLMSG_HDRLEN;
    }
    template <typename T> T* fixed(const T& value) {
        room(NLMSG_ALIGN(sizeof(T)));
        T* at = reinterpret_cast<T*>(buffer_ + length_);
        std::memcpy(at, &value, sizeof(T));
        length_ += NLMSG_ALIGN(sizeof(T));
        return at;
    }
    void attribute(uint16_t type, const void* data, size_t size) {
        room(RTA_SPACE(size));
        auto* a = reinterpret_cast<rtattr*>(buffer_ + length_);
        a->rta_type = type;
        a->rta_len = static_cast<uint16_t>(RTA_LENGTH(size));
        if (size)
            std::memcpy(RTA_DATA(a), data, size);
        length_ += RTA_ALIGN(a->rta_len);
    }
    void attribute(uint16_t type, const std::string& text) {
        attribute(type, text.c_str(), text.size() + 1);
    }
    size_t begin_nest(uint16_t type) {
        const size_t at = length_;
        attribute(type, nullptr, 0);
        return at;
    }
    void end_nest(size_t at) {
        reinterpret_cast<rtattr*>(buffer_ + at)->rta_len = static_cast<uint16_t>(length_ - at);
    }
    nlmsghdr* finish(uint32_t seq) {
        header()->nlmsg_len = static_cast<uint32_t>(length_);
        header()->nlmsg_seq = seq;
        return header();
    }

  private:
    nlmsghdr* header() { return reinterpret_cast<nlmsghdr*>(buffer_); }
    void room(size_t bytes) const {
        if (length_ + bytes > sizeof(buffer_))
            fail(EMSGSIZE, "a netlink request");
    }
    alignas(NLMSG_ALIGNTO) uint8_t buffer_[512] = {};
    size_t length_ = 0;
};

// A route netlink socket in the calling thread's namespace; each request waits for the
// kernel's acknowledgement.
class RouteSocket {
  public:
    RouteSocket() : fd_(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)) {
        if (fd_ < 0)
            fail(errno, "netlink socket");
    }
    ~RouteSocket() { ::close(fd_); }
    RouteSocket(const RouteSocket&) = delete;
    RouteSocket& operator=(const RouteSocket&) = delete;

    void send(Request& request, const std::string& what) {
        const nlmsghdr* message = request.finish(++seq_);
        if (::send(fd_, message, message->nlmsg_len, 0) < 0)
            fail(errno, what);
        alignas(NLMSG_ALIGNTO) uint8_t reply[4096];
        for (;;) {
            ssize_t n = ::recv(fd_, reply, sizeof(reply), 0);
            if (n < 0)
                fail(errno, what);
            for (auto* h = reinterpret_cast<nlmsghdr*>(reply); NLMSG_OK(h, n);
                 h = NLMSG_NEXT(h, n)) {
                if (h->nlmsg_seq != seq_ || h->nlmsg_type != NLMSG_ERROR)
                    continue;
                const int err = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
                if (err)
                    fail(err, what);
                return;
            }
        }
    }

    // Sets an interface up, and with `master` makes it a port of that bridge.
    void set_up(const std::string& interface, int master = 0) {
        const unsigned index = ::if_nametoindex(interface.c_str());
        if (!index)
            fail(errno, "no interface " + interface);
        Request request(RTM_NEWLINK, 0);
        ifinfomsg info{};
        info.ifi_index = static_cast<int>(index);
        info.ifi_flags = IFF_UP;
        info.ifi_change = IFF_UP;
        request.fixed(info);
        if (master) {
            const uint32_t m = static_cast<uint32_t>(master);
            request.attribute(IFLA_MASTER, &m, sizeof(m));
        }
        send(request, "setting " + interface + " up");
    }

    void add_address(const std::string& interface, int family, const void* address,
                     uint8_t prefix_length) {
        const unsigned index = ::if_nametoindex(interface.c_str());
        if (!index)
            fail(errno, "no interface " + interface);
        Request request(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
        ifaddrmsg info{};
        info.ifa_family = static_cast<uint8_t>(family);
        info.ifa_prefixlen = prefix_length;
        info.ifa_index = index;
        // The namespace is ours alone: no duplicate to detect, and the address is usable at
        // once.
        info.ifa_flags = family == AF_INET6 ? IFA_F_NODAD : 0;
        request.fixed(info);
        const size_t size = family == AF_INET ? 4 : 16;
        request.attribute(IFA_LOCAL, address, size);
        request.attribute(IFA_ADDRESS, address, size);
        send(request, "adding an address to " + interface);
    }

  private:
    int fd_;
    uint32_t seq_ = 0;
};

// Makes /run/netns a shared mount point as `ip netns add` does, so that a namespace
// mounted there is seen from mount namespaces made later (ip netns exec makes one).
void prepare_netns_dir() {
    if (::mkdir(kNetnsDir, 0755) != 0 && errno != EEXIST)
        fail(errno, std::string("mkdir ") + kNetnsDir);
    if (::mount("", kNetnsDir, "none", MS_SHARED | MS_REC, nullptr) == 0)
        return;
    if (errno != EINVAL)
        fail(errno, std::string("mount --make-shared ") + kNetnsDir);
    // Not a mount point yet: bind it onto itself first.
    if (::mount(kNetnsDir, kNetnsDir, "none", MS_BIND | MS_REC, nullptr) != 0 ||
        ::mount("", kNetnsDir, "none", MS_SHARED | MS_REC, nullptr) != 0)
        fail(errno, std::string("mount --make-shared ") + kNetnsDir);
}

// A new network namespace mounted at /run/netns/<name>; returns a descriptor of it.
int make_namespace(const std::string& name,
                   const std::function<void(const std::string&)>& before_mount) {
    const std::string path = std::string(kNetnsDir) + "/" + name;
    int file = ::open(path.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
    if (file < 0 && errno == EEXIST) {
        // Another's namespace, or the empty file an engine left that died before it had
        // recorded it: only the second is taken over.
        struct statfs fs {};
        if (::statfs(path.c_str(), &fs) == 0 && fs.f_type != NSFS_MAGIC)
            file = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        else
            errno = EEXIST;
    }
    if (file < 0)
        fail(errno, "creating " + path);
    ::close(file);
    before_mount(path);
    on_own_thread([&] {
        if (::unshare(CLONE_NEWNET) != 0)
            fail(errno, "a new network namespace");
        const std::string own =
            "/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/ns/net";
        if (::mount(own.c_str(), path.c_str(), "none", MS_BIND, nullptr) != 0)
            fail(errno, "mounting the network namespace at " + path);
    });
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fail(errno, "opening " + path);
    return fd;
}

} // namespace

std::vector<HostNamespace> fabric_hosts(const Topology& topology, const std::string& prefix) {
    std::vector<HostNamespace> hosts;
    for (uint32_t endpoint = 0; endpoint < topology.endpoints.size(); ++endpoint) {
        const Node& node = topology.nodes[topology.endpoints[endpoint]];
        if (hosts.empty() || hosts.back().host != node.host)
            hosts.push_back({node.host, prefix + "-" + node.host, {}, {}});
        hosts.back().nics.push_back(endpoint);
        hosts.back().nic_nodes.push_back(node.name);
    }
    return hosts;
}

std::string management_namespace(const std::string& prefix) {
    return prefix + "-fabric";
}

void make_host_namespaces(std::vector<HostNamespace>& hosts, const std::string& management,
                          const PortSet& ports,
                          const std::function<void(const std::string&)>& before_mount) {
    prepare_netns_dir();
    std::vector<int> fds;
    struct Closer {
        std::vector<int>& fds;
        ~Closer() {
            for (int fd : fds)
                ::close(fd);
        }
    } closer{fds};
    const int switch_fd = make_namespace(management, before_mount);
    fds.push_back(switch_fd);
    for (HostNamespace& host : hosts) {
        fds.push_back(make_namespace(host.name, before_mount));
        struct stat st {};
        if (::fstat(fds.back(), &st) != 0)
            fail(errno, "stat of " + host.name);
        host.dev = st.st_dev;
        host.ino = st.st_ino;
    }

    // The management network: a bridge, and a veth pair per NIC from it into the host.
    in_namespace(switch_fd, management, [&] {
        RouteSocket rtnl;
        const std::string bridge = "mgmt";
        Request make_bridge(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
        make_bridge.fixed(ifinfomsg{});
        make_bridge.attribute(IFLA_IFNAME, bridge);
        const size_t info = make_bridge.begin_nest(IFLA_LINKINFO);
        make_bridge.attribute(IFLA_INFO_KIND, std::string("bridge"));
        make_bridge.end_nest(info);
        rtnl.send(make_bridge, "making the bridge of " + management);
        rtnl.set_up(bridge);
        const int bridge_index = static_cast<int>(::if_nametoindex(bridge.c_str()));
        for (size_t h = 0; h < hosts.size(); ++h) {
            const int host_fd = fds[h + 1];
            for (size_t nic = 0; nic < hosts[h].nics.size(); ++nic) {
                // The bridge's end is named after the endpoint (h3, h3n1).
                const std::string& end = hosts[h].nic_nodes[nic];
                // Both ends carry the port's MTU (the bridge follows), and the host's end
                // the port's MAC, so that its link-local address is GID 1's, as a RoCE
                // NIC's GIDs are its netdev's addresses.
                const PortInfo& port = ports.info(hosts[h].nics[nic]);
                const uint32_t mtu = port.eth_mtu;
                Request veth(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
                veth.fixed(ifinfomsg{});
                veth.attribute(IFLA_IFNAME, end);
                veth.attribute(IFLA_MTU, &mtu, sizeof(mtu));
                const size_t link = veth.begin_nest(IFLA_LINKINFO);
                veth.attribute(IFLA_INFO_KIND, std::string("veth"));
                const size_t data = veth.begin_nest(IFLA_INFO_DATA);
                const size_t peer = veth.begin_nest(VETH_INFO_PEER);
                veth.fixed(ifinfomsg{});
                veth.attribute(IFLA_IFNAME, HostNamespace::interface_of_nic(nic));
                veth.attribute(IFLA_MTU, &mtu, sizeof(mtu));
                veth.attribute(IFLA_ADDRESS, port.mac.data(), port.mac.size());
                const uint32_t ns = static_cast<uint32_t>(host_fd);
                veth.attribute(IFLA_NET_NS_FD, &ns, sizeof(ns));
                veth.end_nest(peer);
                veth.end_nest(data);
                veth.end_nest(link);
                rtnl.send(veth, "making the veth pair of " + hosts[h].name);
                rtnl.set_up(end, bridge_index);
            }
        }
    });

    // Each host: loopback, and every NIC's addresses on its interface.
    for (size_t h = 0; h < hosts.size(); ++h)
        in_namespace(fds[h + 1], hosts[h].name, [&] {
            RouteSocket rtnl;
            rtnl.set_up("lo");
            for (size_t nic = 0; nic < hosts[h].nics.size(); ++nic) {
                const PortInfo& port = ports.info(hosts[h].nics[nic]);
                const std::string interface = HostNamespace::interface_of_nic(nic);
                rtnl.set_up(interface);
                const uint32_t ipv4 = htonl(port.ipv4);
                rtnl.add_address(interface, AF_INET, &ipv4, 16);
                for (const transport::Gid& ipv6 : port.ipv6) {
                    try {
                        rtnl.add_address(interface, AF_INET6, ipv6.data(), 64);
                    } catch (const std::system_error& e) {
                        // IPv6 turned off (ipv6.disable=1, disable_ipv6): IPv4 only.
                        if (e.code().value() != EAFNOSUPPORT && e.code().value() != EACCES)
                            throw;
                        std::fprintf(stderr, "softhca-engine: %s has no IPv6 (%s)\n",
                                     hosts[h].name.c_str(), e.what());
                    }
                }
            }
        });
}

int host_of_namespace(const std::vector<HostNamespace>& hosts, dev_t dev, ino_t ino) {
    for (size_t h = 0; h < hosts.size(); ++h)
        if (hosts[h].dev == dev && hosts[h].ino == ino)
            return static_cast<int>(h);
    return -1;
}

} // namespace softhca::engine::fabric
