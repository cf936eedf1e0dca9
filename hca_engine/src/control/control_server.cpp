#include "control_server.hpp"

#include "client_descriptors.hpp"
#include "clock.hpp"
#include "control_messages.hpp"
#include "engine_qp.hpp"
#include "softhca/device_interface/async_event.hpp"
#include "softhca/device_interface/socket_io.hpp"
#include "softhca/transport/path_mtu.hpp"
#include "softhca/transport/roce_address.hpp"
#include "stall_watch.hpp"
#include "unix_listener.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <malloc.h>
#include <stdexcept>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace softhca::engine {

namespace di = device_interface;

namespace {

// The client's command name, as `softhca status` shows it. The client chooses it
// (prctl(PR_SET_NAME)): any byte but printable ASCII becomes '?', so it can neither
// break the JSON document (not UTF-8) nor put terminal escapes on an operator's screen.
std::string read_command_name(const PeerProcess& peer) {
    std::ifstream in(peer.path("comm"));
    std::string name;
    std::getline(in, name);
    for (char& ch : name)
        if (ch < 0x20 || ch > 0x7e)
            ch = '?';
    return name.empty() ? "?" : name;
}

} // namespace

ControlServer::ControlServer(const std::string& socket_path, const std::vector<Device>& devices,
                             PortSet& ports, std::string prefix)
    : socket_path_(socket_path), devices_(devices), ports_(ports), prefix_(std::move(prefix)) {
    for (size_t i = 0; i < devices.size(); ++i)
        wakeups_.push_back(::epoll_create1(EPOLL_CLOEXEC));
    keys_.set_device_count(devices.size());
    listen_fd_ = listen_seqpacket(socket_path);
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void ControlServer::add_device() {
    wakeups_.push_back(::epoll_create1(EPOLL_CLOEXEC));
    keys_.set_device_count(devices_.size());
}

void ControlServer::remove_device(size_t device) {
    for (auto it = connections_.begin(); it != connections_.end();) {
        if (it->second.device == static_cast<int>(device)) {
            paused_.forget(it->first);
            close_connection(it->second);
            connections_by_user_.give_back(it->second.account);
            it = connections_.erase(it);
        } else {
            ++it;
        }
    }
    if (wakeups_[device] >= 0)
        ::close(std::exchange(wakeups_[device], -1));
}

ControlServer::~ControlServer() {
    for (auto& [fd, connection] : connections_)
        close_connection(connection);
    if (listen_fd_ >= 0)
        ::close(listen_fd_);
    if (spare_fd_ >= 0)
        ::close(spare_fd_);
    for (int pipes : wakeups_)
        if (pipes >= 0)
            ::close(pipes);
    ::unlink(socket_path_.c_str());
}

namespace {

// The refusal of a connection the engine will not serve (a reply of sequence 0,
// control.hpp): the client's open fails with EMFILE, as too many open files would fail
// it, not with a broken connection. The caller closes `fd`.
void refuse_connection(int fd) {
    di::ReplyHeader refusal{};
    refusal.header.magic = di::kControlMagic;
    refusal.header.version = di::kControlVersion;
    refusal.header.length = sizeof(refusal);
    refusal.status = EMFILE;
    [[maybe_unused]] ssize_t sent = ::send(fd, &refusal, sizeof(refusal), MSG_DONTWAIT);
}

} // namespace

std::vector<int> ControlServer::accept_pending() {
    std::vector<int> accepted;
    // A bounded number per round (the listening socket stays readable for the rest), so
    // a flood of connections cannot hold the loop that serves everyone.
    for (unsigned round = 0; round < kAcceptsPerRound; ++round) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                // Out of descriptors: refuse the waiting client (with the descriptor
                // kept in reserve for this) rather than spin on a listening socket
                // that stays readable.
                ::close(spare_fd_);
                int refused = ::accept(listen_fd_, nullptr, nullptr);
                close_client_socket(refused); // its messages' descriptors: not here
                spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                ++refused_connections_;
                continue;
            }
            break;
        }
        Connection c;
        if (!c.peer.pin(fd)) {
            close_client_socket(fd); // gone before it could be pinned
            continue;
        }
        // Each connection costs the engine descriptors (its socket, the pidfd, the
        // process's /proc directory, later its queues' memfds): a user's are capped below
        // the engine's maximum (--limits user_connections), so one user cannot take the
        // descriptors every other client needs. Refused as the descriptors running out
        // refuses it: the client's open fails.
        if (connections_.size() >= kEngineMaxima.connections ||
            !connections_by_user_.take(c.peer.account, keys_.limits.user_connections)) {
            c.peer.release();
            refuse_connection(fd);
            close_client_socket(fd, c.peer.account);
            ++refused_connections_;
            continue;
        }
        c.fd = fd;
        c.pid = c.peer.pid;
        c.uid = c.peer.uid;
        c.account = c.peer.account;
        c.command = read_command_name(c.peer);
        c.peer.read_pid_namespace(c.pidns, c.ns_pid);
        connections_.emplace(fd, std::move(c));
        accepted.push_back(fd);
    }
    return accepted;
}

