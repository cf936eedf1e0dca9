// Attacks on what the engine touches for a client (issue 26, items 2 to 4): the memfds
// it hands out, the pipes a client hands it, the doorbell, and client files mapped
// under an MR. Each case performs the attack as a hostile client would (speaking the
// control protocol itself where the provider would not misbehave) and asserts that it
// fails while the engine keeps serving: a new connection is answered and a transfer
// between two honest QPs completes with its bytes.
#define CATCH_CONFIG_MAIN
#include "raw_control.hpp"
#include "softhca/device_interface/async_event.hpp"
#include "verbs_fixture.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace di = softhca::device_interface;
using raw_control::Client;

namespace {

// The engine answers a new connection, and an RDMA WRITE between two honest QPs
// completes with every byte.
void require_engine_serving() {
    Client fresh;
    int async_pipe[2];
    REQUIRE(pipe2(async_pipe, O_CLOEXEC) == 0);
    REQUIRE(fresh.open_device(async_pipe[1]) == 0);
    struct {
        di::MessageHeader header;
    } bare{};
    REQUIRE(fresh.call(di::Opcode::AllocPd, bare) == 0);
    close(async_pipe[0]);
    close(async_pipe[1]);

    ibv_qp* a = create_qp_on(dev(0), IBV_QPT_RC, {4, 4, 1, 1, 0});
    ibv_qp* b = create_qp_on(dev(1), IBV_QPT_RC, {4, 4, 1, 1, 0});
    connect(a, b->qp_num, dev(1).gid);
    connect(b, a->qp_num, dev(0).gid);
    Buffer src(dev(0), 65536, kAllAccess, false), dst(dev(1), 65536, kAllAccess, false);
    fill(src, 9, 0, 65536);
    ibv_sge sge{src.addr(), 65536, src.mr->lkey};
    ibv_send_wr wr = signaled_wr(IBV_WR_RDMA_WRITE, &sge, 1, 1);
    wr.wr.rdma.remote_addr = dst.addr();
    wr.wr.rdma.rkey = dst.mr->rkey;
    post(a, wr);
    const ibv_wc wc = wait_completions(dev(0), 1)[0];
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(matches(dst, 9, 0, 65536));
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
}

// ftruncate of a memfd the engine handed out: refused by its seals.
void require_sealed(int fd, const char* what) {
    INFO(what);
    REQUIRE(fd >= 0);
    struct stat st {};
    REQUIRE(fstat(fd, &st) == 0);
    CHECK(ftruncate(fd, 0) == -1);
    CHECK(errno == EPERM);
    CHECK(ftruncate(fd, st.st_size + 4096) == -1);
    const int seals = fcntl(fd, F_GET_SEALS);
    CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
          (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
    // The seal cannot be taken off, and the size is what it was.
    CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == -1);
    struct stat after {};
    REQUIRE(fstat(fd, &after) == 0);
    CHECK(after.st_size == st.st_size);
    close(fd);
}

} // namespace

