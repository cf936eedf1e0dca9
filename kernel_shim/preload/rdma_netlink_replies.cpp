#include "rdma_netlink_replies.hpp"

#include "next_symbol.hpp"
#include "softhca/device_interface/control.hpp"
#include "softhca/device_interface/registration.hpp" // kEngineSocketFile, kDeviceIndexFile
#include "softhca/device_interface/socket_io.hpp"
#include "softhca/transport/roce_address.hpp" // GUIDs as sysfs writes them

// This library is built without exceptions: a document that does not parse is discarded.
#define JSON_NOEXCEPTION
#include <nlohmann/json.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <functional>
#include <iterator>
#include <linux/netlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

namespace softhca::preload {
namespace {

// The status document keeps its objects' members in the order the engine wrote them: a
// QP counter's hw counters are listed in the engine's order, as a driver lists its own.
using Json = nlohmann::ordered_json;

// The tree's files are read with the C library's own open: the interposed one would
// send /sys/class/... paths back into the tree, and these are the tree's paths already.
std::string read_file(const std::string& path) {
    static const auto real_open = next_symbol<int (*)(const char*, int, ...)>("open");
    const int fd = real_open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return {};
    char buffer[256];
    const ssize_t n = ::read(fd, buffer, sizeof(buffer) - 1);
    ::close(fd);
    if (n <= 0)
        return {};
    std::string text(buffer, static_cast<size_t>(n));
    while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
        text.pop_back();
    return text;
}

// The names in a folder of the tree, sorted (no dot entries).
std::vector<std::string> list_folder(const std::string& path) {
    static const auto real_opendir = next_symbol<DIR* (*)(const char*)>("opendir");
    std::vector<std::string> names;
    DIR* dir = real_opendir(path.c_str());
    if (!dir)
        return names;
    while (const dirent* entry = ::readdir(dir))
        if (entry->d_name[0] != '.')
            names.emplace_back(entry->d_name);
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    return names;
}

uint64_t number(const std::string& text) {
    return std::strtoull(text.c_str(), nullptr, 0);
}

// A device of the tree as nldev numbers it: by the index the engine wrote in its folder
// (registration.hpp's kDeviceIndexFile: its slot + 1, never reused while the engine runs,
// as the kernel's). Devices come and go (rdma link add and delete): iproute2 looks a name
// up (a device dump) and sends its index, which then names the same device or none.
struct Device {
    uint32_t index = 0;
    std::string name;
    std::string dir; // .../class/infiniband/NAME
    uint32_t ports = 0;
};

std::vector<Device> devices(const char* root) {
    std::vector<Device> out;
    const std::string cls = std::string(root) + "/class/infiniband";
    for (const std::string& name : list_folder(cls)) {
        Device d;
        d.name = name;
        d.dir = cls + "/" + name;
        // A device whose index is not written yet is not registered yet (its tree is
        // being made): nldev would not know it either.
        const uint64_t index = number(read_file(d.dir + "/" + device_interface::kDeviceIndexFile));
        if (index == 0 || index >= UINT32_MAX)
            continue;
        d.index = static_cast<uint32_t>(index);
        d.ports = static_cast<uint32_t>(list_folder(d.dir + "/ports").size());
        out.push_back(std::move(d));
    }
    return out;
}

// One netlink message being built.
class Message {
  public:
    Message(uint16_t type, uint16_t flags, uint32_t seq, uint32_t portid) {
        nlmsghdr header{};
        header.nlmsg_type = type;
        header.nlmsg_flags = flags;
        header.nlmsg_seq = seq;
        header.nlmsg_pid = portid;
        bytes_.assign(reinterpret_cast<const char*>(&header), sizeof(header));
    }
    void put(uint16_t type, const void* value, size_t length) {
        if (length > UINT16_MAX - NLA_HDRLEN)
            return; // no attribute of ours is near this
        nlattr attr{};
        attr.nla_type = type;
        attr.nla_len = static_cast<uint16_t>(NLA_HDRLEN + length);
        bytes_.append(reinterpret_cast<const char*>(&attr), sizeof(attr));
        if (length)
            bytes_.append(static_cast<const char*>(value), length);
        bytes_.append(NLA_ALIGN(length) - length, '\0');
    }
    // A payload that is not attributes (an error's or DONE's).
    void append(const void* bytes, size_t length) {
        bytes_.append(static_cast<const char*>(bytes), length);
    }
    void put_u8(uint16_t type, uint8_t v) { put(type, &v, sizeof(v)); }
    void put_u32(uint16_t type, uint32_t v) { put(type, &v, sizeof(v)); }
    void put_u64(uint16_t type, uint64_t v) { put(type, &v, sizeof(v)); }
    void put_string(uint16_t type, const std::string& s) { put(type, s.c_str(), s.size() + 1); }
    // Nested attributes: begin() returns where the nest starts, end() closes it.
    size_t begin(uint16_t type) {
        const size_t at = bytes_.size();
        put(type, nullptr, 0);
        reinterpret_cast<nlattr*>(&bytes_[at])->nla_type = type | NLA_F_NESTED;
        return at;
    }
    void end(size_t at) {
        // A nest longer than an attribute can say is cut back to its header (empty).
        if (bytes_.size() - at > UINT16_MAX)
            bytes_.resize(at + NLA_HDRLEN);
        reinterpret_cast<nlattr*>(&bytes_[at])->nla_len = static_cast<uint16_t>(bytes_.size() - at);
    }
    size_t size() const { return bytes_.size(); }
    // Drops what was put from `at` on (a nest begun there, and what it holds).
    void cut(size_t at) { bytes_.resize(at); }
    std::string finish() {
        reinterpret_cast<nlmsghdr*>(&bytes_[0])->nlmsg_len = static_cast<uint32_t>(bytes_.size());
        return std::move(bytes_);
    }

