// rdma_cm files, ids, commands and events: the kernel's rdma_ucm (drivers/infiniband/
// core/ucma.c) and the address and route part of its rdma_cm, over the engine's ports.
#include "rdma_cm_server.hpp"

#include "client_descriptors.hpp"
#include "client_process.hpp"

#include "socket_addresses.hpp"
#include "stall_watch.hpp"
#include "unix_listener.hpp"

#include "clock.hpp"
#include "softhca/device_interface/rdma_cm.hpp"
#include "softhca/device_interface/socket_io.hpp"
#include "softhca/transport/path_mtu.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <rdma/ib_user_verbs.h>
#include <sstream>
#include <stdexcept>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace softhca::engine {

namespace di = device_interface;
namespace tp = transport;

namespace {

// The IB CM's timers and retries, as the kernel's unless the environment says otherwise.
tp::CmConfig cm_config_from_environment() {
    tp::CmConfig config;
    if (const char* t = std::getenv("SOFTHCA_CM_RESPONSE_TIMEOUT"))
        config.response_timeout = static_cast<uint8_t>(std::clamp(std::atoi(t), 8, 31));
    if (const char* r = std::getenv("SOFTHCA_CM_MAX_RETRIES"))
        config.max_retries = static_cast<unsigned>(std::clamp(std::atoi(r), 0, 15));
    if (const char* l = std::getenv("SOFTHCA_CM_PACKET_LIFE"))
        config.packet_life = static_cast<uint8_t>(std::clamp(std::atoi(l), 8, 31));
    return config;
}

} // namespace

RdmaCmServer::RdmaCmServer(const std::string& socket_path, const std::vector<Device>& devices,
                           const PortSet& ports, MadSender& wire)
    : socket_path_(socket_path), devices_(devices), ports_(ports), wire_(wire),
      random_(std::random_device{}()),
      cm_(*this, cm_config_from_environment(), std::random_device{}()) {
    trace_ = std::getenv("SOFTHCA_RDMA_CM_TRACE") != nullptr;
    listen_fd_ = listen_seqpacket(socket_path);
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

RdmaCmServer::~RdmaCmServer() {
    for (auto& [fd, file] : files_) {
        close_client_socket(file->fd, file->account);
        close_client_descriptor(file->pipe, file->account);
    }
    ::close(listen_fd_);
    if (spare_fd_ >= 0)
        ::close(spare_fd_);
    ::unlink(socket_path_.c_str());
}

namespace {

// The answer to the Open a refused client sends first: its open(2) fails EMFILE. The
// caller closes `fd`.
void refuse_open(int fd) {
    di::RdmaCmReply refusal{};
    refusal.header.magic = di::kRdmaCmMagic;
    refusal.header.version = di::kRdmaCmVersion;
    refusal.header.op = static_cast<uint16_t>(di::RdmaCmOp::Open);
    refusal.header.length = sizeof(refusal);
    refusal.result = -EMFILE;
    [[maybe_unused]] ssize_t sent = ::send(fd, &refusal, sizeof(refusal), MSG_DONTWAIT);
}

} // namespace

std::vector<int> RdmaCmServer::accept_pending() {
    std::vector<int> accepted;
    // A bounded number per round: the listening socket stays readable for the rest.
    for (unsigned round = 0; round < 64; ++round) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
            // Out of descriptors: refuse the waiting client with the one kept in reserve,
            // rather than spin on a listening socket that stays readable.
            ::close(spare_fd_);
            const int refused = ::accept(listen_fd_, nullptr, nullptr);
            close_client_socket(refused); // its messages' descriptors: not here
            spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
            continue;
        }
        if (fd < 0)
            break;
        PeerProcess peer; // client_process.hpp
        if (!peer.pin(fd)) {
            close_client_socket(fd); // gone before it could be pinned
            continue;
        }
        // A user's files are capped below the engine's maximum (--limits user_cm_files):
        // past either the open is refused, the connection closed.
        if (files_.size() >= kEngineMaxima.cm_files ||
            !files_by_user_.take(peer.account, limits_.user_cm_files)) {
            peer.release();
            refuse_open(fd);
            close_client_socket(fd, peer.account);
            ++counters_.refused_files;
            continue;
        }
        auto file = std::make_unique<CmFile>();
        file->fd = fd;
        file->pid = peer.pid;
        file->uid = peer.uid;
        file->account = peer.account;
        peer.read_pid_namespace(file->pidns, file->ns_pid);
        file->host = host_of_socket(fd);
        // Root only: a CapEff of CAP_NET_BIND_SERVICE may be a user namespace's.
        file->privileged_ports = peer.uid == 0;
        peer.release();
        files_.emplace(fd, std::move(file));
        accepted.push_back(fd);
    }
    return accepted;
}