void ControlServer::close_connection(Connection& connection) {
    connection.resources.reset(); // destroys every object of the context
    connection.peer.release();
    if (connection.async_fd >= 0)
        close_client_descriptor(connection.async_fd, connection.account); // a client's pipe
    if (connection.doorbell_fd >= 0)
        ::close(connection.doorbell_fd); // leaves the epoll set with its last descriptor
    connection.doorbell_fd = -1;
    // Unwatched first: the sink may hold the socket's file on, and a registration would
    // outlive the descriptor. Messages may still be queued on it (an empty message reads
    // as its end, and so does a reset): their descriptors are released where the
    // socket's last reference goes.
    if (unwatch_)
        unwatch_(connection.fd);
    close_client_socket(connection.fd, connection.account);
    connection.async_fd = -1;
    connection.fd = -1;
}

Served ControlServer::handle_input(int fd) {
    auto it = connections_.find(fd);
    if (it == connections_.end())
        return Served::Closed;
    Connection& c = it->second;
    const uid_t account = c.account;
    const auto dispose = [account](int passed) { close_client_descriptor(passed, account); };
    alignas(8) char buffer[di::kMaxControlMessage];
    // Fair service: a few requests per connection per round (epoll, level-triggered,
    // brings the rest back next round), so one client that keeps sending cannot hold
    // the control path from the others or the data path.
    for (unsigned served = 0; served < kRequestsPerRound; ++served) {
        // A user whose descriptors wait to be closed (client_descriptors.hpp) sends no
        // more of them until they drain: its connections rest, everyone else's do not.
        if (paused_.pause_if_backed_up(fd, account))
            return Served::Paused;
        di::ReceivedMessage m =
            di::receive_message(fd, buffer, sizeof(buffer), MSG_DONTWAIT, dispose);
        if (m.size < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return Served::Open;
        if (m.size <= 0) {
            // An empty message may carry descriptors too.
            dispose(m.fd);
            dispose(m.second_fd);
            const bool had_context = c.resources != nullptr;
            close_connection(c);
            connections_by_user_.give_back(c.account);
            connections_.erase(it);
            if (had_context &&
                std::none_of(connections_.begin(), connections_.end(),
                             [](const auto& e) { return e.second.resources != nullptr; }))
                ::malloc_trim(0); // the last context is gone: give its heap back
            return Served::Closed;
        }
        if (m.truncated) {
            // Larger than any valid message: answer as garbage.
            dispose(m.fd);
            dispose(m.second_fd);
            di::MessageHeader none{};
            reply_status(c, none, EMSGSIZE);
            continue;
        }
        if (take_posted_work_)
            take_posted_work_();
        dispatch(c, buffer, static_cast<size_t>(m.size), m.fd, m.second_fd);
    }
    return Served::Open;
}

std::vector<int> ControlServer::resumed() {
    return paused_.resumed([this](int fd) -> std::optional<uid_t> {
        const auto it = connections_.find(fd);
        return it == connections_.end() ? std::nullopt : std::optional(it->second.account);
    });
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

void ControlServer::dispatch(Connection& c, const void* message, size_t size, int received_fd,
                             int second_fd) {
    // A request may reach client memory after the engine slept: look at liveness anew.
    ClientProcess::next_round();
    // Any descriptor not consumed by the handler is closed on the way out, without
    // waiting on whatever filesystem it may lie on (client_descriptors.hpp).
    struct FdGuard {
        int fd;
        uid_t account;
        ~FdGuard() { close_client_descriptor(fd, account); }
    } guard{received_fd, c.account}, second_guard{second_fd, c.account};

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
    const Method* method = method_for(header.opcode);
    if (!method) {
        // Nothing else before the device is open; after, an operation we do not have.
        reply_status(c, header, c.device < 0 ? ENODEV : EOPNOTSUPP);
        return;
    }
    if (method->needs_device && c.device < 0) {
        reply_status(c, header, ENODEV);
        return;
    }
    if (size != method->request_size) {
        reply_status(c, header, EBADMSG); // right opcode, wrong size
        return;
    }
    Call call{c, header, message, guard.fd, second_guard.fd};
    try {
        (this->*method->handler)(call);
    } catch (const std::exception& e) {
        // Whatever a request made go wrong (out of memory, a library's exception) fails
        // that request, never the engine that serves everyone.
        std::fprintf(stderr, "softhca-engine: request %u of pid %d failed: %s\n", header.opcode,
                     static_cast<int>(c.pid), e.what());
        reply_status(c, header, EIO);
    }
}

const PortInfo& ControlServer::port_of(const Connection& c) const {
    return ports_.info(devices_[static_cast<size_t>(c.device)].port_index);
}

void ControlServer::raise_device_event(size_t device_index, uint64_t element, uint32_t event_type) {
    di::AsyncEventRecord record{element, event_type, 0};
    for (auto& [fd, c] : connections_) {
        if (c.device != static_cast<int>(device_index) || c.async_fd < 0)
            continue;
        // Non-blocking: a process that never reads its events cannot stall the card; one
        // whose reader holds the pipe's lock on a FUSE page is the stall watch's.
        const StallWatch::Touch touch({c.peer.proc_dir, c.peer.account, c.peer.uid});
        [[maybe_unused]] ssize_t n = ::write(c.async_fd, &record, sizeof(record));
    }
}

} // namespace softhca::engine