  private:
    std::string bytes_;
};

// A string attribute as nldev's policy takes it (NLA_NUL_STRING): valid only when a NUL
// ends it within the attribute (an attribute not sent is not), its text what comes
// before the first NUL.
struct StringAttribute {
    bool terminated = false;
    std::string text;
};

// What a request asked: the attributes nldev reads from requests.
struct Request {
    bool has_device = false, has_port = false;
    uint32_t device = 0, port = 0;
    std::string chardev_type;
    // rdma link add NAME type TYPE netdev IF.
    StringAttribute device_name, link_type, netdev_name;
    // Per-resource counters (rdma statistic qp ...): which resource (RDMA_NLDEV_ATTR_RES_QP
    // for QPs), the counter mode set or asked for, the auto mode's mask, the QP and the
    // counter; the hw counters a request would turn on or off (statistic set ...
    // optional-counters), how many it names.
    bool has_stat_res = false, has_stat_mode = false, has_auto_mask = false;
    bool has_lqpn = false, has_counter_id = false, has_hwcounters = false;
    uint32_t stat_res = 0, stat_mode = 0, auto_mask = 0, lqpn = 0, counter_id = 0;
    size_t hwcounter_count = 0;
    // A u32 attribute of another length than 4: the kernel's strict parsing (the counter
    // requests') refuses the request.
    bool bad_u32 = false;
};

// The u32 attributes of requests, and where each goes.
struct U32Attribute {
    uint16_t type;
    bool Request::*present;
    uint32_t Request::*value;
};
constexpr U32Attribute kU32Attributes[] = {
    {RDMA_NLDEV_ATTR_DEV_INDEX, &Request::has_device, &Request::device},
    {RDMA_NLDEV_ATTR_PORT_INDEX, &Request::has_port, &Request::port},
    {RDMA_NLDEV_ATTR_STAT_RES, &Request::has_stat_res, &Request::stat_res},
    {RDMA_NLDEV_ATTR_STAT_MODE, &Request::has_stat_mode, &Request::stat_mode},
    {RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK, &Request::has_auto_mask, &Request::auto_mask},
    {RDMA_NLDEV_ATTR_RES_LQPN, &Request::has_lqpn, &Request::lqpn},
    {RDMA_NLDEV_ATTR_STAT_COUNTER_ID, &Request::has_counter_id, &Request::counter_id},
};

StringAttribute string_attribute(const uint8_t* value, size_t length) {
    StringAttribute s;
    const auto* text = reinterpret_cast<const char*>(value);
    const size_t n = strnlen(text, length);
    s.terminated = n < length;
    s.text.assign(text, n);
    return s;
}

Request parse(const nlmsghdr* header) {
    Request r;
    const auto* at = reinterpret_cast<const uint8_t*>(header) + NLMSG_HDRLEN;
    size_t left = header->nlmsg_len - NLMSG_HDRLEN;
    while (left >= NLA_HDRLEN) {
        nlattr attr;
        std::memcpy(&attr, at, sizeof(attr));
        if (attr.nla_len < NLA_HDRLEN || attr.nla_len > left)
            break;
        const uint8_t* value = at + NLA_HDRLEN;
        const size_t length = attr.nla_len - NLA_HDRLEN;
        // A u32 attribute: read when it holds 4 bytes at least (the lenient parsing of
        // the other requests), noted when it is not exactly 4.
        const auto u32 = [&](uint32_t& out) {
            r.bad_u32 |= length != 4;
            if (length < 4)
                return false;
            std::memcpy(&out, value, 4);
            return true;
        };
        const uint16_t type = attr.nla_type & NLA_TYPE_MASK;
        for (const U32Attribute& a : kU32Attributes)
            if (type == a.type)
                r.*a.present |= u32(r.*a.value);
        switch (type) {
        case RDMA_NLDEV_ATTR_CHARDEV_TYPE:
            r.chardev_type.assign(reinterpret_cast<const char*>(value),
                                  strnlen(reinterpret_cast<const char*>(value), length));
            break;
        case RDMA_NLDEV_ATTR_STAT_HWCOUNTERS:
            // A nest of u32 indices: counted, whatever they say.
            r.has_hwcounters = true;
            for (size_t offset = 0; length - offset >= NLA_HDRLEN;) {
                nlattr inner;
                std::memcpy(&inner, value + offset, sizeof(inner));
                if (inner.nla_len < NLA_HDRLEN || inner.nla_len > length - offset)
                    break;
                ++r.hwcounter_count;
                offset += std::min<size_t>(NLA_ALIGN(inner.nla_len), length - offset);
            }
            break;
        case RDMA_NLDEV_ATTR_DEV_NAME:
            r.device_name = string_attribute(value, length);
            break;
        case RDMA_NLDEV_ATTR_LINK_TYPE:
            r.link_type = string_attribute(value, length);
            break;
        case RDMA_NLDEV_ATTR_NDEV_NAME:
            r.netdev_name = string_attribute(value, length);
            break;
        default:
            break;
        }
        const size_t step = NLA_ALIGN(attr.nla_len);
        if (step >= left)
            break;
        at += step;
        left -= step;
    }
    return r;
}

std::string error_message(const nlmsghdr* request, int error, uint32_t portid) {
    Message m(NLMSG_ERROR, 0, request->nlmsg_seq, portid);
    nlmsgerr body{};
    body.error = -error;
    body.msg = *request;
    m.append(&body, sizeof(body));
    return m.finish();
}

std::string done_message(const nlmsghdr* request, uint32_t portid) {
    Message m(NLMSG_DONE, NLM_F_MULTI, request->nlmsg_seq, portid);
    const int32_t status = 0;
    m.append(&status, sizeof(status));
    return m.finish();
}

void put_device_handle(Message& m, const Device& d) {
    m.put_u32(RDMA_NLDEV_ATTR_DEV_INDEX, d.index);
    m.put_string(RDMA_NLDEV_ATTR_DEV_NAME, d.name);
}

// RDMA_NLDEV_CMD_GET (nldev fill_dev_info): the port attribute carries the number of
// ports.
void fill_device(Message& m, const Device& d) {
    put_device_handle(m, d);
    m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, d.ports);
    m.put_string(RDMA_NLDEV_ATTR_FW_VERSION, read_file(d.dir + "/fw_ver"));
    m.put_u64(RDMA_NLDEV_ATTR_NODE_GUID,
              transport::guid_from_sysfs_string(read_file(d.dir + "/node_guid")));
    m.put_u64(RDMA_NLDEV_ATTR_SYS_IMAGE_GUID,
              transport::guid_from_sysfs_string(read_file(d.dir + "/sys_image_guid")));
    m.put_u8(RDMA_NLDEV_ATTR_DEV_NODE_TYPE, RDMA_NODE_IB_CA);
    m.put_string(RDMA_NLDEV_ATTR_DEV_PROTOCOL, "roce");
}

// RDMA_NLDEV_CMD_PORT_GET (fill_port_info). A RoCE port has no LID, SM LID or LMC to
// report (the kernel sends them for InfiniBand ports only); its netdev comes from the
// first GID's.
void fill_port(Message& m, const Device& d, uint32_t port) {
    const std::string dir = d.dir + "/ports/" + std::to_string(port);
    put_device_handle(m, d);
    m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, port);
    m.put_u64(RDMA_NLDEV_ATTR_CAP_FLAGS, number(read_file(dir + "/cap_mask")));
    m.put_u8(RDMA_NLDEV_ATTR_PORT_STATE, static_cast<uint8_t>(number(read_file(dir + "/state"))));
    m.put_u8(RDMA_NLDEV_ATTR_PORT_PHYS_STATE,
             static_cast<uint8_t>(number(read_file(dir + "/phys_state"))));
    const std::string netdev = read_file(dir + "/gid_attrs/ndevs/0");
    const unsigned ifindex = netdev.empty() ? 0 : ::if_nametoindex(netdev.c_str());
    if (ifindex) { // only an interface of the caller's namespace, as the kernel does
        m.put_u32(RDMA_NLDEV_ATTR_NDEV_INDEX, ifindex);
        m.put_string(RDMA_NLDEV_ATTR_NDEV_NAME, netdev);
    }
}

// RDMA_NLDEV_CMD_STAT_GET for a port: every hw counter the engine publishes, by name.
void fill_port_counters(Message& m, const Device& d, uint32_t port) {
    const std::string dir = d.dir + "/ports/" + std::to_string(port) + "/hw_counters";
    put_device_handle(m, d);
    m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, port);
    const size_t table = m.begin(RDMA_NLDEV_ATTR_STAT_HWCOUNTERS);
    for (const std::string& name : list_folder(dir)) {
        if (name == "lifespan" || name.find('.') != std::string::npos)
            continue;
        const size_t entry = m.begin(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY);
        m.put_string(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, name);
        m.put_u64(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE, number(read_file(dir + "/" + name)));
        m.end(entry);
    }
    m.end(table);
}

