// rdma_cm addresses, routes and QP attributes: which device owns or reaches an address
// (the engine's own ports, as the kernel's routing would pick them), binds in a port
// space, address resolution by ARP, the RoCE path record, and INIT_QP_ATTR as ib_cm
// answers it (cm.c cm_init_qp_*_attr, cma.c cma_ib_init_qp_attr).
#include "rdma_cm_server.hpp"

#include "gid_table.hpp"
#include "softhca/transport/roce_path.hpp"

#include "clock.hpp"
#include "socket_addresses.hpp"
#include "softhca/transport/path_mtu.hpp"

#include <cerrno>
#include <cstring>
#include <rdma/ib_user_verbs.h>

namespace softhca::engine {

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
constexpr uint16_t kEphemeralFirst = 32768, kEphemeralLast = 60999; // ip_local_port_range
constexpr uint16_t kFirstUnprivilegedPort = 1024;                   // PROT_SOCK

} // namespace

int RdmaCmServer::device_for_address(const sockaddr* addr, int host) const {
    sockaddr_storage s{};
    std::memcpy(&s, addr, sockaddr_size(addr->sa_family));
    const tp::Gid gid = gid_of_address(s);
    if (gid == tp::Gid{})
        return -1;
    for (size_t i = 0; i < devices_.size(); ++i)
        if (device_in_host(i, host) && port_owns(ports_.info(devices_[i].port_index), gid))
            return static_cast<int>(i);
    return -1;
}

size_t RdmaCmServer::device_of_port(size_t port) const {
    for (size_t i = 0; i < devices_.size(); ++i)
        if (devices_[i].port_index == port)
            return i;
    return devices_.size();
}

// Where the kernel's rdma_cm puts loopback: the first device whose port is up.
int RdmaCmServer::first_active_device(int host) const {
    for (size_t i = 0; i < devices_.size(); ++i)
        if (device_in_host(i, host) && ports_.info(devices_[i].port_index).link_up)
            return static_cast<int>(i);
    return -1;
}

namespace {
// How many leading bits two addresses share.
int common_prefix_bits(const tp::Gid& a, const tp::Gid& b) {
    for (size_t i = 0; i < a.size(); ++i)
        if (const unsigned differ = a[i] ^ b[i])
            return static_cast<int>(i * 8) + __builtin_clz(differ) - 24;
    return 128;
}
} // namespace

// The device a packet to `destination` would leave from: the one that owns the address
// (the kernel routes a local destination to itself), else the one whose address of that
// family shares the longest prefix with it and whose link is up.
int RdmaCmServer::device_toward(const tp::Gid& destination, int host) const {
    int best = -1;
    int best_bits = -1;
    const bool ipv4 = tp::gid_is_ipv4_mapped(destination);
    for (size_t i = 0; i < devices_.size(); ++i) {
        if (!device_in_host(i, host))
            continue; // another host's: that namespace's, not this one's
        const PortInfo& p = ports_.info(devices_[i].port_index);
        if (port_owns(p, destination))
            return static_cast<int>(i);
        for (const tp::Gid& own : p.gids) {
            if (tp::gid_is_ipv4_mapped(own) != ipv4 ||
                (!ipv4 && tp::gid_is_link_local(own) != tp::gid_is_link_local(destination)))
                continue;
            const int bits = common_prefix_bits(own, destination);
            if (p.link_up && bits > best_bits) {
                best = static_cast<int>(i);
                best_bits = bits;
            }
        }
    }
    return best;
}

tp::Gid RdmaCmServer::own_gid_toward(size_t device, const tp::Gid& destination) const {
    // The port's address of the destination's family (a global IPv6 one first).
    const PortInfo& p = ports_.info(devices_[device].port_index);
    const bool ipv4 = tp::gid_is_ipv4_mapped(destination);
    const tp::Gid* found = nullptr;
    for (const tp::Gid& own : p.gids)
        if (tp::gid_is_ipv4_mapped(own) == ipv4 &&
            (!found || (tp::gid_is_link_local(*found) && !tp::gid_is_link_local(own) &&
                        !tp::gid_is_link_local(destination))))
            found = &own;
    return found ? *found : tp::Gid{};
}

tp::Gid RdmaCmServer::source_gid(const CmId& id) const {
    const tp::Gid bound = gid_of_address(id.src);
    if (bound != tp::Gid{} || id.device < 0)
        return bound;
    return own_gid_toward(static_cast<size_t>(id.device), id.peer.gid);
}

uint8_t RdmaCmServer::source_gid_index(const CmId& id) const {
    if (id.device < 0)
        return 0;
    const PortInfo& p = ports_.info(devices_[static_cast<size_t>(id.device)].port_index);
    const tp::Gid source = source_gid(id);
    for (size_t i = 0; i < p.gids.size(); ++i)
        if (p.gids[i] == source)
            return static_cast<uint8_t>(i);
    return 0;
}

