#include "device_model.hpp"

#include "engine_qp.hpp"
#include "engine_srq.hpp"
#include "multicast_groups.hpp"
#include "softhca/transport/path_mtu.hpp"

#include <cstring>

namespace softhca::engine {

namespace di = device_interface;

di::DeviceAttributes device_attributes(const Device& device) {
    di::DeviceAttributes a{};
    std::strncpy(a.fw_ver, kFirmwareVersion, sizeof(a.fw_ver) - 1);
    a.node_guid = device.node_guid;
    a.sys_image_guid = device.node_guid;
    a.max_mr_size = DeviceLimits::kMaxMrSize;
    a.page_size_cap = 0xfffff000; // any power-of-two page from 4 KiB
    a.vendor_id = kVendorId;
    a.vendor_part_id = kVendorPartId;
    a.hw_ver = 1;
    // IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_RC_RNR_NAK_GEN |
    // IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_XRC |
    // IBV_DEVICE_MEM_WINDOW_TYPE_2B (type 2 windows bound to a QP)
    a.device_cap_flags =
        (1u << 11) | (1u << 10) | (1u << 12) | (1u << 13) | (1u << 17) | (1u << 20) | (1u << 24);
    a.max_mw = DeviceLimits::kMaxMw;
    a.max_srq = SrqLimits::kMaxSrq;
    a.max_srq_wr = SrqLimits::kMaxSrqWr;
    a.max_srq_sge = SrqLimits::kMaxSrqSge;
    a.max_ah = 1u << 20; // address handles live in the provider: memory is the limit
    a.max_mcast_grp = MulticastGroups::kMaxGroups;
    a.max_mcast_qp_attach = MulticastGroups::kMaxQpsPerGroup;
    a.max_total_mcast_qp_attach = MulticastGroups::kMaxGroups * MulticastGroups::kMaxQpsPerGroup;
    a.max_qp = QpLimits::kMaxQp;
    a.max_qp_wr = QpLimits::kMaxQpWr;
    a.max_sge = QpLimits::kMaxSge;
    a.max_sge_rd = QpLimits::kMaxSge;
    a.max_qp_rd_atom = QpLimits::kMaxRdAtomic;
    a.max_qp_init_rd_atom = QpLimits::kMaxRdAtomic;
    a.max_res_rd_atom = QpLimits::kMaxRdAtomic * QpLimits::kMaxQp;
    a.max_inline_data = QpLimits::kMaxInline;
    a.max_cq = DeviceLimits::kMaxCq;
    a.max_cqe = DeviceLimits::kMaxCqe;
    a.max_mr = DeviceLimits::kMaxMr;
    a.max_pd = DeviceLimits::kMaxPd;
    // Atomics are atomic among all operations of the engine, not against the CPU.
    a.atomic_cap = 1; // IBV_ATOMIC_HCA
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a.num_comp_vectors = DeviceLimits::kNumCompVectors;
    return a;
}

namespace {
// Link speed in Mb/s to the IBTA (width, speed) pair whose product matches it best.
void encode_speed(uint32_t mbps, uint32_t& width, uint32_t& speed) {
    struct Row {
        uint32_t mbps, width, speed;
    };
    // width: 1=1X 2=4X; speed: 1=SDR 2=DDR 4=QDR 16=FDR 32=EDR 64=HDR
    static constexpr Row rows[] = {
        {200000, 2, 64}, {100000, 2, 32}, {56000, 2, 16}, {50000, 1, 64}, {40000, 2, 4},
        {25000, 1, 32},  {14000, 1, 16},  {10000, 1, 4},  {5000, 1, 2},   {0, 1, 1},
    };
    for (const auto& row : rows) {
        if (mbps >= row.mbps) {
            width = row.width;
            speed = row.speed;
            return;
        }
    }
}
} // namespace

di::PortAttributes port_attributes(const PortInfo& port) {
    di::PortAttributes a{};
    a.state = static_cast<uint32_t>(port.link_up ? di::PortState::Active : di::PortState::Down);
    a.phys_state = port.link_up ? 5 : 3;
    auto max_mtu = transport::path_mtu_for_ethernet_mtu(port.max_eth_mtu);
    auto active_mtu = transport::path_mtu_for_ethernet_mtu(port.eth_mtu);
    a.max_mtu = static_cast<uint32_t>(max_mtu.value_or(transport::PathMtu::Mtu256));
    a.active_mtu = static_cast<uint32_t>(active_mtu.value_or(transport::PathMtu::Mtu256));
    a.eth_mtu = port.eth_mtu;
    a.gid_tbl_len = static_cast<uint32_t>(port.gids.size());
    a.pkey_tbl_len = 1;
    a.port_cap_flags = di::kPortCapabilityMask;
    a.max_msg_sz = 1u << 31; // IBTA: messages up to 2^31 bytes
    encode_speed(port.link_speed_mbps, a.active_width, a.active_speed);
    a.link_layer = 2; // IBV_LINK_LAYER_ETHERNET
    a.ipv4 = port.ipv4;
    std::memcpy(a.mac, port.mac.data(), 6);
    return a;
}

} // namespace softhca::engine
