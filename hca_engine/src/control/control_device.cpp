// The control server's device requests: opening a device (a context), querying it and
// its port, the context's doorbell page, the engine's status and an administrator's
// port state. Handlers get requests of their exact size (control_methods.cpp).
#include "client_descriptors.hpp"
#include "control_messages.hpp"
#include "control_server.hpp"

#include "engine_qp.hpp"
#include "shared_memory.hpp"
#include "softhca/device_interface/async_event.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/capability.h>
#include <optional>
#include <string>
#include <sys/epoll.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace softhca::engine {

namespace di = device_interface;

std::optional<size_t> ControlServer::device_named(const char (&field)[di::kMaxDeviceName]) const {
    const std::string name(field, strnlen(field, sizeof(field)));
    for (size_t i = 0; i < devices_.size(); ++i)
        if (devices_[i].name == name && !devices_[i].removed)
            return i;
    return std::nullopt;
}

void ControlServer::open_device(Call& call) {
    const auto& request = call.request<di::OpenDeviceRequest>();
    Connection& c = call.c;
    if (c.device >= 0) {
        reply_status(call, EEXIST);
        return;
    }
    if (request.provider_abi != di::kControlVersion) {
        reply_status(call, EPROTO);
        return;
    }
    const std::optional<size_t> found = device_named(request.device_name);
    if (!found) {
        reply_status(call, ENODEV);
        return;
    }
    const int index = static_cast<int>(*found);
    // The async event pipe must come along; the engine writes through a description of
    // its own (client_descriptors.hpp).
    const int async_fd = adopt_client_pipe(std::exchange(call.fd, -1),
                                           {c.peer.proc_dir, c.peer.account, c.peer.uid});
    if (async_fd < 0) {
        reply_status(call, EBADF);
        return;
    }
    // The memory the context reaches: the process's own /proc/self/mem (client_process.hpp).
    std::shared_ptr<ClientProcess> client;
    if (int err = ClientProcess::adopt(c.peer, call.second_fd, request.probe_addr, request.probe,
                                       client)) {
        close_client_descriptor(async_fd, c.account);
        reply_status(call, err);
        return;
    }
    call.second_fd = -1;
    client->set_connection(c.fd);
    try {
        c.resources = std::make_unique<ContextResources>(std::move(client), keys_,
                                                         static_cast<size_t>(index));
        c.resources->set_pid_namespace(c.pidns, c.ns_pid);
    } catch (const std::system_error& e) {
        close_client_descriptor(async_fd, c.account);
        reply_status(call, e.code().value()); // no memory for its doorbell page
        return;
    }
    // The context's own doorbell pipe: the provider gets the write end, the engine keeps
    // the read end (a description no client holds), watched through wakeup_fd(device).
    int doorbell[2];
    if (::pipe2(doorbell, O_NONBLOCK | O_CLOEXEC) != 0) {
        const int err = errno;
        close_client_descriptor(async_fd, c.account);
        c.resources.reset();
        reply_status(call, err);
        return;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = doorbell[0];
    ::epoll_ctl(wakeups_[static_cast<size_t>(index)], EPOLL_CTL_ADD, doorbell[0], &ev);
    c.doorbell_fd = doorbell[0];
    c.device = index;
    c.async_fd = async_fd;
    c.context_id = next_context_id_++;
    c.resources->set_async_fd(c.async_fd);
    di::OpenDeviceReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.context_id = c.context_id;
    r.phys_port_cnt = 1;
    reply(call, &r, sizeof(r), doorbell[1]);
    ::close(doorbell[1]);
}

void ControlServer::query_device(Call& call) {
    di::QueryDeviceReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.attr = device_attributes(devices_[static_cast<size_t>(call.c.device)]);
    reply(call, &r, sizeof(r));
}

void ControlServer::query_port(Call& call) {
    if (call.request<di::QueryPortRequest>().port_num != 1) {
        reply_status(call, EINVAL);
        return;
    }
    di::QueryPortReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.attr = port_attributes(port_of(call.c));
    reply(call, &r, sizeof(r));
}

void ControlServer::map_doorbells(Call& call) {
    Doorbells& doorbells = call.resources().doorbells();
    di::MapDoorbellsReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.bytes = static_cast<uint32_t>(doorbells.bytes());
    r.slots = di::kDoorbellSlots;
    reply_sharing(call, &r, sizeof(r), doorbells.share());
}

void ControlServer::engine_status(Call& call) {
    const StatusDocument doc = status_document_for(&call.c);
    const bool text = static_cast<di::Opcode>(call.header.opcode) == di::Opcode::EngineStatus;
    // Strings come from clients: anything not UTF-8 is replaced, never thrown on.
    const std::string body =
        text ? status_text(doc)
             : doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    SharedMemory file;
    if (int err = file.create("softhca-status", std::max<size_t>(body.size(), 1))) {
        reply_status(call, err);
        return;
    }
    std::memcpy(file.data(), body.data(), body.size());
    di::StatusReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.bytes = body.size();
    reply_sharing(call, &r, sizeof(r), file.share());
}

void ControlServer::set_port_state(Call& call) {
    const auto& request = call.request<di::SetPortStateRequest>();
    if (call.c.uid != 0 && call.c.uid != ::geteuid()) {
        reply_status(call, EPERM);
        return;
    }
    const std::optional<size_t> device = device_named(request.device_name);
    if (!device) {
        reply_status(call, ENODEV);
        return;
    }
    if (request.port_num != 1 || request.up > 1) {
        reply_status(call, EINVAL);
        return;
    }
    const size_t port = devices_[*device].port_index;
    // Grants hold while the path is as it was when they were given.
    for (auto& [fd, other] : connections_)
        if (other.resources)
            other.resources->revoke_grants();
    if (ports_.set_admin_state(port, request.up != 0))
        raise_device_event(*device, 1,
                           ports_.info(port).link_up ? di::kEventPortActive : di::kEventPortErr);
    reply_status(call, 0);
}

void ControlServer::set_fabric_link(Call& call) {
    const auto& request = call.request<di::SetFabricLinkRequest>();
    if (call.c.uid != 0 && call.c.uid != ::geteuid()) {
        reply_status(call, EPERM);
        return;
    }
    if (request.up > 1) {
        reply_status(call, EINVAL);
        return;
    }
    const auto name = [](const char(&text)[32]) { return std::string(text, strnlen(text, 32)); };
    std::vector<bool> was_up;
    for (size_t i = 0; i < ports_.size(); ++i)
        was_up.push_back(ports_.info(i).link_up);
    if (const int error =
            ports_.set_fabric_link(name(request.node_a), name(request.node_b), request.up != 0)) {
        reply_status(call, error);
        return;
    }
    // A NIC's link is its device's port: PORT_ERR and PORT_ACTIVE as with `softhca port`.
    for (size_t i = 0; i < devices_.size(); ++i) {
        const size_t port = devices_[i].port_index;
        if (!devices_[i].removed && ports_.info(port).link_up != was_up[port])
            raise_device_event(
                i, 1, ports_.info(port).link_up ? di::kEventPortActive : di::kEventPortErr);
    }
    reply_status(call, 0);
}

bool ControlServer::network_administrator(const Connection& c) {
    // The engine's own user when that is not root, or root with CAP_NET_ADMIN, which the
    // kernel's RDMA netlink asks of these requests (RDMA_NL_ADMIN_PERM).
    return (c.uid != 0 && c.uid == ::geteuid()) || c.peer.root_with_capability(CAP_NET_ADMIN);
}

void ControlServer::link(Call& call) {
    const auto& request = call.request<di::LinkRequest>();
    if (!network_administrator(call.c)) {
        reply_status(call, EPERM);
        return;
    }
    // Not on a connection that has a device open: deleting that device would close the
    // connection the reply goes out on.
    if (call.c.device >= 0) {
        reply_status(call, EINVAL);
        return;
    }
    const size_t name_length = strnlen(request.device_name, sizeof(request.device_name));
    const size_t netdev_length = strnlen(request.netdev, sizeof(request.netdev));
    if (name_length == sizeof(request.device_name) || netdev_length == sizeof(request.netdev)) {
        reply_status(call, EINVAL); // not NUL-terminated
        return;
    }
    if (!link_handler_) {
        reply_status(call, EOPNOTSUPP);
        return;
    }
    const bool add = call.header.opcode == static_cast<uint16_t>(di::Opcode::LinkAdd);
    reply_status(call, link_handler_(add, std::string(request.device_name, name_length),
                                     std::string(request.netdev, netdev_length)));
}

bool ControlServer::qp_owner(size_t device, uint32_t qpn, QpCounterSets::Owner& owner,
                             const EngineQp*& qp) const {
    for (const auto& [fd, c] : connections_) {
        if (!c.resources || c.device != static_cast<int>(device))
            continue;
        for (const auto& [handle, owned] : c.resources->qps())
            if (owned->qp_num() == qpn) {
                owner = {c.pid, c.uid, c.pidns, c.ns_pid, c.command};
                qp = owned.get();
                return true;
            }
    }
    return false;
}

void ControlServer::qp_counter(Call& call) {
    const auto& request = call.request<di::QpCounterRequest>();
    di::QpCounterReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.qpn = request.qpn;
    const auto answer = [&](int status) {
        r.reply.status = status;
        reply(call, &r, sizeof(r));
    };
    if (!network_administrator(call.c))
        return answer(EPERM);
    const std::optional<size_t> found = device_named(request.device_name);
    if (!found)
        return answer(ENODEV);
    const size_t device = *found;
    QpCounterSets& sets = keys_.qp_counter_sets;
    if (request.op == di::kQpCounterSetAuto)
        return answer(sets.set_auto(device, request.auto_mask));
    if (request.op != di::kQpCounterBind && request.op != di::kQpCounterUnbind)
        return answer(EINVAL);
    QpCounterSets::Owner owner;
    const EngineQp* qp = nullptr;
    if (!qp_owner(device, request.qpn, owner, qp))
        return answer(ENOENT);
    if (request.op == di::kQpCounterUnbind)
        return answer(
            sets.unbind(device, request.qpn, request.counter_id, qp->transport().counters()));
    const int status = sets.bind(device, request.qpn, qp->type(), owner, qp->transport().counters(),
                                 request.new_counter != 0, request.counter_id, r.counter_id);
    answer(status);
}

} // namespace softhca::engine