bool RdmaCmServer::port_in_use(const CmId& id, uint16_t port) const {
    // The ids of this port space bound to this port only (index_bound_port), not every id
    // of every user.
    auto [first, last] = bound_ports_.equal_range({id.port_space, port});
    for (auto b = first; b != last; ++b) {
        auto found = ids_.find(b->second);
        if (found == ids_.end())
            continue;
        const auto& other = found->second;
        if (other.get() == &id || !other->file || other->host != id.host)
            continue; // another namespace's ports are its own
        const bool overlap = is_any_address(other->src) || is_any_address(id.src) ||
                             gid_of_address(other->src) == gid_of_address(id.src);
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
    int device = -1;
    if (is_loopback_address(s)) {
        // A loopback address binds to the first device whose port is up, as the kernel's
        // rdma_cm binds loopback (cma_bind_loopback); libfabric binds 127.0.0.1 this way.
        device = first_active_device(id.host);
        if (device < 0)
            return -EADDRNOTAVAIL;
    } else if (!is_any_address(s)) {
        device = device_for_address(reinterpret_cast<const sockaddr*>(&s), id.host);
        if (device < 0)
            return -EADDRNOTAVAIL;
    }
    id.src = s;
    uint16_t port = port_of_address(s);
    if (port) {
        // A port below 1024 needs CAP_NET_BIND_SERVICE (the kernel's cma_get_port); the
        // engine grants it to root only (rdma_cm_server.cpp).
        if (port < kFirstUnprivilegedPort && !(id.file && id.file->privileged_ports))
            return -EACCES;
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
    index_bound_port(id);
    return 0;
}

int RdmaCmServer::resolve_address(CmId& id, const sockaddr* src, const sockaddr* dst, size_t room,
                                  uint32_t timeout_ms, uint64_t now) {
    sockaddr_storage d{};
    if (!copy_address(dst, room, d))
        return -EAFNOSUPPORT;
    if (id.state != CmState::Idle && id.state != CmState::AddrResolved)
        return -EINVAL;
    if (id.file && events_full(*id.file))
        return -ENOMEM; // the user's files hold all the events they may
    const tp::Gid dst_gid = gid_of_address(d);
    if (dst_gid == tp::Gid{})
        return -EHOSTUNREACH;
    const bool dst_ipv4 = tp::gid_is_ipv4_mapped(dst_gid);
    if (id.bound && id.src.ss_family == AF_INET && !dst_ipv4)
        return -EAFNOSUPPORT; // an IPv4 id cannot reach an IPv6 destination
    if (!id.bound) {
        sockaddr_storage any{};
        if (src && src->sa_family != AF_UNSPEC) {
            if (!copy_address(src, room, any))
                return -EAFNOSUPPORT;
        } else {
            any.ss_family = d.ss_family;
        }
        if (const int rc = bind(id, reinterpret_cast<const sockaddr*>(&any), sizeof(any)))
            return rc;
    }
    const bool loopback = is_loopback_address(d);
    if (loopback && id.device < 0) {
        // A loopback destination is this host: the first device whose port is up
        // (cma_resolve_loopback), reached through its own port.
        id.device = first_active_device(id.host);
        if (id.device < 0)
            return -ENETUNREACH;
    }
    bool routed = false;
    if (id.device < 0) {
        id.device = device_toward(dst_gid, id.host);
        if (id.device < 0)
            return -ENETUNREACH;
        routed = true;
    }
    // The peer: the destination, or for loopback this port's own address of its family.
    const tp::Gid peer =
        loopback ? own_gid_toward(static_cast<size_t>(id.device), dst_gid) : dst_gid;
    if (peer == tp::Gid{})
        return -ENETUNREACH; // the port has no address of that family
    if (routed && is_any_address(id.src)) {
        // The bound "any" address becomes the port's own (the kernel fills in the
        // route's source address).
        const tp::Gid own = own_gid_toward(static_cast<size_t>(id.device), peer);
        if (own == tp::Gid{})
            return -ENETUNREACH;
        const uint16_t port = port_of_address(id.src);
        const sa_family_t family = id.src.ss_family;
        id.src = {};
        id.src.ss_family = family;
        set_address(id.src, own);
        set_port(id.src, port);
    } else if (loopback && is_any_address(id.src)) {
        // Toward loopback the route's source is loopback too (addr4_resolve/addr6_resolve
        // take the route's source): 127.0.0.1 or ::1, the port kept. libfabric names its
        // endpoints by this address.
        tp::Gid own{};
        if (dst_ipv4)
            own = tp::gid_from_ipv4(0x7f000001);
        else
            own[15] = 1;
        set_address(id.src, own);
    }
    id.dst = d;
    id.peer.gid = peer;
    id.peer.ipv4 = tp::gid_is_ipv4_mapped(peer) ? tp::load_be32(peer.data() + 12) : 0;
    id.peer.local = source_gid(id);
    id.state = CmState::AddrQuery;
    id.resolve_deadline = now + static_cast<uint64_t>(timeout_ms ? timeout_ms : 2000) * 1'000'000;
    // Resolved at once when the neighbour is known; else looked at again in turn (poll).
    if (!resolution_ended(id, now)) {
        resolving_.insert(id.handle);
        schedule(now + kNeighborCheckNs);
    }
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
        const tp::Gid sgid = source_gid(id);
        std::memcpy(path.sgid, sgid.data(), 16);
    }
    if (id.peer.gid != tp::Gid{})
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
    path.packet_life_time = cm_.config().packet_life;
}

void RdmaCmServer::fill_roce_ah(ib_uverbs_ah_attr& ah, const tp::Gid& dgid, uint8_t tos,
                                uint8_t sgid_index) {
    // RoCE: a GRH to the GID from the id's source GID, port 1, the route's hop limit (64,
    // as the kernel takes it for RoCEv2) and the id's type of service; no LIDs.
    ah = {};
    std::memcpy(ah.grh.dgid, dgid.data(), 16);
    ah.grh.sgid_index = sgid_index;
    ah.grh.hop_limit = 64;
    ah.grh.traffic_class = tos;
    ah.is_global = 1;
    ah.port_num = 1;
}

int RdmaCmServer::init_qp_attr(const CmId& id, uint32_t qp_state, ib_uverbs_qp_attr& a) const {
    a = {};
    a.qp_state = qp_state;
    // The connection's attributes, once the IB CM has them (ib_cm_init_qp_attr).
    const tp::CmConnection* c = connection_of(id);
    const bool connected = c && (c->state == tp::CmConnectionState::ReqReceived ||
                                 c->state == tp::CmConnectionState::RepSent ||
                                 c->state == tp::CmConnectionState::RepReceived ||
                                 c->state == tp::CmConnectionState::Established);
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
                    (c->responder_resources ? kAccessRemoteRead | kAccessRemoteAtomic : 0);
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
        fill_roce_ah(a.ah_attr, id.peer.gid, id.tos, source_gid_index(id));
        a.path_mtu = c->path_mtu;
        a.dest_qp_num = c->remote_qpn;
        a.rq_psn = id.receive_psn;
        if (id.qp_type == kQpTypeRc) {
            a.qp_attr_mask |= kQpMaxDestRdAtomic | kQpMinRnrTimer;
            a.max_dest_rd_atomic = c->responder_resources;
            a.min_rnr_timer = 0; // what ib_cm gives (cm_init_qp_rtr_attr)
        }
        return 0;
    case kQpsRts:
        a.qp_attr_mask = kQpState | kQpSqPsn;
        if (ud)
            return 0; // sq_psn 0
        if (!connected)
            return -EINVAL;
        a.sq_psn = c->send_psn;
        if (id.qp_type == kQpTypeRc) {
            a.qp_attr_mask |= kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;
            a.timeout = id.ack_timeout ? id.ack_timeout : c->local_ack_timeout;
            a.retry_cnt = c->retry_count;
            a.rnr_retry = c->rnr_retry_count;
            a.max_rd_atomic = c->initiator_depth;
        }
        return 0;
    default:
        return -EINVAL;
    }
}

