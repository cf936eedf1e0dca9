// libFuzzer target: the engine's rdma_cm (RdmaCmServer: librdmacm's commands as the
// preload library carries them, and the IB CM's state machine on QP1). Two rdma_cm files
// on the engine's two (simulated) ports speak to it; a loopback wire takes every MAD the
// CM sends and, when the input says so, delivers it to the other port whole, with a byte
// changed, or not at all, or delivers a MAD made of input bytes; time jumps forward by
// the input's amounts so that retransmissions, time-outs and time wait run.
//
// Each step takes a byte saying what to do and then its operands:
//   command: which file, the command (RDMA_USER_CM_CMD_*), the input's length, the
//     response's size, whether to write the n-th id this input created into the
//     command's id field and a real address (198.18.0.1 or .2) into its address, then
//     the command's bytes;
//   deliver the oldest MAD sent (optionally changing one byte), drop it, or inject 256
//     bytes of the input as a MAD on a port; let time pass (then poll).
// Invariants: no crash or sanitizer report; every command gets exactly one reply, which
// answers it (sequence) with a result that is an errno or the length written, and
// response bytes no larger than asked; and once both files are closed and time has run
// on far enough, the engine holds no id (nothing of a closed file outlives the CM's
// timers).
#include "clock.hpp"
#include "rdma_cm_file.hpp"
#include "rdma_cm_server.hpp"
#include "serve_connection.hpp"
#include "sim_ports.hpp"
#include "softhca/device_interface/rdma_cm.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_user_cm.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace di = softhca::device_interface;
namespace tp = softhca::transport;
using namespace softhca::engine;

