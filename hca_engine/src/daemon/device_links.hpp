// Devices added and removed while the engine runs: what `rdma link add NAME type softhca
// netdev IF` and `rdma link delete NAME` ask (control.hpp, LinkRequest), as the kernel's
// nldev_newlink makes an rxe or siw device on a network interface and nldev_dellink
// unregisters it.
//
// A device added here gets one port of the engine's own kind on the interface (a DPDK
// af_packet port, or a kernel UDP socket port; PortSet::add_port), with the interface's
// addresses (its IPv4 address and its IPv6 ones but link-local) as its GIDs, and is
// registered in the device tree as the engine's start-up devices are: libibverbs lists it
// from the next ibv_get_device_list. The main loop's data path serves it.
//
// Removal is the kernel's disassociation: every context open on the device is closed (its
// objects destroyed; the provider reports IBV_EVENT_DEVICE_FATAL and later verbs fail with
// EIO), its rdma_cm ids get RDMA_CM_EVENT_DEVICE_REMOVAL, its port stops, and its tree goes.
// Its slot stays, marked removed: device and port indices never move, and a later add
// takes a new one (kMaxDevices in all). Only devices added here can be removed (EINVAL
// for the engine's own, as the kernel refuses to unregister a device of real hardware).
//
// Both run on the engine's loop under the world, as every control request does; neither
// touches a client's memory or waits on a client.
#pragma once

#include "control_server.hpp"
#include "datapath_threads.hpp"
#include "device_model.hpp"
#include "engine_config.hpp"
#include "port_counter_files.hpp"
#include "ports.hpp"
#include "rdma_cm_server.hpp"

#include "softhca/device_interface/registration.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace softhca::engine {

// What the device tree says of one device (registration.hpp).
device_interface::DeviceRegistration
device_registration(const EngineConfig& config, const Device& device, const PortInfo& port);
// The port folder of a device in the tree at `sysfs_root`, where its counters are.
std::string port_folder(const std::string& sysfs_root, const Device& device);

class DeviceLinks {
  public:
    struct Parts {
        const EngineConfig& config;
        std::vector<Device>& devices;
        PortSet& ports;
        ControlServer& server;
        DatapathThreads& threads;
        RdmaCmServer& rdma_cm;
        device_interface::Manifest& manifest;
        // The main loop starts or stops sleeping on a device's doorbell wake-up set.
        std::function<void(int)> watch_doorbells;
        std::function<void(int)> unwatch_doorbells;
        // A port was added: the main loop learns what it must wake for.
        std::function<void(const PortInfo&)> port_added;
    };
    explicit DeviceLinks(Parts parts) : parts_(std::move(parts)) {}

    // LinkAdd and LinkDelete (ControlServer::set_link_handler): 0 or an errno value, as
    // control.hpp lists them.
    int add(const std::string& name, const std::string& netdev);
    int remove(const std::string& name);
    // Their checks before anything changes (also what the control-message fuzzer runs):
    // a valid name not in use, an interface that exists and has no port, room for one
    // more; a device of that name that `rdma link add` made (set in `device`).
    static int check_add(const std::vector<Device>& devices, const PortSet& ports,
                         const std::string& cdev_dir, const std::string& name,
                         const std::string& netdev);
    static int check_remove(const std::vector<Device>& devices, const std::string& name,
                            size_t& device);

    // The added devices' port counters in their trees (port_counter_files.hpp): the main
    // loop collects them beside the start-up devices', when one is due (cheap to ask).
    bool counters_due(uint64_t now) const;
    void collect_counters(uint64_t now, ControlServer& server);

  private:
    Parts parts_;
    std::map<size_t, std::unique_ptr<PortCounterFiles>> counter_files_; // by device
};

} // namespace softhca::engine