int RdmaCmServer::join_multicast(CmId& id, uint64_t uid, const sockaddr* group, size_t length,
                                 uint16_t join_flags, uint32_t& handle) {
    // rdma_join_multicast: on a bound or resolved UD id, an IPv4 multicast group.
    if (id.qp_type != kQpTypeUd || id.device < 0 ||
        (id.state != CmState::Idle && id.state != CmState::AddrResolved &&
         id.state != CmState::RouteResolved))
        return -EINVAL;
    sockaddr_storage g{};
    if (!copy_address(group, length, g))
        return -EAFNOSUPPORT;
    const uint32_t ip = ipv4_of_address(g);
    if ((ip >> 28) != 0xe)
        return -EINVAL; // not 224.0.0.0/4
    // A join holds engine memory and queues an event: charged as an id, and refused while
    // the user's queued events are at their cap.
    if (!id.file || events_full(*id.file) || !charge_id(id.file->account))
        return -ENOMEM;
    CmMulticast mc;
    mc.user = id.file->account;
    mc.handle = next_free_handle();
    mc.uid = uid;
    mc.id = id.handle;
    mc.group = g;
    multicasts_[mc.handle] = mc;
    id.multicasts.push_back(mc.handle);
    handle = mc.handle;
    // The join completes at once: no SA and no MAD over RoCE. The event carries the
    // group's address handle, QPN 0xFFFFFF and the id's Q_Key (cma_iboe_join_multicast).
    CmEvent event;
    event.owner = mc.handle;
    event.resp.uid = uid;
    event.resp.id = mc.handle;
    event.resp.event = kEventMulticastJoin;
    auto& ud = event.resp.param.ud;
    ud.qp_num = 0xffffff;
    ud.qkey = id.qkey;
    const tp::Gid mgid = tp::gid_from_ipv4(ip);
    fill_roce_ah(ud.ah_attr, mgid, id.tos);
    (void)join_flags; // send-only members simply do not attach; librdmacm decides that
    queue_event(id, event);
    return 0;
}

} // namespace softhca::engine
