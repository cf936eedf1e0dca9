// RESET -> INIT -> RTR -> RTS for a connected QP (RC, XRC or UC: the attributes each state
// requires of its type) towards `remote_qpn` at `remote_gid`, with the path and limits of
// `path`. Shared by the test programs (the verbs fixture, the soak worker, the security
// attacks, the NCCL-shaped test), each of which reports a failure its own way.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace qp_setup {

struct ConnectedPath {
    int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    ibv_mtu mtu = IBV_MTU_1024;
    uint32_t psn = 0; // both directions' first PSN
    uint8_t hop_limit = 64;
    uint8_t sl = 0;
    uint8_t min_rnr_timer = 1;
    uint8_t rd_atomic = 4; // max_rd_atomic and max_dest_rd_atomic
    uint8_t timeout = 14;
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;
};

// nullptr when the QP reached RTS, else the state it could not enter ("INIT", "RTR", "RTS").
inline const char* connect_qp(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid,
                              const ConnectedPath& path) {
    const bool reliable = qp->qp_type != IBV_QPT_UC; // RC or XRC: RC's attributes serve both
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = path.access;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return "INIT";
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = path.mtu;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = path.psn;
    a.max_dest_rd_atomic = path.rd_atomic;
    a.min_rnr_timer = path.min_rnr_timer;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = remote_gid;
    a.ah_attr.grh.hop_limit = path.hop_limit;
    a.ah_attr.port_num = 1;
    a.ah_attr.sl = path.sl;
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (reliable)
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    if (ibv_modify_qp(qp, &a, mask))
        return "RTR";
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = path.psn;
    a.timeout = path.timeout;
    a.retry_cnt = path.retry_cnt;
    a.rnr_retry = path.rnr_retry;
    a.max_rd_atomic = path.rd_atomic;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (reliable)
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    if (ibv_modify_qp(qp, &a, mask))
        return "RTS";
    return nullptr;
}

} // namespace qp_setup
