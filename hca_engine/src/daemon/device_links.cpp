#include "device_links.hpp"

#include "clock.hpp"

#include "softhca/device_interface/control.hpp"
#include "softhca/transport/roce_path.hpp"

#include <arpa/inet.h>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

namespace softhca::engine {

namespace di = device_interface;
namespace tp = transport;

static_assert(di::kMaxDevices == kMaxPorts, "a device per port, room kept for each");

di::DeviceRegistration device_registration(const EngineConfig& config, const Device& device,
                                           const PortInfo& port) {
    di::DeviceRegistration d;
    d.ibdev_name = device.name;
    d.uverbs_name = device.name + "_uverbs";
    d.node_guid = device.node_guid;
    d.fw_ver = kFirmwareVersion;
    d.engine_socket = config.socket_path();
    d.index = static_cast<uint32_t>(device.port_index + 1); // a device per port, its slot
    d.ports.push_back({port.gids, port.netdev, port.global_traffic_class});
    return d;
}

std::string port_folder(const std::string& sysfs_root, const Device& device) {
    return sysfs_root + "/class/infiniband/" + device.name + "/ports/1";
}

namespace {

// Where the instance's tree and nodes are: what registering one device needs of it.
di::InstanceRegistration instance_paths(const EngineConfig& config) {
    di::InstanceRegistration instance;
    instance.sysfs_root = config.sysfs_root();
    instance.cdev_dir = config.cdev_dir;
    return instance;
}

// A name the kernel's link add takes (not empty, no '%': nldev_newlink) that is also safe
// as a folder of the tree and a node of /dev/infiniband: letters, digits, '_', '-' and
// '.', not starting with '.'.
bool valid_device_name(const std::string& name) {
    // Its node NAME_uverbs must fit libibverbs' names (IBV_SYSFS_NAME_MAX, 64 with the NUL).
    if (name.empty() || name.front() == '.' || name.size() > 56)
        return false;
    for (const char ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' && ch != '.')
            return false;
    return true;
}

// The interface's addresses as a port takes them: its first IPv4 address and its IPv6
// addresses but link-local ones (the GID table adds the link-local one a port owns).
PortConfig port_on(const std::string& netdev) {
    PortConfig port;
    port.netdev = netdev;
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0)
        return port;
    for (ifaddrs* i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || netdev != i->ifa_name)
            continue;
        if (i->ifa_addr->sa_family == AF_INET && port.ipv4 == 0) {
            port.ipv4 = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            tp::Gid gid;
            std::memcpy(gid.data(), &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                        16);
            if (!tp::gid_is_link_local(gid))
                port.ipv6.push_back(gid);
        }
    }
    ::freeifaddrs(list);
    return port;
}

} // namespace

int DeviceLinks::check_add(const std::vector<Device>& devices, const PortSet& ports,
                           const std::string& cdev_dir, const std::string& name,
                           const std::string& netdev) {
    if (!valid_device_name(name))
        return EINVAL;
    for (const Device& d : devices)
        if (!d.removed && d.name == name)
            return EEXIST; // as ib_register_device for a name in use
    // Another instance's device, or the kernel's: their nodes share /dev/infiniband.
    if (::access((cdev_dir + "/" + name + "_uverbs").c_str(), F_OK) == 0)
        return EEXIST;
    // A DPDK port names its interface in its device arguments, where ',' and '=' separate.
    if (netdev.find_first_of(",=") != std::string::npos)
        return EINVAL;
    if (netdev.empty() || ::if_nametoindex(netdev.c_str()) == 0)
        return ENODEV; // the kernel: dev_get_by_name found nothing
    for (const Device& d : devices)
        if (!d.removed && ports.info(d.port_index).netdev == netdev)
            return EEXIST; // rxe: "already configured on" the interface
    if (devices.size() >= di::kMaxDevices)
        return ENOSPC;
    return 0;
}

