// libFuzzer target: the preload's RDMA netlink answers (kernel_shim/preload/
// rdma_netlink_replies.cpp), fed whole request datagrams, over a device tree of two
// devices the target makes at start (its engine socket names nothing, so the resource
// requests, link add and delete and the QP counter requests take their error path: no
// engine is ever reached). Invariants: no crash or sanitizer report; every answer is one
// whole netlink message (its length says its size, at least a header); an answer never
// names another sequence number than a request of the datagram had; a link add or delete
// or a QP counter set, bind or unbind is never acknowledged or answered as done (there is
// no engine to do it: only a STAT_SET that names hw counters and no mode, which asks
// nothing of the engine, may be).
#include "rdma_netlink_replies.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <set>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

void put_file(const std::string& path, const std::string& bytes) {
    if (FILE* f = std::fopen(path.c_str(), "wb")) {
        std::fwrite(bytes.data(), 1, bytes.size(), f);
        std::fclose(f);
    }
}

void make_dirs(const std::string& path) {
    for (size_t at = 1; (at = path.find('/', at)) != std::string::npos; ++at)
        ::mkdir(path.substr(0, at).c_str(), 0755);
    ::mkdir(path.c_str(), 0755);
}

// A tree as the engine writes it (registration.cpp, port_counter_files.cpp), small.
std::string make_tree() {
    char templ[] = "/tmp/softhca-fuzz-netlink-XXXXXX";
    const std::string root = ::mkdtemp(templ) ? templ : "/tmp";
    for (int d = 0; d < 2; ++d) {
        const std::string name = "fz" + std::to_string(d);
        const std::string dev = root + "/class/infiniband/" + name;
        make_dirs(dev + "/ports/1/gid_attrs/ndevs");
        make_dirs(dev + "/ports/1/hw_counters");
        put_file(dev + "/fw_ver", "0.1.0\n");
        put_file(dev + "/node_guid", "0053:48ff:fe60:ae0" + std::to_string(d) + "\n");
        put_file(dev + "/sys_image_guid", "0053:48ff:fe60:ae0" + std::to_string(d) + "\n");
        put_file(dev + "/softhca_engine_socket", root + "/no-engine.sock\n");
        put_file(dev + "/softhca_device_index", std::to_string(d + 1) + "\n");
        put_file(dev + "/ports/1/cap_mask", "0x00010000\n");
        put_file(dev + "/ports/1/state", "4: ACTIVE\n");
        put_file(dev + "/ports/1/phys_state", "5: LinkUp\n");
        put_file(dev + "/ports/1/gid_attrs/ndevs/0", d == 0 ? "lo\n" : "\n");
        put_file(dev + "/ports/1/hw_counters/sent_pkts", "12345\n");
        put_file(dev + "/ports/1/hw_counters/rcvd_pkts", "678\n");
        put_file(dev + "/ports/1/hw_counters/lifespan", "10\n");
        const std::string verbs = root + "/class/infiniband_verbs/" + name + "_uverbs";
        make_dirs(verbs);
        put_file(verbs + "/ibdev", name + "\n");
        put_file(verbs + "/dev", "1:7\n");
        put_file(verbs + "/abi_version", "6\n");
    }
    return root;
}

const std::string& tree() {
    static const std::string root = make_tree();
    return root;
}

std::string request(uint16_t op, uint16_t flags, uint32_t seq, const std::string& attrs = {}) {
    nlmsghdr h{};
    h.nlmsg_len = static_cast<uint32_t>(sizeof(h) + attrs.size());
    h.nlmsg_type = static_cast<uint16_t>(RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op));
    h.nlmsg_flags = flags;
    h.nlmsg_seq = seq;
    return std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + attrs;
}

std::string attr_u32(uint16_t type, uint32_t value) {
    nlattr a{8, type};
    return std::string(reinterpret_cast<const char*>(&a), 4) +
           std::string(reinterpret_cast<const char*>(&value), 4);
}

std::string attr_string(uint16_t type, const std::string& value) {
    nlattr a{static_cast<uint16_t>(4 + value.size() + 1), type};
    std::string out(reinterpret_cast<const char*>(&a), 4);
    out += value;
    out.push_back('\0');
    out.resize(NLA_ALIGN(out.size()), '\0');
    return out;
}

std::string nest(uint16_t type, const std::string& inner) {
    nlattr a{static_cast<uint16_t>(4 + inner.size()), static_cast<uint16_t>(type | NLA_F_NESTED)};
    return std::string(reinterpret_cast<const char*>(&a), 4) + inner;
}

