// The engine's rdma_cm and IB CM over the simulated lossy wire (sim_ports.hpp): two
// rdma_cm files speak librdmacm's commands to RdmaCmServer as the preload library
// carries them, the data path carries the CM's MADs between the two ports, and the
// wire drops, duplicates and reorders them. Every connection must go through
// ADDR_RESOLVED, ROUTE_RESOLVED, CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED and
// DISCONNECTED on both sides exactly once, with the QP numbers and PSNs each side gave.
#include "clock.hpp"
#include "datapath.hpp"
#include "rdma_cm_file.hpp"
#include "rdma_cm_server.hpp"
#include "sim_ports.hpp"
#include "softhca/device_interface/rdma_cm.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <map>
#include <poll.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>
#include <set>
#include <sys/socket.h>
#include <unistd.h>

using namespace softhca::engine;
namespace di = softhca::device_interface;

namespace {

// The engine side: data path and rdma_cm over the simulated wire, polled by hand.
struct CmBench {
    sim::SimulatedPortSet ports;
    QueueDirectory keys;
    std::vector<Device> devices;
    Datapath datapath;
    std::string socket_path;
    RdmaCmServer cm;
    std::set<int> files;

    static QueueDirectory two_devices() {
        QueueDirectory k;
        k.set_device_count(2);
        return k;
    }
    explicit CmBench(const FaultConfig& faults)
        : ports(faults), keys(two_devices()), devices{{"sim0", 0, 0x0253494d00000001ull},
                                                      {"sim1", 1, 0x0253494d00000002ull}},
          datapath(ports, devices, keys),
          socket_path("/tmp/softhca-cm-test-" + std::to_string(getpid()) + ".sock"),
          cm(socket_path, devices, ports, datapath) {
        datapath.set_mad_receiver(&cm);
    }
    void round() {
        for (int fd : cm.accept_pending())
            files.insert(fd);
        for (auto it = files.begin(); it != files.end();)
            it = cm.handle_input(*it) == Served::Open ? std::next(it) : files.erase(it);
        const uint64_t now = monotonic_ns();
        datapath.poll(now);
        cm.poll(now);
    }
};

// One rdma_cm file as the preload library opens it.
struct CmFileClient {
    CmBench& bench;
    int sock = -1;
    int pipe_app = -1;
    uint32_t sequence = 0;

    explicit CmFileClient(CmBench& b) : bench(b) {
        RdmaCmFileEnds ends;
        REQUIRE(open_rdma_cm_file(bench.socket_path, 0, ends));
        sock = ends.sock;
        pipe_app = ends.app;
        std::vector<uint8_t> response;
        REQUIRE(exchange_reply(response) == 0);
    }
    ~CmFileClient() {
        ::close(sock);
        ::close(pipe_app);
    }

    int exchange_reply(std::vector<uint8_t>& response, bool* wait_again = nullptr) {
        bench.round();
        alignas(8) uint8_t buffer[di::kMaxRdmaCmMessage];
        const ssize_t n = ::recv(sock, buffer, sizeof(buffer), 0);
        REQUIRE(n >= static_cast<ssize_t>(sizeof(di::RdmaCmReply)));
        di::RdmaCmReply reply;
        std::memcpy(&reply, buffer, sizeof(reply));
        response.assign(buffer + sizeof(reply), buffer + n);
        if (wait_again)
            *wait_again = reply.wait_again;
        return reply.result < 0 ? reply.result : 0;
    }

    // One command: returns 0 or -errno, the response bytes in `response`.
    template <typename Body>
    int command(uint32_t cmd, const Body& body, std::vector<uint8_t>& response, uint16_t out,
                bool* wait_again = nullptr) {
        alignas(8)
            uint8_t buffer[sizeof(di::RdmaCmCommand) + sizeof(rdma_ucm_cmd_hdr) + sizeof(Body)];
        di::RdmaCmCommand c{};
        c.header = {
            di::kRdmaCmMagic, di::kRdmaCmVersion, static_cast<uint16_t>(di::RdmaCmOp::Command), 0,
            sizeof(buffer),   ++sequence};
        c.write_bytes = sizeof(rdma_ucm_cmd_hdr) + sizeof(Body);
        rdma_ucm_cmd_hdr hdr{cmd, sizeof(Body), out};
        std::memcpy(buffer, &c, sizeof(c));
        std::memcpy(buffer + sizeof(c), &hdr, sizeof(hdr));
        std::memcpy(buffer + sizeof(c) + sizeof(hdr), &body, sizeof(body));
        REQUIRE(di::send_message(sock, buffer, sizeof(buffer)) == sizeof(buffer));
        return exchange_reply(response, wait_again);
    }
    template <typename Body> int command(uint32_t cmd, const Body& body) {
        std::vector<uint8_t> ignored;
        return command(cmd, body, ignored, 0);
    }

