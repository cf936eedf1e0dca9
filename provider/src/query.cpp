// ibv_query_device(_ex) and ibv_query_port: the card describes itself.
#include "provider.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <endian.h>

namespace softhca::provider {

namespace di = device_interface;

int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size) {
    if (input && input->comp_mask)
        return EINVAL;
    if (attr_size < sizeof(ibv_device_attr))
        return EINVAL;
    ContextState& state = state_of(context);
    if (state.control.dead())
        return EIO;
    const di::DeviceAttributes& a = state.attributes;

    ibv_device_attr_ex ex{};
    ibv_device_attr& d = ex.orig_attr;
    // Zeroed above: at most all but the last byte, so the string ends.
    std::memcpy(d.fw_ver, a.fw_ver,
                std::min(strnlen(a.fw_ver, sizeof(a.fw_ver)), sizeof(d.fw_ver) - 1));
    d.node_guid = htobe64(a.node_guid);
    d.sys_image_guid = htobe64(a.sys_image_guid);
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = a.page_size_cap;
    d.vendor_id = a.vendor_id;
    d.vendor_part_id = a.vendor_part_id;
    d.hw_ver = a.hw_ver;
    d.max_qp = static_cast<int>(a.max_qp);
    d.max_qp_wr = static_cast<int>(a.max_qp_wr);
    d.device_cap_flags = a.device_cap_flags;
    d.max_sge = static_cast<int>(a.max_sge);
    d.max_sge_rd = static_cast<int>(a.max_sge_rd);
    d.max_cq = static_cast<int>(a.max_cq);
    d.max_cqe = static_cast<int>(a.max_cqe);
    d.max_mr = static_cast<int>(a.max_mr);
    d.max_mw = static_cast<int>(a.max_mw);
    d.max_pd = static_cast<int>(a.max_pd);
    d.max_qp_rd_atom = static_cast<int>(a.max_qp_rd_atom);
    d.max_ee_rd_atom = static_cast<int>(a.max_ee_rd_atom);
    d.max_res_rd_atom = static_cast<int>(a.max_res_rd_atom);
    d.max_qp_init_rd_atom = static_cast<int>(a.max_qp_init_rd_atom);
    d.atomic_cap = static_cast<ibv_atomic_cap>(a.atomic_cap);
    d.max_srq = static_cast<int>(a.max_srq);
    d.max_srq_wr = static_cast<int>(a.max_srq_wr);
    d.max_srq_sge = static_cast<int>(a.max_srq_sge);
    d.max_ah = static_cast<int>(a.max_ah);
    d.max_mcast_grp = static_cast<int>(a.max_mcast_grp);
    d.max_mcast_qp_attach = static_cast<int>(a.max_mcast_qp_attach);
    d.max_total_mcast_qp_attach = static_cast<int>(a.max_total_mcast_qp_attach);
    d.max_pkeys = static_cast<uint16_t>(a.max_pkeys);
    d.local_ca_ack_delay = static_cast<uint8_t>(a.local_ca_ack_delay);
    d.phys_port_cnt = static_cast<uint8_t>(a.phys_port_cnt);
    ex.device_cap_flags_ex = a.device_cap_flags;
    ex.phys_port_cnt_ex = a.phys_port_cnt;
    // Completion timestamps: the card's clock is CLOCK_MONOTONIC in nanoseconds (1 GHz,
    // all 64 bits valid), as ibv_query_rt_values_ex reads it.
    ex.completion_timestamp_mask = UINT64_MAX;
    // On-demand paging, explicit and implicit, for every operation of every transport:
    // the engine reaches an ODP region through the process's page tables each time
    // (cross-memory attach), so a page need only be mapped when it is touched.
    constexpr uint32_t kOdpOperations = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                                        IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                                        IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
    ex.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
    ex.odp_caps.per_transport_caps.rc_odp_caps = kOdpOperations;
    ex.odp_caps.per_transport_caps.uc_odp_caps =
        kOdpOperations & ~(IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC);
    ex.odp_caps.per_transport_caps.ud_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
    ex.xrc_odp_caps = kOdpOperations;
    ex.max_dm_size = di::kDeviceMemoryBytes; // dm.cpp
    ex.hca_core_clock = kHcaCoreClockKhz;

    // Callers built against an older verbs.h pass a shorter structure: fill only that.
    std::memcpy(attr, &ex, std::min(attr_size, sizeof(ex)));
    return 0;
}

int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr) {
    ContextState& state = state_of(context);
    di::QueryPortRequest request{};
    request.port_num = port_num;
    di::QueryPortReply reply{};
    if (int err = state.control.call(di::Opcode::QueryPort, &request, sizeof(request), &reply,
                                     sizeof(reply)))
        return err;
    const di::PortAttributes& a = reply.attr;
    ibv_port_attr& p = *port_attr;
    std::memset(&p, 0, sizeof(p));
    p.state = static_cast<ibv_port_state>(a.state);
    p.max_mtu = static_cast<ibv_mtu>(a.max_mtu);
    p.active_mtu = static_cast<ibv_mtu>(a.active_mtu);
    p.gid_tbl_len = static_cast<int>(a.gid_tbl_len);
    p.port_cap_flags = a.port_cap_flags;
    p.max_msg_sz = a.max_msg_sz;
    p.pkey_tbl_len = static_cast<uint16_t>(a.pkey_tbl_len);
    p.active_width = static_cast<uint8_t>(a.active_width);
    p.active_speed = static_cast<uint8_t>(a.active_speed);
    p.phys_state = static_cast<uint8_t>(a.phys_state);
    p.link_layer = static_cast<uint8_t>(a.link_layer);
    p.lid = 0;
    p.sm_lid = 0;
    p.lmc = 0;
    p.max_vl_num = 1; // IBTA PortInfo VLCap encoding: 1 = VL0 only
    return 0;
}

} // namespace softhca::provider
