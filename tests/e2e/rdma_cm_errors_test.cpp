// The emulated rdma_cm device under bad input, through the system librdmacm and by
// hand on its file: garbage and truncated commands, unknown ids, non-blocking event
// reads, a listener that rejects with private data, destroying an id whose events are
// not acknowledged, and a client killed in the middle of the handshake. Run under
// `softhca exec` against an instance whose built-in wire joins <prefix>0 (198.18.0.1)
// and <prefix>1 (198.18.0.2).
#define CATCH_CONFIG_MAIN
#include "engine_status.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace {

// The few rdma_ucm ABI layouts (rdma/rdma_user_cm.h, which cannot be included beside
// rdma_cma.h) this test writes by hand.
constexpr uint32_t kCmdCreateId = 0, kCmdDestroyId = 1, kCmdGetEvent = 12;
struct CmdHeader {
    uint32_t cmd;
    uint16_t in;
    uint16_t out;
};
struct CreateId {
    uint64_t uid;
    uint64_t response;
    uint16_t ps;
    uint8_t qp_type;
    uint8_t reserved[5];
};
struct DestroyId {
    uint64_t response;
    uint32_t id;
    uint32_t reserved;
};
struct GetEvent {
    uint64_t response;
};
static_assert(sizeof(CmdHeader) == 8 && sizeof(CreateId) == 24 && sizeof(DestroyId) == 16);
constexpr size_t kEventRespBytes = 336; // sizeof(struct rdma_ucm_event_resp)

constexpr const char* kServerIp = "198.18.0.2";
constexpr const char* kClientIp = "198.18.0.1";

sockaddr_in address(const char* ip, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

uint16_t test_port() {
    static uint16_t next = static_cast<uint16_t>(30000 + getpid() % 20000);
    return next++;
}

// The next event on the channel within `seconds`, or nullptr.
rdma_cm_event* next_event(rdma_event_channel* channel, int seconds = 10) {
    pollfd p{channel->fd, POLLIN, 0};
    if (::poll(&p, 1, seconds * 1000) != 1)
        return nullptr;
    rdma_cm_event* event = nullptr;
    return rdma_get_cm_event(channel, &event) == 0 ? event : nullptr;
}

struct Listener {
    rdma_event_channel* channel = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    uint16_t port = test_port();
    explicit Listener(const char* ip = kServerIp) {
        REQUIRE(channel);
        REQUIRE(rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) == 0);
        sockaddr_in a = address(ip, port);
        REQUIRE(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a)) == 0);
        REQUIRE(rdma_listen(id, 4) == 0);
    }
    ~Listener() {
        rdma_destroy_id(id);
        rdma_destroy_event_channel(channel);
    }
};

// A client id resolved up to its route; connect() sends the REQ (no QP: the events alone
// are what these tests look at, as librdmacm allows with a qp_num of our choosing).
struct Client {
    rdma_event_channel* channel = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    explicit Client(uint16_t port) {
        REQUIRE(channel);
        REQUIRE(rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) == 0);
        sockaddr_in src = address(kClientIp, 0);
        sockaddr_in dst = address(kServerIp, port);
        REQUIRE(rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src),
                                  reinterpret_cast<sockaddr*>(&dst), 2000) == 0);
        expect(RDMA_CM_EVENT_ADDR_RESOLVED);
        REQUIRE(rdma_resolve_route(id, 2000) == 0);
        expect(RDMA_CM_EVENT_ROUTE_RESOLVED);
    }
    void expect(rdma_cm_event_type type) {
        rdma_cm_event* e = next_event(channel);
        REQUIRE(e);
        CHECK(rdma_event_str(e->event) == std::string(rdma_event_str(type)));
        rdma_ack_cm_event(e);
    }
    int connect(const void* data = nullptr, uint8_t bytes = 0) {
        rdma_conn_param param{};
        param.private_data = data;
        param.private_data_len = bytes;
        param.qp_num = 0x123;
        param.retry_count = 7;
        param.rnr_retry_count = 7;
        return rdma_connect(id, &param);
    }
    ~Client() {
        rdma_destroy_id(id);
        rdma_destroy_event_channel(channel);
    }
};

// One write(2) of a hand-made command on the device file.
ssize_t command(int fd, uint32_t cmd, const void* body, size_t bytes, uint16_t out = 0) {
    char buffer[512] = {};
    CmdHeader hdr{cmd, static_cast<uint16_t>(bytes), out};
    std::memcpy(buffer, &hdr, sizeof(hdr));
    std::memcpy(buffer + sizeof(hdr), body, bytes);
    return ::write(fd, buffer, sizeof(hdr) + bytes);
}

} // namespace