    uint32_t create_id(uint64_t uid) {
        rdma_ucm_create_id c{};
        c.uid = uid;
        c.ps = RDMA_PS_TCP;
        c.qp_type = 2;
        std::vector<uint8_t> r;
        REQUIRE(command(RDMA_USER_CM_CMD_CREATE_ID, c, r, 4) == 0);
        uint32_t id;
        std::memcpy(&id, r.data(), 4);
        return id;
    }

    // The next event, pumping the engine until one is queued (or 20 s pass).
    rdma_ucm_event_resp next_event() {
        const uint64_t deadline = monotonic_ns() + 20'000'000'000ull;
        while (monotonic_ns() < deadline) {
            pollfd p{pipe_app, POLLIN, 0};
            if (::poll(&p, 1, 0) == 1) {
                rdma_ucm_get_event g{};
                std::vector<uint8_t> r;
                bool again = false;
                REQUIRE(command(RDMA_USER_CM_CMD_GET_EVENT, g, r, sizeof(rdma_ucm_event_resp),
                                &again) == 0);
                if (!again) {
                    rdma_ucm_event_resp e{};
                    std::memcpy(&e, r.data(), std::min(r.size(), sizeof(e)));
                    return e;
                }
            }
            bench.round();
            ::usleep(50);
        }
        FAIL("no event within 20 s");
        return {};
    }
    bool no_event_queued() {
        pollfd p{pipe_app, POLLIN, 0};
        return ::poll(&p, 1, 0) == 0;
    }
};

sockaddr_in6 ipv4_in6(uint32_t ip, uint16_t port) {
    sockaddr_in6 s{};
    auto& a = reinterpret_cast<sockaddr_in&>(s);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(ip);
    a.sin_port = htons(port);
    return s;
}

ib_uverbs_qp_attr qp_attr(CmFileClient& f, uint32_t id, uint32_t state) {
    rdma_ucm_init_qp_attr c{};
    c.id = id;
    c.qp_state = state;
    std::vector<uint8_t> r;
    REQUIRE(f.command(RDMA_USER_CM_CMD_INIT_QP_ATTR, c, r, sizeof(ib_uverbs_qp_attr)) == 0);
    ib_uverbs_qp_attr a{};
    std::memcpy(&a, r.data(), std::min(r.size(), sizeof(a)));
    return a;
}

// A listening id bound to `address`; returns it.
uint32_t listen_at(CmFileClient& server, uint64_t uid, const sockaddr_in6& address,
                   uint32_t backlog) {
    const uint32_t listener = server.create_id(uid);
    rdma_ucm_bind_ip b{};
    b.id = listener;
    b.addr = address;
    REQUIRE(server.command(RDMA_USER_CM_CMD_BIND_IP, b) == 0);
    rdma_ucm_listen l{};
    l.id = listener;
    l.backlog = backlog;
    REQUIRE(server.command(RDMA_USER_CM_CMD_LISTEN, l) == 0);
    return listener;
}

// rdma_connect on a resolved id with these connection parameters.
void connect_id(CmFileClient& client, uint32_t id, const rdma_ucm_conn_param& param) {
    rdma_ucm_connect c{};
    c.id = id;
    c.conn_param = param;
    REQUIRE(client.command(RDMA_USER_CM_CMD_CONNECT, c) == 0);
}

// A new id with its address and route resolved from `source` to `destination`.
uint32_t resolve_to(CmFileClient& client, uint64_t uid, const sockaddr_in6& source,
                    const sockaddr_in6& destination) {
    const uint32_t id = client.create_id(uid);
    rdma_ucm_resolve_ip r{};
    r.id = id;
    r.src_addr = source;
    r.dst_addr = destination;
    r.timeout_ms = 5000;
    REQUIRE(client.command(RDMA_USER_CM_CMD_RESOLVE_IP, r) == 0);
    REQUIRE(client.next_event().event == kEventAddrResolved);
    rdma_ucm_resolve_route rr{};
    rr.id = id;
    REQUIRE(client.command(RDMA_USER_CM_CMD_RESOLVE_ROUTE, rr) == 0);
    REQUIRE(client.next_event().event == kEventRouteResolved);
    return id;
}

// The same, then connected with QP `qp_num`, as rdma_connect does it; returns the id (the
// REQ is on its way).
uint32_t connect_to(CmFileClient& client, uint64_t uid, const sockaddr_in6& source,
                    const sockaddr_in6& destination, uint32_t qp_num) {
    const uint32_t active = resolve_to(client, uid, source, destination);
    rdma_ucm_conn_param param{};
    param.qp_num = qp_num;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    param.valid = 1;
    connect_id(client, active, param);
    return active;
}

// The active side disconnects, the passive side sees it and disconnects too, and the
// active side sees that.
void disconnect_both(CmFileClient& client, uint32_t active, CmFileClient& server,
                     uint32_t passive) {
    rdma_ucm_disconnect d{};
    d.id = active;
    REQUIRE(client.command(RDMA_USER_CM_CMD_DISCONNECT, d) == 0);
    REQUIRE(server.next_event().event == kEventDisconnected);
    d.id = passive;
    REQUIRE(server.command(RDMA_USER_CM_CMD_DISCONNECT, d) == 0);
    REQUIRE(client.next_event().event == kEventDisconnected);
}

// Takes the next connection request and accepts it with QP `qp_num`; returns the new id.
uint32_t accept_next(CmFileClient& server, uint64_t uid, uint32_t qp_num) {
    const auto e = server.next_event();
    REQUIRE(e.event == kEventConnectRequest);
    rdma_ucm_accept a{};
    a.uid = uid;
    a.id = e.id;
    a.conn_param.qp_num = qp_num;
    a.conn_param.rnr_retry_count = 7;
    a.conn_param.valid = 1;
    REQUIRE(server.command(RDMA_USER_CM_CMD_ACCEPT, a) == 0);
    return e.id;
}

} // namespace