TEST_CASE("ftruncate of every memfd the engine hands out is refused") {
    Client c;
    int async_pipe[2];
    REQUIRE(pipe2(async_pipe, O_CLOEXEC) == 0);
    REQUIRE(c.open_device(async_pipe[1]) == 0);
    struct {
        di::MessageHeader header;
    } bare{};
    int doorbell_page = -1;
    REQUIRE(c.call(di::Opcode::MapDoorbells, bare, -1, &doorbell_page) == 0);
    require_sealed(doorbell_page, "doorbell page");
    REQUIRE(c.call(di::Opcode::AllocPd, bare) == 0);
    const uint32_t pd = c.reply_as<di::HandleReply>().handle;
    di::CreateCqRequest cq_request{};
    cq_request.cqe = 16;
    int cq_ring = -1;
    REQUIRE(c.call(di::Opcode::CreateCq, cq_request, -1, &cq_ring) == 0);
    const uint32_t cq = c.reply_as<di::CreateCqReply>().cq_handle;
    require_sealed(cq_ring, "CQ ring");
    di::CreateQpRequest qp_request{};
    qp_request.pd_handle = pd;
    qp_request.send_cq_handle = cq;
    qp_request.recv_cq_handle = cq;
    qp_request.qp_type = IBV_QPT_RC;
    qp_request.caps = {4, 4, 1, 1, 0, 0};
    int qp_ring = -1;
    REQUIRE(c.call(di::Opcode::CreateQp, qp_request, -1, &qp_ring) == 0);
    require_sealed(qp_ring, "QP ring");
    di::CreateSrqRequest srq_request{};
    srq_request.pd_handle = pd;
    srq_request.max_wr = 8;
    srq_request.max_sge = 1;
    int srq_ring = -1;
    REQUIRE(c.call(di::Opcode::CreateSrq, srq_request, -1, &srq_ring) == 0);
    require_sealed(srq_ring, "SRQ ring");
    di::AllocDmRequest dm_request{};
    dm_request.length = 4096;
    int dm = -1;
    REQUIRE(c.call(di::Opcode::AllocDm, dm_request, -1, &dm) == 0);
    require_sealed(dm, "device memory");
    int status_file = -1;
    REQUIRE(c.call(di::Opcode::EngineStatusJson, bare, -1, &status_file) == 0);
    require_sealed(status_file, "status document");
    close(async_pipe[0]);
    close(async_pipe[1]);
    require_engine_serving();
}

TEST_CASE("a client that makes its async event pipe block cannot stall the engine") {
    // The client keeps the write end it handed over, clears O_NONBLOCK on it (a flag of
    // the file description, which a dup shares), fills the pipe, and then has the port
    // go down and up, which writes an event to every context of the device.
    Client c;
    int async_pipe[2];
    REQUIRE(pipe2(async_pipe, O_CLOEXEC | O_NONBLOCK) == 0);
    REQUIRE(c.open_device(async_pipe[1]) == 0);
    const char junk[4096] = {};
    while (write(async_pipe[1], junk, sizeof(junk)) > 0) {
    }
    REQUIRE(errno == EAGAIN);
    REQUIRE(fcntl(async_pipe[1], F_SETFL, 0) == 0);
    for (uint32_t up : {0u, 1u}) {
        di::SetPortStateRequest port{};
        std::snprintf(port.device_name, sizeof(port.device_name), "%s", test_device_name().c_str());
        port.port_num = 1;
        port.up = up;
        Client admin;
        REQUIRE(admin.call(di::Opcode::SetPortState, port) == 0);
    }
    require_engine_serving();
    // And the same client's pipe got nothing beyond what it had room for: its events
    // were dropped, not waited for.
    close(async_pipe[0]);
    close(async_pipe[1]);
}

