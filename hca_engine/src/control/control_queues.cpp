// The control server's queue requests: completion queues, QPs, shared receive queues
// and multicast attachment. Each is validated by the resource tables; replies carry
// errno values.
#include "client_descriptors.hpp"
#include "clock.hpp"
#include "control_messages.hpp"
#include "control_server.hpp"
#include "engine_qp.hpp"
#include "engine_srq.hpp"
#include "ports.hpp"

#include <cerrno>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace softhca::engine {

namespace di = device_interface;

namespace {

// CreateCq's channel: the flag and the descriptor come together (the descriptor must be
// a pipe, which adopt_client_pipe checks: a write to anything else could block the card).
bool valid_channel_flags(uint32_t flags, int fd) {
    return !(flags & ~(di::kCreateCqChannel | di::kCreateCqTimestamps)) &&
           ((flags & di::kCreateCqChannel) != 0) == (fd >= 0);
}

} // namespace

namespace {
// CreateCq and ResizeCq answer alike: the CQ's handle, its size and its ring (whose fd
// the caller passes along).
di::CreateCqReply cq_reply(const di::MessageHeader& header, int status, uint32_t handle,
                           const CompletionQueue* cq) {
    di::CreateCqReply r{};
    r.reply.header = reply_header(header, sizeof(r));
    r.reply.status = status;
    r.cq_handle = handle;
    if (cq) {
        r.cqe = cq->cqe;
        r.ring_bytes = cq->ring.bytes();
    }
    return r;
}
} // namespace

void ControlServer::create_cq(Call& call) {
    const auto& request = call.request<di::CreateCqRequest>();
    if (!valid_channel_flags(request.flags, call.fd)) {
        reply_status(call, EINVAL);
        return;
    }
    // The engine writes events through a description of its own (client_descriptors.hpp).
    const int channel = call.fd >= 0 ? adopt_client_pipe(std::exchange(call.fd, -1),
                                                         call.resources().client().stall_owner())
                                     : -1;
    if ((request.flags & di::kCreateCqChannel) && channel < 0) {
        reply_status(call, EINVAL);
        return;
    }
    const CompletionQueue* cq = nullptr;
    uint32_t handle = 0;
    const int status = call.resources().create_cq(
        request.cqe, request.comp_vector, request.user_handle,
        CompletionChannel(channel, call.resources().client().stall_owner()), handle, cq,
        (request.flags & di::kCreateCqTimestamps) != 0);
    const di::CreateCqReply r = cq_reply(call.header, status, handle, cq);
    reply_sharing(call, &r, sizeof(r), cq ? cq->ring.share() : -1);
}

void ControlServer::resize_cq(Call& call) {
    const auto& request = call.request<di::ResizeCqRequest>();
    const CompletionQueue* cq = nullptr;
    const int status = call.resources().resize_cq(request.cq_handle, request.cqe, cq);
    const di::CreateCqReply r = cq_reply(call.header, status, request.cq_handle, cq);
    reply_sharing(call, &r, sizeof(r), cq ? cq->ring.share() : -1);
}

void ControlServer::destroy_cq(Call& call) {
    reply_status(call, call.resources().destroy_cq(call.request<di::HandleRequest>().handle));
}

namespace {
// CreateQp and OpenQp both answer with the QP's handle here, its number, caps and ring.
di::CreateQpReply qp_reply(const di::MessageHeader& header, int status, const EngineQp* qp) {
    di::CreateQpReply r{};
    r.reply.header = reply_header(header, sizeof(r));
    r.reply.status = status;
    if (qp) {
        r.qp_num = qp->qp_num();
        r.caps = qp->caps();
        r.ring_bytes = qp->ring_bytes();
    }
    return r;
}
} // namespace

void ControlServer::create_qp(Call& call) {
    EngineQp* qp = nullptr;
    const int status =
        call.resources().create_qp(call.request<di::CreateQpRequest>(), port_of(call.c), qp);
    di::CreateQpReply r = qp_reply(call.header, status, qp);
    if (qp)
        r.qp_handle = qp->handle();
    reply_sharing(call, &r, sizeof(r), qp ? qp->share_ring() : -1);
}

void ControlServer::open_qp(Call& call) {
    const auto& request = call.request<di::OpenQpRequest>();
    EngineQp* qp = nullptr;
    uint32_t handle = 0;
    const int status = call.resources().open_qp(request.qp_num, request.xrcd_handle,
                                                request.user_handle, handle, qp);
    di::CreateQpReply r = qp_reply(call.header, status, qp);
    r.qp_handle = handle;
    reply_sharing(call, &r, sizeof(r), qp ? qp->share_ring() : -1);
}