TEST_CASE("rdma_cm over a lossy wire: each connection's events exactly once, QPNs and PSNs "
          "crossed") {
    ::setenv("SOFTHCA_CM_RESPONSE_TIMEOUT", "8", 1); // retries after a few milliseconds
    ::setenv("SOFTHCA_CM_PACKET_LIFE", "8", 1);
    FaultConfig faults;
    faults.drop = 0.15;
    faults.duplicate = 0.15;
    faults.reorder = 0.1;
    faults.seed = 5;
    CmBench bench(faults);
    // The Starting PSNs the REQ and REP carry on the wire (RoCEv2 to QP1: Ethernet, IPv4,
    // UDP, BTH, DETH, then the MAD; its attribute at 16, the CM message at 24).
    uint32_t req_psn = 0, rep_psn = 0;
    bench.ports.tap = [&](size_t, const uint8_t* f, uint32_t length) {
        constexpr size_t kMad = 14 + 20 + 8 + 12 + 8;
        if (length < kMad + 24 + 48 || f[14 + 20 + 8 + 7] != 1) // destination QP 1
            return;
        const uint8_t* mad = f + kMad;
        const uint16_t attribute = static_cast<uint16_t>(mad[16] << 8 | mad[17]);
        auto be24 = [](const uint8_t* p) { return uint32_t(p[0]) << 16 | p[1] << 8 | p[2]; };
        if (attribute == 0x10)
            req_psn = be24(mad + 24 + 44);
        else if (attribute == 0x13)
            rep_psn = be24(mad + 24 + 20);
    };
    CmFileClient server(bench), client(bench);
    constexpr uint32_t kServerIp = 0xc6120002, kClientIp = 0xc6120001;
    constexpr uint16_t kPort = 5000;

    const uint32_t listener = server.create_id(0x1000);
    rdma_ucm_bind_ip b{};
    b.id = listener;
    b.addr = ipv4_in6(kServerIp, kPort);
    REQUIRE(server.command(RDMA_USER_CM_CMD_BIND_IP, b) == 0);
    rdma_ucm_listen l{};
    l.id = listener;
    l.backlog = 16;
    REQUIRE(server.command(RDMA_USER_CM_CMD_LISTEN, l) == 0);

    constexpr int kConnections = 12;
    for (int i = 0; i < kConnections; ++i) {
        INFO("connection " << i);
        const uint64_t uid = 0x2000 + static_cast<uint64_t>(i);
        const uint32_t active = client.create_id(uid);
        rdma_ucm_resolve_ip r{};
        r.id = active;
        r.src_addr = ipv4_in6(kClientIp, 0);
        r.dst_addr = ipv4_in6(kServerIp, kPort);
        r.timeout_ms = 5000;
        REQUIRE(client.command(RDMA_USER_CM_CMD_RESOLVE_IP, r) == 0);
        auto e = client.next_event();
        REQUIRE(e.event == kEventAddrResolved);
        CHECK(e.uid == uid);
        rdma_ucm_resolve_route rr{};
        rr.id = active;
        REQUIRE(client.command(RDMA_USER_CM_CMD_RESOLVE_ROUTE, rr) == 0);
        REQUIRE(client.next_event().event == kEventRouteResolved);

        const uint32_t client_qpn = 0x100 + static_cast<uint32_t>(i);
        const uint32_t server_qpn = 0x200 + static_cast<uint32_t>(i);
        rdma_ucm_conn_param param{};
        param.qp_num = client_qpn;
        param.responder_resources = 4;
        param.initiator_depth = 4;
        param.retry_count = 7;
        param.rnr_retry_count = 7;
        param.private_data_len = 4;
        std::memcpy(param.private_data, "ping", 4);
        param.valid = 1;
        connect_id(client, active, param);

        e = server.next_event();
        REQUIRE(e.event == kEventConnectRequest);
        CHECK(e.uid == 0x1000);
        CHECK(e.param.conn.qp_num == client_qpn);
        CHECK(std::memcmp(e.param.conn.private_data, "ping", 4) == 0);
        const uint32_t passive = e.id;
        rdma_ucm_accept a{};
        a.uid = 0x3000 + static_cast<uint64_t>(i);
        a.id = passive;
        a.conn_param.qp_num = server_qpn;
        a.conn_param.responder_resources = 4;
        a.conn_param.initiator_depth = 4;
        a.conn_param.rnr_retry_count = 7;
        a.conn_param.valid = 1;
        REQUIRE(server.command(RDMA_USER_CM_CMD_ACCEPT, a) == 0);

        e = client.next_event();
        REQUIRE(e.event == kEventConnectResponse);
        CHECK(e.param.conn.qp_num == server_qpn);
        const auto active_rtr = qp_attr(client, active, 2);
        const auto active_rts = qp_attr(client, active, 3);
        const auto passive_rtr = qp_attr(server, passive, 2);
        const auto passive_rts = qp_attr(server, passive, 3);
        CHECK(active_rtr.dest_qp_num == server_qpn);
        CHECK(passive_rtr.dest_qp_num == client_qpn);
        CHECK(active_rtr.rq_psn == passive_rts.sq_psn);
        CHECK(passive_rtr.rq_psn == active_rts.sq_psn);
        // As the kernel's CM fills them (tests/vectors/rxe-cm-rping.pcap): each side
        // announces the PSN its receive queue expects, so the passive side sends from the
        // REQ's Starting PSN and the active side from the REP's.
        CHECK(req_psn == passive_rts.sq_psn);
        CHECK(req_psn == active_rtr.rq_psn);
        CHECK(rep_psn == active_rts.sq_psn);
        CHECK(rep_psn == passive_rtr.rq_psn);
        CHECK(req_psn != rep_psn);
        rdma_ucm_accept rtu{};
        rtu.id = active;
        REQUIRE(client.command(RDMA_USER_CM_CMD_ACCEPT, rtu) == 0);
        e = server.next_event();
        REQUIRE(e.event == kEventEstablished);
        CHECK(e.uid == a.uid);

        disconnect_both(client, active, server, passive);

        // Duplicated and repeated MADs were answered, not reported again: all that may
        // follow is the end of the time wait, once per side.
        for (int k = 0; k < 200; ++k)
            bench.round();
        for (CmFileClient* side : {&client, &server}) {
            int exits = 0;
            while (!side->no_event_queued()) {
                const auto extra = side->next_event();
                CHECK(extra.event == kEventTimewaitExit);
                ++exits;
            }
            CHECK(exits <= 1);
        }
        rdma_ucm_destroy_id x{};
        x.id = active;
        REQUIRE(client.command(RDMA_USER_CM_CMD_DESTROY_ID, x) == 0);
        x.id = passive;
        REQUIRE(server.command(RDMA_USER_CM_CMD_DESTROY_ID, x) == 0);
    }
    CHECK(bench.ports.info(0).faults.dropped + bench.ports.info(1).faults.dropped > 0);
    CHECK(bench.cm.counters().retransmissions > 0);
    ::unsetenv("SOFTHCA_CM_RESPONSE_TIMEOUT");
    ::unsetenv("SOFTHCA_CM_PACKET_LIFE");
}

