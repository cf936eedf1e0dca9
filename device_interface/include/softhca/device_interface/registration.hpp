// Device registration: everything libibverbs reads to find, open and describe a device
// when there is no kernel RDMA stack (rdma-core 44: libibverbs/init.c, sysfs.c,
// cmd_device.c read these paths under $SYSFS_PATH).
#pragma once

#include "softhca/device_interface/manifest.hpp"
#include "softhca/device_interface/rdma_cm.hpp" // kRdmaCmAbiVersion
#include "softhca/transport/roce_address.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace softhca::device_interface {

// Device number of /dev/full: opening it works, every write to it fails with ENOSPC,
// so a verb that libibverbs still sends "to the kernel" fails cleanly.
constexpr unsigned kCmdDeviceMajor = 1;
constexpr unsigned kCmdDeviceMinor = 7;

// uverbs ABI version the kernel would report (ib_user_verbs.h IB_USER_VERBS_ABI_VERSION).
constexpr int kUverbsAbiVersion = 6;

// File in the device directory naming the engine's control socket; the provider reads
// it, and its presence is how the provider recognises a softhca device.
constexpr const char* kEngineSocketFile = "softhca_engine_socket";
// File in the device directory with the device's index as RDMA netlink gives it (the
// kernel's ib_device index): its engine slot + 1, never another device's while the engine
// runs, as the kernel never reuses one.
constexpr const char* kDeviceIndexFile = "softhca_device_index";

struct PortRegistration {
    std::vector<transport::Gid> gids; // the GID table from index 0, every entry RoCE v2
    std::string netdev;               // kernel interface behind the port, empty for a built-in wire
    int traffic_class = -1;           // the port's global traffic class, -1: none
};

struct DeviceRegistration {
    std::string ibdev_name;  // softhca0
    std::string uverbs_name; // softhca0_uverbs (node under /dev/infiniband)
    uint64_t node_guid = 0;
    std::string fw_ver;
    std::string engine_socket;
    uint32_t index = 0; // kDeviceIndexFile's (0: not written)
    std::vector<PortRegistration> ports;
    // The netdev lives in another network namespace than the engine's (a fabric host's
    // interface): the device link is a virtual device of the tree, never the engine's
    // interface of that name.
    bool netdev_elsewhere = false;
};

// A view of some of an instance's devices in a tree of its own: what a program on one
// host of a fabric sees (softhca exec --host NAME), its devices' ports on that host's
// interfaces.
struct HostView {
    std::string sysfs_root;
    std::vector<DeviceRegistration> devices;
};

struct InstanceRegistration {
    std::string sysfs_root;      // what SYSFS_PATH is set to
    std::string cdev_dir;        // /dev/infiniband
    std::string driver_file;     // /etc/libibverbs.d/<prefix>.driver
    std::string provider_prefix; // absolute path, libibverbs appends -rdmav34.so
    std::vector<DeviceRegistration> devices;
    // The engine's rdma_cm socket: class/misc/rdma_cm holds its name and the ABI version
    // librdmacm reads (the kernel's rdma_ucm reports 4). Empty: no rdma_cm device.
    std::string rdma_cm_socket;
    std::vector<HostView> host_views;
    std::string host_views_dir; // holds the views' trees; removed whole
};

// An instance's prefix names its devices and files under /run, /etc and /dev: 1..32
// characters of [a-z0-9_], so that it can name nothing else.
inline bool valid_instance_prefix(const std::string& prefix) {
    return !prefix.empty() && prefix.size() <= 32 &&
           prefix.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos;
}

// Creates the tree, nodes and driver file, recording each in the manifest. Throws
// std::system_error on failure (whatever was already created stays recorded).
void register_instance(const InstanceRegistration& instance, Manifest& manifest);

// A device added to a registered instance (`rdma link add`, as ib_register_device adds
// one to a running system): its tree and node, each recorded. Throws as above.
void register_device(const InstanceRegistration& instance, const DeviceRegistration& device,
                     Manifest& manifest);
// Takes away what register_device made (`rdma link delete`): libibverbs no longer lists
// it. What stays in the manifest is gone already, which removal tolerates.
void unregister_device(const InstanceRegistration& instance, const DeviceRegistration& device);

} // namespace softhca::device_interface