// The fabric host whose network namespace a client's socket is in: the accepted end of a
// Unix socket is made in its client's namespace (SIOCGSKNS names it).
int RdmaCmServer::host_of_socket(int fd) const {
    if (!host_of_namespace_)
        return -1;
    const int ns = ::ioctl(fd, SIOCGSKNS);
    if (ns < 0)
        return -1;
    struct stat st {};
    const int host = ::fstat(ns, &st) == 0 ? host_of_namespace_(st.st_dev, st.st_ino) : -1;
    ::close(ns);
    return host;
}

void RdmaCmServer::close_file(CmFile& file) {
    // As closing the kernel's file: every id of it is destroyed, connections torn down,
    // in O(its ids): its events go at once (nobody will read them), then each id of its
    // own set. By handle, looked up again before each: destroying a listener destroys the
    // requests it had not reported yet, which are this file's too (a pointer kept to one
    // of them was used after it was freed; fuzz_rdma_cm found it).
    std::vector<uint32_t> unreported;
    for (const CmEvent& e : file.events)
        if (e.resp.event == kEventConnectRequest)
            unreported.push_back(e.resp.id);
    events_by_user_.give_back(file.account, file.events.size());
    file.events.clear();
    for (uint32_t child : unreported)
        if (auto it = ids_.find(child); it != ids_.end() && it->second->file == &file)
            destroy_id(*it->second);
    while (!file.ids.empty()) {
        auto it = ids_.find(*file.ids.begin());
        if (it == ids_.end() || it->second->file != &file) {
            file.ids.erase(file.ids.begin()); // not expected: the set follows the ids
            continue;
        }
        destroy_id(*it->second);
    }
    if (unwatch_)
        unwatch_(file.fd); // first: the file may outlive the descriptor, in the sink
    close_client_socket(file.fd, file.account); // messages may still be queued on it
    if (file.pipe >= 0) {
        auto [first, last] = files_by_pipe_.equal_range(file.pipe_inode);
        for (auto it = first; it != last; ++it)
            if (it->second == &file) {
                files_by_pipe_.erase(it);
                break;
            }
        close_client_descriptor(file.pipe, file.account); // a client's pipe
    }
    files_by_user_.give_back(file.account);
}

Served RdmaCmServer::handle_input(int fd) {
    auto it = files_.find(fd);
    if (it == files_.end())
        return Served::Closed;
    CmFile& file = *it->second;
    const uid_t account = file.account;
    const auto dispose = [account](int passed) { close_client_descriptor(passed, account); };
    alignas(8) uint8_t buffer[di::kMaxRdmaCmMessage];
    // A few commands per file per round, as the control server serves its connections.
    for (unsigned served = 0; served < 16; ++served) {
        // ... and rests the files of a user whose descriptors wait to be closed
        // (client_descriptors.hpp).
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
            close_file(file);
            files_.erase(it);
            return Served::Closed;
        }
        int passed = -1; // a command's descriptor (MIGRATE_ID's), closed once it is served
        if (m.fd >= 0) {
            // Open brings the event pipe, which must be a pipe. The engine reads and
            // writes it through a description of its own (client_descriptors.hpp), so the
            // client cannot make it block.
            di::RdmaCmHeader h{};
            std::memcpy(&h, buffer, std::min<size_t>(sizeof(h), static_cast<size_t>(m.size)));
            if (file.pipe < 0 && h.op == static_cast<uint16_t>(di::RdmaCmOp::Open)) {
                file.pipe = adopt_client_pipe(m.fd, {-1, file.account, file.uid}, true);
                if (file.pipe >= 0 && (file.pipe_inode = anonymous_pipe_inode(file.pipe)))
                    files_by_pipe_.emplace(file.pipe_inode, &file);
            } else if (h.op == static_cast<uint16_t>(di::RdmaCmOp::Command)) {
                passed = m.fd;
            } else {
                dispose(m.fd);
            }
        }
        dispose(m.second_fd);
        if (m.truncated) {
            dispose(passed);
            di::RdmaCmReply reply{};
            reply.header.magic = di::kRdmaCmMagic;
            reply.header.version = di::kRdmaCmVersion;
            reply.header.length = sizeof(reply);
            reply.result = -EINVAL;
            di::send_message(fd, &reply, sizeof(reply));
            continue;
        }
        dispatch(file, buffer, static_cast<size_t>(m.size), passed);
        dispose(passed);
    }
    return Served::Open;
}