// RDMA_NLDEV_CMD_GET_CHARDEV for "uverbs": the device's uverbs node, as libibverbs finds
// it (the tree's infiniband_verbs folder names it). Other character devices (umad,
// rdma_cm) are not a device's here: their callers fall back to sysfs, as on a kernel
// without that client.
bool fill_uverbs(Message& m, const char* root, const Device& d) {
    const std::string verbs = std::string(root) + "/class/infiniband_verbs";
    for (const std::string& name : list_folder(verbs)) {
        if (read_file(verbs + "/" + name + "/ibdev") != d.name)
            continue;
        const std::string dev = read_file(verbs + "/" + name + "/dev");
        unsigned major_number = 0, minor_number = 0;
        if (std::sscanf(dev.c_str(), "%u:%u", &major_number, &minor_number) != 2)
            return false;
        put_device_handle(m, d);
        m.put_u64(RDMA_NLDEV_ATTR_CHARDEV, makedev(major_number, minor_number));
        m.put_u64(RDMA_NLDEV_ATTR_CHARDEV_ABI,
                  number(read_file(verbs + "/" + name + "/abi_version")));
        m.put_string(RDMA_NLDEV_ATTR_CHARDEV_NAME, name);
        return true;
    }
    return false;
}

namespace di = device_interface;

// One request to the engine on a connection of its own, as the provider and `softhca`
// talk to it: the reply (at most `capacity` bytes) in `reply`, and what came, the
// descriptors passed with it the caller's to close. The control socket is the one the
// tree's devices name (each names the same; the first that names one, in case a device is
// being removed meanwhile). Size -1 when the tree names none or the engine does not
// answer: 5 s to connect and send, 5 s for the reply.
di::ReceivedMessage engine_call(const std::vector<Device>& all, const void* request, size_t length,
                                void* reply, size_t capacity) {
    di::ReceivedMessage received;
    std::string path;
    for (const Device& d : all)
        if (!(path = read_file(d.dir + "/" + di::kEngineSocketFile)).empty())
            break;
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof(address.sun_path))
        return received;
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    const int sock = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return received;
    timeval timeout{5, 0};
    ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout)); // connect too
    if (::connect(sock, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 &&
        di::send_message(sock, request, length) == static_cast<ssize_t>(length))
        received = di::receive_message(sock, reply, capacity);
    ::close(sock);
    return received;
}

di::MessageHeader control_header(di::Opcode opcode, uint32_t length) {
    return {di::kControlMagic, di::kControlVersion, static_cast<uint16_t>(opcode), 0, length, 1};
}

// Descriptors that came with an answer nobody keeps.
void close_passed(const di::ReceivedMessage& received) {
    if (received.fd >= 0)
        ::close(received.fd);
    if (received.second_fd >= 0)
        ::close(received.second_fd);
}

// The engine's status document, as `softhca status --json` gets it: only what the
// caller may see (its own processes; root in the engine's PID namespace sees every one),
// as the kernel's resource tracker shows a PID namespace its own. Discarded when the
// engine does not answer.
Json engine_status(const std::vector<Device>& all) {
    const di::MessageHeader request =
        control_header(di::Opcode::EngineStatusJson, sizeof(di::MessageHeader));
    di::StatusReply reply{};
    const di::ReceivedMessage received =
        engine_call(all, &request, sizeof(request), &reply, sizeof(reply));
    std::string text;
    if (received.size == static_cast<ssize_t>(sizeof(reply)) && reply.reply.status == 0 &&
        received.fd >= 0 && reply.bytes < (64u << 20)) {
        text.resize(reply.bytes);
        size_t at = 0;
        while (at < text.size()) {
            const ssize_t n =
                ::pread(received.fd, &text[at], text.size() - at, static_cast<off_t>(at));
            if (n <= 0)
                break;
            at += static_cast<size_t>(n);
        }
        text.resize(at);
    }
    close_passed(received);
    return Json::parse(text, nullptr, false);
}

// LinkAdd or LinkDelete for device `name` (LinkAdd: on interface `netdev`): the engine's
// answer, 0 or a positive errno; EIO when it cannot be reached or its answer is not a
// reply, as for the status document.
int engine_link(const std::vector<Device>& all, di::Opcode opcode, const std::string& name,
                const std::string& netdev) {
    di::LinkRequest request{};
    request.header = control_header(opcode, sizeof(request));
    // The callers checked both fit with their NUL.
    std::memcpy(request.device_name, name.data(),
                std::min(name.size(), sizeof(request.device_name) - 1));
    std::memcpy(request.netdev, netdev.data(), std::min(netdev.size(), sizeof(request.netdev) - 1));
    di::ReplyHeader reply{};
    const di::ReceivedMessage received =
        engine_call(all, &request, sizeof(request), &reply, sizeof(reply));
    close_passed(received);
    if (received.size != static_cast<ssize_t>(sizeof(reply)) || received.truncated)
        return EIO;
    // A status that is no errno is not passed on as one.
    return reply.status >= 0 && reply.status < 4096 ? reply.status : EIO;
}

// QpCounter for device `name` (rdma statistic qp set|bind|unbind): op, with the auto
// mode's mask, or the QP and its counter (`new_counter`: a counter made for it). The
// engine's answer, 0 or a positive errno, and the counter a bound QP went to; EIO when it
// cannot be reached or its answer is neither a QpCounterReply nor an error's ReplyHeader.
int engine_qp_counter(const std::vector<Device>& all, const std::string& name, di::QpCounterOp op,
                      uint32_t mask, uint32_t qpn, uint32_t counter, bool new_counter,
                      uint32_t& bound) {
    di::QpCounterRequest request{};
    request.header = control_header(di::Opcode::QpCounter, sizeof(request));
    std::memcpy(request.device_name, name.data(),
                std::min(name.size(), sizeof(request.device_name) - 1));
    request.op = op;
    request.auto_mask = mask;
    request.qpn = qpn;
    request.counter_id = counter;
    request.new_counter = new_counter ? 1 : 0;
    di::QpCounterReply reply{};
    const di::ReceivedMessage received =
        engine_call(all, &request, sizeof(request), &reply, sizeof(reply));
    close_passed(received);
    const int status = reply.reply.status;
    if (received.truncated || status < 0 || status >= 4096)
        return EIO;
    if (received.size == static_cast<ssize_t>(sizeof(reply))) {
        bound = reply.counter_id;
        return status;
    }
    // An error may come as the reply header alone.
    return received.size == static_cast<ssize_t>(sizeof(di::ReplyHeader)) && status ? status : EIO;
}