void ControlServer::modify_qp(Call& call) {
    const auto& request = call.request<di::ModifyQpRequest>();
    EngineQp* qp = call.resources().find_qp(request.qp_handle);
    // A Q_Key with the high bit set is privileged (its high bit); like uverbs we let
    // only root (or the engine's own user) give one to a QP.
    if (qp && (request.attr_mask & transport::qp_attr::kQkey) &&
        (request.attr.qkey & 0x80000000u) && call.c.uid != 0 && call.c.uid != ::geteuid()) {
        reply_status(call, EPERM);
        return;
    }
    if (!qp) {
        reply_status(call, EINVAL);
        return;
    }
    const transport::QpState before = qp->transport().state();
    const transport::QpCounters counted = qp->transport().counters(); // RESET zeroes them
    const int status = qp->modify(request, port_of(call.c), monotonic_ns());
    const transport::QpState after = qp->transport().state();
    const auto device = static_cast<size_t>(call.c.device);
    if (status == 0 && after == transport::QpState::Reset && before != after) {
        // What it counted stays in the device's totals and its counter's, as a destroyed
        // QP's does: hw counters never go back.
        keys_.retired_qp_counters_by_device[device] += counted;
        keys_.qp_counter_sets.qp_reset(device, qp->qp_num(), counted);
    }
    // Reaching INIT binds the QP to a counter in auto mode (`rdma statistic qp`), as the
    // kernel's modify does when the QP gets its port; the counter is its creator's: the
    // caller's context, unless it only opened the QP (an XRC target), then looked up.
    if (status == 0 && before == transport::QpState::Reset && after == transport::QpState::Init &&
        keys_.qp_counter_sets.mode(device) == QpCounterSets::Mode::Auto) {
        const auto& owned = call.resources().qps();
        const auto mine = owned.find(request.qp_handle);
        QpCounterSets::Owner owner{call.c.pid, call.c.uid, call.c.pidns, call.c.ns_pid,
                                   call.c.command};
        const EngineQp* created = nullptr;
        if ((mine != owned.end() && mine->second.get() == qp) ||
            qp_owner(device, qp->qp_num(), owner, created))
            keys_.qp_counter_sets.qp_ready(device, qp->qp_num(), qp->type(), owner,
                                           qp->transport().counters());
    }
    reply_status(call, status);
}

void ControlServer::query_qp(Call& call) {
    di::QueryQpReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    if (EngineQp* qp = call.resources().find_qp(call.request<di::QueryQpRequest>().qp_handle))
        qp->query(r);
    else
        r.reply.status = EINVAL;
    reply(call, &r, sizeof(r));
}

void ControlServer::destroy_qp(Call& call) {
    reply_status(call, call.resources().destroy_qp(call.request<di::HandleRequest>().handle));
}

void ControlServer::attach_mcast(Call& call) {
    const auto& request = call.request<di::McastRequest>();
    reply_status(call, call.resources().attach_mcast(request.qp_handle, request.gid));
}

void ControlServer::detach_mcast(Call& call) {
    const auto& request = call.request<di::McastRequest>();
    reply_status(call, call.resources().detach_mcast(request.qp_handle, request.gid));
}

namespace {
// CreateSrq and ModifySrq answer alike: what the SRQ is now (and, from the caller, its
// ring's fd when the SRQ got a new ring: created, or resized).
di::CreateSrqReply srq_reply(const di::MessageHeader& header, int status, const EngineSrq* srq) {
    di::CreateSrqReply r{};
    r.reply.header = reply_header(header, sizeof(r));
    r.reply.status = status;
    if (status == 0) {
        r.srq_handle = srq->handle();
        r.srq_num = srq->srq_num();
        r.max_wr = srq->max_wr();
        r.max_sge = srq->max_sge();
        r.ring_bytes = srq->ring_bytes();
    }
    return r;
}
} // namespace

void ControlServer::create_srq(Call& call) {
    EngineSrq* srq = nullptr;
    const int status = call.resources().create_srq(call.request<di::CreateSrqRequest>(), srq);
    const di::CreateSrqReply r = srq_reply(call.header, status, srq);
    reply_sharing(call, &r, sizeof(r), status == 0 ? srq->share_ring() : -1);
}

void ControlServer::modify_srq(Call& call) {
    EngineSrq* srq = nullptr;
    bool new_ring = false;
    const int status =
        call.resources().modify_srq(call.request<di::ModifySrqRequest>(), srq, new_ring);
    const di::CreateSrqReply r = srq_reply(call.header, status, srq);
    reply_sharing(call, &r, sizeof(r), status == 0 && new_ring ? srq->share_ring() : -1);
}

void ControlServer::query_srq(Call& call) {
    di::QuerySrqReply q{};
    q.reply.header = reply_header(call.header, sizeof(q));
    if (EngineSrq* found = call.resources().find_srq(call.request<di::HandleRequest>().handle)) {
        q.max_wr = found->max_wr();
        q.max_sge = found->max_sge();
        q.srq_limit = found->queue().limit();
    } else {
        q.reply.status = EINVAL;
    }
    reply(call, &q, sizeof(q));
}

void ControlServer::destroy_srq(Call& call) {
    reply_status(call, call.resources().destroy_srq(call.request<di::HandleRequest>().handle));
}

} // namespace softhca::engine