std::vector<int> RdmaCmServer::resumed() {
    return paused_.resumed([this](int fd) -> std::optional<uid_t> {
        const auto it = files_.find(fd);
        return it == files_.end() ? std::nullopt : std::optional(it->second->account);
    });
}

void RdmaCmServer::dispatch(CmFile& file, const uint8_t* message, size_t size, int passed_fd) {
    di::RdmaCmHeader header{};
    std::memcpy(&header, message, std::min(size, sizeof(header)));
    di::RdmaCmReply reply{};
    reply.header = header;
    reply.header.length = sizeof(reply);
    Reply out;
    if (size < sizeof(header) || header.magic != di::kRdmaCmMagic || header.length != size) {
        reply.result = -EBADMSG;
    } else if (header.version != di::kRdmaCmVersion) {
        reply.result = -EPROTO;
    } else if (header.op == static_cast<uint16_t>(di::RdmaCmOp::Open)) {
        di::RdmaCmOpen open{};
        if (size != sizeof(open) || file.pipe < 0) {
            reply.result = -EBADMSG;
        } else {
            reply.result = 0;
        }
    } else if (header.op == static_cast<uint16_t>(di::RdmaCmOp::Command) && file.pipe >= 0 &&
               size >= sizeof(di::RdmaCmCommand)) {
        di::RdmaCmCommand c{};
        std::memcpy(&c, message, sizeof(c));
        const uint8_t* body = message + sizeof(c);
        if (sizeof(c) + c.write_bytes + c.extra_bytes != size ||
            c.write_bytes < sizeof(rdma_ucm_cmd_hdr)) {
            reply.result = -EINVAL;
        } else {
            rdma_ucm_cmd_hdr hdr{};
            std::memcpy(&hdr, body, sizeof(hdr));
            // ucma_write: the header's input length must lie within the write.
            if (hdr.in + sizeof(hdr) > c.write_bytes) {
                reply.result = -EINVAL;
            } else {
                ++counters_.commands;
                const int rc = command(file, hdr.cmd, body + sizeof(hdr), hdr.in,
                                       body + c.write_bytes, c.extra_bytes, out, passed_fd);
                if (trace_ && hdr.cmd != RDMA_USER_CM_CMD_GET_EVENT)
                    std::fprintf(stderr, "rdma_cm: pid %d command %u in %u out %u: %d\n",
                                 static_cast<int>(file.pid), hdr.cmd, hdr.in, hdr.out, rc);
                if (rc < 0)
                    ++counters_.bad_commands;
                reply.result = rc < 0 ? rc : static_cast<int32_t>(c.write_bytes);
                // The response size the command asked for bounds what is written.
                if (out.bytes.size() > hdr.out)
                    out.bytes.resize(hdr.out);
            }
        }
    } else {
        reply.result = -EBADMSG;
    }
    if (reply.result < 0)
        out.bytes.clear();
    reply.wait_again = out.wait_again;
    reply.response_address = out.address;
    reply.response_bytes = static_cast<uint32_t>(out.bytes.size());
    std::vector<uint8_t> buffer(sizeof(reply) + out.bytes.size());
    std::memcpy(buffer.data(), &reply, sizeof(reply));
    if (!out.bytes.empty())
        std::memcpy(buffer.data() + sizeof(reply), out.bytes.data(), out.bytes.size());
    di::send_message(file.fd, buffer.data(), buffer.size());
}