namespace {

// Every broken invariant says which before the fuzzer records the input.
[[gnu::format(printf, 1, 2)]] [[noreturn]] void fail(const char* format, ...) {
    std::va_list args;
    va_start(args, format);
    std::fprintf(stderr, "fuzz_rdma_cm: ");
    std::vfprintf(stderr, format, args);
    std::fprintf(stderr, "\n");
    va_end(args);
    std::abort();
}

// The MADs the CM sends, held until the input delivers or drops them.
struct LoopbackWire final : MadSender {
    struct Sent {
        size_t port;
        MadPeer to;
        tp::CmMad mad;
    };
    std::deque<Sent> sent;
    bool send_mad(size_t port, const MadPeer& to, const tp::CmMad& mad, uint64_t) override {
        if (sent.size() < 256)
            sent.push_back({port, to, mad});
        return true;
    }
    bool neighbor_resolved(size_t, const tp::Gid&, uint64_t) override { return true; }
};

struct Engine {
    sim::SimulatedPortSet ports{FaultConfig{}};
    std::vector<Device> devices{{"fc0", 0, 0x0253494d00000001ull},
                                {"fc1", 1, 0x0253494d00000002ull}};
    LoopbackWire wire;
    std::string path = "/tmp/softhca-fuzz-cm-" + std::to_string(::getpid()) + ".sock";
    RdmaCmServer cm{path, devices, ports, wire};
    uint64_t now = 0; // the CM's clock: only forward, never behind the real one
};

Engine& engine() {
    static Engine* e = [] {
        auto* created = new Engine;
        std::atexit([] { ::unlink(engine().path.c_str()); });
        return created;
    }();
    return *e;
}

tp::Gid ipv4_gid(uint32_t ipv4) {
    tp::Gid g{};
    g[10] = g[11] = 0xff;
    g[12] = static_cast<uint8_t>(ipv4 >> 24);
    g[13] = static_cast<uint8_t>(ipv4 >> 16);
    g[14] = static_cast<uint8_t>(ipv4 >> 8);
    g[15] = static_cast<uint8_t>(ipv4);
    return g;
}

// Where each command's id and address fields are (0 / none where it has none).
struct Layout {
    size_t size = 0;      // the command's struct
    ssize_t id = -1;      // offset of its id
    ssize_t address = -1; // offset of a sockaddr to make real
    ssize_t second_address = -1;
};

Layout layout(uint32_t cmd) {
    switch (cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID:
        return {sizeof(rdma_ucm_create_id)};
    case RDMA_USER_CM_CMD_DESTROY_ID:
        return {sizeof(rdma_ucm_destroy_id), offsetof(rdma_ucm_destroy_id, id)};
    case RDMA_USER_CM_CMD_BIND_IP:
        return {sizeof(rdma_ucm_bind_ip), offsetof(rdma_ucm_bind_ip, id),
                offsetof(rdma_ucm_bind_ip, addr)};
    case RDMA_USER_CM_CMD_BIND:
        return {sizeof(rdma_ucm_bind), offsetof(rdma_ucm_bind, id), offsetof(rdma_ucm_bind, addr)};
    case RDMA_USER_CM_CMD_RESOLVE_IP:
        return {sizeof(rdma_ucm_resolve_ip), offsetof(rdma_ucm_resolve_ip, id),
                offsetof(rdma_ucm_resolve_ip, src_addr), offsetof(rdma_ucm_resolve_ip, dst_addr)};
    case RDMA_USER_CM_CMD_RESOLVE_ADDR:
        return {sizeof(rdma_ucm_resolve_addr), offsetof(rdma_ucm_resolve_addr, id),
                offsetof(rdma_ucm_resolve_addr, src_addr),
                offsetof(rdma_ucm_resolve_addr, dst_addr)};
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE:
        return {sizeof(rdma_ucm_resolve_route), offsetof(rdma_ucm_resolve_route, id)};
    case RDMA_USER_CM_CMD_QUERY_ROUTE:
    case RDMA_USER_CM_CMD_QUERY:
        return {sizeof(rdma_ucm_query), offsetof(rdma_ucm_query, id)};
    case RDMA_USER_CM_CMD_CONNECT:
        return {sizeof(rdma_ucm_connect), offsetof(rdma_ucm_connect, id)};
    case RDMA_USER_CM_CMD_LISTEN:
        return {sizeof(rdma_ucm_listen), offsetof(rdma_ucm_listen, id)};
    case RDMA_USER_CM_CMD_ACCEPT:
        return {sizeof(rdma_ucm_accept), offsetof(rdma_ucm_accept, id)};
    case RDMA_USER_CM_CMD_REJECT:
        return {sizeof(rdma_ucm_reject), offsetof(rdma_ucm_reject, id)};
    case RDMA_USER_CM_CMD_DISCONNECT:
        return {sizeof(rdma_ucm_disconnect), offsetof(rdma_ucm_disconnect, id)};
    case RDMA_USER_CM_CMD_INIT_QP_ATTR:
        return {sizeof(rdma_ucm_init_qp_attr), offsetof(rdma_ucm_init_qp_attr, id)};
    case RDMA_USER_CM_CMD_GET_EVENT:
        return {sizeof(rdma_ucm_get_event)};
    case RDMA_USER_CM_CMD_GET_OPTION:
    case RDMA_USER_CM_CMD_SET_OPTION:
        return {sizeof(rdma_ucm_set_option), offsetof(rdma_ucm_set_option, id)};
    case RDMA_USER_CM_CMD_NOTIFY:
        return {sizeof(rdma_ucm_notify), offsetof(rdma_ucm_notify, id)};
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
        return {sizeof(rdma_ucm_join_ip_mcast), offsetof(rdma_ucm_join_ip_mcast, id),
                offsetof(rdma_ucm_join_ip_mcast, addr)};
    case RDMA_USER_CM_CMD_JOIN_MCAST:
        return {sizeof(rdma_ucm_join_mcast), offsetof(rdma_ucm_join_mcast, id),
                offsetof(rdma_ucm_join_mcast, addr)};
    case RDMA_USER_CM_CMD_LEAVE_MCAST:
        return {sizeof(rdma_ucm_destroy_id), offsetof(rdma_ucm_destroy_id, id)};
    case RDMA_USER_CM_CMD_MIGRATE_ID:
        return {sizeof(rdma_ucm_migrate_id), offsetof(rdma_ucm_migrate_id, id)};
    default:
        return {64};
    }
}

// One rdma_cm file as the preload library opens it.
struct File {
    int sock = -1;
    int app = -1;
    int served = -1;
    uint32_t sequence = 0;

