// The kernel's neighbour table, for a port whose interface the kernel shares (an af_xdp
// port: its XDP program hands the kernel everything but RoCEv2, ARP and neighbour
// discovery included, so the kernel resolves and answers for the address it shares with
// the port, as it does for Linux rxe). Read and asked over rtnetlink; the data path calls
// these only for a destination it does not know yet, at most once per request interval
// and within kernel_neighbors_may_ask, over one rtnetlink socket.
#pragma once

#include "softhca/transport/roce_frame.hpp"

#include <cstdint>

namespace softhca::engine {

// Whether the engine may ask the kernel now: at most 1000 destinations a second (bursts
// of 32), whatever they are, so that a process posting to many made-up addresses costs
// the engine and the kernel's table little. Counts the question when it says yes.
bool kernel_neighbors_may_ask(uint64_t now_ns);

// The MAC the kernel has for `address` on interface `ifindex`, when its entry is usable
// (reachable, stale, delay, probe or permanent).
bool kernel_neighbor(int ifindex, const transport::Gid& address, transport::MacAddress& mac);

// Makes the kernel resolve `address` on `ifindex` as if a packet were sent to it
// (RTM_NEWNEIGH with NTF_USE: the entry is made if need be and ARP or a Neighbor
// Solicitation goes out). False when the kernel refused.
bool kernel_resolve_neighbor(int ifindex, const transport::Gid& address);

} // namespace softhca::engine
