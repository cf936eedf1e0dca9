#include "kernel_neighbors.hpp"

#include <algorithm>
#include <cstring>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <mutex>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace softhca::engine {

namespace tp = transport;

namespace {

// One rtnetlink request (an ndmsg and its destination) and room for the answer.
struct Request {
    nlmsghdr header;
    ndmsg neighbor;
    alignas(NLA_ALIGNTO) uint8_t attributes[64];
};

// The engine's one rtnetlink socket, opened at first use; a reply that does not come
// within 100 ms counts as none.
// Data-path threads serving several af_xdp ports ask through one socket, one sequence
// number and one budget: a question at a time.
std::mutex asking;

int netlink_socket() {
    static const int fd = [] {
        const int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
        if (s >= 0) {
            timeval wait{0, 100'000};
            setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
        }
        return s;
    }();
    return fd;
}

// Sends `request` and reads the kernel's answer to it into `answer` (the message with
// its sequence number: answers to requests that timed out are skipped); its length, or
// -1.
ssize_t exchange(Request& request, uint8_t* answer, size_t capacity) {
    static uint32_t sequence = 0;
    const int fd = netlink_socket();
    if (fd < 0)
        return -1;
    request.header.nlmsg_seq = ++sequence;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd, &request, request.header.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) != static_cast<ssize_t>(request.header.nlmsg_len))
        return -1;
    for (int tries = 0; tries < 8; ++tries) {
        const ssize_t n = recv(fd, answer, capacity, 0);
        if (n < static_cast<ssize_t>(sizeof(nlmsghdr)))
            return -1;
        nlmsghdr header;
        std::memcpy(&header, answer, sizeof(header));
        if (header.nlmsg_seq == sequence)
            return n;
    }
    return -1;
}

// A neighbour request for `address` on `ifindex`.
Request make_request(uint16_t type, uint16_t flags, int ifindex, const tp::Gid& address) {
    Request r{};
    const bool ipv4 = tp::gid_is_ipv4_mapped(address);
    const size_t address_bytes = ipv4 ? 4 : 16;
    r.header.nlmsg_type = type;
    r.header.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
    r.neighbor.ndm_family = ipv4 ? AF_INET : AF_INET6;
    r.neighbor.ndm_ifindex = ifindex;
    nlattr destination{};
    destination.nla_type = NDA_DST;
    destination.nla_len = static_cast<uint16_t>(NLA_HDRLEN + address_bytes);
    std::memcpy(r.attributes, &destination, sizeof(destination));
    std::memcpy(r.attributes + NLA_HDRLEN, address.data() + (ipv4 ? 12 : 0), address_bytes);
    r.header.nlmsg_len =
        static_cast<uint32_t>(NLMSG_LENGTH(sizeof(ndmsg)) + NLA_ALIGN(destination.nla_len));
    return r;
}

} // namespace

bool kernel_neighbors_may_ask(uint64_t now_ns) {
    const std::lock_guard lock(asking);
    // A token bucket: one question a millisecond on average, 32 at once.
    constexpr uint64_t kPerQuestionNs = 1'000'000;
    constexpr uint64_t kBurstNs = 32 * kPerQuestionNs;
    static uint64_t spent_until = 0;
    spent_until = std::max(spent_until, now_ns - std::min(now_ns, kBurstNs));
    if (spent_until >= now_ns)
        return false;
    spent_until += kPerQuestionNs;
    return true;
}

bool kernel_neighbor(int ifindex, const tp::Gid& address, tp::MacAddress& mac) {
    const std::lock_guard lock(asking);
    Request request = make_request(RTM_GETNEIGH, 0, ifindex, address);
    alignas(nlmsghdr) uint8_t answer[1024];
    const ssize_t n = exchange(request, answer, sizeof(answer));
    if (n < static_cast<ssize_t>(NLMSG_LENGTH(sizeof(ndmsg))))
        return false;
    nlmsghdr header;
    std::memcpy(&header, answer, sizeof(header));
    if (header.nlmsg_type != RTM_NEWNEIGH || header.nlmsg_len > static_cast<size_t>(n) ||
        header.nlmsg_len < NLMSG_LENGTH(sizeof(ndmsg)))
        return false; // NLMSG_ERROR: no entry
    ndmsg neighbor;
    std::memcpy(&neighbor, answer + NLMSG_HDRLEN, sizeof(neighbor));
    constexpr uint16_t usable = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT;
    if (!(neighbor.ndm_state & usable))
        return false;
    // The attributes: find the link-layer address.
    size_t at = NLMSG_LENGTH(sizeof(ndmsg));
    while (at + NLA_HDRLEN <= header.nlmsg_len) {
        nlattr attribute;
        std::memcpy(&attribute, answer + at, sizeof(attribute));
        if (attribute.nla_len < NLA_HDRLEN || at + attribute.nla_len > header.nlmsg_len)
            break;
        if (attribute.nla_type == NDA_LLADDR && attribute.nla_len == NLA_HDRLEN + 6) {
            std::memcpy(mac.data(), answer + at + NLA_HDRLEN, 6);
            return true;
        }
        at += NLA_ALIGN(attribute.nla_len);
    }
    return false;
}

bool kernel_resolve_neighbor(int ifindex, const tp::Gid& address) {
    const std::lock_guard lock(asking);
    Request request = make_request(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_ACK, ifindex, address);
    request.neighbor.ndm_flags = NTF_USE;
    alignas(nlmsghdr) uint8_t answer[256];
    const ssize_t n = exchange(request, answer, sizeof(answer));
    if (n < static_cast<ssize_t>(NLMSG_LENGTH(sizeof(nlmsgerr))))
        return false;
    nlmsghdr header;
    std::memcpy(&header, answer, sizeof(header));
    if (header.nlmsg_type != NLMSG_ERROR)
        return false;
    nlmsgerr error;
    std::memcpy(&error, answer + NLMSG_HDRLEN, sizeof(error));
    return error.error == 0;
}

} // namespace softhca::engine