TEST_CASE("a client that makes its completion channel block cannot stall the engine") {
    // The channel's pipe: the client keeps its write end with O_NONBLOCK cleared and the
    // pipe full, arms the CQ and has completions arrive.
    ibv_comp_channel* channel = ibv_create_comp_channel(dev(1).context);
    REQUIRE(channel);
    ibv_cq* cq = ibv_create_cq(dev(1).context, 16, nullptr, channel, 0);
    REQUIRE(cq);
    // The channel's fd reads and writes the pipe (the preload reopens it read-write).
    const int fd = channel->fd;
    REQUIRE(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
    const char junk[4096] = {};
    while (write(fd, junk, sizeof(junk)) > 0) {
    }
    REQUIRE(fcntl(fd, F_SETFL, 0) == 0);
    REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
    ibv_qp* a = create_qp_on(dev(0), IBV_QPT_RC, {4, 4, 1, 1, 0});
    ibv_qp* b = create_qp_on(dev(1), IBV_QPT_RC, {4, 4, 1, 1, 0}, cq);
    connect(a, b->qp_num, dev(1).gid);
    connect(b, a->qp_num, dev(0).gid);
    Buffer src(dev(0), 64, kAllAccess, false), dst(dev(1), 64, kAllAccess, false);
    ibv_sge rsge{dst.addr(), 64, dst.mr->lkey};
    post_recv(b, 2, &rsge, 1);
    ibv_sge sge{src.addr(), 64, src.mr->lkey};
    ibv_send_wr wr = signaled_wr(IBV_WR_SEND, &sge, 1, 1);
    post(a, wr);
    CHECK(wait_completions(dev(0), 1)[0].status == IBV_WC_SUCCESS);
    CHECK(wait_completions(cq, 1)[0].status == IBV_WC_SUCCESS);
    require_engine_serving();
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_destroy_cq(cq);
    ibv_destroy_comp_channel(channel);
}

TEST_CASE("a client's doorbell is its own: filling or draining it touches no other context") {
    Client one, two;
    int pipes[2][2];
    REQUIRE(pipe2(pipes[0], O_CLOEXEC) == 0);
    REQUIRE(pipe2(pipes[1], O_CLOEXEC) == 0);
    int doorbell_one = -1, doorbell_two = -1;
    REQUIRE(one.open_device(pipes[0][1], &doorbell_one) == 0);
    REQUIRE(two.open_device(pipes[1][1], &doorbell_two) == 0);
    struct stat a {
    }, b{};
    REQUIRE(fstat(doorbell_one, &a) == 0);
    REQUIRE(fstat(doorbell_two, &b) == 0);
    CHECK(S_ISFIFO(a.st_mode));
    CHECK(a.st_ino != b.st_ino); // not one object shared by every client
    CHECK((fcntl(doorbell_one, F_GETFL) & O_ACCMODE) == O_WRONLY);
    // Fill it, and make it blocking: only this client's own posts could wait on it.
    const char junk[4096] = {};
    while (write(doorbell_one, junk, sizeof(junk)) > 0) {
    }
    REQUIRE(fcntl(doorbell_one, F_SETFL, 0) == 0);
    require_engine_serving();
    for (int* p : pipes) {
        close(p[0]);
        close(p[1]);
    }
    close(doorbell_one);
    close(doorbell_two);
}

TEST_CASE("a shared file truncated under its MR fails that access, not the engine") {
    // The engine maps a MAP_SHARED memfd registered as an MR; the client truncates the
    // file, so the pages behind the engine's mapping are gone: an RDMA WRITE and an RDMA
    // READ into it must fail with an error completion, and the engine live on.
    const size_t size = 65536;
    const int file = memfd_create("softhca-truncated", MFD_CLOEXEC);
    REQUIRE(file >= 0);
    REQUIRE(ftruncate(file, size) == 0);
    void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
    REQUIRE(memory != MAP_FAILED);
    ibv_mr* mr = ibv_reg_mr(dev(1).pd, memory, size, kAllAccess);
    REQUIRE(mr);
    REQUIRE(ftruncate(file, 0) == 0);
    Buffer src(dev(0), size, kAllAccess, false);
    for (ibv_wr_opcode opcode :
         {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
        INFO("opcode " << opcode);
        ibv_qp* a = create_qp_on(dev(0), IBV_QPT_RC, {4, 4, 1, 1, 0});
        ibv_qp* b = create_qp_on(dev(1), IBV_QPT_RC, {4, 4, 1, 1, 0});
        connect(a, b->qp_num, dev(1).gid);
        connect(b, a->qp_num, dev(0).gid);
        ibv_sge sge{src.addr(), opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? 8u : 4096u, src.mr->lkey};
        ibv_send_wr wr = signaled_wr(opcode, &sge, 1, 1);
        if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
            wr.wr.atomic.remote_addr = reinterpret_cast<uintptr_t>(memory);
            wr.wr.atomic.rkey = mr->rkey;
            wr.wr.atomic.compare_add = 1;
        } else {
            wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(memory);
            wr.wr.rdma.rkey = mr->rkey;
        }
        post(a, wr);
        const ibv_wc wc = wait_completions(dev(0), 1)[0];
        CHECK(wc.status != IBV_WC_SUCCESS);
        ibv_destroy_qp(a);
        ibv_destroy_qp(b);
        ibv_wc drain[4];
        while (ibv_poll_cq(dev(1).cq, 4, drain) > 0) {
        }
    }
    ibv_dereg_mr(mr);
    munmap(memory, size);
    close(file);
    require_engine_serving();
}

TEST_CASE("an atomic whose host address is misaligned is refused though its iova is aligned") {
    // An MR whose iova and address differ mod 8: the iova passes the check, the address
    // the atomic would land on does not (a split-lock cmpxchg).
    std::vector<uint8_t> memory(8192 + 8);
    ibv_mr* mr = ibv_reg_mr_iova(dev(1).pd, memory.data() + 4, 8192, 0x100000, kAllAccess);
    REQUIRE(mr);
    Buffer src(dev(0), 8, kAllAccess, false);
    ibv_qp* a = create_qp_on(dev(0), IBV_QPT_RC, {4, 4, 1, 1, 0});
    ibv_qp* b = create_qp_on(dev(1), IBV_QPT_RC, {4, 4, 1, 1, 0});
    connect(a, b->qp_num, dev(1).gid);
    connect(b, a->qp_num, dev(0).gid);
    ibv_sge sge{src.addr(), 8, src.mr->lkey};
    ibv_send_wr wr = signaled_wr(IBV_WR_ATOMIC_CMP_AND_SWP, &sge, 1, 1);
    wr.wr.atomic.remote_addr = 0x100000;
    wr.wr.atomic.rkey = mr->rkey;
    wr.wr.atomic.compare_add = 0;
    wr.wr.atomic.swap = 0x1122334455667788ull;
    post(a, wr);
    const ibv_wc wc = wait_completions(dev(0), 1)[0];
    CHECK(wc.status == IBV_WC_REM_INV_REQ_ERR);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_dereg_mr(mr);
    require_engine_serving();
}

TEST_CASE("a process name that is not UTF-8, with terminal escapes, breaks neither status form") {
    // The name is the client's to choose (PR_SET_NAME); the status shows it to others.
    char old_name[17] = {};
    REQUIRE(prctl(PR_GET_NAME, old_name) == 0);
    REQUIRE(prctl(PR_SET_NAME, "\xff\xfe\x1b[31mred") == 0);
    Client c;
    int async_pipe[2];
    REQUIRE(pipe2(async_pipe, O_CLOEXEC) == 0);
    REQUIRE(c.open_device(async_pipe[1]) == 0);
    REQUIRE(prctl(PR_SET_NAME, old_name) == 0);
    for (di::Opcode opcode : {di::Opcode::EngineStatusJson, di::Opcode::EngineStatus}) {
        Client viewer;
        struct {
            di::MessageHeader header;
        } bare{};
        int file = -1;
        REQUIRE(viewer.call(opcode, bare, -1, &file) == 0);
        const auto bytes = viewer.reply_as<di::StatusReply>().bytes;
        std::string text(bytes, '\0');
        REQUIRE(pread(file, text.data(), text.size(), 0) == static_cast<ssize_t>(bytes));
        close(file);
        CHECK(text.find('\x1b') == std::string::npos);
        CHECK(text.find('\xff') == std::string::npos);
        CHECK(text.find("??[31mred") != std::string::npos);
    }
    close(async_pipe[0]);
    close(async_pipe[1]);
    require_engine_serving();
}

// ibv_open_xrcd on `fd` with `oflags`, as ibv_open_xrcd(3) asks (both given).
ibv_xrcd* open_xrcd(int fd, int oflags) {
    ibv_xrcd_init_attr attr{};
    attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    attr.fd = fd;
    attr.oflags = oflags;
    return ibv_open_xrcd(dev(0).context, &attr);
}

TEST_CASE("an XRC domain holds its file, so its inode cannot name another file later") {
    // A domain found by (device, inode): were the file deleted and its inode reused,
    // another user's new file would join the domain. The engine keeps the file open.
    char path[] = "/tmp/softhca-xrcd-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    ibv_xrcd* xrcd = open_xrcd(fd, O_CREAT);
    REQUIRE(xrcd);
    close(fd);
    REQUIRE(unlink(path) == 0);
    auto engine_holds = [&] {
        const std::string pid = test_engine_pid();
        const std::string dir = "/proc/" + pid + "/fd/";
        for (int n = 0; n < 4096; ++n) {
            char target[512];
            const ssize_t len =
                readlink((dir + std::to_string(n)).c_str(), target, sizeof(target) - 1);
            if (len > 0 && std::string(target, len).find(path) != std::string::npos)
                return true;
        }
        return false;
    };
    CHECK(engine_holds());
    REQUIRE(ibv_close_xrcd(xrcd) == 0);
    // The engine closes a client's file on a thread of its own (a close may wait on the
    // file's filesystem), so after the reply, soon: within 2 s.
    bool held = true;
    for (int i = 0; i < 200 && held; ++i) {
        held = engine_holds();
        if (held)
            usleep(10000);
    }
    CHECK_FALSE(held);
}

TEST_CASE("an XRC domain cannot be joined through an O_PATH descriptor") {
    // O_PATH needs no permission on the file itself: a user who may not open a domain's
    // file (mode 0600, another owner) can still get one. The kernel's fdget refuses it.
    char path[] = "/tmp/softhca-xrcd-path-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    ibv_xrcd* owner = open_xrcd(fd, O_CREAT);
    REQUIRE(owner);
    const int path_fd = open(path, O_PATH | O_CLOEXEC);
    REQUIRE(path_fd >= 0);
    for (const int oflags : {0, O_CREAT}) {
        errno = 0;
        CHECK(open_xrcd(path_fd, oflags) == nullptr);
        CHECK(errno == EBADF);
    }
    // The same file opened for real joins the owner's domain.
    const int real_fd = open(path, O_RDONLY | O_CLOEXEC);
    REQUIRE(real_fd >= 0);
    ibv_xrcd* joined = open_xrcd(real_fd, 0);
    CHECK(joined);
    if (joined)
        CHECK(ibv_close_xrcd(joined) == 0);
    CHECK(ibv_close_xrcd(owner) == 0);
    close(real_fd);
    close(path_fd);
    close(fd);
    unlink(path);
    require_engine_serving();
}

TEST_CASE("a 1-byte MR on a huge shared region maps one page into the engine, not the region") {
    // MAP_NORESERVE costs the client nothing; mapping the whole region would cost the
    // engine its address space (and max_map_count) for everyone.
    const size_t huge = 64ull << 30;
    void* region = mmap(nullptr, huge, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(region != MAP_FAILED);
    uint8_t* byte = static_cast<uint8_t*>(region) + (huge / 2);
    const unsigned long long before = test_engine_memory("VmSize");
    ibv_mr* mr = ibv_reg_mr(dev(1).pd, byte, 1, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    REQUIRE(mr);
    const unsigned long long after = test_engine_memory("VmSize");
    INFO("engine VmSize " << before << " -> " << after);
    CHECK(after < before + (1ull << 30));
    // And the engine reaches it: an RDMA WRITE of one byte lands there.
    Buffer src(dev(0), 8, kAllAccess, false);
    src.bytes[0] = 0x7e;
    ibv_qp* a = create_qp_on(dev(0), IBV_QPT_RC, {4, 4, 1, 1, 0});
    ibv_qp* b = create_qp_on(dev(1), IBV_QPT_RC, {4, 4, 1, 1, 0});
    connect(a, b->qp_num, dev(1).gid);
    connect(b, a->qp_num, dev(0).gid);
    ibv_sge sge{src.addr(), 1, src.mr->lkey};
    ibv_send_wr wr = signaled_wr(IBV_WR_RDMA_WRITE, &sge, 1, 1);
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(byte);
    wr.wr.rdma.rkey = mr->rkey;
    post(a, wr);
    CHECK(wait_completions(dev(0), 1)[0].status == IBV_WC_SUCCESS);
    CHECK(*byte == 0x7e);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_dereg_mr(mr);
    munmap(region, huge);
}
