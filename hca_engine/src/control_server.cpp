#include "control_server.hpp"

#include "clock.hpp"
#include "control_messages.hpp"
#include "engine_qp.hpp"
#include "softhca/device_interface/async_event.hpp"
#include "softhca/device_interface/socket_io.hpp"
#include "softhca/transport/path_mtu.hpp"
#include "softhca/transport/roce_address.hpp"
#include "unix_listener.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace softhca::engine {

namespace di = device_interface;

namespace {

std::string read_command_name(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    std::getline(in, name);
    return name.empty() ? "?" : name;
}

// CreateCq's channel: the flag and the descriptor come together, and the descriptor is
// a pipe (a write to anything else could block the card).
bool valid_channel_request(uint32_t flags, int fd) {
    if ((flags & ~(di::kCreateCqChannel | di::kCreateCqTimestamps)) ||
        ((flags & di::kCreateCqChannel) != 0) != (fd >= 0))
        return false;
    struct stat st {};
    return fd < 0 || (::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode));
}

} // namespace

ControlServer::ControlServer(const std::string& socket_path, const std::vector<Device>& devices,
                             PortSet& ports, std::string prefix, int doorbell_fd)
    : socket_path_(socket_path), devices_(devices), ports_(ports), prefix_(std::move(prefix)),
      doorbell_fd_(doorbell_fd) {
    keys_.set_device_count(devices.size());
    listen_fd_ = listen_seqpacket(socket_path);
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

ControlServer::~ControlServer() {
    for (auto& [fd, connection] : connections_)
        close_connection(connection);
    if (listen_fd_ >= 0)
        ::close(listen_fd_);
    if (spare_fd_ >= 0)
        ::close(spare_fd_);
    ::unlink(socket_path_.c_str());
}

std::vector<int> ControlServer::accept_pending() {
    std::vector<int> accepted;
    for (;;) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                // Out of descriptors: refuse the waiting client (with the descriptor
                // kept in reserve for this) rather than spin on a listening socket
                // that stays readable.
                ::close(spare_fd_);
                int refused = ::accept(listen_fd_, nullptr, nullptr);
                if (refused >= 0)
                    ::close(refused);
                spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                ++refused_connections_;
                continue;
            }
            break;
        }
        ucred cred{};
        socklen_t len = sizeof(cred);
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
            ::close(fd);
            continue;
        }
        Connection c;
        c.fd = fd;
        c.pid = cred.pid;
        c.uid = cred.uid;
        c.command = read_command_name(cred.pid);
        connections_.emplace(fd, std::move(c));
        accepted.push_back(fd);
    }
    return accepted;
}

void ControlServer::close_connection(Connection& connection) {
    connection.resources.reset(); // destroys every object of the context
    if (connection.async_fd >= 0)
        ::close(connection.async_fd);
    ::close(connection.fd);
    connection.async_fd = -1;
    connection.fd = -1;
}

