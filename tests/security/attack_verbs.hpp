// What the attack programs (not Catch2 tests: they fork, exec and exit by themselves)
// share: a device side with a PD, a CQ and its GID, and an RC QP brought to RTS towards
// a peer, each failing the program at once with what went wrong.
#pragma once

#include "connect_qp.hpp"
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
    qp_setup::ConnectedPath path;
    path.access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    path.min_rnr_timer = 12;
    path.rd_atomic = 1;
    path.timeout = 10; // ~4 ms: a peer that never answers fails soon
    path.retry_cnt = 2;
    path.rnr_retry = 2;
    if (const char* state = qp_setup::connect_qp(qp, remote_qpn, remote_gid, path))
        die(state);
}

} // namespace attack
