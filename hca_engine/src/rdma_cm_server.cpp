// rdma_cm files, ids, commands and events: the kernel's rdma_ucm (drivers/infiniband/
// core/ucma.c) and the address and route part of its rdma_cm, over the engine's ports.
#include "rdma_cm_server.hpp"

#include "socket_addresses.hpp"

#include "clock.hpp"
#include "softhca/device_interface/rdma_cm.hpp"
#include "softhca/device_interface/socket_io.hpp"
#include "softhca/transport/path_mtu.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <rdma/ib_user_verbs.h>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace softhca::engine {

namespace di = device_interface;
namespace tp = transport;

namespace {

// IBV_QP_* attribute mask bits (enum ibv_qp_attr_mask) and QP states.
constexpr uint32_t kQpState = 1u << 0;
constexpr uint32_t kQpAccessFlags = 1u << 3;
constexpr uint32_t kQpPkeyIndex = 1u << 4;
constexpr uint32_t kQpPort = 1u << 5;
constexpr uint32_t kQpQkey = 1u << 6;
constexpr uint32_t kQpAv = 1u << 7;
constexpr uint32_t kQpPathMtu = 1u << 8;
constexpr uint32_t kQpTimeout = 1u << 9;
constexpr uint32_t kQpRetryCnt = 1u << 10;
constexpr uint32_t kQpRnrRetry = 1u << 11;
constexpr uint32_t kQpRqPsn = 1u << 12;
constexpr uint32_t kQpMaxQpRdAtomic = 1u << 13;
constexpr uint32_t kQpMinRnrTimer = 1u << 15;
constexpr uint32_t kQpSqPsn = 1u << 16;
constexpr uint32_t kQpMaxDestRdAtomic = 1u << 17;
constexpr uint32_t kQpDestQpn = 1u << 20;
constexpr uint32_t kQpsInit = 1, kQpsRtr = 2, kQpsRts = 3;
constexpr uint32_t kAccessRemoteWrite = 1u << 1, kAccessRemoteRead = 1u << 2,
                   kAccessRemoteAtomic = 1u << 3;
// What the kernel's rdma_cm puts in a RoCE path record (CMA_IBOE_PACKET_LIFETIME).
constexpr uint8_t kPacketLifeTime = 16;
constexpr uint16_t kEphemeralFirst = 32768, kEphemeralLast = 60999; // ip_local_port_range

bool valid_port_space(uint16_t ps) {
    return ps == RDMA_PS_TCP || ps == RDMA_PS_UDP || ps == RDMA_PS_IB || ps == RDMA_PS_IPOIB;
}

} // namespace

// What a command answers besides its result: bytes for the response pointer.
struct RdmaCmServer::Reply {
    uint64_t address = 0;
    std::vector<uint8_t> bytes;
    bool wait_again = false;
    template <typename T> void set(uint64_t to, const T& value, size_t out) {
        address = to;
        bytes.assign(reinterpret_cast<const uint8_t*>(&value),
                     reinterpret_cast<const uint8_t*>(&value) + std::min(out, sizeof(T)));
    }
};

RdmaCmServer::RdmaCmServer(const std::string& socket_path, const std::vector<Device>& devices,
                           const PortSet& ports, MadSender& wire)
    : socket_path_(socket_path), devices_(devices), ports_(ports), wire_(wire),
      random_(std::random_device{}()) {
    if (const char* t = std::getenv("SOFTHCA_CM_RESPONSE_TIMEOUT"))
        response_timeout_ = static_cast<uint8_t>(std::clamp(std::atoi(t), 8, 31));
    trace_ = std::getenv("SOFTHCA_RDMA_CM_TRACE") != nullptr;
    if (const char* r = std::getenv("SOFTHCA_CM_MAX_RETRIES"))
        max_retries_ = static_cast<unsigned>(std::clamp(std::atoi(r), 0, 15));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof(addr.sun_path))
        throw std::runtime_error("socket path too long: " + socket_path);
    std::strcpy(addr.sun_path, socket_path.c_str());
    listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0)
        throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    ::unlink(socket_path.c_str());
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::chmod(socket_path.c_str(), 0666) != 0 || ::listen(listen_fd_, 64) != 0)
        throw std::runtime_error("rdma_cm socket " + socket_path + ": " + std::strerror(errno));
}