TEST_CASE("the rdma_cm file: a character device that refuses garbage with errnos") {
    const int fd = ::open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    REQUIRE(fd >= 0);
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    CHECK(S_ISCHR(st.st_mode));

    CHECK(::write(fd, "abc", 3) == -1);
    CHECK(errno == EINVAL); // shorter than the header
    char zeros[8] = {};
    CHECK(command(fd, 99, zeros, sizeof(zeros)) == -1);
    CHECK(errno == EINVAL); // no such command
    CmdHeader lying{kCmdCreateId, 200, 4};
    CHECK(::write(fd, &lying, sizeof(lying)) == -1);
    CHECK(errno == EINVAL); // the header claims more input than the write has

    DestroyId destroy{};
    uint32_t destroyed = 0xffffffff;
    destroy.response = reinterpret_cast<uintptr_t>(&destroyed);
    destroy.id = 0xdead;
    CHECK(command(fd, kCmdDestroyId, &destroy, sizeof(destroy), 4) == -1);
    CHECK(errno == ENOENT);

    CreateId create{};
    create.ps = 0x4242; // no such port space
    uint32_t created = 0;
    create.response = reinterpret_cast<uintptr_t>(&created);
    CHECK(command(fd, kCmdCreateId, &create, sizeof(create), 4) == -1);
    CHECK(errno == EINVAL);
    create.ps = RDMA_PS_TCP;
    create.response = 8; // an address nobody may write
    CHECK(command(fd, kCmdCreateId, &create, sizeof(create), 4) == -1);
    CHECK(errno == EFAULT);

    // No event queued: not readable, and GET_EVENT on a non-blocking file is EAGAIN.
    pollfd p{fd, POLLIN, 0};
    CHECK(::poll(&p, 1, 0) == 0);
    alignas(8) uint8_t event[kEventRespBytes] = {};
    GetEvent get{};
    get.response = reinterpret_cast<uintptr_t>(event);
    CHECK(command(fd, kCmdGetEvent, &get, sizeof(get), kEventRespBytes) == -1);
    CHECK(errno == EAGAIN);

    // After all that, the file still works.
    create.response = reinterpret_cast<uintptr_t>(&created);
    CHECK(command(fd, kCmdCreateId, &create, sizeof(create), 4) ==
          static_cast<ssize_t>(sizeof(CmdHeader) + sizeof(create)));
    destroy.id = created;
    CHECK(command(fd, kCmdDestroyId, &destroy, sizeof(destroy), 4) > 0);
    CHECK(destroyed == 0); // events_reported
    ::close(fd);
}

TEST_CASE("binding a port twice is EADDRINUSE") {
    Listener listener;
    rdma_cm_id* other = nullptr;
    REQUIRE(rdma_create_id(listener.channel, &other, nullptr, RDMA_PS_TCP) == 0);
    sockaddr_in a = address(kServerIp, listener.port);
    CHECK(rdma_bind_addr(other, reinterpret_cast<sockaddr*>(&a)) == -1);
    CHECK(errno == EADDRINUSE);
    sockaddr_in foreign = address("198.18.7.7", 0);
    CHECK(rdma_bind_addr(other, reinterpret_cast<sockaddr*>(&foreign)) == -1);
    CHECK(errno == EADDRNOTAVAIL); // no port has that address
    rdma_destroy_id(other);
}

TEST_CASE("a listener that rejects with private data: the client gets REJECTED and the data") {
    Listener listener;
    Client client(listener.port);
    const char hello[] = "hello";
    REQUIRE(client.connect(hello, sizeof(hello)) == 0);
    rdma_cm_event* request = next_event(listener.channel);
    REQUIRE(request);
    REQUIRE(request->event == RDMA_CM_EVENT_CONNECT_REQUEST);
    REQUIRE(request->param.conn.private_data_len >= sizeof(hello));
    CHECK(std::memcmp(request->param.conn.private_data, hello, sizeof(hello)) == 0);
    CHECK(request->param.conn.qp_num == 0x123);
    const char no[] = "not today";
    CHECK(rdma_reject(request->id, no, sizeof(no)) == 0);
    rdma_cm_id* child = request->id;
    rdma_ack_cm_event(request);
    rdma_destroy_id(child);

    rdma_cm_event* rejected = next_event(client.channel);
    REQUIRE(rejected);
    CHECK(rejected->event == RDMA_CM_EVENT_REJECTED);
    CHECK(rejected->status == 28); // IB_CM_REJ_CONSUMER_DEFINED
    REQUIRE(rejected->param.conn.private_data_len >= sizeof(no));
    CHECK(std::memcmp(rejected->param.conn.private_data, no, sizeof(no)) == 0);
    rdma_ack_cm_event(rejected);
}