// What the rdma tool and libibverbs send, each a seed of its own.
void write_seeds(const std::string& dir) {
    const uint16_t req = NLM_F_REQUEST, dump = NLM_F_REQUEST | NLM_F_DUMP, ack = NLM_F_ACK;
    const std::string link =
        attr_u32(RDMA_NLDEV_ATTR_DEV_INDEX, 1) + attr_u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
    const std::string qp = attr_u32(RDMA_NLDEV_ATTR_STAT_RES, RDMA_NLDEV_ATTR_RES_QP);
    const std::vector<std::pair<std::string, std::string>> seeds = {
        {"dev-dump", request(RDMA_NLDEV_CMD_GET, dump, 1)},
        {"dev-get",
         request(RDMA_NLDEV_CMD_GET, req | ack, 2, attr_u32(RDMA_NLDEV_ATTR_DEV_INDEX, 1))},
        {"port-dump", request(RDMA_NLDEV_CMD_PORT_GET, dump, 3)},
        {"stat-get",
         request(RDMA_NLDEV_CMD_STAT_GET, req | ack, 4,
                 attr_u32(RDMA_NLDEV_ATTR_DEV_INDEX, 2) + attr_u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1))},
        {"chardev", request(RDMA_NLDEV_CMD_GET_CHARDEV, req, 5,
                            attr_u32(RDMA_NLDEV_ATTR_DEV_INDEX, 1) +
                                attr_string(RDMA_NLDEV_ATTR_CHARDEV_TYPE, "uverbs"))},
        {"sys", request(RDMA_NLDEV_CMD_SYS_GET, req | ack, 6)},
        {"res", request(RDMA_NLDEV_CMD_RES_GET, dump, 7)},
        {"two", request(RDMA_NLDEV_CMD_GET, dump, 8) + request(RDMA_NLDEV_CMD_SYS_GET, req, 9)},
        // rdma link add fz9 type softhca netdev lo, and with a type no module provides.
        {"link-add", request(RDMA_NLDEV_CMD_NEWLINK, req | ack, 10,
                             attr_string(RDMA_NLDEV_ATTR_DEV_NAME, "fz9") +
                                 attr_string(RDMA_NLDEV_ATTR_LINK_TYPE, "softhca") +
                                 attr_string(RDMA_NLDEV_ATTR_NDEV_NAME, "lo"))},
        {"link-add-rxe", request(RDMA_NLDEV_CMD_NEWLINK, req | ack, 11,
                                 attr_string(RDMA_NLDEV_ATTR_DEV_NAME, "rxe0") +
                                     attr_string(RDMA_NLDEV_ATTR_LINK_TYPE, "rxe") +
                                     attr_string(RDMA_NLDEV_ATTR_NDEV_NAME, "lo"))},
        // rdma link delete fz1: the device dump that finds its index, then the delete.
        {"link-delete",
         request(RDMA_NLDEV_CMD_GET, dump, 12) + request(RDMA_NLDEV_CMD_DELLINK, req | ack, 13,
                                                         attr_u32(RDMA_NLDEV_ATTR_DEV_INDEX, 2))},
        // rdma statistic qp mode|show|set|bind|unbind link fz0/1, as the tool sends them.
        {"stat-qp-mode",
         request(RDMA_NLDEV_CMD_STAT_GET, req | ack, 14,
                 link + attr_u32(RDMA_NLDEV_ATTR_STAT_MODE, RDMA_COUNTER_MODE_MANUAL) + qp)},
        {"stat-qp-show", request(RDMA_NLDEV_CMD_STAT_GET, dump | ack, 15, link + qp)},
        {"stat-qp-counter", request(RDMA_NLDEV_CMD_STAT_GET, req | ack, 16,
                                    link + qp + attr_u32(RDMA_NLDEV_ATTR_STAT_COUNTER_ID, 4))},
        {"stat-qp-auto",
         request(RDMA_NLDEV_CMD_STAT_SET, req | ack, 17,
                 link + qp + attr_u32(RDMA_NLDEV_ATTR_STAT_MODE, RDMA_COUNTER_MODE_AUTO) +
                     attr_u32(RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK, RDMA_COUNTER_MASK_QP_TYPE))},
        {"stat-qp-bind", request(RDMA_NLDEV_CMD_STAT_SET, req | ack, 18,
                                 attr_u32(RDMA_NLDEV_ATTR_STAT_MODE, RDMA_COUNTER_MODE_MANUAL) +
                                     qp + link + attr_u32(RDMA_NLDEV_ATTR_RES_LQPN, 17) +
                                     attr_u32(RDMA_NLDEV_ATTR_STAT_COUNTER_ID, 4))},
        {"stat-qp-unbind", request(RDMA_NLDEV_CMD_STAT_DEL, req | ack, 19,
                                   attr_u32(RDMA_NLDEV_ATTR_STAT_MODE, RDMA_COUNTER_MODE_MANUAL) +
                                       qp + link + attr_u32(RDMA_NLDEV_ATTR_STAT_COUNTER_ID, 4) +
                                       attr_u32(RDMA_NLDEV_ATTR_RES_LQPN, 17))},
        // rdma statistic set link fz0/1 optional-counters with one index, and none.
        {"stat-optional", request(RDMA_NLDEV_CMD_STAT_SET, req | ack, 20,
                                  link + nest(RDMA_NLDEV_ATTR_STAT_HWCOUNTERS,
                                              attr_u32(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_INDEX, 0)))},
        {"stat-optional-none", request(RDMA_NLDEV_CMD_STAT_SET, req | ack, 21,
                                       link + nest(RDMA_NLDEV_ATTR_STAT_HWCOUNTERS, {}))},
    };
    for (const auto& [name, bytes] : seeds)
        put_file(dir + "/" + name, bytes);
}

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_rdma_netlink: %s\n", what);
    std::abort();
}

