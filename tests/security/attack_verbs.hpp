// What the attack programs (not Catch2 tests: they fork, exec and exit by themselves)
// share: a device side with a PD, a CQ and its GID, and an RC QP brought to RTS towards
// a peer, each failing the program at once with what went wrong.
#pragma once

#include "test_device.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <infiniband/verbs.h>
#include <string>

namespace attack {

[[noreturn]] inline void die(const char* what) {
    std::fprintf(stderr, "%s: %s (%s)\n", program_invocation_short_name, what,
                 std::strerror(errno));
    std::exit(2);
}

struct Side {
    ibv_context* context = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_gid gid{};
};

inline Side open_side(const std::string& name) {
    Side s;
    s.context = open_test_device(name);
    if (!s.context)
        die("open device");
    s.pd = ibv_alloc_pd(s.context);
    s.cq = ibv_create_cq(s.context, 64, nullptr, nullptr, 0);
    if (!s.pd || !s.cq || ibv_query_gid(s.context, 1, 0, &s.gid))
        die("pd/cq/gid");
    return s;
}

inline ibv_qp* make_qp(const Side& s) {
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = s.cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = init.cap.max_recv_wr = 8;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(s.pd, &init);
    if (!qp)
        die("create qp");
    return qp;
}

inline void connect_qp(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = remote_gid;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("RTR");
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 10; // ~4 ms: a peer that never answers fails soon
    a.retry_cnt = 2;
    a.rnr_retry = 2;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        die("RTS");
}

} // namespace attack
