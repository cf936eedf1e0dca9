// What the card says about itself: device and port attributes, as ibv_query_device and
// ibv_query_port report them. One device per port.
#pragma once

#include "ports.hpp"
#include "softhca/device_interface/control.hpp"

#include <string>

namespace softhca::engine {

// Limits of the resources this engine implements (queue pair limits: QpLimits).
struct DeviceLimits {
    static constexpr uint32_t kMaxPd = 1u << 16;
    static constexpr uint32_t kMaxMr = 1u << 20;
    static constexpr uint32_t kMaxMw = 1u << 16;
    static constexpr uint32_t kMaxCq = 1u << 16;
    static constexpr uint32_t kMaxCqe = (1u << 20) - 1;
    static constexpr uint64_t kMaxMrSize = 1ull << 47;
    static constexpr uint32_t kNumCompVectors = 1;
};

// Vendor identity: an IEEE OUI-sized id that is not Mellanox's 0x02c9 and matches no
// entry of perftest's device table.
constexpr uint32_t kVendorId = 0x534843; // "SHC"
constexpr uint32_t kVendorPartId = 0x0001;
constexpr const char* kFirmwareVersion = "0.1.0";

struct Device {
    std::string name;      // <prefix><N>, or the name `rdma link add` gave
    size_t port_index = 0; // into the PortSet; the device's port 1
    uint64_t node_guid = 0;
    // Made by `rdma link add` (daemon/device_links.hpp), which `rdma link delete` may
    // remove; the engine's own devices stay while it runs (the kernel's
    // IBK_ALLOW_USER_UNREG is for rxe's and siw's alike).
    bool added = false;
    // Removed by `rdma link delete`: its slot stays (indices never move), nothing finds it.
    bool removed = false;
};

device_interface::DeviceAttributes device_attributes(const Device& device);
device_interface::PortAttributes port_attributes(const PortInfo& port);

} // namespace softhca::engine