// Whether a message's attributes, walked as the preload walks them, name hw counters.
bool names_hwcounters(const uint8_t* message, size_t length) {
    for (size_t at = NLMSG_HDRLEN; length >= at && length - at >= NLA_HDRLEN;) {
        nlattr a;
        std::memcpy(&a, message + at, sizeof(a));
        if (a.nla_len < NLA_HDRLEN || a.nla_len > length - at)
            return false;
        if ((a.nla_type & NLA_TYPE_MASK) == RDMA_NLDEV_ATTR_STAT_HWCOUNTERS)
            return true;
        at += NLA_ALIGN(a.nla_len);
    }
    return false;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    tree();
    if (const char* dir = std::getenv("SOFTHCA_FUZZ_SEEDS")) {
        make_dirs(dir);
        write_seeds(dir);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // The sequence numbers the datagram's messages carry, as far as headers can be read;
    // how many of its messages are counter sets that need no engine (hw counters named).
    std::set<uint32_t> sequences;
    size_t engineless_sets = 0;
    const uint16_t stat_set = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_STAT_SET);
    for (size_t at = 0; at + sizeof(nlmsghdr) <= size;) {
        nlmsghdr h;
        std::memcpy(&h, data + at, sizeof(h));
        sequences.insert(h.nlmsg_seq);
        if (h.nlmsg_len < sizeof(h) || h.nlmsg_len > size - at)
            break;
        if (h.nlmsg_type == stat_set && names_hwcounters(data + at, h.nlmsg_len))
            ++engineless_sets;
        at += std::min<size_t>(NLMSG_ALIGN(static_cast<size_t>(h.nlmsg_len)), size - at);
    }
    size_t stat_set_answers = 0, stat_set_acks = 0;
    const auto answers = softhca::preload::answer_rdma_netlink(tree().c_str(), data, size, 4242);
    for (const std::string& answer : answers) {
        if (answer.size() < sizeof(nlmsghdr))
            fail("an answer shorter than a header");
        nlmsghdr h;
        std::memcpy(&h, answer.data(), sizeof(h));
        if (h.nlmsg_len != answer.size())
            fail("an answer whose length is not its size");
        if (!sequences.count(h.nlmsg_seq))
            fail("an answer to a sequence number no request had");
        if (h.nlmsg_pid != 4242)
            fail("an answer to another port");
        // An ACK carries the request it answers: a link request's or a counter unbind's
        // is never success. A counter set, bind or unbind is answered (typed STAT_SET, an
        // unbind's too) or acknowledged as done only when it asked nothing of the engine.
        if (h.nlmsg_type == stat_set)
            ++stat_set_answers;
        nlmsgerr e;
        if (h.nlmsg_type == NLMSG_ERROR && answer.size() >= sizeof(h) + sizeof(e)) {
            std::memcpy(&e, answer.data() + sizeof(h), sizeof(e));
            const uint16_t newlink = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_NEWLINK);
            const uint16_t dellink = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_DELLINK);
            const uint16_t stat_del = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_STAT_DEL);
            const bool request = (e.msg.nlmsg_flags & NLM_F_REQUEST) != 0;
            if (e.error == 0 && request &&
                (e.msg.nlmsg_type == newlink || e.msg.nlmsg_type == dellink ||
                 e.msg.nlmsg_type == stat_del))
                fail("a link request or counter unbind acknowledged without an engine");
            if (e.error == 0 && request && e.msg.nlmsg_type == stat_set)
                ++stat_set_acks;
        }
    }
    if (stat_set_answers > engineless_sets || stat_set_acks > engineless_sets)
        fail("a QP counter set or bind answered as done without an engine");
    return 0;
}