TEST_CASE("rdma_destroy_id waits until the id's reported events are acknowledged") {
    Listener listener;
    Client client(listener.port);
    REQUIRE(client.connect() == 0);
    rdma_cm_event* request = next_event(listener.channel);
    REQUIRE(request);
    REQUIRE(request->event == RDMA_CM_EVENT_CONNECT_REQUEST);
    rdma_cm_id* child = request->id;
    REQUIRE(rdma_reject(child, nullptr, 0) == 0);
    rdma_destroy_id(child);
    // The listener has one reported, unacknowledged event (the request): destroying
    // it must block until that event is acknowledged.
    std::atomic<bool> destroyed{false};
    rdma_cm_id* listen_id = listener.id;
    std::thread destroyer([&] {
        rdma_destroy_id(listen_id);
        destroyed = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK_FALSE(destroyed.load());
    rdma_ack_cm_event(request);
    destroyer.join();
    CHECK(destroyed.load());
    REQUIRE(rdma_create_id(listener.channel, &listener.id, nullptr, RDMA_PS_TCP) == 0);
    client.expect(RDMA_CM_EVENT_REJECTED);
}

TEST_CASE("a client killed mid-handshake: the listener's side ends and the engine serves on") {
    Listener listener;
    int die[2]; // the parent's word that the child may die now
    REQUIRE(::pipe(die) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::close(die[1]);
        // A verbs context of its own (the devices librdmacm opened are the parent's), so
        // that the engine's status shows this process for as long as it lives.
        int devices = 0;
        ibv_device** list = ibv_get_device_list(&devices);
        if (!list || devices == 0 || !ibv_open_device(list[0]))
            _exit(4);
        // Resolve and send the REQ, then die without another word.
        Client client(listener.port);
        if (client.connect() != 0)
            _exit(2);
        char word;
        (void)!::read(die[0], &word, 1);
        ::kill(getpid(), SIGKILL);
        _exit(3);
    }
    ::close(die[0]);
    rdma_cm_event* request = next_event(listener.channel);
    REQUIRE(request);
    REQUIRE(request->event == RDMA_CM_EVENT_CONNECT_REQUEST);
    rdma_cm_id* id = request->id;
    rdma_ack_cm_event(request);
    const std::string alive = "pid " + std::to_string(child) + " (";
    auto shows_child = [&](const std::string& s) { return s.find(alive) != std::string::npos; };
    CHECK(wait_for_status(shows_child));
    ::close(die[1]);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    // The dead client's engine rejects on its behalf: the request is gone, and
    // accepting it fails (ucma reports no event for a request not yet accepted). Once the
    // engine has let the dead process's verbs context go (a loaded machine may take a
    // while to), its rdma_cm file has gone the same way.
    CHECK(wait_for_status([&](const std::string& s) { return !shows_child(s); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    rdma_conn_param param{};
    param.qp_num = 0x456;
    CHECK(rdma_accept(id, &param) == -1);
    CHECK(errno == EINVAL);
    rdma_destroy_id(id);

    // And a new connection works.
    Client again(listener.port);
    REQUIRE(again.connect() == 0);
    rdma_cm_event* next = next_event(listener.channel);
    REQUIRE(next);
    CHECK(next->event == RDMA_CM_EVENT_CONNECT_REQUEST);
    rdma_cm_id* next_id = next->id;
    rdma_ack_cm_event(next);
    rdma_reject(next_id, nullptr, 0);
    rdma_destroy_id(next_id);
    again.expect(RDMA_CM_EVENT_REJECTED);
}

TEST_CASE("a loopback destination is this host, as the kernel's rdma_cm resolves it") {
    Listener listener("0.0.0.0");
    rdma_event_channel* channel = rdma_create_event_channel();
    REQUIRE(channel);
    rdma_cm_id* id = nullptr;
    REQUIRE(rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) == 0);
    sockaddr_in dst = address("127.0.0.1", listener.port);
    REQUIRE(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) == 0);
    rdma_cm_event* e = next_event(channel);
    REQUIRE(e);
    CHECK(e->event == RDMA_CM_EVENT_ADDR_RESOLVED);
    rdma_ack_cm_event(e);
    CHECK(id->verbs != nullptr); // bound to a device
    REQUIRE(rdma_resolve_route(id, 2000) == 0);
    e = next_event(channel);
    REQUIRE(e);
    CHECK(e->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
    rdma_ack_cm_event(e);
    rdma_conn_param param{};
    param.qp_num = 0x77;
    REQUIRE(rdma_connect(id, &param) == 0);
    rdma_cm_event* request = next_event(listener.channel);
    REQUIRE(request);
    CHECK(request->event == RDMA_CM_EVENT_CONNECT_REQUEST);
    CHECK(request->param.conn.qp_num == 0x77);
    rdma_cm_id* child = request->id;
    rdma_ack_cm_event(request);
    rdma_reject(child, nullptr, 0);
    rdma_destroy_id(child);
    e = next_event(channel);
    REQUIRE(e);
    CHECK(e->event == RDMA_CM_EVENT_REJECTED);
    rdma_ack_cm_event(e);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(channel);
}