    explicit File(Engine& e) {
        RdmaCmFileEnds ends;
        if (!open_rdma_cm_file(e.path, ++sequence, ends))
            fail("opening an rdma_cm file failed");
        sock = ends.sock;
        app = ends.app;
        const std::vector<int> accepted = e.cm.accept_pending();
        if (accepted.size() != 1)
            fail("the engine accepted %zu connections, not 1", accepted.size());
        served = accepted[0];
        std::vector<uint8_t> response;
        if (const int rc = exchange(e, sequence, 0, response); rc != 0)
            fail("Open answered %d", rc);
    }

    // Lets the engine answer; returns the result and checks the reply's invariants.
    int exchange(Engine& e, uint32_t seq, uint16_t out, std::vector<uint8_t>& response) {
        if (serve(e.cm, served) != Served::Open)
            fail("the engine hung up on a command (errno %d)", errno);
        alignas(8) uint8_t buffer[di::kMaxRdmaCmMessage * 2];
        const ssize_t n = ::recv(sock, buffer, sizeof(buffer), MSG_DONTWAIT);
        if (n < static_cast<ssize_t>(sizeof(di::RdmaCmReply)))
            fail("no reply: recv returned %zd (errno %d)", n, errno);
        di::RdmaCmReply reply;
        std::memcpy(&reply, buffer, sizeof(reply));
        if (reply.header.sequence != seq || reply.response_bytes > out ||
            reply.response_bytes != n - sizeof(reply))
            fail("reply %u with %u response bytes in %zd, for command %u asking %u",
                 reply.header.sequence, reply.response_bytes, n, seq, out);
        if (::recv(sock, buffer, sizeof(buffer), MSG_DONTWAIT) >= 0)
            fail("a second reply to command %u", seq);
        response.assign(buffer + sizeof(reply), buffer + n);
        return reply.result;
    }

    // Closes the file as the application's close(2) does; the engine must see it go.
    // Not always at once: a task that reads /proc/<pid>/fd/N (ps, lsof, a monitor) holds a
    // reference to the file for a moment, and when our close(2) is not the last one the
    // socket is released, and its peer told, when that task lets go. A process scanning
    // this one's /proc/<pid>/fd made this harness abort within seconds when it expected
    // the hangup the instant close returned (seen once in 8.7 million inputs without one).
    // So, as the engine's own loop does, wait for the socket to say so: up to 5 s.
    void close(Engine& e) {
        ::close(sock);
        ::close(app);
        for (int waited_ms = 0; serve(e.cm, served) != Served::Closed; waited_ms += 10) {
            if (waited_ms >= 5000) {
                std::fprintf(stderr, "the engine did not see file %d close in 5 s\n", served);
                std::abort();
            }
            pollfd p{served, POLLIN | POLLRDHUP, 0};
            ::poll(&p, 1, 10);
        }
    }
};

// Reads the input a byte or a span at a time; zeros past its end.
struct Input {
    const uint8_t* data;
    size_t size;
    size_t at = 0;
    bool done() const { return at >= size; }
    uint8_t byte() { return at < size ? data[at++] : 0; }
    size_t take(uint8_t* to, size_t want) {
        const size_t n = std::min(want, size - std::min(at, size));
        if (n)
            std::memcpy(to, data + at, n);
        at += n;
        return n;
    }
};

void put_address(uint8_t* at, size_t room, uint8_t which, uint16_t port) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    in.sin_addr.s_addr = htonl((198u << 24) | (18u << 16) | (1u + (which & 1)));
    std::memcpy(at, &in, std::min(room, sizeof(in)));
}