TEST_CASE("rdma_cm: a peer that never answers is UNREACHABLE after the retries") {
    ::setenv("SOFTHCA_CM_RESPONSE_TIMEOUT", "8", 1);
    ::setenv("SOFTHCA_CM_PACKET_LIFE", "8", 1);
    ::setenv("SOFTHCA_CM_MAX_RETRIES", "3", 1);
    FaultConfig none;
    CmBench bench(none);
    CmFileClient client(bench);
    const uint32_t id = resolve_to(client, 7, ipv4_in6(0xc6120001, 0), ipv4_in6(0xc6120002, 6000));
    // The wire goes dead after the route is known: nothing reaches the peer any more.
    bench.ports.set_admin_state(1, false);
    rdma_ucm_conn_param param{};
    param.qp_num = 0x42;
    param.valid = 1;
    connect_id(client, id, param);
    const auto e = client.next_event();
    CHECK(e.event == kEventUnreachable);
    CHECK(static_cast<int32_t>(e.status) == -ETIMEDOUT);
    CHECK(bench.cm.counters().retransmissions == 3);
    ::unsetenv("SOFTHCA_CM_RESPONSE_TIMEOUT");
    ::unsetenv("SOFTHCA_CM_PACKET_LIFE");
    ::unsetenv("SOFTHCA_CM_MAX_RETRIES");
}