bool ControlServer::handle_input(int fd) {
    auto it = connections_.find(fd);
    if (it == connections_.end())
        return false;
    Connection& c = it->second;
    alignas(8) char buffer[di::kMaxControlMessage];
    for (;;) {
        di::ReceivedMessage m = di::receive_message(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
        if (m.size < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        if (m.size <= 0) {
            close_connection(c);
            connections_.erase(it);
            return false;
        }
        if (m.truncated) {
            // Larger than any valid message: answer as garbage.
            if (m.fd >= 0)
                ::close(m.fd);
            di::MessageHeader none{};
            reply_status(c, none, EMSGSIZE);
            continue;
        }
        dispatch(c, buffer, static_cast<size_t>(m.size), m.fd);
    }
}

void ControlServer::reply(Connection& c, const void* message, size_t size, int fd_to_pass) {
    // A client that stopped reading only hurts itself; its socket buffer is ample for
    // one outstanding reply, so a failure here means it is going away.
    di::send_message(c.fd, message, size, fd_to_pass);
}

void ControlServer::reply_status(Connection& c, const di::MessageHeader& request, int status) {
    di::ReplyHeader r{};
    r.header = reply_header(request, sizeof(r));
    r.status = status;
    reply(c, &r, sizeof(r));
}

void ControlServer::dispatch(Connection& c, const void* message, size_t size, int received_fd) {
    // Any descriptor not consumed below is closed on the way out.
    struct FdGuard {
        int fd;
        ~FdGuard() {
            if (fd >= 0)
                ::close(fd);
        }
    } guard{received_fd};

    di::MessageHeader header{};
    if (size < sizeof(header)) {
        reply_status(c, header, EBADMSG);
        return;
    }
    std::memcpy(&header, message, sizeof(header));
    if (header.magic != di::kControlMagic || header.length != size) {
        reply_status(c, header, EBADMSG);
        return;
    }
    if (header.version != di::kControlVersion) {
        reply_status(c, header, EPROTO);
        return;
    }
    const auto opcode = static_cast<di::Opcode>(header.opcode);

    if (opcode == di::Opcode::EngineStatus || opcode == di::Opcode::EngineStatusJson) {
        const StatusDocument doc = status_document();
        const std::string text = opcode == di::Opcode::EngineStatus ? status_text(doc) : doc.dump();
        std::vector<char> out(sizeof(di::ReplyHeader) + text.size());
        if (out.size() > di::kMaxControlMessage * 64)
            out.resize(di::kMaxControlMessage * 64);
        di::ReplyHeader r{};
        r.header = reply_header(header, static_cast<uint32_t>(out.size()));
        std::memcpy(out.data(), &r, sizeof(r));
        std::memcpy(out.data() + sizeof(r), text.data(), out.size() - sizeof(r));
        reply(c, out.data(), out.size());
        return;
    }

    if (opcode == di::Opcode::SetPortState) {
        set_port_state(c, message, size);
        return;
    }

    if (opcode == di::Opcode::OpenDevice) {
        const auto* request = as<di::OpenDeviceRequest>(message, size);
        if (!request) {
            reply_status(c, header, EBADMSG);
            return;
        }
        if (c.device >= 0) {
            reply_status(c, header, EEXIST);
            return;
        }
        if (request->provider_abi != di::kControlVersion) {
            reply_status(c, header, EPROTO);
            return;
        }
        const std::string name(request->device_name,
                               strnlen(request->device_name, sizeof(request->device_name)));
        int index = -1;
        for (size_t i = 0; i < devices_.size(); ++i)
            if (devices_[i].name == name)
                index = static_cast<int>(i);
        if (index < 0) {
            reply_status(c, header, ENODEV);
            return;
        }
        if (guard.fd < 0 || ::fcntl(guard.fd, F_SETFL, O_NONBLOCK) != 0) {
            reply_status(c, header, EBADF); // the async event pipe must come along
            return;
        }
        try {
            c.resources =
                std::make_unique<ContextResources>(c.pid, keys_, static_cast<size_t>(index));
        } catch (const std::system_error& e) {
            reply_status(c, header, e.code().value()); // no memory for its doorbell page
            return;
        }
        c.device = index;
        c.async_fd = std::exchange(guard.fd, -1);
        c.context_id = next_context_id_++;
        c.resources->set_async_fd(c.async_fd);
        di::OpenDeviceReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        r.context_id = c.context_id;
        r.phys_port_cnt = 1;
        reply(c, &r, sizeof(r), doorbell_fd_);
        return;
    }

    if (c.device < 0) {
        reply_status(c, header, ENODEV); // nothing else before the device is open
        return;
    }
    const Device& device = devices_[static_cast<size_t>(c.device)];
    ContextResources& res = *c.resources;

    if (opcode == di::Opcode::OpenXrcd) {
        const auto* request = as<di::OpenXrcdRequest>(message, size);
        if (!request) {
            reply_status(c, header, EBADMSG);
            return;
        }
        di::HandleReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        r.reply.status =
            request->with_fd && guard.fd < 0
                ? EBADF
                : res.open_xrcd(request->with_fd ? guard.fd : -1, request->oflags, r.handle);
        reply(c, &r, sizeof(r));
        return;
    }
    if (dispatch_qp(c, header, message, size))
        return;

    switch (opcode) {
    case di::Opcode::QueryDevice: {
        if (size != sizeof(di::MessageHeader))
            break;
        di::QueryDeviceReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        r.attr = device_attributes(device);
        reply(c, &r, sizeof(r));
        return;
    }
    case di::Opcode::MapDoorbells: {
        if (size != sizeof(di::MessageHeader))
            break;
        di::MapDoorbellsReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        r.bytes = static_cast<uint32_t>(res.doorbells().bytes());
        r.slots = di::kDoorbellSlots;
        reply(c, &r, sizeof(r), res.doorbells().fd());
        return;
    }
    case di::Opcode::QueryPort: {
        const auto* request = as<di::QueryPortRequest>(message, size);
        if (!request)
            break;
        if (request->port_num != 1) {
            reply_status(c, header, EINVAL);
            return;
        }
        di::QueryPortReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        r.attr = port_attributes(ports_.info(device.port_index));
        reply(c, &r, sizeof(r));
        return;
    }
    case di::Opcode::AllocPd: {
        if (size != sizeof(di::MessageHeader))
            break;
        di::HandleReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        r.reply.status = res.alloc_pd(r.handle);
        reply(c, &r, sizeof(r));
        return;
    }
    case di::Opcode::DeallocPd:
    case di::Opcode::DeregMr:
    case di::Opcode::DeallocMw:
    case di::Opcode::DestroyCq: {
        const auto* request = as<di::HandleRequest>(message, size);
        if (!request)
            break;
        int status = opcode == di::Opcode::DeallocPd   ? res.dealloc_pd(request->handle)
                     : opcode == di::Opcode::DeregMr   ? res.dereg_mr(request->handle)
                     : opcode == di::Opcode::DeallocMw ? res.dealloc_mw(request->handle)
                                                       : res.destroy_cq(request->handle);
        reply_status(c, header, status);
        return;
    }
    case di::Opcode::RegMr:
    case di::Opcode::ReregMr: {
        RegisteredMr mr{};
        di::RegMrReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        if (opcode == di::Opcode::RegMr) {
            const auto* request = as<di::RegMrRequest>(message, size);
            if (!request)
                break;
            r.reply.status = res.reg_mr(*request, mr);
        } else {
            const auto* request = as<di::ReregMrRequest>(message, size);
            if (!request)
                break;
            r.reply.status = res.rereg_mr(*request, mr);
        }
        r.mr_handle = mr.handle;
        r.lkey = mr.lkey;
        r.rkey = mr.rkey;
        reply(c, &r, sizeof(r));
        return;
    }
    case di::Opcode::AllocDm: {
        const auto* request = as<di::AllocDmRequest>(message, size);
        if (!request)
            break;
        const DeviceMemory* dm = nullptr;
        di::AllocDmReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        r.reply.status = res.alloc_dm(request->length, request->log_align_req, r.dm_handle, dm);
        if (dm)
            r.bytes = dm->memory.bytes();
        reply(c, &r, sizeof(r), dm ? dm->memory.fd() : -1);
        return;
    }
    case di::Opcode::FreeDm: {
        const auto* request = as<di::HandleRequest>(message, size);
        if (!request)
            break;
        reply_status(c, header, res.free_dm(request->handle));
        return;
    }
    case di::Opcode::RegDmMr: {
        const auto* request = as<di::RegDmMrRequest>(message, size);
        if (!request)
            break;
        RegisteredMr mr{};
        di::RegMrReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        r.reply.status = res.reg_dm_mr(*request, mr);
        r.mr_handle = mr.handle;
        r.lkey = mr.lkey;
        r.rkey = mr.rkey;
        reply(c, &r, sizeof(r));
        return;
    }
    case di::Opcode::AllocMw: {
        const auto* request = as<di::AllocMwRequest>(message, size);
        if (!request)
            break;
        di::AllocMwReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        r.reply.status = res.alloc_mw(request->pd_handle, request->type, r.mw_handle, r.rkey);
        reply(c, &r, sizeof(r));
        return;
    }
    case di::Opcode::CreateCq:
    case di::Opcode::ResizeCq: {
        const CompletionQueue* cq = nullptr;
        di::CreateCqReply r{};
        r.reply.header = reply_header(header, sizeof(r));
        if (opcode == di::Opcode::CreateCq) {
            const auto* request = as<di::CreateCqRequest>(message, size);
            if (!request)
                break;
            if (!valid_channel_request(request->flags, guard.fd)) {
                reply_status(c, header, EINVAL);
                return;
            }
            r.reply.status =
                res.create_cq(request->cqe, request->comp_vector, request->user_handle,
                              CompletionChannel(std::exchange(guard.fd, -1)), r.cq_handle, cq,
                              (request->flags & di::kCreateCqTimestamps) != 0);
        } else {
            const auto* request = as<di::ResizeCqRequest>(message, size);
            if (!request)
                break;
            r.cq_handle = request->cq_handle;
            r.reply.status = res.resize_cq(request->cq_handle, request->cqe, cq);
        }
        if (cq) {
            r.cqe = cq->cqe;
            r.ring_bytes = cq->ring.bytes();
        }
        reply(c, &r, sizeof(r), cq ? cq->ring.fd() : -1);
        return;
    }
    default:
        reply_status(c, header, EOPNOTSUPP);
        return;
    }
    reply_status(c, header, EBADMSG); // right opcode, wrong size
}

void ControlServer::set_port_state(Connection& c, const void* message, size_t size) {
    const auto* request = as<di::SetPortStateRequest>(message, size);
    if (!request) {
        reply_status(c, *static_cast<const di::MessageHeader*>(message), EBADMSG);
        return;
    }
    if (c.uid != 0 && c.uid != ::geteuid()) {
        reply_status(c, request->header, EPERM);
        return;
    }
    const std::string name(request->device_name,
                           strnlen(request->device_name, sizeof(request->device_name)));
    for (size_t i = 0; i < devices_.size(); ++i) {
        if (devices_[i].name != name)
            continue;
        if (request->port_num != 1 || request->up > 1) {
            reply_status(c, request->header, EINVAL);
            return;
        }
        const size_t port = devices_[i].port_index;
        if (ports_.set_admin_state(port, request->up != 0))
            raise_device_event(
                i, 1, ports_.info(port).link_up ? di::kEventPortActive : di::kEventPortErr);
        reply_status(c, request->header, 0);
        return;
    }
    reply_status(c, request->header, ENODEV);
}

void ControlServer::raise_device_event(size_t device_index, uint64_t element, uint32_t event_type) {
    di::AsyncEventRecord record{element, event_type, 0};
    for (auto& [fd, c] : connections_) {
        if (c.device != static_cast<int>(device_index) || c.async_fd < 0)
            continue;
        // Non-blocking: a process that never reads its events cannot stall the card.
        [[maybe_unused]] ssize_t n = ::write(c.async_fd, &record, sizeof(record));
    }
}

} // namespace softhca::engine
