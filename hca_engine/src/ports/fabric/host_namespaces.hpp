// The hosts of a fabric as places a program can run (--fabric ...,netns=1): each host a
// network namespace of its own, named as `ip netns` names them (/run/netns/<prefix>-h3),
// holding its NICs' addresses (198.19.0.4/16 and 2001:2:0:fab::4/64 on eth0, whose MAC and
// MTU are the port's; a rail host's NIC n on eth<n>), so that a program started there (softhca exec
// --host h3) binds, routes and resolves as on host h3. A bridge in one more namespace
// (<prefix>-fabric) joins the hosts' interfaces: the management network that carries what is not
// RDMA (perftest's and MPI's connection setup over TCP, ping), as a cluster's Ethernet does, while
// RDMA crosses the fabric inside the engine. Nothing is made in the engine's own namespace.
#pragma once

#include "fabric_topology.hpp"
#include "ports.hpp"

#include <functional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace softhca::engine::fabric {

struct HostNamespace {
    std::string host;                   // "h3"
    std::string name;                   // "<prefix>-h3": /run/netns/<name>
    std::vector<uint32_t> nics;         // its endpoints (devices), NIC 0 first
    std::vector<std::string> nic_nodes; // their node names (h3, or h3n0, h3n1)
    dev_t dev = 0;                      // the namespace's identity (a stat of /proc/PID/ns/net)
    ino_t ino = 0;
    // The interface of NIC n in the host's namespace: "eth<n>".
    static std::string interface_of_nic(size_t nic) { return "eth" + std::to_string(nic); }
};

constexpr const char* kNetnsDir = "/run/netns";

// The hosts of `topology` in host order, their namespaces named after `prefix`.
std::vector<HostNamespace> fabric_hosts(const Topology& topology, const std::string& prefix);

// The management network's namespace: "<prefix>-fabric".
std::string management_namespace(const std::string& prefix);

// Makes the management namespace and every host's, their interfaces and addresses (each
// NIC's, from `ports`), and fills in each namespace's identity. `before_mount(path)` is
// called before a namespace is mounted at `path`, so that a record of it exists even if the
// engine dies right after (kernel_shim's manifest removes it). Throws std::system_error.
void make_host_namespaces(std::vector<HostNamespace>& hosts, const std::string& management,
                          const PortSet& ports,
                          const std::function<void(const std::string&)>& before_mount);

// The host whose namespace that is (an index into `hosts`), or -1.
int host_of_namespace(const std::vector<HostNamespace>& hosts, dev_t dev, ino_t ino);

} // namespace softhca::engine::fabric