int DeviceLinks::check_remove(const std::vector<Device>& devices, const std::string& name,
                              size_t& device) {
    device = devices.size();
    for (size_t d = 0; d < devices.size(); ++d)
        if (!devices[d].removed && devices[d].name == name)
            device = d;
    if (device == devices.size())
        return ENODEV;
    if (!devices[device].added)
        return EINVAL; // the kernel's answer for a device users may not unregister
    return 0;
}

int DeviceLinks::add(const std::string& name, const std::string& netdev) {
    std::vector<Device>& devices = parts_.devices;
    if (const int error = check_add(devices, parts_.ports, parts_.config.cdev_dir, name, netdev))
        return error;
    const PortConfig port = port_on(netdev);
    if (port.ipv4 == 0 && port.ipv6.empty())
        return EADDRNOTAVAIL; // a RoCE port needs an address to be reached at
    std::string why;
    const long index = parts_.ports.add_port(port, why);
    if (index < 0) {
        std::fprintf(stderr, "softhca-engine: link add %s on %s: %s\n", name.c_str(),
                     netdev.c_str(), why.c_str());
        return static_cast<int>(-index);
    }
    const size_t port_index = static_cast<size_t>(index);
    const PortInfo& info = parts_.ports.info(port_index);
    devices.push_back({name, port_index, tp::guid_from_mac(info.mac), true, false});
    const size_t device = devices.size() - 1;
    parts_.server.add_device();
    parts_.threads.add_port(port_index);
    const di::DeviceRegistration registration =
        device_registration(parts_.config, devices[device], info);
    const di::InstanceRegistration instance = instance_paths(parts_.config);
    try {
        di::register_device(instance, registration, parts_.manifest);
        counter_files_[device] =
            std::make_unique<PortCounterFiles>(std::vector<PortCounterFiles::Target>{
                {port_folder(instance.sysfs_root, devices[device]), port_index, device}});
    } catch (const std::exception& e) {
        std::fprintf(stderr, "softhca-engine: link add %s: %s\n", name.c_str(), e.what());
        counter_files_.erase(device);
        di::unregister_device(instance, registration);
        devices[device].removed = true;
        parts_.server.remove_device(device);
        parts_.threads.remove_port(port_index);
        parts_.ports.remove_port(port_index);
        return EIO;
    }
    parts_.watch_doorbells(parts_.server.wakeup_fd(device));
    parts_.port_added(info);
    std::fprintf(stderr, "softhca-engine: link add %s on %s (%s)\n", name.c_str(), netdev.c_str(),
                 info.pmd.c_str());
    return 0;
}

int DeviceLinks::remove(const std::string& name) {
    std::vector<Device>& devices = parts_.devices;
    size_t device = 0;
    if (const int error = check_remove(devices, name, device))
        return error;
    const size_t port = devices[device].port_index;
    const di::DeviceRegistration registration =
        device_registration(parts_.config, devices[device], parts_.ports.info(port));
    // Nothing finds it from here on (OpenDevice, rdma_cm's addresses, status).
    devices[device].removed = true;
    parts_.unwatch_doorbells(parts_.server.wakeup_fd(device));
    parts_.server.remove_device(device);
    parts_.rdma_cm.device_removed(device);
    parts_.threads.remove_port(port);
    parts_.ports.remove_port(port);
    counter_files_.erase(device); // its writer stops before the folders go
    const di::InstanceRegistration instance = instance_paths(parts_.config);
    di::unregister_device(instance, registration);
    std::fprintf(stderr, "softhca-engine: link delete %s\n", name.c_str());
    return 0;
}

bool DeviceLinks::counters_due(uint64_t now) const {
    for (const auto& [device, files] : counter_files_)
        if (files->due(now))
            return true;
    return false;
}

void DeviceLinks::collect_counters(uint64_t now, ControlServer& server) {
    for (auto& [device, files] : counter_files_)
        if (files->due(now))
            files->collect(now, parts_.ports, [&server](size_t d) {
                return server.tables().qp_counters_of_device(d);
            });
}

} // namespace softhca::engine