CmId* RdmaCmServer::find_id(const CmFile& file, uint32_t handle) {
    auto it = ids_.find(handle);
    return it != ids_.end() && it->second->file == &file ? it->second.get() : nullptr;
}

CmId* RdmaCmServer::create_id(CmFile& file, uint64_t uid, uint16_t port_space, uint8_t qp_type) {
    // Charged to the file's user until released (kept while the CM finishes on the wire):
    // ENOMEM past the user's cap or the engine's maximum, as the kernel's allocation fails.
    if (!charge_id(file.account))
        return nullptr;
    auto id = std::make_unique<CmId>();
    id->handle = next_free_handle();
    id->uid = uid;
    id->file = &file;
    id->user = file.account;
    id->host = file.host;
    id->port_space = port_space;
    id->qp_type = qp_type;
    // The kernel's rdma_cm draws each id's PSN at creation (rdma_create_id): the first
    // PSN its QP's receive queue expects, which it announces in its REQ or REP.
    id->receive_psn = random_() & 0xffffff;
    id->qkey = port_space == RDMA_PS_UDP || port_space == RDMA_PS_IPOIB ? kRdmaUdpQkey : 0;
    CmId& ref = *id;
    ids_.emplace(ref.handle, std::move(id));
    file.ids.insert(ref.handle);
    return &ref;
}

uint32_t RdmaCmServer::next_free_handle() {
    while (next_handle_ == 0 || ids_.count(next_handle_) || multicasts_.count(next_handle_))
        ++next_handle_;
    return next_handle_++;
}

void RdmaCmServer::index_bound_port(const CmId& id) {
    // Connections accepted on a port do not hold it: a new listener may bind it once the
    // old one is gone (perftest's -R does exactly this).
    if (!id.from_request)
        bound_ports_.emplace(std::make_pair(id.port_space, port_of_address(id.src)), id.handle);
}

void RdmaCmServer::forget_bound_port(const CmId& id) {
    if (id.from_request)
        return; // never indexed
    auto [first, last] = bound_ports_.equal_range({id.port_space, port_of_address(id.src)});
    for (auto it = first; it != last; ++it)
        if (it->second == id.handle) {
            bound_ports_.erase(it);
            return;
        }
}

void RdmaCmServer::release_id(CmId& id) {
    // Nothing else points at it: requests name their listener by handle.
    if (id.connection)
        cm_.release(id.connection);
    ids_by_user_.give_back(id.user);
    ids_.erase(id.handle);
}

void RdmaCmServer::destroy_id(CmId& id) {
    const uint64_t now = monotonic_ns();
    // A listener's connection requests not yet reported go with it: ucma drops the
    // context's events and the CM rejects those requests.
    std::vector<uint32_t> unreported;
    if (id.file) {
        for (const CmEvent& e : id.file->events)
            if (e.owner == id.handle && e.resp.event == kEventConnectRequest)
                unreported.push_back(e.resp.id);
        // Its events and its groups' in one pass over the file's queue.
        std::vector<uint32_t> owners = id.multicasts;
        owners.push_back(id.handle);
        drop_events(*id.file, owners);
    }
    if (CmId* listener = listener_of(id); listener && listener->pending_requests)
        --listener->pending_requests;
    id.listener = 0;
    for (uint32_t group : id.multicasts) {
        multicasts_.erase(group);
        ids_by_user_.give_back(id.user); // a join is charged as an id (join_multicast)
    }
    id.multicasts.clear();
    if (id.bound)
        forget_bound_port(id);
    resolving_.erase(id.handle);
    if (id.file)
        id.file->ids.erase(id.handle);
    id.file = nullptr;
    for (uint32_t child : unreported)
        if (auto it = ids_.find(child); it != ids_.end() && it->second->file)
            destroy_id(*it->second);
    // What ib_destroy_cm_id does on the wire (IbCm::destroy). Kept while the CM still has
    // something to do there (a DREQ to repeat, a time wait to keep answering): its events
    // release it (rdma_cm_connections.cpp); gone otherwise.
    if (!id.connection || !cm_.destroy(id.connection, now))
        release_id(id);
}