TEST_CASE("rdma_cm over IPv6 addresses: IP version 6 in the REQ, QPs on the IPv6 GIDs") {
    CmBench bench({});
    // 2001:2::2 is device 1's, 2001:2::1 device 0's (sim_ports.hpp); GID index 2 each.
    auto ipv6 = [](uint8_t host, uint16_t port) {
        sockaddr_in6 s{};
        s.sin6_family = AF_INET6;
        s.sin6_port = htons(port);
        const uint8_t bytes[16] = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, host};
        std::memcpy(&s.sin6_addr, bytes, 16);
        return s;
    };
    int ipv6_mads = 0, ip_version_6 = 0;
    bench.ports.tap = [&](size_t, const uint8_t* f, uint32_t length) {
        constexpr size_t kMad = 14 + 40 + 8 + 12 + 8;
        if (length < kMad + 24 + 36 || f[12] != 0x86 || f[13] != 0xdd || f[14 + 40 + 8 + 7] != 1)
            return;
        ++ipv6_mads;
        softhca::transport::CmMad mad;
        std::memcpy(&mad, f + kMad, sizeof(mad));
        if (mad.header.attribute_id() ==
            static_cast<uint16_t>(softhca::transport::CmAttribute::Req)) {
            softhca::transport::CmaHeader cma;
            std::memcpy(&cma, mad.as<softhca::transport::CmReq>().private_data(), sizeof(cma));
            ip_version_6 += cma.ip_version() == 6;
        }
    };
    CmFileClient server(bench), client(bench);
    listen_at(server, 0x1000, ipv6(2, 5000), 4);
    // From device 0 (a local destination would route to itself).
    const uint32_t active = connect_to(client, 0x2000, ipv6(1, 0), ipv6(2, 5000), 0x101);
    const uint32_t passive = accept_next(server, 0x3000, 0x202);
    REQUIRE(client.next_event().event == kEventConnectResponse);
    CHECK(ip_version_6 == 1);
    CHECK(ipv6_mads >= 2);
    // Each QP's path: the peer's IPv6 GID, from this port's IPv6 GID (index 2).
    const auto active_rtr = qp_attr(client, active, 2);
    const auto passive_rtr = qp_attr(server, passive, 2);
    const sockaddr_in6 server_address = ipv6(2, 0), client_address = ipv6(1, 0);
    CHECK(std::memcmp(active_rtr.ah_attr.grh.dgid, &server_address.sin6_addr, 16) == 0);
    CHECK(std::memcmp(passive_rtr.ah_attr.grh.dgid, &client_address.sin6_addr, 16) == 0);
    CHECK(active_rtr.ah_attr.grh.sgid_index == 2);
    CHECK(passive_rtr.ah_attr.grh.sgid_index == 2);
    // The passive id's addresses are IPv6 (cma_save_net_info).
    rdma_ucm_query q{};
    q.id = passive;
    q.option = RDMA_USER_CM_QUERY_ADDR;
    std::vector<uint8_t> reply;
    REQUIRE(server.command(RDMA_USER_CM_CMD_QUERY, q, reply, sizeof(rdma_ucm_query_addr_resp)) ==
            0);
    rdma_ucm_query_addr_resp addr{};
    std::memcpy(&addr, reply.data(), std::min(reply.size(), sizeof(addr)));
    const auto& src = reinterpret_cast<const sockaddr_in6&>(addr.src_addr);
    const auto& dst = reinterpret_cast<const sockaddr_in6&>(addr.dst_addr);
    CHECK(src.sin6_family == AF_INET6);
    CHECK(std::memcmp(&src.sin6_addr, &server_address.sin6_addr, 16) == 0);
    CHECK(std::memcmp(&dst.sin6_addr, &client_address.sin6_addr, 16) == 0);
}

