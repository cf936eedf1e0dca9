// Every rdma_ucm command the engine serves, in one table indexed by the command's number
// (the kernel's ucma_cmd_table holds the handlers alone): the size of its input
// (rdma_ucm_*), of its response, and its handler (rdma_cm_commands.cpp). command() finds
// the method and calls the handler with the input typed. An input shorter than its
// command reads as zeros past what was written (the kernel would copy sizeof(cmd) bytes
// of the caller's memory, which the engine does not have).
#include "rdma_cm_server.hpp"

#include "clock.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <rdma/ib_user_verbs.h>

namespace softhca::engine {

namespace {

using S = RdmaCmServer;

} // namespace

template <typename In,
          int (RdmaCmServer::*Handler)(RdmaCmServer::Call&, const In&, RdmaCmServer::Reply&)>
int RdmaCmServer::invoke(RdmaCmServer& server, Call& call, const uint8_t* in, size_t in_bytes,
                         Reply& reply) {
    In c{};
    std::memcpy(&c, in, std::min(in_bytes, sizeof(c)));
    return (server.*Handler)(call, c, reply);
}

const RdmaCmServer::Method* RdmaCmServer::method_for(uint32_t cmd) {
    // The kernel's numbers (enum in rdma/rdma_user_cm.h), each with its sizes and handler.
    struct Entry {
        uint32_t cmd;
        Method method;
    };
#define SOFTHCA_RDMA_CM_METHOD(CMD, IN, OUT, HANDLER)                                              \
    Entry {                                                                                        \
        RDMA_USER_CM_CMD_##CMD, {sizeof(IN), OUT, &S::invoke<IN, &S::HANDLER>},                    \
    }
    static const Entry kMethods[] = {
        // Ids and addresses.
        SOFTHCA_RDMA_CM_METHOD(CREATE_ID, rdma_ucm_create_id, sizeof(rdma_ucm_create_id_resp),
                               cmd_create_id),
        SOFTHCA_RDMA_CM_METHOD(DESTROY_ID, rdma_ucm_destroy_id, sizeof(rdma_ucm_destroy_id_resp),
                               cmd_destroy_id),
        SOFTHCA_RDMA_CM_METHOD(BIND_IP, rdma_ucm_bind_ip, 0, cmd_bind_ip),
        SOFTHCA_RDMA_CM_METHOD(BIND, rdma_ucm_bind, 0, cmd_bind),
        SOFTHCA_RDMA_CM_METHOD(RESOLVE_IP, rdma_ucm_resolve_ip, 0, cmd_resolve_ip),
        SOFTHCA_RDMA_CM_METHOD(RESOLVE_ADDR, rdma_ucm_resolve_addr, 0, cmd_resolve_addr),
        SOFTHCA_RDMA_CM_METHOD(RESOLVE_ROUTE, rdma_ucm_resolve_route, 0, cmd_resolve_route),
        SOFTHCA_RDMA_CM_METHOD(QUERY_ROUTE, rdma_ucm_query, sizeof(rdma_ucm_query_route_resp),
                               cmd_query_route),
        // QUERY answers QUERY_ADDR's response, or QUERY_PATH's or QUERY_GID's.
        SOFTHCA_RDMA_CM_METHOD(
            QUERY, rdma_ucm_query,
            std::max(sizeof(rdma_ucm_query_addr_resp), sizeof(rdma_ucm_query_path_resp)),
            cmd_query),
        SOFTHCA_RDMA_CM_METHOD(MIGRATE_ID, rdma_ucm_migrate_id, sizeof(rdma_ucm_migrate_resp),
                               cmd_migrate_id),
        // Connections: the IB CM's commands.
        SOFTHCA_RDMA_CM_METHOD(LISTEN, rdma_ucm_listen, 0, cmd_listen),
        SOFTHCA_RDMA_CM_METHOD(CONNECT, rdma_ucm_connect, 0, cmd_connect),
        SOFTHCA_RDMA_CM_METHOD(ACCEPT, rdma_ucm_accept, 0, cmd_accept),
        SOFTHCA_RDMA_CM_METHOD(REJECT, rdma_ucm_reject, 0, cmd_reject),
        SOFTHCA_RDMA_CM_METHOD(DISCONNECT, rdma_ucm_disconnect, 0, cmd_disconnect),
        SOFTHCA_RDMA_CM_METHOD(INIT_QP_ATTR, rdma_ucm_init_qp_attr, sizeof(ib_uverbs_qp_attr),
                               cmd_init_qp_attr),
        SOFTHCA_RDMA_CM_METHOD(NOTIFY, rdma_ucm_notify, 0, cmd_notify),
        // Events and options.
        SOFTHCA_RDMA_CM_METHOD(GET_EVENT, rdma_ucm_get_event, sizeof(rdma_ucm_event_resp),
                               cmd_get_event),
        SOFTHCA_RDMA_CM_METHOD(SET_OPTION, rdma_ucm_set_option, 0, cmd_set_option),
        // Multicast.
        SOFTHCA_RDMA_CM_METHOD(JOIN_IP_MCAST, rdma_ucm_join_ip_mcast,
                               sizeof(rdma_ucm_create_id_resp), cmd_join_ip_mcast),
        SOFTHCA_RDMA_CM_METHOD(JOIN_MCAST, rdma_ucm_join_mcast, sizeof(rdma_ucm_create_id_resp),
                               cmd_join_mcast),
        SOFTHCA_RDMA_CM_METHOD(LEAVE_MCAST, rdma_ucm_destroy_id, sizeof(rdma_ucm_destroy_id_resp),
                               cmd_leave_mcast),
        // GET_OPTION: in the table with no handler (ENOSYS), as the kernel has it.
        Entry{RDMA_USER_CM_CMD_GET_OPTION, {0, 0, nullptr}},
    };
#undef SOFTHCA_RDMA_CM_METHOD
    // Indexed by command number once; a number with no entry finds nothing (EINVAL).
    static const auto kByCommand = [] {
        std::array<const Method*, RDMA_USER_CM_CMD_JOIN_MCAST + 1> by{};
        for (const Entry& e : kMethods)
            by.at(e.cmd) = &e.method;
        return by;
    }();
    return cmd < kByCommand.size() ? kByCommand[cmd] : nullptr;
}

int RdmaCmServer::command(CmFile& file, uint32_t cmd, const uint8_t* in, size_t in_bytes,
                          const uint8_t* extra, size_t extra_bytes, Reply& reply, int passed_fd) {
    const Method* method = method_for(cmd);
    if (!method)
        return -EINVAL; // no such command (ucma_write)
    if (!method->handler)
        return -ENOSYS; // as the kernel answers it
    Call call{file, extra, extra_bytes, monotonic_ns(), passed_fd};
    const int rc = method->handler(*this, call, in, in_bytes, reply);
    // No handler answers more than its command's response.
    if (reply.bytes.size() > method->out_bytes)
        reply.bytes.resize(method->out_bytes);
    return rc;
}

} // namespace softhca::engine