RdmaCmServer::~RdmaCmServer() {
    for (auto& [fd, file] : files_) {
        ::close(file->fd);
        ::close(file->pipe);
    }
    ::close(listen_fd_);
    ::unlink(socket_path_.c_str());
}

std::vector<int> RdmaCmServer::accept_pending() {
    std::vector<int> accepted;
    for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break;
        ucred cred{};
        socklen_t len = sizeof(cred);
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
            ::close(fd);
            continue;
        }
        auto file = std::make_unique<CmFile>();
        file->fd = fd;
        file->pid = cred.pid;
        files_.emplace(fd, std::move(file));
        accepted.push_back(fd);
    }
    return accepted;
}

void RdmaCmServer::close_file(CmFile& file) {
    // As closing the kernel's file: every id of it is destroyed, connections torn down.
    std::vector<CmId*> owned;
    for (auto& [handle, id] : ids_)
        if (id->file == &file)
            owned.push_back(id.get());
    for (CmId* id : owned)
        destroy_id(*id);
    ::close(file.fd);
    if (file.pipe >= 0)
        ::close(file.pipe);
}

bool RdmaCmServer::handle_input(int fd) {
    auto it = files_.find(fd);
    if (it == files_.end())
        return false;
    CmFile& file = *it->second;
    alignas(8) uint8_t buffer[di::kMaxRdmaCmMessage];
    for (;;) {
        di::ReceivedMessage m = di::receive_message(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
        if (m.size < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        if (m.size <= 0) {
            close_file(file);
            files_.erase(it);
            return false;
        }
        if (m.fd >= 0) {
            // Only Open brings a descriptor: the event pipe, which must be a pipe.
            struct stat st {};
            di::RdmaCmHeader h{};
            std::memcpy(&h, buffer, std::min<size_t>(sizeof(h), static_cast<size_t>(m.size)));
            if (file.pipe < 0 && h.op == static_cast<uint16_t>(di::RdmaCmOp::Open) &&
                ::fstat(m.fd, &st) == 0 && S_ISFIFO(st.st_mode) &&
                (::fcntl(m.fd, F_GETFL) & O_NONBLOCK))
                file.pipe = m.fd;
            else
                ::close(m.fd);
        }
        if (m.truncated) {
            di::RdmaCmReply reply{};
            reply.header.magic = di::kRdmaCmMagic;
            reply.header.version = di::kRdmaCmVersion;
            reply.header.length = sizeof(reply);
            reply.result = -EINVAL;
            di::send_message(fd, &reply, sizeof(reply));
            continue;
        }
        dispatch(file, buffer, static_cast<size_t>(m.size));
    }
}

void RdmaCmServer::dispatch(CmFile& file, const uint8_t* message, size_t size) {
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
            std::memcpy(&open, message, sizeof(open));
            file.app_fd = open.app_fd;
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
                                       body + c.write_bytes, c.extra_bytes, out);
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

CmId& RdmaCmServer::create_id(CmFile* file, uint64_t uid, uint16_t port_space, uint8_t qp_type) {
    auto id = std::make_unique<CmId>();
    id->handle = next_handle_++;
    id->uid = uid;
    id->file = file;
    id->port_space = port_space;
    id->qp_type = qp_type;
    // The kernel's rdma_cm draws each id's PSN at creation (rdma_create_id).
    id->send_psn = random_() & 0xffffff;
    id->qkey = port_space == RDMA_PS_UDP || port_space == RDMA_PS_IPOIB ? kRdmaUdpQkey : 0;
    CmId& ref = *id;
    ids_.emplace(ref.handle, std::move(id));
    return ref;
}

void RdmaCmServer::release_id(CmId& id) {
    if (id.local_comm_id)
        by_comm_id_.erase(id.local_comm_id);
    for (auto& [handle, other] : ids_)
        if (other->listener == &id)
            other->listener = nullptr;
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
        drop_events(*id.file, id.handle);
    }
    if (id.listener && id.listener->pending_requests)
        --id.listener->pending_requests;
    id.listener = nullptr;
    id.file = nullptr;
    for (uint32_t child : unreported)
        if (auto it = ids_.find(child); it != ids_.end() && it->second->file)
            destroy_id(*it->second);
    // What ib_destroy_cm_id does on the wire, state by state (cm.c cm_destroy_id).
    switch (id.state) {
    case CmState::ReqSent:
        send_rej(id, static_cast<uint16_t>(tp::CmRejectReason::Timeout), nullptr, 0, now);
        break;
    case CmState::ReqReceived:
    case CmState::RepSent:
    case CmState::RepReceived:
        send_rej(id, static_cast<uint16_t>(tp::CmRejectReason::ConsumerDefined), nullptr, 0, now);
        break;
    case CmState::Established:
        send_dreq(id, now);
        break;
    case CmState::DreqReceived:
        send_drep(id, now);
        break;
    default:
        break;
    }
    // Kept while the CM still has something to do on the wire (a DREQ to repeat, a time
    // wait to keep answering); gone otherwise.
    if (id.state != CmState::DreqSent && id.state != CmState::TimeWait)
        release_id(id);
}

void RdmaCmServer::queue_event(CmId& owner, const CmEvent& event) {
    if (!owner.file)
        return; // destroyed: nobody to tell
    // A connection request not yet accepted has no user context: ucma drops its events
    // (an error before ACCEPT shows as ACCEPT failing).
    if (owner.listener)
        return;
    owner.file->events.push_back(event);
    const uint8_t token = 1;
    [[maybe_unused]] ssize_t w = ::write(owner.file->pipe, &token, 1);
}

void RdmaCmServer::queue_event(CmId& owner, uint32_t type, int32_t status, uint32_t reported_id) {
    CmEvent event;
    event.owner = owner.handle;
    event.resp.uid = owner.uid;
    event.resp.id = reported_id ? reported_id : owner.handle;
    event.resp.event = type;
    event.resp.status = static_cast<uint32_t>(status);
    queue_event(owner, event);
}

void RdmaCmServer::drop_events(CmFile& file, uint32_t owner) {
    for (auto it = file.events.begin(); it != file.events.end();) {
        if (it->owner == owner || it->resp.id == owner) {
            it = file.events.erase(it);
            uint8_t token;
            [[maybe_unused]] ssize_t r = ::read(file.pipe, &token, 1);
        } else {
            ++it;
        }
    }
}

int RdmaCmServer::device_for_address(const sockaddr* addr) const {
    sockaddr_storage s{};
    std::memcpy(&s, addr, sockaddr_size(addr->sa_family));
    const uint32_t ip = ipv4_of_address(s);
    for (size_t i = 0; i < devices_.size(); ++i)
        if (ip && ports_.info(devices_[i].port_index).ipv4 == ip)
            return static_cast<int>(i);
    return -1;
}

// The device a packet to `ipv4` would leave from: the one that owns the address (the
// kernel routes a local destination to itself), else the one on the longest common
// prefix with it whose link is up.
int RdmaCmServer::device_toward(uint32_t ipv4) const {
    int best = -1;
    int best_bits = -1;
    for (size_t i = 0; i < devices_.size(); ++i) {
        const PortInfo& p = ports_.info(devices_[i].port_index);
        if (p.ipv4 == ipv4)
            return static_cast<int>(i);
        const int bits = __builtin_clz((p.ipv4 ^ ipv4) | 1);
        if (p.link_up && bits > best_bits) {
            best = static_cast<int>(i);
            best_bits = bits;
        }
    }
    return best;
}

bool RdmaCmServer::port_in_use(const CmId& id, uint16_t port) const {
    for (const auto& [handle, other] : ids_) {
        // Connections accepted on a port do not hold it: a new listener may bind it
        // once the old one is gone (perftest's -R does exactly this).
        if (other.get() == &id || !other->bound || other->from_request ||
            other->port_space != id.port_space || port_of_address(other->src) != port ||
            !other->file)
            continue;
        const bool overlap = is_any_address(other->src) || is_any_address(id.src) ||
                             ipv4_of_address(other->src) == ipv4_of_address(id.src);
        if (!overlap)
            continue;
        // SO_REUSEADDR-like: both allow it and neither listens (cma_check_port).
        if (id.reuse_address && other->reuse_address && other->state != CmState::Listen)
            continue;
        return true;
    }
    return false;
}

int RdmaCmServer::bind(CmId& id, const sockaddr* addr, size_t length) {
    if (id.state != CmState::Idle || id.bound)
        return -EINVAL;
    if (addr->sa_family == AF_IB)
        return -EAFNOSUPPORT; // librdmacm then uses the IP commands (no AF_IB on RoCE here)
    sockaddr_storage s{};
    if (!copy_address(addr, length, s))
        return -EAFNOSUPPORT;
    if (s.ss_family == AF_INET6 && !is_any_address(s) && !ipv4_of_address(s))
        return -EADDRNOTAVAIL; // no port has an IPv6 address of its own yet
    int device = -1;
    if (!is_any_address(s)) {
        device = device_for_address(reinterpret_cast<const sockaddr*>(&s));
        if (device < 0)
            return -EADDRNOTAVAIL;
    }
    id.src = s;
    uint16_t port = port_of_address(s);
    if (port) {
        if (port_in_use(id, port))
            return -EADDRINUSE;
    } else {
        // An ephemeral port, drawn as the kernel does (cma_alloc_any_port).
        const unsigned range = kEphemeralLast - kEphemeralFirst + 1;
        unsigned start = random_() % range;
        for (unsigned i = 0; i < range && !port; ++i) {
            const auto candidate = static_cast<uint16_t>(kEphemeralFirst + (start + i) % range);
            if (!port_in_use(id, candidate))
                port = candidate;
        }
        if (!port)
            return -EADDRNOTAVAIL;
        set_port(id.src, port);
    }
    id.bound = true;
    id.device = device;
    return 0;
}

int RdmaCmServer::resolve_address(CmId& id, const sockaddr* src, const sockaddr* dst,
                                  uint32_t timeout_ms, uint64_t now) {
    sockaddr_storage d{};
    if (!copy_address(dst, sizeof(sockaddr_storage), d))
        return -EAFNOSUPPORT;
    if (id.state != CmState::Idle && id.state != CmState::AddrResolved)
        return -EINVAL;
    const uint32_t dst_ip = ipv4_of_address(d);
    if (!dst_ip)
        return -EHOSTUNREACH; // IPv6 destinations need an IPv6 port address
    if (!id.bound) {
        sockaddr_storage any{};
        if (src && src->sa_family != AF_UNSPEC) {
            if (!copy_address(src, sizeof(sockaddr_storage), any))
                return -EAFNOSUPPORT;
        } else {
            any.ss_family = d.ss_family;
        }
        if (const int rc = bind(id, reinterpret_cast<const sockaddr*>(&any), sizeof(any)))
            return rc;
    }
    if (id.device < 0) {
        id.device = device_toward(dst_ip);
        if (id.device < 0)
            return -ENETUNREACH;
        // The bound "any" address becomes the port's own (the kernel fills in the
        // route's source address).
        const uint32_t own = ports_.info(devices_[static_cast<size_t>(id.device)].port_index).ipv4;
        const uint16_t port = port_of_address(id.src);
        if (id.src.ss_family == AF_INET6) {
            uint8_t* a = ipv6_bytes(id.src);
            std::memset(a, 0, 16);
            a[10] = a[11] = 0xff;
            tp::store_be32(a + 12, own);
        } else {
            auto& a = reinterpret_cast<sockaddr_in&>(id.src);
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(own);
        }
        set_port(id.src, port);
    }
    id.dst = d;
    id.peer.ipv4 = dst_ip;
    id.peer.gid = tp::gid_from_ipv4(dst_ip);
    id.state = CmState::AddrQuery;
    id.resolve_deadline = now + static_cast<uint64_t>(timeout_ms ? timeout_ms : 2000) * 1'000'000;
    poll(now); // resolved at once when the neighbour is known
    return 0;
}

uint8_t RdmaCmServer::active_mtu(const CmId& id) const {
    if (id.device < 0)
        return static_cast<uint8_t>(tp::PathMtu::Mtu1024);
    const PortInfo& p = ports_.info(devices_[static_cast<size_t>(id.device)].port_index);
    return static_cast<uint8_t>(
        tp::path_mtu_for_ethernet_mtu(p.eth_mtu).value_or(tp::PathMtu::Mtu256));
}

void RdmaCmServer::fill_route(const CmId& id, ib_user_path_rec& path) const {
    path = {};
    if (id.device >= 0) {
        const tp::Gid sgid = tp::gid_from_ipv4(
            ipv4_of_address(id.src)
                ? ipv4_of_address(id.src)
                : ports_.info(devices_[static_cast<size_t>(id.device)].port_index).ipv4);
        std::memcpy(path.sgid, sgid.data(), 16);
    }
    if (id.peer.ipv4)
        std::memcpy(path.dgid, id.peer.gid.data(), 16);
    path.pkey = htons(0xffff);
    path.reversible = 1;
    path.numb_path = 1;
    path.hop_limit = 64;
    path.traffic_class = id.tos;
    path.mtu_selector = 2; // exactly
    path.mtu = active_mtu(id);
    path.rate_selector = 2;
    path.rate = 7; // IB_RATE_40_GBPS, what a 40G RoCE port reports
    path.packet_life_time_selector = 2;
    path.packet_life_time = kPacketLifeTime;
}

int RdmaCmServer::init_qp_attr(const CmId& id, uint32_t qp_state, ib_uverbs_qp_attr& a) const {
    a = {};
    a.qp_state = qp_state;
    const bool connected = id.state == CmState::ReqReceived || id.state == CmState::RepSent ||
                           id.state == CmState::RepReceived || id.state == CmState::Established;
    const bool ud = id.qp_type == kQpTypeUd;
    if (id.device < 0)
        return -EINVAL;
    // rdma_init_qp_attr: before the CM has a connection, cma_ib_init_qp_attr; after, the
    // CM's own (ib_cm_init_qp_attr), and rq_psn from the rdma_cm.
    switch (qp_state) {
    case kQpsInit:
        a.qp_attr_mask = kQpState | kQpPkeyIndex | kQpPort;
        a.port_num = 1;
        a.pkey_index = 0;
        if (ud) {
            a.qp_attr_mask |= kQpQkey;
            a.qkey = id.qkey;
        } else {
            a.qp_attr_mask |= kQpAccessFlags;
            if (connected)
                a.qp_access_flags =
                    kAccessRemoteWrite |
                    (id.responder_resources ? kAccessRemoteRead | kAccessRemoteAtomic : 0);
        }
        return 0;
    case kQpsRtr:
        if (ud) {
            a.qp_attr_mask = kQpState;
            return 0;
        }
        if (!connected)
            return -EINVAL;
        a.qp_attr_mask = kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn;
        std::memcpy(a.ah_attr.grh.dgid, id.peer.gid.data(), 16);
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.grh.traffic_class = id.tos;
        a.ah_attr.grh.sgid_index = 0;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.path_mtu = id.path_mtu;
        a.dest_qp_num = id.remote_qpn;
        a.rq_psn = id.receive_psn;
        if (id.qp_type == kQpTypeRc) {
            a.qp_attr_mask |= kQpMaxDestRdAtomic | kQpMinRnrTimer;
            a.max_dest_rd_atomic = id.responder_resources;
            a.min_rnr_timer = 0; // what ib_cm gives (cm_init_qp_rtr_attr)
        }
        return 0;
    case kQpsRts:
        a.qp_attr_mask = kQpState | kQpSqPsn;
        if (ud)
            return 0; // sq_psn 0
        if (!connected)
            return -EINVAL;
        a.sq_psn = id.send_psn;
        if (id.qp_type == kQpTypeRc) {
            a.qp_attr_mask |= kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;
            a.timeout = id.ack_timeout ? id.ack_timeout : id.local_ack_timeout;
            a.retry_cnt = id.retry_count;
            a.rnr_retry = id.rnr_retry_count;
            a.max_rd_atomic = id.initiator_depth;
        }
        return 0;
    default:
        return -EINVAL;
    }
}

int RdmaCmServer::command(CmFile& file, uint32_t cmd, const uint8_t* in, size_t in_bytes,
                          const uint8_t* extra, size_t extra_bytes, Reply& reply) {
    // Commands are copied in as the kernel copies them: a shorter one reads as zeros.
    auto read = [&](auto& into) {
        into = {};
        std::memcpy(&into, in, std::min(in_bytes, sizeof(into)));
    };
    const uint64_t now = monotonic_ns();
    switch (cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID: {
        rdma_ucm_create_id c;
        read(c);
        if (!valid_port_space(c.ps))
            return -EINVAL;
        const uint8_t qp_type = c.ps == RDMA_PS_TCP                            ? kQpTypeRc
                                : c.ps == RDMA_PS_UDP || c.ps == RDMA_PS_IPOIB ? kQpTypeUd
                                                                               : c.qp_type;
        CmId& id = create_id(&file, c.uid, c.ps, qp_type);
        rdma_ucm_create_id_resp r{};
        r.id = id.handle;
        reply.set(c.response, r, sizeof(r));
        return 0;
    }
    case RDMA_USER_CM_CMD_DESTROY_ID: {
        rdma_ucm_destroy_id c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        rdma_ucm_destroy_id_resp r{};
        r.events_reported = id->events_reported;
        destroy_id(*id);
        reply.set(c.response, r, sizeof(r));
        return 0;
    }
    case RDMA_USER_CM_CMD_BIND_IP: {
        rdma_ucm_bind_ip c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        return bind(*id, reinterpret_cast<const sockaddr*>(&c.addr), sizeof(c.addr));
    }
    case RDMA_USER_CM_CMD_BIND: {
        rdma_ucm_bind c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        if (c.reserved || c.addr_size > sizeof(c.addr))
            return -EINVAL;
        return bind(*id, reinterpret_cast<const sockaddr*>(&c.addr), c.addr_size);
    }
    case RDMA_USER_CM_CMD_RESOLVE_IP: {
        rdma_ucm_resolve_ip c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        return resolve_address(*id, reinterpret_cast<const sockaddr*>(&c.src_addr),
                               reinterpret_cast<const sockaddr*>(&c.dst_addr), c.timeout_ms, now);
    }
    case RDMA_USER_CM_CMD_RESOLVE_ADDR: {
        rdma_ucm_resolve_addr c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        if (c.reserved || c.src_size > sizeof(c.src_addr) || c.dst_size > sizeof(c.dst_addr))
            return -EINVAL;
        return resolve_address(
            *id, c.src_size ? reinterpret_cast<const sockaddr*>(&c.src_addr) : nullptr,
            reinterpret_cast<const sockaddr*>(&c.dst_addr), c.timeout_ms, now);
    }
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE: {
        rdma_ucm_resolve_route c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        if (id->state != CmState::AddrResolved && id->state != CmState::RouteResolved)
            return -EINVAL;
        // RoCE: the path comes from the addresses (cma_resolve_iboe_route), at once.
        id->route_resolved = true;
        id->state = CmState::RouteResolved;
        queue_event(*id, kEventRouteResolved, 0);
        return 0;
    }
    case RDMA_USER_CM_CMD_QUERY_ROUTE: {
        rdma_ucm_query c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        rdma_ucm_query_route_resp r{};
        if (id->device >= 0) {
            r.node_guid = htobe64(devices_[static_cast<size_t>(id->device)].node_guid);
            r.port_num = 1;
            fill_route(*id, r.ib_route[0]);
            r.num_paths = id->route_resolved ? 1 : 0;
        }
        std::memcpy(&r.src_addr, &id->src, std::min(sizeof(r.src_addr), sizeof(id->src)));
        std::memcpy(&r.dst_addr, &id->dst, std::min(sizeof(r.dst_addr), sizeof(id->dst)));
        r.ibdev_index = UINT32_MAX; // match by node GUID
        reply.set(c.response, r, sizeof(r));
        return 0;
    }
    case RDMA_USER_CM_CMD_QUERY: {
        rdma_ucm_query c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        if (c.option == RDMA_USER_CM_QUERY_ADDR) {
            rdma_ucm_query_addr_resp r{};
            if (id->device >= 0) {
                r.node_guid = htobe64(devices_[static_cast<size_t>(id->device)].node_guid);
                r.port_num = 1;
            }
            r.pkey = 0xffff;
            r.src_size = static_cast<uint16_t>(sockaddr_size(id->src.ss_family));
            r.dst_size = static_cast<uint16_t>(sockaddr_size(id->dst.ss_family));
            std::memcpy(&r.src_addr, &id->src, sizeof(id->src));
            std::memcpy(&r.dst_addr, &id->dst, sizeof(id->dst));
            r.ibdev_index = UINT32_MAX;
            reply.set(c.response, r, sizeof(r));
            return 0;
        }
        if (c.option == RDMA_USER_CM_QUERY_PATH || c.option == RDMA_USER_CM_QUERY_GID) {
            // Paths and GIDs over AF_IB, which this device does not offer (BIND refuses it).
            rdma_ucm_query_path_resp r{};
            reply.set(c.response, r, sizeof(r));
            return 0;
        }
        return -ENOSYS;
    }
    case RDMA_USER_CM_CMD_LISTEN: {
        rdma_ucm_listen c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        if (id->state == CmState::Listen)
            return 0; // a second listen only changes the backlog
        if (id->state != CmState::Idle)
            return -EINVAL;
        if (!id->bound) {
            sockaddr_in any{};
            any.sin_family = AF_INET;
            if (const int rc = bind(*id, reinterpret_cast<const sockaddr*>(&any), sizeof(any)))
                return rc;
        }
        // Another listener on this port (both reuse-address ids until now) is refused.
        id->state = CmState::Listen;
        if (port_in_use(*id, port_of_address(id->src))) {
            id->state = CmState::Idle;
            return -EADDRINUSE;
        }
        return 0;
    }
    case RDMA_USER_CM_CMD_CONNECT: {
        rdma_ucm_connect c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        if (id->state != CmState::RouteResolved || !c.conn_param.valid)
            return -EINVAL;
        if (id->qp_type == kQpTypeUd)
            return -ENOSYS; // SIDR is not built yet
        return send_req(*id, c.conn_param, now);
    }
    case RDMA_USER_CM_CMD_ACCEPT: {
        rdma_ucm_accept c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        if (id->state == CmState::ReqReceived && c.conn_param.valid) {
            id->uid = c.uid;
            if (id->listener && id->listener->pending_requests)
                --id->listener->pending_requests;
            id->listener = nullptr;
            return send_rep(*id, c.conn_param, now);
        }
        if (id->state == CmState::RepReceived && !c.conn_param.valid)
            return send_rtu(*id, now); // the active side's accept: the RTU (cma_rep_recv)
        return -EINVAL;
    }
    case RDMA_USER_CM_CMD_REJECT: {
        rdma_ucm_reject c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        if (id->state != CmState::ReqReceived && id->state != CmState::RepReceived)
            return -EINVAL;
        if (c.private_data_len > tp::CmRej::kPrivateDataBytes)
            return -EINVAL;
        return send_rej(*id, static_cast<uint16_t>(tp::CmRejectReason::ConsumerDefined),
                        c.private_data, c.private_data_len, now);
    }
    case RDMA_USER_CM_CMD_DISCONNECT: {
        rdma_ucm_disconnect c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        if (id->state == CmState::Established || id->state == CmState::RepSent)
            return send_dreq(*id, now);
        if (id->state == CmState::DreqReceived) {
            send_drep(*id, now);
            return 0;
        }
        return -EINVAL;
    }
    case RDMA_USER_CM_CMD_INIT_QP_ATTR: {
        rdma_ucm_init_qp_attr c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        ib_uverbs_qp_attr r{};
        if (const int rc = init_qp_attr(*id, c.qp_state, r))
            return rc;
        reply.set(c.response, r, sizeof(r));
        return 0;
    }
    case RDMA_USER_CM_CMD_GET_EVENT: {
        rdma_ucm_get_event c;
        read(c);
        if (file.events.empty()) {
            reply.wait_again = true;
            return 0;
        }
        CmEvent event = file.events.front();
        file.events.pop_front();
        uint8_t token;
        [[maybe_unused]] ssize_t r = ::read(file.pipe, &token, 1);
        if (auto it = ids_.find(event.owner); it != ids_.end())
            ++it->second->events_reported;
        reply.set(c.response, event.resp, sizeof(event.resp));
        return 0;
    }
    case RDMA_USER_CM_CMD_GET_OPTION:
        return -ENOSYS; // as the kernel answers it
    case RDMA_USER_CM_CMD_SET_OPTION: {
        rdma_ucm_set_option c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        if (c.optlen > extra_bytes)
            return -EINVAL;
        auto value8 = [&]() -> int {
            if (c.optlen < 1)
                return -EINVAL;
            return extra[0];
        };
        auto value_int = [&]() -> int {
            int v = 0;
            if (c.optlen != sizeof(v))
                return -1;
            std::memcpy(&v, extra, sizeof(v));
            return v;
        };
        if (c.level == RDMA_OPTION_ID) {
            switch (c.optname) {
            case RDMA_OPTION_ID_TOS: {
                const int v = value8();
                if (v < 0)
                    return -EINVAL;
                id->tos = static_cast<uint8_t>(v);
                return 0;
            }
            case RDMA_OPTION_ID_REUSEADDR:
                if (c.optlen != sizeof(int))
                    return -EINVAL;
                if (id->state != CmState::Idle)
                    return -EINVAL;
                id->reuse_address = value_int() != 0;
                return 0;
            case RDMA_OPTION_ID_AFONLY:
                if (c.optlen != sizeof(int) || id->bound)
                    return -EINVAL;
                id->af_only = value_int() != 0;
                return 0;
            case RDMA_OPTION_ID_ACK_TIMEOUT: {
                const int v = value8();
                if (v < 0)
                    return -EINVAL;
                id->ack_timeout = static_cast<uint8_t>(std::min(v, 31));
                return 0;
            }
            default:
                return -ENOSYS;
            }
        }
        if (c.level == RDMA_OPTION_IB && c.optname == RDMA_OPTION_IB_PATH)
            return -ENOSYS; // setting an IB path record does not apply to RoCE
        return -ENOSYS;
    }
    case RDMA_USER_CM_CMD_NOTIFY: {
        rdma_ucm_notify c;
        read(c);
        return find_id(file, c.id) ? 0 : -ENOENT; // rdma_notify: nothing for RoCE
    }
    case RDMA_USER_CM_CMD_MIGRATE_ID: {
        rdma_ucm_migrate_id c;
        read(c);
        CmId* id = find_id(file, c.id);
        if (!id)
            return -ENOENT;
        CmFile* target = nullptr;
        for (auto& [fd, f] : files_)
            if (f->pid == file.pid && f->app_fd == static_cast<int>(c.fd))
                target = f.get();
        if (!target)
            return -ENOENT;
        rdma_ucm_migrate_resp r{};
        r.events_reported = id->events_reported;
        if (target != &file) {
            // Its queued events move with it, in order (ucma_move_events).
            for (auto it = file.events.begin(); it != file.events.end();) {
                if (it->owner == id->handle) {
                    target->events.push_back(*it);
                    uint8_t token;
                    [[maybe_unused]] ssize_t rd = ::read(file.pipe, &token, 1);
                    const uint8_t one = 1;
                    [[maybe_unused]] ssize_t wr = ::write(target->pipe, &one, 1);
                    it = file.events.erase(it);
                } else {
                    ++it;
                }
            }
            id->file = target;
        }
        reply.set(c.response, r, sizeof(r));
        return 0;
    }
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
    case RDMA_USER_CM_CMD_JOIN_MCAST:
    case RDMA_USER_CM_CMD_LEAVE_MCAST:
        return -ENOSYS; // multicast through rdma_cm is not built yet
    default:
        return -EINVAL; // no such command (ucma_write)
    }
}

bool RdmaCmServer::poll(uint64_t now) {
    bool busy = false;
    std::vector<CmId*> due;
    for (auto& [handle, id] : ids_) {
        if (id->state == CmState::AddrQuery) {
            const size_t port = devices_[static_cast<size_t>(id->device)].port_index;
            if (wire_.neighbor_resolved(port, id->peer.ipv4, now)) {
                id->state = CmState::AddrResolved;
                queue_event(*id, kEventAddrResolved, 0);
                busy = true;
            } else if (now >= id->resolve_deadline) {
                id->state = CmState::Idle;
                queue_event(*id, kEventAddrError, -ETIMEDOUT);
                busy = true;
            }
        } else if ((id->awaiting_reply && now >= id->retry_at) ||
                   (id->state == CmState::TimeWait && now >= id->time_wait_until)) {
            due.push_back(id.get());
        }
    }
    for (CmId* id : due) {
        on_timeout(*id, now);
        busy = true;
    }
    return busy;
}

uint64_t RdmaCmServer::next_deadline() const {
    uint64_t next = UINT64_MAX;
    for (const auto& [handle, id] : ids_) {
        if (id->state == CmState::AddrQuery)
            next = std::min(next, monotonic_ns() + 1'000'000); // look again in 1 ms
        if (id->awaiting_reply)
            next = std::min(next, id->retry_at);
        if (id->state == CmState::TimeWait)
            next = std::min(next, id->time_wait_until);
    }
    return next;
}

std::string RdmaCmServer::status_report() const {
    std::ostringstream out;
    size_t established = 0, listening = 0;
    for (const auto& [handle, id] : ids_) {
        established += id->state == CmState::Established;
        listening += id->state == CmState::Listen && id->file;
    }
    out << "rdma_cm: files " << files_.size() << " ids " << ids_.size() << " listening "
        << listening << " established " << established << " commands " << counters_.commands
        << " refused " << counters_.bad_commands << " mads_in " << counters_.mads_in << " mads_out "
        << counters_.mads_out << " mads_dropped " << counters_.mads_dropped << " retransmissions "
        << counters_.retransmissions << " duplicates " << counters_.duplicates << "\n";
    return out.str();
}

} // namespace softhca::engine