TEST_CASE("rdma_cm: a connection request past the listener's backlog is rejected, and the "
          "backlog frees as requests are taken") {
    CmBench bench({});
    CmFileClient server(bench), client(bench);
    constexpr uint32_t kServerIp = 0xc6120002, kClientIp = 0xc6120001;
    listen_at(server, 0x1000, ipv4_in6(kServerIp, 5100), 1);
    auto connect = [&](uint64_t uid) {
        return connect_to(client, uid, ipv4_in6(kClientIp, 0), ipv4_in6(kServerIp, 5100),
                          0x100 + static_cast<uint32_t>(uid & 0xff));
    };
    connect(0x2001);
    for (int i = 0; i < 1000 && server.no_event_queued(); ++i)
        bench.round();
    REQUIRE_FALSE(server.no_event_queued()); // the first request waits, not yet taken
    connect(0x2002);
    auto e = client.next_event();
    CHECK(e.uid == 0x2002);
    CHECK(e.event == kEventRejected);
    CHECK(e.status == 28); // consumer defined, as the kernel's CM rejects it
    CHECK(bench.cm.counters().backlog_full == 1);
    e = server.next_event(); // taking the first request frees the backlog
    REQUIRE(e.event == kEventConnectRequest);
    connect(0x2003);
    e = server.next_event();
    CHECK(e.event == kEventConnectRequest);
    CHECK(bench.cm.counters().backlog_full == 1);
}

TEST_CASE("rdma_cm: an id resolved toward loopback without a source gets the loopback "
          "address as its own, as the kernel's route gives it") {
    CmBench bench({});
    CmFileClient client(bench);
    auto source_of = [&](uint32_t id) {
        rdma_ucm_query q{};
        q.id = id;
        q.option = RDMA_USER_CM_QUERY_ADDR;
        std::vector<uint8_t> reply;
        REQUIRE(client.command(RDMA_USER_CM_CMD_QUERY, q, reply,
                               sizeof(rdma_ucm_query_addr_resp)) == 0);
        rdma_ucm_query_addr_resp addr{};
        std::memcpy(&addr, reply.data(), std::min(reply.size(), sizeof(addr)));
        sockaddr_storage s{};
        std::memcpy(&s, &addr.src_addr, sizeof(addr.src_addr));
        return s;
    };
    SECTION("IPv4: 127.0.0.1") {
        const uint32_t id = client.create_id(0x1000);
        rdma_ucm_resolve_ip r{};
        r.id = id;
        r.dst_addr = ipv4_in6(0x7f000001, 6000);
        r.timeout_ms = 2000;
        REQUIRE(client.command(RDMA_USER_CM_CMD_RESOLVE_IP, r) == 0);
        REQUIRE(client.next_event().event == kEventAddrResolved);
        const auto s = source_of(id);
        const auto& in = reinterpret_cast<const sockaddr_in&>(s);
        CHECK(in.sin_family == AF_INET);
        CHECK(ntohl(in.sin_addr.s_addr) == 0x7f000001);
        CHECK(ntohs(in.sin_port) != 0); // the ephemeral port the bind drew, kept
    }
    SECTION("IPv6: ::1") {
        const uint32_t id = client.create_id(0x1001);
        rdma_ucm_resolve_ip r{};
        r.id = id;
        auto& d = reinterpret_cast<sockaddr_in6&>(r.dst_addr);
        d.sin6_family = AF_INET6;
        d.sin6_port = htons(6000);
        d.sin6_addr = in6addr_loopback;
        r.timeout_ms = 2000;
        REQUIRE(client.command(RDMA_USER_CM_CMD_RESOLVE_IP, r) == 0);
        REQUIRE(client.next_event().event == kEventAddrResolved);
        const auto s = source_of(id);
        const auto& in6 = reinterpret_cast<const sockaddr_in6&>(s);
        CHECK(in6.sin6_family == AF_INET6);
        CHECK(std::memcmp(&in6.sin6_addr, &in6addr_loopback, 16) == 0);
    }
}