// A seed that goes the whole way (what a fresh corpus would take long to find): a
// listener on 198.18.0.1:7000, an id on the other file resolving to it, REQ, the
// connect request event and ACCEPT, REP, the active side's ACCEPT (RTU), DISCONNECT,
// DREQ and DREP, time wait. Written by LLVMFuzzerInitialize when SOFTHCA_FUZZ_SEEDS
// names a directory (tools/fuzz.sh), in this harness's own step encoding.
class SeedWriter {
  public:
    template <typename Body>
    void command(int file, uint32_t cmd, uint8_t flags, uint16_t out, const Body& body) {
        static_assert(sizeof(Body) < 512);
        bytes_.push_back(static_cast<uint8_t>(file));
        bytes_.push_back(static_cast<uint8_t>(cmd));
        bytes_.push_back(flags);
        bytes_.push_back(static_cast<uint8_t>(out / 2));
        const auto* b = reinterpret_cast<const uint8_t*>(&body);
        bytes_.insert(bytes_.end(), b, b + sizeof(body));
    }
    // The id this input made n-th, and the file's own address fields left as written.
    static uint8_t id(int n) { return static_cast<uint8_t>(0x01 | n << 4); }
    void deliver() { bytes_.insert(bytes_.end(), {160, 64}); }
    void pass_time() { bytes_.insert(bytes_.end(), {240, 1, 20}); }
    void get_event(int file) {
        rdma_ucm_get_event g{};
        g.response = 0x2000;
        command(file, RDMA_USER_CM_CMD_GET_EVENT, 0, 510, g);
    }
    void write(const std::string& path) const {
        if (FILE* f = std::fopen(path.c_str(), "wb")) {
            std::fwrite(bytes_.data(), 1, bytes_.size(), f);
            std::fclose(f);
        }
    }

  private:
    std::vector<uint8_t> bytes_;
};

template <typename Storage> void address(Storage& to, uint8_t host, uint16_t port) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    in.sin_addr.s_addr = htonl((198u << 24) | (18u << 16) | host);
    std::memcpy(&to, &in, sizeof(in));
}

