// The neighbours room (neighbors/): ARP (arp.hpp), IPv6 neighbour discovery
// (neighbor_discovery.hpp) and this table: codecs and state, no I/O. It uses nothing else
// of the engine; the data path sends and answers (datapath/neighbor_resolution.cpp).
//
// One port's neighbour table: peer addresses, as GIDs (IPv4 as ::ffff:a.b.c.d), to MACs.
// Entries come from answers to what the engine asked (ARP replies, Neighbor
// Advertisements), from requests that name one of the port's own addresses (RFC 826's
// merge, RFC 4861 7.2.3), and from RoCE packets addressed to the port. An answer nobody
// asked for makes no entry and changes none (the caller counts and drops it), as Linux
// does with arp_accept and accept_untracked_na off.
#pragma once

#include "softhca/transport/roce_address.hpp"

#include <cstdint>
#include <cstring>
#include <unordered_map>

namespace softhca::engine {

class NeighborTable {
  public:
    // Peers one port may know, and solicitations it may have outstanding: a flood of
    // packets from made-up sources fills the table, never memory.
    static constexpr size_t kMaxEntries = 4096;
    // Requests for one address go out at most this often (Linux's retrans_time is 1 s;
    // a QP waiting on the address retries sooner, as an HCA driver's resolver would).
    static constexpr uint64_t kRequestIntervalNs = 100'000'000;
    // An answer counts as asked for until this long after the last request.
    static constexpr uint64_t kAnswerWindowNs = 3'000'000'000;

    // The MAC for an address, or nullptr when not known (yet).
    const transport::MacAddress* lookup(const transport::Gid& address) const {
        auto it = entries_.find(address);
        return it == entries_.end() ? nullptr : &it->second;
    }
    bool knows(const transport::Gid& address) const { return entries_.count(address) != 0; }
    size_t size() const { return entries_.size(); }

    // Records address → mac; false when the table is full and the address new.
    bool learn(const transport::Gid& address, const transport::MacAddress& mac) {
        // Every RoCE packet teaches its source: the same peer as the last one (a stream)
        // needs no lookup. Entries are never removed, so the memo stays true.
        if (has_last_ && address == last_address_ && mac == last_mac_)
            return true;
        auto it = entries_.find(address);
        if (it != entries_.end()) {
            it->second = mac;
        } else {
            if (entries_.size() >= kMaxEntries)
                return false;
            entries_.emplace(address, mac);
        }
        has_last_ = true;
        last_address_ = address;
        last_mac_ = mac;
        return true;
    }

    // Rate limit for requests: true when a request for `address` may go out at now_ns
    // (the caller sends it); the request is recorded as outstanding.
    bool may_request(const transport::Gid& address, uint64_t now_ns) {
        if (last_request_.size() >= kMaxEntries)
            std::erase_if(last_request_, [&](const auto& entry) {
                return now_ns - entry.second > kAnswerWindowNs;
            });
        auto it = last_request_.find(address);
        if (it != last_request_.end() && now_ns - it->second < kRequestIntervalNs)
            return false;
        if (it == last_request_.end() && last_request_.size() >= kMaxEntries)
            return false;
        last_request_[address] = now_ns;
        return true;
    }

    // True when an answer about `address` was asked for (a request went out recently);
    // the question is then settled.
    bool take_answer(const transport::Gid& address, uint64_t now_ns) {
        auto it = last_request_.find(address);
        if (it == last_request_.end() || now_ns - it->second > kAnswerWindowNs)
            return false;
        last_request_.erase(it);
        return true;
    }

    // An answer (ARP reply, Neighbor Advertisement) that `address` is at `mac`: learnt
    // when it was asked for; a second answer to one question (a host whose kernel and
    // softhca port share an address both reply) is taken as saying nothing new. False for
    // anything else: unsolicited, for the caller to drop and count.
    bool accept_answer(const transport::Gid& address, const transport::MacAddress& mac,
                       uint64_t now_ns) {
        if (take_answer(address, now_ns)) {
            learn(address, mac);
            return true;
        }
        const transport::MacAddress* known = lookup(address);
        return known && *known == mac;
    }

  private:
    struct GidHash {
        size_t operator()(const transport::Gid& gid) const {
            uint64_t high = 0, low = 0;
            std::memcpy(&high, gid.data(), 8);
            std::memcpy(&low, gid.data() + 8, 8);
            return static_cast<size_t>((high * 0x9e3779b97f4a7c15ull) ^ low ^ (low >> 29));
        }
    };
    std::unordered_map<transport::Gid, transport::MacAddress, GidHash> entries_;
    bool has_last_ = false; // the entry learn() made or confirmed last
    transport::Gid last_address_{};
    transport::MacAddress last_mac_{};
    std::unordered_map<transport::Gid, uint64_t, GidHash> last_request_;
};

} // namespace softhca::engine