TEST_CASE("rdma_cm: malformed and replayed CM MADs from the wire are dropped and counted, and "
          "the connection is unchanged") {
    CmBench bench({});
    // Every MAD the two ports send (RoCEv2 over IPv4 to QP1), kept to be sent again.
    constexpr size_t kMad = 14 + 20 + 8 + 12 + 8; // Ethernet, IPv4, UDP, BTH, DETH
    struct Sent {
        size_t from;
        uint16_t attribute;
        std::vector<uint8_t> frame;
    };
    std::vector<Sent> sent;
    bench.ports.tap = [&](size_t from, const uint8_t* f, uint32_t length) {
        if (length < kMad + 24 || f[14 + 20 + 8 + 7] != 1)
            return;
        const uint16_t attribute = static_cast<uint16_t>(f[kMad + 16] << 8 | f[kMad + 17]);
        sent.push_back({from, attribute, std::vector<uint8_t>(f, f + length)});
    };
    auto frame_of = [&](uint16_t attribute) {
        for (const Sent& s : sent)
            if (s.attribute == attribute)
                return s;
        FAIL("no MAD with attribute " << attribute << " was sent");
        return Sent{};
    };
    CmFileClient server(bench), client(bench);
    constexpr uint32_t kServerIp = 0xc6120002, kClientIp = 0xc6120001;
    listen_at(server, 0x1000, ipv4_in6(kServerIp, 5200), 4);
    const uint32_t active =
        connect_to(client, 0x2000, ipv4_in6(kClientIp, 0), ipv4_in6(kServerIp, 5200), 0x111);
    const uint32_t passive = accept_next(server, 0x3000, 0x222);
    REQUIRE(client.next_event().event == kEventConnectResponse);
    rdma_ucm_accept rtu{};
    rtu.id = active;
    REQUIRE(client.command(RDMA_USER_CM_CMD_ACCEPT, rtu) == 0);
    REQUIRE(server.next_event().event == kEventEstablished);
    for (int k = 0; k < 50; ++k)
        bench.round();
    REQUIRE(client.no_event_queued());
    REQUIRE(server.no_event_queued());

    const Sent req = frame_of(0x10), rep = frame_of(0x13), rtu_mad = frame_of(0x14);
    // Delivers a frame to the other end of the wire from its sender, its ICRC made valid
    // again after any change (so the CM, not the ICRC check, is what meets it).
    auto replay = [&](const Sent& s, const std::function<void(std::vector<uint8_t>&)>& change) {
        std::vector<uint8_t> f = s.frame;
        if (change) {
            change(f);
            const size_t ip_length = f.size() - 14;
            const uint32_t icrc = softhca::transport::compute_icrc(f.data() + 14, ip_length - 4);
            for (int i = 0; i < 4; ++i)
                f[f.size() - 4 + static_cast<size_t>(i)] = static_cast<uint8_t>(icrc >> (8 * i));
        }
        bench.ports.deliver(1 - s.from, f.data(), static_cast<uint32_t>(f.size()));
        for (int k = 0; k < 20; ++k)
            bench.round();
    };
    const auto before = bench.cm.counters();
    SECTION("replayed: the REQ, the REP and the RTU of the connection again") {
        replay(req, nullptr);
        replay(rep, nullptr);
        replay(rtu_mad, nullptr);
        // Each one is a duplicate; the REP is answered with the RTU again (the first one
        // may have been lost, 12.9.8.3), which the passive side meets as a fourth.
        CHECK(bench.cm.counters().duplicates == before.duplicates + 4);
        CHECK(bench.cm.counters().mads_dropped == before.mads_dropped);
    }
    SECTION("malformed: another class version, an unknown attribute, a REP and an RTU for no "
            "connection, a DREQ for another QP") {
        replay(rep, [&](std::vector<uint8_t>& f) { f[kMad + 3] = 1; }); // class version 1
        replay(rep, [&](std::vector<uint8_t>& f) { f[kMad + 17] = 0x99; });
        replay(rep, [&](std::vector<uint8_t>& f) { f[kMad + 24 + 4] ^= 0xff; }); // remote id
        replay(rtu_mad, [&](std::vector<uint8_t>& f) { f[kMad + 24] ^= 0xff; }); // local id
        // A DREQ made from the RTU: the comm ids are right, the remote QPN (offset 8) not.
        replay(rtu_mad, [&](std::vector<uint8_t>& f) {
            f[kMad + 17] = 0x15;
            f[kMad + 24 + 10] ^= 0x7f;
        });
        CHECK(bench.cm.counters().mads_dropped == before.mads_dropped + 5);
        CHECK(bench.cm.counters().duplicates == before.duplicates);
    }
    SECTION("truncated: a MAD cut short") {
        Sent cut = rep;
        // 64 bytes of MAD, lengths in the IPv4 and UDP headers made to match.
        cut.frame.resize(kMad + 64 + 4);
        replay(cut, [&](std::vector<uint8_t>& f) {
            const size_t ip_length = f.size() - 14;
            f[14 + 2] = static_cast<uint8_t>(ip_length >> 8);
            f[14 + 3] = static_cast<uint8_t>(ip_length);
            f[14 + 10] = f[14 + 11] = 0;
            const uint16_t sum = softhca::transport::ipv4_header_checksum(f.data() + 14, 20);
            f[14 + 10] = static_cast<uint8_t>(sum >> 8);
            f[14 + 11] = static_cast<uint8_t>(sum);
            const size_t udp_length = ip_length - 20;
            f[14 + 20 + 4] = static_cast<uint8_t>(udp_length >> 8);
            f[14 + 20 + 5] = static_cast<uint8_t>(udp_length);
        });
        CHECK(bench.cm.counters().mads_dropped == before.mads_dropped + 1);
    }
    // Nothing was reported, and the connection is what it was: a disconnect still
    // reaches both sides.
    CHECK(client.no_event_queued());
    CHECK(server.no_event_queued());
    disconnect_both(client, active, server, passive);
}

