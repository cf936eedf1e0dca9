// The control server's queue requests: QPs, shared receive queues and multicast
// attachment. Each is validated by the resource tables; replies carry errno values.
#include "clock.hpp"
#include "control_messages.hpp"
#include "control_server.hpp"
#include "engine_qp.hpp"
#include "engine_srq.hpp"
#include "ports.hpp"

#include <cerrno>
#include <unistd.h>

namespace softhca::engine {

namespace di = device_interface;

const PortInfo& ControlServer::port_of(const Connection& c) const {
    return ports_.info(devices_[static_cast<size_t>(c.device)].port_index);
}

bool ControlServer::dispatch_qp(Connection& c, const di::MessageHeader& header, const void* message,
                                size_t size) {
    ContextResources& res = *c.resources;
    switch (static_cast<di::Opcode>(header.opcode)) {
    case di::Opcode::CreateQp:
    case di::Opcode::OpenQp: {
        // Both answer with the QP's handle here, its number, caps and ring.
        EngineQp* qp = nullptr;
        di::CreateQpReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        if (static_cast<di::Opcode>(header.opcode) == di::Opcode::CreateQp) {
            const auto* request = as<di::CreateQpRequest>(message, size);
            if (!request)
                break;
            r.reply.status = res.create_qp(*request, port_of(c), qp);
            if (qp)
                r.qp_handle = qp->handle();
        } else {
            const auto* request = as<di::OpenQpRequest>(message, size);
            if (!request)
                break;
            r.reply.status = res.open_qp(request->qp_num, request->xrcd_handle,
                                         request->user_handle, r.qp_handle, qp);
        }
        if (qp) {
            r.qp_num = qp->qp_num();
            r.caps = qp->caps();
            r.ring_bytes = qp->ring_bytes();
        }
        reply(c, &r, sizeof(r), qp ? qp->ring_fd() : -1);
        return true;
    }
    case di::Opcode::ModifyQp: {
        const auto* request = as<di::ModifyQpRequest>(message, size);
        if (!request)
            break;
        EngineQp* qp = res.find_qp(request->qp_handle);
        // A Q_Key with the high bit set is privileged (its high bit); like uverbs we
        // let only root (or the engine's own user) give one to a QP.
        if (qp && (request->attr_mask & transport::qp_attr::kQkey) &&
            (request->attr.qkey & 0x80000000u) && c.uid != 0 && c.uid != ::geteuid()) {
            reply_status(c, header, EPERM);
            return true;
        }
        reply_status(c, header, qp ? qp->modify(*request, port_of(c), monotonic_ns()) : EINVAL);
        return true;
    }
    case di::Opcode::QueryQp: {
        const auto* request = as<di::QueryQpRequest>(message, size);
        if (!request)
            break;
        di::QueryQpReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        if (EngineQp* qp = res.find_qp(request->qp_handle))
            qp->query(r);
        else
            r.reply.status = EINVAL;
        reply(c, &r, sizeof(r));
        return true;
    }
    case di::Opcode::DestroyQp: {
        const auto* request = as<di::HandleRequest>(message, size);
        if (!request)
            break;
        reply_status(c, header, res.destroy_qp(request->handle));
        return true;
    }
    case di::Opcode::AttachMcast:
    case di::Opcode::DetachMcast: {
        const auto* request = as<di::McastRequest>(message, size);
        if (!request)
            break;
        reply_status(c, header,
                     static_cast<di::Opcode>(header.opcode) == di::Opcode::AttachMcast
                         ? res.attach_mcast(request->qp_handle, request->gid)
                         : res.detach_mcast(request->qp_handle, request->gid));
        return true;
    }
    default:
        return dispatch_srq(c, header, message, size);
    }
    reply_status(c, header, EBADMSG);
    return true;
}

bool ControlServer::dispatch_srq(Connection& c, const di::MessageHeader& header,
                                 const void* message, size_t size) {
    ContextResources& res = *c.resources;
    // CreateSrq and ModifySrq answer alike: what the SRQ is now, and its ring's fd when
    // the SRQ got a new ring (created, or resized).
    auto reply_srq = [&](int status, const EngineSrq* srq, bool new_ring) {
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
        reply(c, &r, sizeof(r), status == 0 && new_ring ? srq->ring_fd() : -1);
    };
    switch (static_cast<di::Opcode>(header.opcode)) {
    case di::Opcode::CreateSrq: {
        const auto* request = as<di::CreateSrqRequest>(message, size);
        if (!request)
            break;
        EngineSrq* srq = nullptr;
        const int status = res.create_srq(*request, srq);
        reply_srq(status, srq, true);
        return true;
    }
    case di::Opcode::ModifySrq: {
        const auto* request = as<di::ModifySrqRequest>(message, size);
        if (!request)
            break;
        EngineSrq* srq = nullptr;
        bool new_ring = false;
        const int status = res.modify_srq(*request, srq, new_ring);
        reply_srq(status, srq, new_ring);
        return true;
    }
    case di::Opcode::QuerySrq: {
        const auto* request = as<di::HandleRequest>(message, size);
        if (!request)
            break;
        di::QuerySrqReply q{};
        q.reply.header = reply_header(header, sizeof(q));
        if (EngineSrq* found = res.find_srq(request->handle)) {
            q.max_wr = found->max_wr();
            q.max_sge = found->max_sge();
            q.srq_limit = found->queue().limit();
        } else {
            q.reply.status = EINVAL;
        }
        reply(c, &q, sizeof(q));
        return true;
    }
    case di::Opcode::DestroySrq:
    case di::Opcode::CloseXrcd: {
        const auto* request = as<di::HandleRequest>(message, size);
        if (!request)
            break;
        const bool srq = static_cast<di::Opcode>(header.opcode) == di::Opcode::DestroySrq;
        reply_status(c, header,
                     srq ? res.destroy_srq(request->handle) : res.close_xrcd(request->handle));
        return true;
    }
    default:
        return false;
    }
    reply_status(c, header, EBADMSG); // right opcode, wrong size
    return true;
}

} // namespace softhca::engine
