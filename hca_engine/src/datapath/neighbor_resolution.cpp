// The data path's neighbour resolution: ARP (RFC 826) for IPv4 GIDs and Neighbor
// Discovery (RFC 4861) for IPv6 ones. Answers the questions peers ask about the port's
// own addresses, asks about destinations whose MAC is not known, and keeps the answers
// in the port's NeighborTable; an answer nobody asked for is dropped and counted.
#include "datapath.hpp"
#include "gid_table.hpp"
#include "kernel_neighbors.hpp"
#include "softhca/transport/byte_order.hpp"

namespace softhca::engine {

namespace tp = transport;

void Datapath::handle_arp(size_t port, const ArpMessage& arp, uint64_t now) {
    const PortInfo& info = ports_.info(port);
    PortCounters& counters = ports_.counters(port);
    NeighborTable& table = neighbors_[port];
    const tp::Gid sender = tp::gid_from_ipv4(arp.sender_ip);
    if (arp.request) {
        if (!info.ipv4 || arp.target_ip != info.ipv4) {
            ++counters.rx_unhandled; // a question about someone else
            return;
        }
        // RFC 826: the one asking about us is a neighbour we will answer.
        if (arp.sender_ip)
            table.learn(sender, arp.sender_mac);
        TxFrame frame;
        if (!ports_.tx_alloc(port, frame))
            return;
        ArpMessage reply;
        reply.request = false;
        reply.sender_mac = info.mac;
        reply.sender_ip = info.ipv4;
        reply.target_mac = arp.sender_mac;
        reply.target_ip = arp.sender_ip;
        ports_.tx_queue(port, frame, static_cast<uint32_t>(build_arp(frame.data, reply)));
        ++counters.arp_replies;
        return;
    }
    if (!arp.sender_ip || !table.accept_answer(sender, arp.sender_mac, now))
        ++counters.rx_neighbor_dropped;
}

void Datapath::handle_neighbor_discovery(size_t port, const NdMessage& nd, uint64_t now) {
    const PortInfo& info = ports_.info(port);
    PortCounters& counters = ports_.counters(port);
    NeighborTable& table = neighbors_[port];
    if (nd.solicitation) {
        if (tp::gid_is_ipv4_mapped(nd.target) || !gid_table_holds(info.gids, nd.target)) {
            ++counters.rx_unhandled; // about someone else's address (a DAD probe among them)
            return;
        }
        tp::Gid destination;
        tp::MacAddress destination_mac;
        const bool probe = nd.source == tp::Gid{};
        if (probe) {
            // Someone checks whether our address is taken (RFC 4862 5.4.3): it is, and
            // the answer goes to all nodes (ff02::1), unsolicited (RFC 4861 7.2.4).
            destination = tp::Gid{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
            destination_mac = ipv6_multicast_mac(destination);
        } else {
            // RFC 4861 7.2.3: the solicitation's source becomes (or stays) a neighbour.
            destination = nd.source;
            destination_mac = nd.has_link_layer ? nd.link_layer : nd.frame_src;
            table.learn(nd.source, destination_mac);
        }
        TxFrame frame;
        if (!ports_.tx_alloc(port, frame))
            return;
        const size_t length = build_neighbor_advertisement(frame.data, info.mac, destination_mac,
                                                           destination, nd.target, !probe);
        ports_.tx_queue(port, frame, static_cast<uint32_t>(length));
        ++counters.nd_advertisements;
        return;
    }
    if (!nd.has_link_layer || !table.accept_answer(nd.target, nd.link_layer, now))
        ++counters.rx_neighbor_dropped; // nobody asked, or it names no MAC
}

bool Datapath::mac_for(size_t port, const tp::Gid& destination, const tp::Gid& source, uint64_t now,
                       tp::MacAddress& mac) {
    if (ports_.info(port).kernel_udp) {
        mac = {}; // the kernel resolves the destination itself
        return true;
    }
    const bool ipv4 = tp::gid_is_ipv4_mapped(destination);
    if (ipv4 && destination[12] >= 0xe0 && destination[12] <= 0xef) {
        // IPv4 multicast to Ethernet (RFC 1112 6.4): 01:00:5e and the low 23 bits.
        mac = {0x01,
               0x00,
               0x5e,
               static_cast<uint8_t>(destination[13] & 0x7f),
               destination[14],
               destination[15]};
        return true;
    }
    if (!ipv4 && destination[0] == 0xff) {
        mac = ipv6_multicast_mac(destination);
        return true;
    }
    if (const tp::MacAddress* known = neighbors_[port].lookup(destination)) {
        mac = *known;
        return true;
    }
    // Resolve first; the QP's packets wait in the transport meanwhile.
    const PortInfo& info = ports_.info(port);
    if (info.kernel_neighbors) {
        // The kernel resolves for the interface it shares with the port: ask its table,
        // and have it resolve what it does not know yet.
        if (!neighbors_[port].may_request(destination, now) || !kernel_neighbors_may_ask(now))
            return false;
        if (kernel_neighbor(info.kernel_ifindex, destination, mac)) {
            neighbors_[port].learn(destination, mac);
            return true;
        }
        if (kernel_resolve_neighbor(info.kernel_ifindex, destination))
            ++ports_.counters(port).kernel_resolutions;
        return false;
    }
    if ((ipv4 && !info.ipv4) || !neighbors_[port].may_request(destination, now))
        return false;
    TxFrame frame;
    if (!ports_.tx_alloc(port, frame))
        return false;
    if (ipv4) {
        ArpMessage request;
        request.request = true;
        request.sender_mac = info.mac;
        request.sender_ip = info.ipv4;
        request.target_ip = tp::load_be32(destination.data() + 12);
        ports_.tx_queue(port, frame, static_cast<uint32_t>(build_arp(frame.data, request)));
        ++ports_.counters(port).arp_requests;
    } else {
        // From the address the packets will carry (an IPv6 one of the port's).
        const tp::Gid& from = tp::gid_is_ipv4_mapped(source)
                                  ? source_gid_or_fallback(info.gids, 0, destination)
                                  : source;
        ports_.tx_queue(port, frame,
                        static_cast<uint32_t>(
                            build_neighbor_solicitation(frame.data, info.mac, from, destination)));
        ++ports_.counters(port).nd_solicitations;
    }
    return false;
}

bool Datapath::neighbor_resolved(size_t port, const tp::Gid& peer, uint64_t now) {
    const PortInfo& info = ports_.info(port);
    if (port_owns(info, peer))
        return true;
    tp::MacAddress mac;
    return mac_for(port, peer, source_gid_or_fallback(info.gids, 0, peer), now, mac);
}

} // namespace softhca::engine