TEST_CASE("rdma_cm: closing a file whose listener holds requests not yet reported rejects "
          "them and frees every id once") {
    CmBench bench({});
    auto server = std::make_unique<CmFileClient>(bench);
    CmFileClient client(bench);
    constexpr uint32_t kServerIp = 0xc6120002, kClientIp = 0xc6120001;
    listen_at(*server, 0x1000, ipv4_in6(kServerIp, 5200), 8);
    for (uint64_t uid : {0x3001, 0x3002})
        connect_to(client, uid, ipv4_in6(kClientIp, 0), ipv4_in6(kServerIp, 5200),
                   0x200 + static_cast<uint32_t>(uid & 0xff));
    // Both requests reach the listener and wait there, unreported.
    for (int i = 0; i < 2000 && bench.cm.status_document(true, 0, 0)["ids"] != 5; ++i)
        bench.round();
    REQUIRE(bench.cm.status_document(true, 0, 0)["ids"] == 5); // listener, 2 active, 2 requests
    server.reset(); // the server's file closes (process exit)
    bench.round();
    // The listener and its two requests are gone (each destroyed once: under ASan a
    // second destruction of a freed request is a report); the client hears REJECTED.
    std::set<uint64_t> rejected;
    for (int i = 0; i < 2; ++i) {
        const auto e = client.next_event();
        CHECK(e.event == kEventRejected);
        rejected.insert(e.uid);
    }
    CHECK(rejected == std::set<uint64_t>{0x3001, 0x3002});
    CHECK(bench.cm.status_document(true, 0, 0)["files"] == 1);
    CHECK(bench.cm.status_document(true, 0, 0)["ids"] == 2); // the client's own two
}

TEST_CASE("rdma_cm: a user's ids and multicast joins stop at user_cm_ids with ENOMEM, and a "
          "destroyed id gives back its joins and drops their events") {
    CmBench bench({});
    ResourceLimits limits;
    REQUIRE(ResourceLimits::parse("user_cm_ids=4", limits).empty());
    bench.cm.set_limits(limits);
    CmFileClient f(bench);
    // A UD id bound to the first device's address, with two groups joined.
    rdma_ucm_create_id c{};
    c.uid = 0x77;
    c.ps = RDMA_PS_UDP;
    std::vector<uint8_t> r;
    REQUIRE(f.command(RDMA_USER_CM_CMD_CREATE_ID, c, r, 4) == 0);
    uint32_t id = 0;
    std::memcpy(&id, r.data(), 4);
    rdma_ucm_bind_ip b{};
    b.id = id;
    b.addr = ipv4_in6(0xc6120001, 0);
    REQUIRE(f.command(RDMA_USER_CM_CMD_BIND_IP, b) == 0);
    auto join = [&](uint32_t group) {
        rdma_ucm_join_ip_mcast j{};
        j.id = id;
        j.uid = group;
        j.addr = ipv4_in6(group, 0);
        std::vector<uint8_t> response;
        return f.command(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, response, 4);
    };
    REQUIRE(join(0xe0000101) == 0);
    REQUIRE(join(0xe0000102) == 0);
    f.create_id(0x78); // the fourth of the user's four
    CHECK(join(0xe0000103) == -ENOMEM);
    rdma_ucm_create_id more{};
    more.ps = RDMA_PS_TCP;
    CHECK(f.command(RDMA_USER_CM_CMD_CREATE_ID, more, r, 4) == -ENOMEM);
    // The joins' events are queued; destroying the id drops them and frees two places.
    REQUIRE_FALSE(f.no_event_queued());
    rdma_ucm_destroy_id x{};
    x.id = id;
    REQUIRE(f.command(RDMA_USER_CM_CMD_DESTROY_ID, x, r, sizeof(rdma_ucm_destroy_id_resp)) == 0);
    CHECK(f.no_event_queued());
    for (int i = 0; i < 3; ++i) // the id and its two joins were three of the four
        CHECK(f.command(RDMA_USER_CM_CMD_CREATE_ID, more, r, 4) == 0);
    CHECK(f.command(RDMA_USER_CM_CMD_CREATE_ID, more, r, 4) == -ENOMEM);
}