CmEvent RdmaCmServer::event_for(const CmId& owner, uint32_t type, int32_t status) {
    CmEvent event;
    event.owner = owner.handle;
    event.resp.uid = owner.uid;
    event.resp.id = owner.handle;
    event.resp.event = type;
    event.resp.status = static_cast<uint32_t>(status);
    return event;
}

void RdmaCmServer::queue_event(CmId& owner, const CmEvent& event) {
    if (!owner.file)
        return; // destroyed: nobody to tell
    // A connection request not yet accepted has no user context: ucma drops its events
    // (an error before ACCEPT shows as ACCEPT failing).
    if (listener_of(owner))
        return;
    owner.file->events.push_back(event);
    events_by_user_.add(owner.file->account);
    const uint8_t token = 1;
    // Its reader may hold the pipe's lock on a FUSE page (stall_watch.hpp).
    const StallWatch::Touch touch({-1, owner.file->account, owner.file->uid});
    [[maybe_unused]] ssize_t w = ::write(owner.file->pipe, &token, 1);
}

void RdmaCmServer::device_removed(size_t device) {
    for (auto& [handle, id] : ids_)
        if (id->device == static_cast<int>(device) && id->file)
            queue_event(*id, kEventDeviceRemoval, 0);
}

void RdmaCmServer::queue_event(CmId& owner, uint32_t type, int32_t status, uint32_t reported_id) {
    CmEvent event = event_for(owner, type, status);
    if (reported_id)
        event.resp.id = reported_id;
    queue_event(owner, event);
}

void RdmaCmServer::drop_events(CmFile& file, const std::vector<uint32_t>& owners) {
    // One pass however many owners and events (erasing one by one from the middle of the
    // queue, once per owner, was quadratic), then the pipe's tokens in bulk.
    auto named = [&owners](uint32_t h) {
        return std::find(owners.begin(), owners.end(), h) != owners.end();
    };
    const size_t dropped = std::erase_if(
        file.events, [&](const CmEvent& e) { return named(e.owner) || named(e.resp.id); });
    events_by_user_.give_back(file.account, dropped);
    uint8_t tokens[4096];
    for (size_t left = dropped; left > 0;) {
        const ssize_t r = ::read(file.pipe, tokens, std::min(left, sizeof(tokens)));
        if (r <= 0)
            break;
        left -= static_cast<size_t>(r);
    }
}

bool RdmaCmServer::resolution_ended(CmId& id, uint64_t now) {
    const size_t port = devices_[static_cast<size_t>(id.device)].port_index;
    if (wire_.neighbor_resolved(port, id.peer.gid, now)) {
        id.state = CmState::AddrResolved;
        queue_event(id, kEventAddrResolved, 0);
        return true;
    }
    if (now >= id.resolve_deadline) {
        id.state = CmState::Idle;
        queue_event(id, kEventAddrError, -ETIMEDOUT);
        return true;
    }
    return false;
}

bool RdmaCmServer::poll(uint64_t now) {
    // Called every round of the engine's loop: nothing is looked at before the earliest
    // deadline (set wherever a timer starts, see schedule()), the IB CM's timers by it.
    bool busy = false;
    if (now >= wake_at_) {
        // Only the ids resolving an address, and at most kResolveChecks of them, going on
        // from where the last look stopped: no other id costs this loop anything, and
        // many resolving ids cost a look no more than a few (each waits its turn).
        const size_t turns = std::min(kResolveChecks, resolving_.size());
        auto r = resolving_.upper_bound(resolve_cursor_);
        for (size_t looked = 0; looked < turns && !resolving_.empty(); ++looked) {
            if (r == resolving_.end())
                r = resolving_.begin();
            resolve_cursor_ = *r;
            auto found = ids_.find(*r);
            if (found == ids_.end() || found->second->state != CmState::AddrQuery) {
                r = resolving_.erase(r);
                continue;
            }
            if (resolution_ended(*found->second, now)) {
                busy = true;
                r = resolving_.erase(r);
            } else {
                ++r;
            }
        }
        // Those still resolving (looked at now or not yet) look again after a while.
        wake_at_ = resolving_.empty() ? UINT64_MAX : now + kNeighborCheckNs;
    }
    if (now >= cm_.next_deadline())
        busy |= cm_.poll(now);
    return busy;
}