void write_connection_seed(const std::string& dir) {
    SeedWriter w;
    rdma_ucm_create_id create{};
    create.uid = 1;
    create.response = 0x1000;
    create.ps = RDMA_PS_TCP;
    create.qp_type = 2; // IBV_QPT_RC
    w.command(0, RDMA_USER_CM_CMD_CREATE_ID, 0, sizeof(rdma_ucm_create_id_resp), create);
    rdma_ucm_bind bind{};
    bind.addr_size = sizeof(sockaddr_in);
    address(bind.addr, 1, 7000);
    w.command(0, RDMA_USER_CM_CMD_BIND, SeedWriter::id(0), 0, bind);
    rdma_ucm_listen listen{};
    listen.backlog = 8;
    w.command(0, RDMA_USER_CM_CMD_LISTEN, SeedWriter::id(0), 0, listen);
    create.uid = 2;
    w.command(1, RDMA_USER_CM_CMD_CREATE_ID, 0, sizeof(rdma_ucm_create_id_resp), create);
    rdma_ucm_resolve_addr resolve{};
    resolve.timeout_ms = 2000;
    resolve.src_size = resolve.dst_size = sizeof(sockaddr_in);
    address(resolve.src_addr, 2, 0);
    address(resolve.dst_addr, 1, 7000);
    w.command(1, RDMA_USER_CM_CMD_RESOLVE_ADDR, SeedWriter::id(1), 0, resolve);
    w.pass_time();
    w.get_event(1); // ADDR_RESOLVED
    rdma_ucm_resolve_route route{};
    route.timeout_ms = 2000;
    w.command(1, RDMA_USER_CM_CMD_RESOLVE_ROUTE, SeedWriter::id(1), 0, route);
    w.pass_time();
    w.get_event(1); // ROUTE_RESOLVED
    rdma_ucm_connect connect{};
    connect.conn_param.qp_num = 0x111;
    connect.conn_param.responder_resources = 1;
    connect.conn_param.initiator_depth = 1;
    connect.conn_param.retry_count = 7;
    connect.conn_param.rnr_retry_count = 7;
    connect.conn_param.valid = 1;
    w.command(1, RDMA_USER_CM_CMD_CONNECT, SeedWriter::id(1), 0, connect);
    w.deliver();    // REQ
    w.get_event(0); // CONNECT_REQUEST: the new id is the input's third
    rdma_ucm_accept accept{};
    accept.uid = 3;
    accept.conn_param = connect.conn_param;
    accept.conn_param.qp_num = 0x222;
    w.command(0, RDMA_USER_CM_CMD_ACCEPT, SeedWriter::id(2), 0, accept);
    w.deliver();    // REP
    w.get_event(1); // CONNECT_RESPONSE
    accept.conn_param.valid = 0;
    w.command(1, RDMA_USER_CM_CMD_ACCEPT, SeedWriter::id(1), 0, accept); // the RTU
    w.deliver();                                                         // RTU
    w.get_event(0);                                                      // ESTABLISHED
    rdma_ucm_disconnect disconnect{};
    w.command(1, RDMA_USER_CM_CMD_DISCONNECT, SeedWriter::id(1), 0, disconnect);
    w.deliver(); // DREQ
    w.get_event(0);
    w.deliver(); // DREP
    w.get_event(1);
    w.pass_time();
    w.write(dir + "/connect-accept-disconnect");
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (const char* dir = std::getenv("SOFTHCA_FUZZ_SEEDS"))
        write_connection_seed(dir);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Engine& e = engine();
    e.now = std::max(e.now, monotonic_ns());
    e.wire.sent.clear();
    std::vector<uint32_t> ids; // handles this input's CREATE_IDs and events returned
    Input in{data, size};
    {
        File files[2] = {File(e), File(e)};
        for (int step = 0; step < 64 && !in.done(); ++step) {
            const uint8_t what = in.byte();
            if (what < 160) { // a command
                File& f = files[what & 1];
                const uint32_t cmd = in.byte() % (RDMA_USER_CM_CMD_JOIN_MCAST + 2);
                const uint8_t flags = in.byte();
                const Layout l = layout(cmd);
                uint16_t length = static_cast<uint16_t>(l.size);
                if (flags & 0x80) // a wrong length
                    length = static_cast<uint16_t>(in.byte() * 2);
                const uint16_t out = static_cast<uint16_t>(in.byte() * 2);
                std::vector<uint8_t> body(length);
                in.take(body.data(), body.size());
                if ((flags & 0x01) && l.id >= 0 && !ids.empty() &&
                    static_cast<size_t>(l.id) + 4 <= body.size()) {
                    const uint32_t id = ids[(flags >> 4) % ids.size()];
                    std::memcpy(body.data() + l.id, &id, 4);
                }
                if ((flags & 0x02) && l.address >= 0 &&
                    static_cast<size_t>(l.address) < body.size())
                    put_address(body.data() + l.address, body.size() - l.address, flags >> 2,
                                static_cast<uint16_t>(7000 + (flags >> 3 & 3)));
                if ((flags & 0x04) && l.second_address >= 0 &&
                    static_cast<size_t>(l.second_address) < body.size())
                    put_address(body.data() + l.second_address, body.size() - l.second_address,
                                flags >> 3, static_cast<uint16_t>(7000 + (flags >> 5 & 3)));
                std::vector<uint8_t> message(sizeof(di::RdmaCmCommand) + sizeof(rdma_ucm_cmd_hdr) +
                                             body.size());
                di::RdmaCmCommand c{};
                c.header = {di::kRdmaCmMagic,
                            di::kRdmaCmVersion,
                            static_cast<uint16_t>(di::RdmaCmOp::Command),
                            0,
                            static_cast<uint32_t>(message.size()),
                            ++f.sequence};
                c.write_bytes = static_cast<uint32_t>(sizeof(rdma_ucm_cmd_hdr) + body.size());
                const rdma_ucm_cmd_hdr hdr{cmd, length, out};
                std::memcpy(message.data(), &c, sizeof(c));
                std::memcpy(message.data() + sizeof(c), &hdr, sizeof(hdr));
                if (!body.empty())
                    std::memcpy(message.data() + sizeof(c) + sizeof(hdr), body.data(), body.size());
                if (di::send_message(f.sock, message.data(), message.size()) !=
                    static_cast<ssize_t>(message.size()))
                    fail("sending command %u failed (errno %d)", cmd, errno);
                std::vector<uint8_t> response;
                const int result = f.exchange(e, c.header.sequence, out, response);
                if (result > 0 && static_cast<uint32_t>(result) != c.write_bytes)
                    fail("command %u returned %d, not %u or an errno", cmd, result,
                         c.write_bytes); // write(2) returns all it was given or an error
                if (cmd == RDMA_USER_CM_CMD_CREATE_ID && result > 0 &&
                    response.size() >= sizeof(rdma_ucm_create_id_resp)) {
                    rdma_ucm_create_id_resp r;
                    std::memcpy(&r, response.data(), sizeof(r));
                    ids.push_back(r.id);
                }
                if (cmd == RDMA_USER_CM_CMD_GET_EVENT && result > 0 &&
                    response.size() >= sizeof(rdma_ucm_event_resp)) {
                    rdma_ucm_event_resp r; // a connect request's event names a new id
                    std::memcpy(&r, response.data(), sizeof(r));
                    if (std::find(ids.begin(), ids.end(), r.id) == ids.end())
                        ids.push_back(r.id);
                }
            } else if (what < 208) { // the oldest MAD sent: deliver, change a byte, drop
                const uint8_t how = in.byte();
                const uint8_t flip_at = how >= 224 ? in.byte() : 0;
                const uint8_t flip = how >= 224 ? in.byte() : 0;
                if (e.wire.sent.empty())
                    continue;
                LoopbackWire::Sent s = e.wire.sent.front();
                e.wire.sent.pop_front();
                if (how < 32)
                    continue; // lost
                auto* bytes = reinterpret_cast<uint8_t*>(&s.mad);
                if (how >= 224)
                    bytes[flip_at % sizeof(s.mad)] ^= static_cast<uint8_t>(1 + flip % 255);
                const size_t to = s.to.ipv4 == e.ports.info(1).ipv4 ? 1 : 0;
                MadPeer from;
                from.ipv4 = e.ports.info(s.port).ipv4;
                from.gid = ipv4_gid(from.ipv4);
                from.local = s.to.gid;
                e.cm.receive_mad(to, from, bytes, sizeof(s.mad), e.now);
                if (how >= 128 && how < 160) // duplicated
                    e.cm.receive_mad(to, from, bytes, sizeof(s.mad), e.now);
            } else if (what < 232) { // a MAD of the input's bytes on a port
                uint8_t mad[256] = {};
                const size_t port = in.byte() & 1;
                in.take(mad, sizeof(mad));
                MadPeer from;
                from.ipv4 = e.ports.info(port ^ 1).ipv4;
                from.gid = ipv4_gid(from.ipv4);
                from.local = ipv4_gid(e.ports.info(port).ipv4);
                e.cm.receive_mad(port, from, mad, sizeof(mad), e.now);
            } else { // time passes: up to about 70 s in one step
                e.now += uint64_t{in.byte()} << (in.byte() % 28);
                e.cm.poll(e.now);
            }
        }
        for (File& f : files) // every id of theirs is destroyed
            f.close(e);
    }
    // Run the CM's timers out (a DREQ repeated, time wait kept): then nothing is left.
    for (int i = 0; i < 64 && e.cm.next_deadline() != UINT64_MAX; ++i) {
        e.now = std::max(e.now + 1,
                         std::min(e.cm.next_deadline(), e.now + uint64_t{3'600'000'000'000}));
        e.cm.poll(e.now);
        e.wire.sent.clear();
    }
    const auto status = e.cm.status_document(true, 0, 0);
    if (status["files"] != 0 || status["ids"] != 0) {
        std::fprintf(stderr, "left behind: %s\n", status.dump().c_str());
        std::abort();
    }
    return 0;
}