// The document is read defensively: this library has no exceptions, and a value of
// another type than expected would abort the application.
uint64_t count_of(const Json& object, const char* key) {
    if (!object.is_object())
        return 0;
    const auto it = object.find(key);
    return it != object.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

std::string string_of(const Json& object, const char* key) {
    if (!object.is_object())
        return {};
    const auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const Json& list_of(const Json& object, const char* key) {
    static const Json empty = Json::array();
    if (!object.is_object())
        return empty;
    const auto it = object.find(key);
    return it != object.end() && it->is_array() ? *it : empty;
}

// RDMA_NLDEV_CMD_RES_GET: how many of each object the device's contexts hold.
void fill_resource_summary(Message& m, const Device& d, const Json& status) {
    put_device_handle(m, d);
    uint64_t contexts = 0, pd = 0, cq = 0, qp = 0, mr = 0;
    for (const auto& c : list_of(status, "contexts")) {
        if (string_of(c, "device") != d.name)
            continue;
        ++contexts;
        const Json& objects =
            c.is_object() && c.contains("objects") ? c["objects"] : Json::object();
        pd += count_of(objects, "pd");
        cq += count_of(objects, "cq");
        qp += count_of(objects, "qp");
        mr += count_of(objects, "mr");
    }
    const size_t table = m.begin(RDMA_NLDEV_ATTR_RES_SUMMARY);
    const std::pair<const char*, uint64_t> rows[] = {
        {"pd", pd}, {"cq", cq}, {"qp", qp}, {"mr", mr}, {"ctx", contexts}};
    for (const auto& [name, count] : rows) {
        const size_t entry = m.begin(RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY);
        m.put_string(RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME, name);
        m.put_u64(RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR, count);
        m.end(entry);
    }
    m.end(table);
}

uint8_t qp_type_code(const std::string& type) {
    // ib_qp_type: RC 2, UC 3, UD 4, XRC_INI 9, XRC_TGT 10.
    return type == "RC"        ? 2
           : type == "UC"      ? 3
           : type == "UD"      ? 4
           : type == "XRC_INI" ? 9
           : type == "XRC_TGT" ? 10
                               : 0;
}

uint8_t qp_state_code(const std::string& state) {
    static const char* const states[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    for (uint8_t i = 0; i < 7; ++i)
        if (state == states[i])
            return i;
    return 0;
}

// RDMA_NLDEV_CMD_RES_QP_GET: one message per QP of the device (the kernel's dumpit
// does the same), with its numbers, type, state, PSNs and owning process.
void resource_qps(const Device& d, const Json& status,
                  const std::function<void(const std::function<void(Message&)>&)>& reply) {
    for (const auto& c : list_of(status, "contexts")) {
        if (string_of(c, "device") != d.name)
            continue;
        const auto pid = static_cast<uint32_t>(count_of(c, "pid"));
        for (const auto& q : list_of(c, "qps")) {
            reply([&](Message& m) {
                put_device_handle(m, d);
                const size_t table = m.begin(RDMA_NLDEV_ATTR_RES_QP);
                const size_t entry = m.begin(RDMA_NLDEV_ATTR_RES_QP_ENTRY);
                const std::string type = string_of(q, "type");
                const uint8_t state = qp_state_code(string_of(q, "state"));
                if (state >= 2) // past INIT the QP has its port
                    m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
                m.put_u32(RDMA_NLDEV_ATTR_RES_LQPN, static_cast<uint32_t>(count_of(q, "qpn")));
                if (type == "RC" || type == "UC" || type == "XRC_INI" || type == "XRC_TGT") {
                    m.put_u32(RDMA_NLDEV_ATTR_RES_RQPN,
                              static_cast<uint32_t>(count_of(q, "dest_qp")));
                    m.put_u32(RDMA_NLDEV_ATTR_RES_RQ_PSN,
                              static_cast<uint32_t>(count_of(q, "rq_psn")));
                }
                m.put_u32(RDMA_NLDEV_ATTR_RES_SQ_PSN, static_cast<uint32_t>(count_of(q, "sq_psn")));
                m.put_u8(RDMA_NLDEV_ATTR_RES_TYPE, qp_type_code(type));
                m.put_u8(RDMA_NLDEV_ATTR_RES_STATE, state);
                // A process's object carries its PID (the tool reads the name from
                // /proc); only the kernel's own objects carry a name instead.
                m.put_u32(RDMA_NLDEV_ATTR_RES_PID, pid);
                m.end(entry);
                m.end(table);
            });
        }
    }
}

// RDMA_NLDEV_CMD_RES_CQ_GET, _MR_GET, _PD_GET: one message per object of the device,
// numbered by its context's handle with the context's number beside it (ctxn: handles
// are a context's own), with its owning process.
void resource_objects(uint32_t op, const Device& d, const Json& status,
                      const std::function<void(const std::function<void(Message&)>&)>& reply) {
    const auto u32 = [](const Json& o, const char* key) {
        return static_cast<uint32_t>(count_of(o, key));
    };
    const char* list = op == RDMA_NLDEV_CMD_RES_CQ_GET   ? "cqs"
                       : op == RDMA_NLDEV_CMD_RES_MR_GET ? "mrs"
                                                         : "pds";
    const uint16_t table_attr = op == RDMA_NLDEV_CMD_RES_CQ_GET   ? RDMA_NLDEV_ATTR_RES_CQ
                                : op == RDMA_NLDEV_CMD_RES_MR_GET ? RDMA_NLDEV_ATTR_RES_MR
                                                                  : RDMA_NLDEV_ATTR_RES_PD;
    const uint16_t entry_attr = op == RDMA_NLDEV_CMD_RES_CQ_GET   ? RDMA_NLDEV_ATTR_RES_CQ_ENTRY
                                : op == RDMA_NLDEV_CMD_RES_MR_GET ? RDMA_NLDEV_ATTR_RES_MR_ENTRY
                                                                  : RDMA_NLDEV_ATTR_RES_PD_ENTRY;
    for (const auto& c : list_of(status, "contexts")) {
        if (string_of(c, "device") != d.name)
            continue;
        const uint32_t pid = u32(c, "pid"), context = u32(c, "id");
        for (const auto& o : list_of(c, list)) {
            reply([&](Message& m) {
                put_device_handle(m, d);
                const size_t table = m.begin(table_attr);
                const size_t entry = m.begin(entry_attr);
                if (op == RDMA_NLDEV_CMD_RES_CQ_GET) {
                    m.put_u32(RDMA_NLDEV_ATTR_RES_CQE, u32(o, "cqe"));
                    m.put_u64(RDMA_NLDEV_ATTR_RES_USECNT, count_of(o, "users"));
                    m.put_u32(RDMA_NLDEV_ATTR_RES_CQN, u32(o, "handle"));
                } else if (op == RDMA_NLDEV_CMD_RES_MR_GET) {
                    m.put_u32(RDMA_NLDEV_ATTR_RES_RKEY, u32(o, "rkey"));
                    m.put_u32(RDMA_NLDEV_ATTR_RES_LKEY, u32(o, "lkey"));
                    m.put_u64(RDMA_NLDEV_ATTR_RES_IOVA, count_of(o, "iova"));
                    m.put_u64(RDMA_NLDEV_ATTR_RES_MRLEN, count_of(o, "length"));
                    m.put_u32(RDMA_NLDEV_ATTR_RES_MRN, u32(o, "handle"));
                    m.put_u32(RDMA_NLDEV_ATTR_RES_PDN, u32(o, "pd"));
                } else {
                    m.put_u64(RDMA_NLDEV_ATTR_RES_USECNT, count_of(o, "users"));
                    m.put_u32(RDMA_NLDEV_ATTR_RES_PDN, u32(o, "handle"));
                }
                m.put_u32(RDMA_NLDEV_ATTR_RES_CTXN, context);
                m.put_u32(RDMA_NLDEV_ATTR_RES_PID, pid);
                m.end(entry);
                m.end(table);
            });
        }
    }
}

// RDMA_NLDEV_CMD_RES_CTX_GET: each verbs context open on the device, with its process.
void resource_contexts(const Device& d, const Json& status,
                       const std::function<void(const std::function<void(Message&)>&)>& reply) {
    for (const auto& c : list_of(status, "contexts")) {
        if (string_of(c, "device") != d.name)
            continue;
        reply([&](Message& m) {
            put_device_handle(m, d);
            const size_t table = m.begin(RDMA_NLDEV_ATTR_RES_CTX);
            const size_t entry = m.begin(RDMA_NLDEV_ATTR_RES_CTX_ENTRY);
            m.put_u32(RDMA_NLDEV_ATTR_RES_CTXN, static_cast<uint32_t>(count_of(c, "id")));
            m.put_u32(RDMA_NLDEV_ATTR_RES_PID, static_cast<uint32_t>(count_of(c, "pid")));
            m.end(entry);
            m.end(table);
        });
    }
}

// RDMA_NLDEV_CMD_RES_SRQ_GET: each SRQ of the device (type BASIC or XRC, an XRC SRQ's
// CQ), numbered by its context's handle for its PD and CQ, with the QPs that receive from
// it (the tool shows none without that table) and its owning process.
void resource_srqs(const Device& d, const Json& status,
                   const std::function<void(const std::function<void(Message&)>&)>& reply) {
    for (const auto& c : list_of(status, "contexts")) {
        if (string_of(c, "device") != d.name)
            continue;
        const auto pid = static_cast<uint32_t>(count_of(c, "pid"));
        const auto context = static_cast<uint32_t>(count_of(c, "id"));
        for (const auto& q : list_of(c, "srqs")) {
            reply([&](Message& m) {
                put_device_handle(m, d);
                const size_t table = m.begin(RDMA_NLDEV_ATTR_RES_SRQ);
                const size_t entry = m.begin(RDMA_NLDEV_ATTR_RES_SRQ_ENTRY);
                m.put_u32(RDMA_NLDEV_ATTR_RES_SRQN, static_cast<uint32_t>(count_of(q, "srqn")));
                m.put_u8(RDMA_NLDEV_ATTR_RES_TYPE, string_of(q, "type") == "XRC" ? 1 : 0);
                m.put_u32(RDMA_NLDEV_ATTR_RES_PDN, static_cast<uint32_t>(count_of(q, "pd")));
                if (q.is_object() && q.contains("cq") && q["cq"].is_number_unsigned())
                    m.put_u32(RDMA_NLDEV_ATTR_RES_CQN, q["cq"].get<uint32_t>());
                const size_t qps = m.begin(RDMA_NLDEV_ATTR_RES_QP);
                for (const auto& qpn : list_of(q, "qps")) {
                    if (!qpn.is_number_unsigned())
                        continue;
                    const size_t one = m.begin(RDMA_NLDEV_ATTR_RES_QP_ENTRY);
                    m.put_u32(RDMA_NLDEV_ATTR_RES_LQPN, qpn.get<uint32_t>());
                    m.end(one);
                }
                m.end(qps);
                m.put_u32(RDMA_NLDEV_ATTR_RES_CTXN, context);
                m.put_u32(RDMA_NLDEV_ATTR_RES_PID, pid);
                m.end(entry);
                m.end(table);
            });
        }
    }
}

// The state of an rdma_cm id as the kernel's enum rdma_cm_state numbers it.
uint8_t cm_state_code(const std::string& state) {
    static const char* const states[] = {"IDLE",        "ADDR_QUERY",     "ADDR_RESOLVED",
                                         "ROUTE_QUERY", "ROUTE_RESOLVED", "CONNECT",
                                         "DISCONNECT",  "ADDR_BOUND",     "LISTEN"};
    for (uint8_t i = 0; i < std::size(states); ++i)
        if (state == states[i])
            return i;
    return 0;
}

// An address of the status ({"address", "port"}) as the kernel's sockaddr_storage;
// false when there is none.
bool socket_address(const Json& a, sockaddr_storage& out) {
    out = {};
    const std::string text = string_of(a, "address");
    const auto port = static_cast<uint16_t>(count_of(a, "port"));
    auto& v4 = reinterpret_cast<sockaddr_in&>(out);
    auto& v6 = reinterpret_cast<sockaddr_in6&>(out);
    if (::inet_pton(AF_INET, text.c_str(), &v4.sin_addr) == 1) {
        v4.sin_family = AF_INET;
        v4.sin_port = htons(port);
        return true;
    }
    if (::inet_pton(AF_INET6, text.c_str(), &v6.sin6_addr) == 1) {
        v6.sin6_family = AF_INET6;
        v6.sin6_port = htons(port);
        return true;
    }
    return false;
}

// RDMA_NLDEV_CMD_RES_CM_ID_GET: the rdma_cm ids bound to the device (a listener on every
// address is listed on each device, as the kernel lists its per-device listeners), with
// their QP, state, port space, addresses and owning process.
void resource_cm_ids(const Device& d, const Json& status,
                     const std::function<void(const std::function<void(Message&)>&)>& reply) {
    const Json& rdma_cm =
        status.is_object() && status.contains("rdma_cm") ? status["rdma_cm"] : Json();
    for (const auto& id : list_of(rdma_cm, "cm_ids")) {
        const std::string device = string_of(id, "device");
        const std::string state = string_of(id, "state");
        if (device != d.name && !(device.empty() && state == "LISTEN"))
            continue;
        reply([&](Message& m) {
            put_device_handle(m, d);
            const size_t table = m.begin(RDMA_NLDEV_ATTR_RES_CM_ID);
            const size_t entry = m.begin(RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY);
            m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
            if (const auto qpn = static_cast<uint32_t>(count_of(id, "qpn"))) {
                m.put_u32(RDMA_NLDEV_ATTR_RES_LQPN, qpn);
                m.put_u8(RDMA_NLDEV_ATTR_RES_TYPE, static_cast<uint8_t>(count_of(id, "qp_type")));
            }
            m.put_u32(RDMA_NLDEV_ATTR_RES_PS, static_cast<uint32_t>(count_of(id, "port_space")));
            m.put_u8(RDMA_NLDEV_ATTR_RES_STATE, cm_state_code(state));
            sockaddr_storage address;
            if (id.is_object() && id.contains("src") && socket_address(id["src"], address))
                m.put(RDMA_NLDEV_ATTR_RES_SRC_ADDR, &address, sizeof(address));
            if (id.is_object() && id.contains("dst") && socket_address(id["dst"], address))
                m.put(RDMA_NLDEV_ATTR_RES_DST_ADDR, &address, sizeof(address));
            m.put_u32(RDMA_NLDEV_ATTR_RES_CM_IDN, static_cast<uint32_t>(count_of(id, "id")));
            m.put_u32(RDMA_NLDEV_ATTR_RES_PID, static_cast<uint32_t>(count_of(id, "pid")));
            m.end(entry);
            m.end(table);
        });
    }
}

// Per-QP counters (rdma statistic qp), as the kernel's rdma_counter keeps them for a
// driver with counters (mlx5): the status document's device entry names the port's mode
// ("none", "auto" or "manual", qp_counter_mode), the auto mode's mask (qp_counter_mask)
// and the counters (qp_counters[]: id, the type and PID of the QP that made it, its QPs,
// its hw counters by name). A softhca device has one port: its counters are port 1's.
const Json& device_status(const Json& status, const std::string& name) {
    static const Json none = Json::object();
    for (const auto& d : list_of(status, "devices"))
        if (string_of(d, "name") == name)
            return d;
    return none;
}

uint32_t counter_mode_code(const std::string& mode) {
    return mode == "auto"     ? RDMA_COUNTER_MODE_AUTO
           : mode == "manual" ? RDMA_COUNTER_MODE_MANUAL
                              : RDMA_COUNTER_MODE_NONE;
}

// RDMA_NLDEV_CMD_STAT_GET for a port's mode (stat_get_doit_qp): the mode, and the auto
// mode's mask when the port is in auto mode.
void fill_counter_mode(Message& m, const Device& d, uint32_t port, const Json& status) {
    const Json& device = device_status(status, d.name);
    const uint32_t mode = counter_mode_code(string_of(device, "qp_counter_mode"));
    put_device_handle(m, d);
    m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, port);
    m.put_u32(RDMA_NLDEV_ATTR_STAT_MODE, mode);
    if (mode == RDMA_COUNTER_MODE_AUTO)
        m.put_u32(RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK,
                  static_cast<uint32_t>(count_of(device, "qp_counter_mask")));
}

// A u32 of the document (a QP or counter number): false when it is none.
bool u32_of(const Json& value, uint32_t& out) {
    if (!value.is_number_unsigned() || value.get<uint64_t>() > UINT32_MAX)
        return false;
    out = value.get<uint32_t>();
    return true;
}

// Whether an entry of qp_counters[] is a counter (an object with a number), and which.
bool counter_number(const Json& counter, uint32_t& id) {
    return counter.is_object() && counter.contains("id") && u32_of(counter["id"], id);
}

// One counter (fill_res_counter_entry): its port, number and mode; a counter the auto
// mode made, what its QPs share by the mask (their type; their process, its PID as the
// caller sees it and none when it sees none: the tool reads the name from /proc); the
// QPs bound to it; its hw counters in the engine's order. The mode and mask are the
// counter's own where its entry names them ("mode", "mask": an auto counter kept when
// auto mode was turned off), else the port's.
void fill_counter(Message& m, const Json& device, const Json& counter) {
    const auto has = [&](const char* key) { return counter.is_object() && counter.contains(key); };
    const uint32_t mode = counter_mode_code(
        string_of(has("mode") ? counter : device, has("mode") ? "mode" : "qp_counter_mode"));
    const uint64_t mask =
        has("mask") ? count_of(counter, "mask") : count_of(device, "qp_counter_mask");
    uint32_t id = 0;
    counter_number(counter, id);
    m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
    m.put_u32(RDMA_NLDEV_ATTR_STAT_COUNTER_ID, id);
    m.put_u32(RDMA_NLDEV_ATTR_STAT_MODE, mode);
    if (mode == RDMA_COUNTER_MODE_AUTO) {
        if (mask & RDMA_COUNTER_MASK_QP_TYPE)
            m.put_u8(RDMA_NLDEV_ATTR_RES_TYPE, qp_type_code(string_of(counter, "qp_type")));
        const auto pid = static_cast<uint32_t>(count_of(counter, "pid"));
        if ((mask & RDMA_COUNTER_MASK_PID) && pid)
            m.put_u32(RDMA_NLDEV_ATTR_RES_PID, pid);
    }
    const size_t qps = m.begin(RDMA_NLDEV_ATTR_RES_QP);
    for (const auto& value : list_of(counter, "qps")) {
        uint32_t qpn = 0;
        if (!u32_of(value, qpn))
            continue;
        const size_t entry = m.begin(RDMA_NLDEV_ATTR_RES_QP_ENTRY);
        m.put_u32(RDMA_NLDEV_ATTR_RES_LQPN, qpn);
        m.end(entry);
    }
    m.end(qps);
    const size_t table = m.begin(RDMA_NLDEV_ATTR_STAT_HWCOUNTERS);
    static const Json none = Json::object();
    const Json& values = has("counters") ? counter["counters"] : none;
    if (values.is_object()) {
        for (auto it = values.begin(); it != values.end(); ++it) {
            if (!it.value().is_number_unsigned() || it.key().empty())
                continue;
            const size_t entry = m.begin(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY);
            m.put_string(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, it.key());
            m.put_u64(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE, it.value().get<uint64_t>());
            m.end(entry);
        }
    }
    m.end(table);
}

// The counter numbered `id` of the device's entry; null when there is none.
const Json* find_counter(const Json& device, uint32_t id) {
    uint32_t number = 0;
    for (const auto& c : list_of(device, "qp_counters"))
        if (counter_number(c, number) && number == id)
            return &c;
    return nullptr;
}

// The most bytes a message of a counter dump is filled to (the kernel's NLMSG_GOODSIZE
// on 4 KiB pages, as a datagram is packed in rdma_netlink.cpp): libmnl reads a page.
constexpr size_t kMessageBytes = 3776;

// RDMA_NLDEV_CMD_STAT_GET dump of QP counters (nldev_res_get_counter_dumpit): after the
// device's handle, a STAT_COUNTER table of its counters on `port` (0: every port), one
// entry each. A message is filled up to kMessageBytes and the rest go on in another for
// the same device, as the kernel's dump goes on in its next buffer. A counter too big for
// a message (more than about 240 QPs) goes alone in one longer than libmnl reads (the
// tool fails with ENOSPC): the kernel cannot send it either (its dump sends empty tables
// for it without end). No message when the device has no counter; an empty table when
// none is on that port.
void counter_dump(const Device& d, const Json& status, uint32_t port,
                  const std::function<Message()>& start, std::vector<std::string>& out) {
    const Json& device = device_status(status, d.name);
    const Json& counters = list_of(device, "qp_counters");
    if (counters.empty())
        return;
    Message m = start();
    size_t table = 0;
    bool filled = false; // the message holds an entry
    const auto open = [&] {
        m = start();
        put_device_handle(m, d);
        table = m.begin(RDMA_NLDEV_ATTR_STAT_COUNTER);
        filled = false;
    };
    const auto add = [&](const Json& counter) {
        const size_t entry = m.begin(RDMA_NLDEV_ATTR_STAT_COUNTER_ENTRY);
        fill_counter(m, device, counter);
        m.end(entry);
        return entry;
    };
    open();
    for (const auto& counter : counters) {
        uint32_t id = 0;
        if (port > 1 || !counter_number(counter, id))
            continue;
        const size_t entry = add(counter);
        if (m.size() > kMessageBytes && filled) {
            m.cut(entry);
            m.end(table);
            out.push_back(m.finish());
            open();
            add(counter);
        }
        filled = true;
    }
    m.end(table);
    out.push_back(m.finish());
}

const Device* find_device(const std::vector<Device>& all, uint32_t index) {
    for (const Device& d : all)
        if (d.index == index)
            return &d;
    return nullptr;
}

// The answer to one message: datagrams appended to `out`.
void answer_message(const char* root, const nlmsghdr* header, uint32_t portid,
                    std::vector<std::string>& out) {
    if (!(header->nlmsg_flags & NLM_F_REQUEST) || header->nlmsg_type < NLMSG_MIN_TYPE) {
        // Not a request, or a control message: nothing to do, but acknowledged when asked
        // (netlink_rcv_skb).
        if (header->nlmsg_flags & NLM_F_ACK)
            out.push_back(error_message(header, 0, portid));
        return;
    }
    const uint32_t client = header->nlmsg_type >> 10;
    const uint32_t op = header->nlmsg_type & ((1u << 10) - 1);
    if (client != RDMA_NL_NLDEV || op >= RDMA_NLDEV_NUM_OPS) {
        out.push_back(error_message(header, EINVAL, portid));
        return;
    }
    const Request request = parse(header);
    const bool dump = (header->nlmsg_flags & NLM_F_DUMP) != 0;
    const uint16_t type = header->nlmsg_type;
    const std::vector<Device> all = devices(root);
    const auto reply = [&](auto&& fill) {
        Message m(type, dump ? NLM_F_MULTI : 0, header->nlmsg_seq, portid);
        fill(m);
        out.push_back(m.finish());
    };
    const auto acknowledge = [&] {
        if (!dump && (header->nlmsg_flags & NLM_F_ACK))
            out.push_back(error_message(header, 0, portid));
    };
    const Device* device = request.has_device ? find_device(all, request.device) : nullptr;
    // A dump that names a device the kernel does not have is refused (the port, counter
    // and resource dumps look it up first).
    if (dump && op != RDMA_NLDEV_CMD_GET && request.has_device && !device) {
        out.push_back(error_message(header, EINVAL, portid));
        return;
    }
    const auto port_ok = [&](const Device& d) {
        return request.has_port && request.port >= 1 && request.port <= d.ports;
    };

    // The QP counters the engine keeps (rdma statistic qp show: a dump naming a device, a
    // port too as the tool sends it; nldev_res_get_counter_dumpit): its counters, those
    // of another port left out. No device, or a port it does not have: EINVAL.
    const auto qp_counter_dump = [&]() -> int {
        if (!device || (request.has_port && !port_ok(*device)))
            return EINVAL;
        const Json status = engine_status(all);
        if (status.is_discarded())
            return EIO;
        counter_dump(
            *device, status, request.has_port ? request.port : 0,
            [&] { return Message(type, NLM_F_MULTI, header->nlmsg_seq, portid); }, out);
        return 0;
    };
    // A port's counter mode (rdma statistic qp mode: stat_get_doit_qp, STAT_MODE sent to
    // ask for it), or one counter by its number (rdma statistic qp unbind without lqpn:
    // nldev_res_get_counter_doit), on a port named. An attribute missing, a device or
    // port there is not: EINVAL; no such counter: ENOENT; a counter of another port
    // (there is none: a device's counters are port 1's): EAGAIN; one too big for a
    // message: EMSGSIZE.
    const auto qp_counter_get = [&]() -> int {
        if (!device || !port_ok(*device) || (!request.has_counter_id && !request.has_stat_mode))
            return EINVAL;
        const Json status = engine_status(all);
        if (status.is_discarded())
            return EIO;
        if (!request.has_counter_id) {
            reply([&](Message& m) { fill_counter_mode(m, *device, request.port, status); });
            return 0;
        }
        const Json& entry = device_status(status, device->name);
        const Json* counter = find_counter(entry, request.counter_id);
        if (!counter)
            return ENOENT;
        if (request.port != 1)
            return EAGAIN;
        // One message, of the kernel's default size at most: a counter of more QPs than
        // it holds (about 240) is EMSGSIZE, as the kernel's fill fails.
        Message m(type, 0, header->nlmsg_seq, portid);
        put_device_handle(m, *device);
        fill_counter(m, entry, *counter);
        if (m.size() > kMessageBytes)
            return EMSGSIZE;
        out.push_back(m.finish());
        return 0;
    };

    switch (op) {
    case RDMA_NLDEV_CMD_GET:
        if (dump) {
            for (const Device& d : all)
                reply([&](Message& m) { fill_device(m, d); });
        } else if (device) {
            reply([&](Message& m) { fill_device(m, *device); });
        } else {
            out.push_back(error_message(header, request.has_device ? ENODEV : EINVAL, portid));
            return;
        }
        break;
    case RDMA_NLDEV_CMD_PORT_GET:
    case RDMA_NLDEV_CMD_STAT_GET: {
        if (op == RDMA_NLDEV_CMD_STAT_GET && request.has_stat_res) {
            // Per-resource counters: QPs' (rdma statistic qp mode|show, and the counter
            // unbind looks up); MRs' (rdma statistic mr) are not kept here.
            const int error = request.bad_u32                              ? EINVAL
                              : request.stat_res == RDMA_NLDEV_ATTR_RES_MR ? EOPNOTSUPP
                              : request.stat_res != RDMA_NLDEV_ATTR_RES_QP ? EINVAL
                              : dump                                       ? qp_counter_dump()
                                                                           : qp_counter_get();
            if (error) {
                out.push_back(error_message(header, error, portid));
                return;
            }
            break;
        }
        const auto fill = [&](Message& m, const Device& d, uint32_t port) {
            if (op == RDMA_NLDEV_CMD_PORT_GET)
                fill_port(m, d, port);
            else
                fill_port_counters(m, d, port);
        };
        if (dump) {
            for (const Device& d : all) {
                if (device && device != &d)
                    continue; // a dump may name one device
                for (uint32_t p = 1; p <= d.ports; ++p)
                    reply([&](Message& m) { fill(m, d, p); });
            }
        } else if (device && port_ok(*device)) {
            reply([&](Message& m) { fill(m, *device, request.port); });
        } else {
            out.push_back(error_message(header, device ? EINVAL : ENODEV, portid));
            return;
        }
        break;
    }
    case RDMA_NLDEV_CMD_SYS_GET:
        // Namespaces: shared (devices are seen from every network namespace, the kernel's
        // default). Copy on fork: a registered range stays with the process that
        // registered it (the engine reads that process's memory, whatever a child
        // does), which is what a copy-on-fork kernel gives: ibv_fork_init is not needed.
        reply([&](Message& m) {
            m.put_u8(RDMA_NLDEV_SYS_ATTR_NETNS_MODE, 1);
            m.put_u8(RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, 1);
        });
        break;
    case RDMA_NLDEV_CMD_GET_CHARDEV: {
        Message m(type, 0, header->nlmsg_seq, portid);
        if (!device || request.chardev_type != "uverbs" || !fill_uverbs(m, root, *device)) {
            out.push_back(error_message(header, EOPNOTSUPP, portid));
            return;
        }
        out.push_back(m.finish());
        break;
    }
    case RDMA_NLDEV_CMD_RES_GET:
    case RDMA_NLDEV_CMD_RES_QP_GET:
    case RDMA_NLDEV_CMD_RES_CQ_GET:
    case RDMA_NLDEV_CMD_RES_MR_GET:
    case RDMA_NLDEV_CMD_RES_PD_GET:
    case RDMA_NLDEV_CMD_RES_CTX_GET:
    case RDMA_NLDEV_CMD_RES_SRQ_GET:
    case RDMA_NLDEV_CMD_RES_CM_ID_GET: {
        const Json status = engine_status(all);
        if (status.is_discarded()) {
            out.push_back(error_message(header, EIO, portid));
            return;
        }
        if (!dump && !device) {
            out.push_back(error_message(header, request.has_device ? ENODEV : EINVAL, portid));
            return;
        }
        for (const Device& d : all) {
            if (device && device != &d)
                continue;
            if (op == RDMA_NLDEV_CMD_RES_GET)
                reply([&](Message& m) { fill_resource_summary(m, d, status); });
            else if (op == RDMA_NLDEV_CMD_RES_QP_GET)
                resource_qps(d, status, reply);
            else if (op == RDMA_NLDEV_CMD_RES_CTX_GET)
                resource_contexts(d, status, reply);
            else if (op == RDMA_NLDEV_CMD_RES_SRQ_GET)
                resource_srqs(d, status, reply);
            else if (op == RDMA_NLDEV_CMD_RES_CM_ID_GET)
                resource_cm_ids(d, status, reply);
            else
                resource_objects(op, d, status, reply);
        }
        break;
    }
    case RDMA_NLDEV_CMD_NEWLINK: {
        // nldev_newlink (rdma link add NAME type TYPE netdev IF): the engine makes the
        // device. Refused here as the kernel refuses them: an attribute missing or not a
        // NUL-terminated string, a name empty or with '%' (a pattern the kernel numbers,
        // not a name) or longer than the control message holds (63 bytes: the kernel's
        // IB_DEVICE_NAME_MAX with its NUL; an interface name IFNAMSIZ with its NUL):
        // EINVAL; no interface name: ENODEV, as no interface has it; a link type other
        // than softhca's: EINVAL, the kernel's answer for a type no module provides (ENODEV
        // first when the interface is missing too). A
        // dump: EINVAL (nldev has no dump for links). What remains is the engine's to
        // answer: its errno, or EIO when it cannot be reached.
        const StringAttribute& name = request.device_name;
        const StringAttribute& netdev = request.netdev_name;
        int error = 0;
        if (dump || !name.terminated || !request.link_type.terminated || !netdev.terminated ||
            name.text.empty() || name.text.find('%') != std::string::npos ||
            name.text.size() >= di::kMaxDeviceName || netdev.text.size() >= di::kMaxNetdevName)
            error = EINVAL;
        else if (netdev.text.empty())
            error = ENODEV;
        else if (request.link_type.text != "softhca")
            // The kernel looks the interface up (in the caller's network namespace) before
            // the type: a missing one is ENODEV whatever the type. softhca's own interface
            // is the engine's to look up, in its namespace.
            error = ::if_nametoindex(netdev.text.c_str()) == 0 ? ENODEV : EINVAL;
        else
            error = engine_link(all, di::Opcode::LinkAdd, name.text, netdev.text);
        if (error) {
            out.push_back(error_message(header, error, portid));
            return;
        }
        break;
    }
    case RDMA_NLDEV_CMD_DELLINK: {
        // nldev_dellink (rdma link delete NAME, the name looked up by a device dump
        // first): the device of that index, removed by the engine. No index, or one no
        // device has: EINVAL, as the kernel answers both (the engine answers ENODEV for a
        // device removed since the index was looked up); a dump: EINVAL.
        const int error =
            dump || !device ? EINVAL : engine_link(all, di::Opcode::LinkDelete, device->name, {});
        if (error) {
            out.push_back(error_message(header, error, portid));
            return;
        }
        break;
    }
    case RDMA_NLDEV_CMD_STAT_SET: {
        // nldev_stat_set_doit: rdma statistic qp set link DEV/1 auto CRITERIA|off (mode
        // auto, its mask; none: off), rdma statistic qp bind link DEV/1 lqpn N [cntn M]
        // (another mode: the QP to counter M, or to a counter made for it). The engine
        // keeps the counters. Refused here as the kernel refuses them, before the engine
        // is asked: a dump; a u32 attribute not 4 bytes; no device or port index, a
        // device there is not, a port other than 1; neither a mode nor hw counters; a
        // mode without STAT_RES RES_QP; a bind without a QP: EINVAL. Hw counters to turn
        // on or off (rdma statistic set ... optional-counters): none is optional here,
        // so naming any is EINVAL (after the mode, as the kernel does), naming none
        // changes nothing. What remains is the engine's to answer (EPERM, ENODEV,
        // EINVAL, EBUSY, ENOENT), or EIO. The answer: the device and port, and for a
        // bind the counter and the QP.
        const bool bind = request.has_stat_mode && request.stat_mode != RDMA_COUNTER_MODE_AUTO;
        int error = 0;
        uint32_t counter = 0;
        if (dump || request.bad_u32 || !device || !request.has_port || request.port != 1 ||
            !port_ok(*device) || (!request.has_stat_mode && !request.has_hwcounters) ||
            (request.has_stat_mode &&
             (!request.has_stat_res || request.stat_res != RDMA_NLDEV_ATTR_RES_QP)) ||
            (bind && !request.has_lqpn))
            error = EINVAL;
        else if (bind)
            error = engine_qp_counter(all, device->name, di::kQpCounterBind, 0, request.lqpn,
                                      request.counter_id, !request.has_counter_id, counter);
        else if (request.has_stat_mode)
            error = engine_qp_counter(all, device->name, di::kQpCounterSetAuto,
                                      request.has_auto_mask ? request.auto_mask : 0, 0, 0, false,
                                      counter);
        if (!error && request.hwcounter_count)
            error = EINVAL;
        if (error) {
            out.push_back(error_message(header, error, portid));
            return;
        }
        reply([&](Message& m) {
            put_device_handle(m, *device);
            m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, request.port);
            if (bind) {
                m.put_u32(RDMA_NLDEV_ATTR_STAT_COUNTER_ID, counter);
                m.put_u32(RDMA_NLDEV_ATTR_RES_LQPN, request.lqpn);
            }
        });
        break;
    }
    case RDMA_NLDEV_CMD_STAT_DEL: {
        // nldev_stat_del_doit: rdma statistic qp unbind link DEV/1 cntn M lqpn N (without
        // lqpn the tool asks for the counter's QPs and unbinds each). Refused here: a
        // dump; a u32 attribute not 4 bytes; STAT_RES, a device or port index, the
        // counter or the QP missing; STAT_RES other than RES_QP; a device there is not, a
        // port other than 1: EINVAL. Else the engine's answer, or EIO. The answer, typed
        // STAT_SET as the kernel's is: the device, port, counter and QP.
        int error = 0;
        uint32_t counter = 0;
        if (dump || request.bad_u32 || !request.has_stat_res || !request.has_counter_id ||
            !request.has_lqpn || request.stat_res != RDMA_NLDEV_ATTR_RES_QP || !device ||
            !request.has_port || request.port != 1 || !port_ok(*device))
            error = EINVAL;
        else
            error = engine_qp_counter(all, device->name, di::kQpCounterUnbind, 0, request.lqpn,
                                      request.counter_id, false, counter);
        if (error) {
            out.push_back(error_message(header, error, portid));
            return;
        }
        Message m(static_cast<uint16_t>(RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_STAT_SET)),
                  0, header->nlmsg_seq, portid);
        put_device_handle(m, *device);
        m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, request.port);
        m.put_u32(RDMA_NLDEV_ATTR_STAT_COUNTER_ID, request.counter_id);
        m.put_u32(RDMA_NLDEV_ATTR_RES_LQPN, request.lqpn);
        out.push_back(m.finish());
        break;
    }
    default:
        // Operations the kernel has but this does not offer yet: setting devices and
        // ports.
        out.push_back(error_message(header, EOPNOTSUPP, portid));
        return;
    }
    if (dump)
        out.push_back(done_message(header, portid));
    acknowledge();
}

} // namespace

std::vector<std::string> answer_rdma_netlink(const char* tree_root, const uint8_t* request,
                                             size_t length, uint32_t portid) {
    std::vector<std::string> out;
    size_t offset = 0;
    while (length - offset >= NLMSG_HDRLEN) {
        nlmsghdr header;
        std::memcpy(&header, request + offset, sizeof(header));
        if (header.nlmsg_len < NLMSG_HDRLEN || header.nlmsg_len > length - offset)
            break; // the kernel drops a truncated message
        // The message as an aligned copy: attributes are read from it.
        std::string copy(reinterpret_cast<const char*>(request + offset), header.nlmsg_len);
        answer_message(tree_root, reinterpret_cast<const nlmsghdr*>(copy.data()), portid, out);
        // The last message may lack its padding: never step past what was sent.
        offset += std::min<size_t>(NLMSG_ALIGN(header.nlmsg_len), length - offset);
    }
    return out;
}

} // namespace softhca::preload