uint64_t RdmaCmServer::next_deadline() const {
    return std::min(wake_at_, cm_.next_deadline());
}

RdmaCmServer::Counters RdmaCmServer::counters() const {
    Counters c = counters_;
    const tp::IbCm::Counters& cm = cm_.counters();
    c.mads_in = cm.mads_in;
    c.mads_out = cm.mads_out;
    c.mads_dropped = cm.mads_dropped;
    c.retransmissions = cm.retransmissions;
    c.duplicates = cm.duplicates;
    return c;
}

void RdmaCmServer::receive_mad(size_t port, const MadPeer& from, const uint8_t* payload,
                               size_t length, uint64_t now) {
    cm_.receive_mad(port, from, payload, length, now);
}

namespace {

// An id's state by the names of the kernel's enum rdma_cm_state (what `rdma resource show
// cm_id` prints): the address and route steps, then the connection's.
const char* cm_state_name(const CmId& id, tp::CmConnectionState connection) {
    switch (id.state) {
    case CmState::Idle:
        return id.bound ? "ADDR_BOUND" : "IDLE";
    case CmState::AddrQuery:
        return "ADDR_QUERY";
    case CmState::AddrResolved:
        return id.route_resolved ? "ROUTE_RESOLVED" : "ADDR_RESOLVED";
    case CmState::RouteResolved:
        return "ROUTE_RESOLVED";
    case CmState::Listen:
        return "LISTEN";
    case CmState::Connect:
        break;
    }
    switch (connection) {
    case tp::CmConnectionState::DreqSent:
    case tp::CmConnectionState::DreqReceived:
    case tp::CmConnectionState::TimeWait:
    case tp::CmConnectionState::Closed:
        return "DISCONNECT";
    default:
        return "CONNECT";
    }
}

nlohmann::ordered_json address_document(const sockaddr_storage& s) {
    char text[INET6_ADDRSTRLEN] = "";
    if (s.ss_family == AF_INET)
        ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(s).sin_addr, text, sizeof(text));
    else if (s.ss_family == AF_INET6)
        ::inet_ntop(AF_INET6, ipv6_bytes(s), text, sizeof(text));
    else
        return nullptr;
    return {{"address", text}, {"port", port_of_address(s)}};
}

} // namespace

nlohmann::ordered_json RdmaCmServer::status_document(bool sees_all, uid_t uid, ino_t pidns) const {
    size_t established = 0, listening = 0;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& [handle, id] : ids_) {
        const tp::CmConnectionState connection = connection_state(*id);
        established += connection == tp::CmConnectionState::Established;
        listening += id->state == CmState::Listen && id->file;
        const CmFile* file = id->file;
        if (!file || (!sees_all && (file->uid != uid || file->pidns != pidns)))
            continue;
        const tp::CmConnection* c = connection_of(*id);
        list.push_back(
            {{"id", handle},
             {"pid", sees_all ? file->pid : file->ns_pid},
             {"device", id->device >= 0 && static_cast<size_t>(id->device) < devices_.size()
                            ? nlohmann::ordered_json(devices_[static_cast<size_t>(id->device)].name)
                            : nlohmann::ordered_json(nullptr)},
             {"port_space", id->port_space},
             {"qp_type", id->qp_type},
             {"qpn", c ? c->local_qpn : 0},
             {"state", cm_state_name(*id, connection)},
             {"src", address_document(id->src)},
             {"dst", address_document(id->dst)}});
    }
    const Counters counters = this->counters();
    return {{"files", files_.size()},
            {"ids", ids_.size()},
            {"listening", listening},
            {"established", established},
            {"cm_ids", std::move(list)},
            {"counters",
             {{"commands", counters.commands},
              {"refused", counters.bad_commands},
              {"backlog_full", counters.backlog_full},
              {"over_limit", counters.over_limit},
              {"refused_files", counters.refused_files},
              {"mads_in", counters.mads_in},
              {"mads_out", counters.mads_out},
              {"mads_dropped", counters.mads_dropped},
              {"retransmissions", counters.retransmissions},
              {"duplicates", counters.duplicates}}}};
}

} // namespace softhca::engine
