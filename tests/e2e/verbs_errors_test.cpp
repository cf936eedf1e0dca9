// End to end through the system libibverbs: what a verbs program sees from a softhca
// device, including the errno of every kind of bad input, and that the engine keeps
// serving afterwards. Runs under `softhca exec` against a running engine.
#define CATCH_CONFIG_MAIN
#include "raw_control.hpp"
#include "softhca/device_interface/control.hpp"
#include "softhca/device_interface/cq_ring.hpp"
#include "softhca/device_interface/doorbell_page.hpp"
#include "softhca/device_interface/qp_ring.hpp"
#include "softhca/device_interface/socket_io.hpp"
#include "test_device.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdint>
#include <fcntl.h>
#include <fstream>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace di = softhca::device_interface;
using raw_control::connect_raw;
using raw_control::engine_socket_path;
using raw_control::header_for;

namespace {

ibv_context* context() {
    static ibv_context* ctx = open_test_device(test_device_name());
    REQUIRE(ctx != nullptr);
    return ctx;
}

struct Pd {
    ibv_pd* pd = ibv_alloc_pd(context());
    ~Pd() {
        if (pd)
            ibv_dealloc_pd(pd);
    }
};

const long kPage = sysconf(_SC_PAGESIZE);

void* map_pages(size_t pages, int prot) {
    void* p = mmap(nullptr, pages * kPage, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    return p;
}

// The engine still answers: a new PD can be allocated and freed.
void require_engine_serving() {
    ibv_pd* pd = ibv_alloc_pd(context());
    REQUIRE(pd != nullptr);
    REQUIRE(ibv_dealloc_pd(pd) == 0);
}

// Sends raw bytes and returns the status of the engine's reply.
int raw_exchange(int fd, const void* bytes, size_t size) {
    REQUIRE(di::send_message(fd, bytes, size) == static_cast<ssize_t>(size));
    std::vector<char> reply(1 << 18);
    di::ReceivedMessage m = di::receive_message(fd, reply.data(), reply.size());
    REQUIRE(m.size >= static_cast<ssize_t>(sizeof(di::ReplyHeader)));
    di::ReplyHeader header;
    std::memcpy(&header, reply.data(), sizeof(header));
    return header.status;
}

} // namespace

TEST_CASE("the device describes itself honestly") {
    ibv_device_attr attr{};
    REQUIRE(ibv_query_device(context(), &attr) == 0);
    CHECK(attr.vendor_id != 0x02c9); // not Mellanox
    CHECK(attr.phys_port_cnt == 1);
    CHECK(attr.max_pd > 0);
    CHECK(attr.max_cqe > 0);
    CHECK(context()->num_comp_vectors >= 1);
    ibv_device_attr_ex ex{};
    REQUIRE(ibv_query_device_ex(context(), nullptr, &ex) == 0);
    CHECK(ex.orig_attr.vendor_id == attr.vendor_id);
    CHECK(ex.orig_attr.node_guid != 0);
    CHECK(ex.phys_port_cnt_ex == attr.phys_port_cnt); // not 0 beside phys_port_cnt 1

    ibv_port_attr port{};
    REQUIRE(ibv_query_port(context(), 1, &port) == 0);
    CHECK(port.state == IBV_PORT_ACTIVE);
    CHECK(port.link_layer == IBV_LINK_LAYER_ETHERNET);
    CHECK(port.active_mtu >= IBV_MTU_1024);
    CHECK(port.gid_tbl_len >= 1);
    CHECK(ibv_query_port(context(), 2, &port) != 0);

    union ibv_gid gid {};
    REQUIRE(ibv_query_gid(context(), 1, 0, &gid) == 0);
    CHECK(gid.raw[10] == 0xff);
    CHECK(gid.raw[11] == 0xff);
    CHECK(gid.raw[12] == 198);
}

TEST_CASE("reg_mr of an unmapped range fails with EFAULT") {
    Pd pd;
    REQUIRE(pd.pd);
    void* p = map_pages(4, PROT_READ | PROT_WRITE);
    munmap(p, 4 * kPage);
    errno = 0;
    CHECK(ibv_reg_mr(pd.pd, p, 4 * kPage, IBV_ACCESS_LOCAL_WRITE) == nullptr);
    CHECK(errno == EFAULT);
    require_engine_serving();
}

TEST_CASE("reg_mr of memory the process cannot read fails with EFAULT") {
    Pd pd;
    void* p = map_pages(2, PROT_NONE);
    errno = 0;
    CHECK(ibv_reg_mr(pd.pd, p, 2 * kPage, 0) == nullptr);
    CHECK(errno == EFAULT);
    munmap(p, 2 * kPage);
    require_engine_serving();
}

TEST_CASE("a writable MR over read-only memory fails with EFAULT; a read-only one works") {
    Pd pd;
    void* p = map_pages(2, PROT_READ);
    errno = 0;
    CHECK(ibv_reg_mr(pd.pd, p, 2 * kPage, IBV_ACCESS_LOCAL_WRITE) == nullptr);
    CHECK(errno == EFAULT);
    ibv_mr* mr = ibv_reg_mr(pd.pd, p, 2 * kPage, IBV_ACCESS_REMOTE_READ);
    REQUIRE(mr != nullptr);
    CHECK(ibv_dereg_mr(mr) == 0);
    munmap(p, 2 * kPage);
}

TEST_CASE("REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is EINVAL") {
    Pd pd;
    static char buffer[4096];
    errno = 0;
    CHECK(ibv_reg_mr(pd.pd, buffer, sizeof(buffer), IBV_ACCESS_REMOTE_WRITE) == nullptr);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ibv_reg_mr(pd.pd, buffer, sizeof(buffer), IBV_ACCESS_REMOTE_ATOMIC) == nullptr);
    CHECK(errno == EINVAL);
    require_engine_serving();
}

TEST_CASE("zero-length and wrapping ranges are EINVAL") {
    Pd pd;
    static char buffer[4096];
    errno = 0;
    CHECK(ibv_reg_mr(pd.pd, buffer, 0, IBV_ACCESS_LOCAL_WRITE) == nullptr);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ibv_reg_mr(pd.pd, reinterpret_cast<void*>(UINTPTR_MAX - 100), 4096, 0) == nullptr);
    CHECK(errno == EINVAL);
    require_engine_serving();
}

TEST_CASE("an MR's keys come from the engine and it can be deregistered") {
    Pd pd;
    std::vector<char> buffer(1 << 20);
    ibv_mr* mr =
        ibv_reg_mr(pd.pd, buffer.data(), buffer.size(),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    REQUIRE(mr != nullptr);
    CHECK(mr->lkey != 0);
    CHECK(mr->rkey == mr->lkey);
    CHECK(mr->addr == buffer.data());
    CHECK(mr->length == buffer.size());
    ibv_mr* other = ibv_reg_mr(pd.pd, buffer.data(), 4096, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(other != nullptr);
    CHECK(other->lkey != mr->lkey);
    CHECK(ibv_dereg_mr(other) == 0);
    CHECK(ibv_dereg_mr(mr) == 0);
}

TEST_CASE("dealloc_pd while an MR uses the PD is EBUSY, then succeeds") {
    ibv_pd* pd = ibv_alloc_pd(context());
    REQUIRE(pd);
    static char buffer[8192];
    ibv_mr* mr = ibv_reg_mr(pd, buffer, sizeof(buffer), IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(mr);
    CHECK(ibv_dealloc_pd(pd) == EBUSY);
    CHECK(ibv_dereg_mr(mr) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
}

TEST_CASE("CQs are created, resized, polled and destroyed; bad sizes are EINVAL") {
    ibv_device_attr attr{};
    REQUIRE(ibv_query_device(context(), &attr) == 0);
    ibv_cq* cq = ibv_create_cq(context(), 100, nullptr, nullptr, 0);
    REQUIRE(cq != nullptr);
    CHECK(cq->cqe >= 100);
    ibv_wc wc[8];
    CHECK(ibv_poll_cq(cq, 8, wc) == 0);
    CHECK(ibv_resize_cq(cq, 1000) == 0);
    CHECK(cq->cqe >= 1000);
    CHECK(ibv_poll_cq(cq, 8, wc) == 0);
    CHECK(ibv_resize_cq(cq, 0) == EINVAL);
    CHECK(ibv_destroy_cq(cq) == 0);

    errno = 0;
    CHECK(ibv_create_cq(context(), 0, nullptr, nullptr, 0) == nullptr);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ibv_create_cq(context(), attr.max_cqe + 1, nullptr, nullptr, 0) == nullptr);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ibv_create_cq(context(), 10, nullptr, nullptr, context()->num_comp_vectors) == nullptr);
    CHECK(errno == EINVAL);
    require_engine_serving();
}

TEST_CASE("what softhca does not implement fails with EOPNOTSUPP") {
    Pd pd;
    ibv_cq* cq = ibv_create_cq(context(), 16, nullptr, nullptr, 0);
    REQUIRE(cq);
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RAW_PACKET;
    init.cap = {16, 16, 1, 1, 0};
    errno = 0;
    CHECK(ibv_create_qp(pd.pd, &init) == nullptr);
    CHECK(errno == EOPNOTSUPP);
    errno = 0;
    CHECK(ibv_alloc_mw(pd.pd, static_cast<ibv_mw_type>(3)) == nullptr); // no such type
    CHECK(errno == EINVAL);
    // Memory that is not ordinary process memory, device memory, thread and parent
    // domains, flow steering and ECE: consumers and test suites skip on EOPNOTSUPP.
    std::vector<uint8_t> bytes(4096);
    errno = 0;
    CHECK(ibv_reg_mr(pd.pd, bytes.data(), bytes.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED) == nullptr);
    CHECK(errno == EOPNOTSUPP);
    errno = 0;
    CHECK(ibv_reg_dmabuf_mr(pd.pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE) == nullptr);
    CHECK(errno == EOPNOTSUPP);
    init.qp_type = IBV_QPT_RC;
    ibv_qp* qp = ibv_create_qp(pd.pd, &init);
    REQUIRE(qp);
    ibv_flow_attr flow{};
    flow.size = sizeof(flow);
    flow.port = 1;
    errno = 0;
    CHECK(ibv_create_flow(qp, &flow) == nullptr);
    CHECK(errno == EOPNOTSUPP);
    ibv_ece ece{};
    CHECK(ibv_query_ece(qp, &ece) == EOPNOTSUPP);
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
}

TEST_CASE("QP creation, the state machine and posting reject bad input") {
    ibv_pd* pd = ibv_alloc_pd(context());
    REQUIRE(pd);
    ibv_cq* cq = ibv_create_cq(context(), 64, nullptr, nullptr, 0);
    REQUIRE(cq);
    ibv_device_attr dev{};
    REQUIRE(ibv_query_device(context(), &dev) == 0);
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {static_cast<uint32_t>(dev.max_qp_wr) + 1, 16, 1, 1, 0};
    errno = 0;
    CHECK(ibv_create_qp(pd, &init) == nullptr);
    CHECK(errno == EINVAL);
    init.cap = {16, 16, static_cast<uint32_t>(dev.max_sge) + 1, 1, 0};
    errno = 0;
    CHECK(ibv_create_qp(pd, &init) == nullptr);
    CHECK(errno == EINVAL);

    init.cap = {10, 10, 2, 2, 64};
    ibv_qp* qp = ibv_create_qp(pd, &init);
    REQUIRE(qp);
    CHECK(init.cap.max_send_wr >= 10);
    CHECK(init.cap.max_inline_data >= 64);
    CHECK(qp->state == IBV_QPS_RESET);

    // Resources in use cannot go away.
    CHECK(ibv_destroy_cq(cq) == EBUSY);
    CHECK(ibv_dealloc_pd(pd) == EBUSY);

    // Posting a send before RTS, or a receive in RESET, is EINVAL.
    static char buffer[64];
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), 8, 0};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL);
    CHECK(bad == &wr);
    ibv_recv_wr rwr{};
    ibv_recv_wr* rbad = nullptr;
    CHECK(ibv_post_recv(qp, &rwr, &rbad) == EINVAL);

    // RESET -> RTR is not a transition; RESET -> INIT needs its attributes.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == EINVAL);
    attr.qp_state = IBV_QPS_INIT;
    CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == EINVAL);
    attr.pkey_index = 0;
    attr.port_num = 2;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    CHECK(ibv_modify_qp(qp, &attr,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ==
          EINVAL);
    attr.port_num = 1;
    REQUIRE(ibv_modify_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ==
            0);
    CHECK(qp->state == IBV_QPS_INIT);
    CHECK(ibv_post_recv(qp, &rwr, &rbad) == 0);

    // INIT -> RTR without a GRH (RoCE needs one) or with a path MTU the port cannot
    // carry is EINVAL.
    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = IBV_MTU_1024;
    rtr.dest_qp_num = qp->qp_num;
    rtr.rq_psn = 1;
    rtr.max_dest_rd_atomic = 1;
    rtr.min_rnr_timer = 12;
    rtr.ah_attr.port_num = 1;
    const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                         IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    CHECK(ibv_modify_qp(qp, &rtr, rtr_mask) == EINVAL);
    rtr.ah_attr.is_global = 1;
    REQUIRE(ibv_query_gid(context(), 1, 0, &rtr.ah_attr.grh.dgid) == 0);
    CHECK(ibv_modify_qp(qp, &rtr, rtr_mask & ~IBV_QP_DEST_QPN) == EINVAL);
    // The source GID must exist and be of the destination's family: GID 0 is IPv4, GID 1
    // the link-local IPv6 address.
    ibv_port_attr port{};
    REQUIRE(ibv_query_port(context(), 1, &port) == 0);
    rtr.ah_attr.grh.sgid_index = static_cast<uint8_t>(port.gid_tbl_len);
    CHECK(ibv_modify_qp(qp, &rtr, rtr_mask) == EINVAL);
    rtr.ah_attr.grh.sgid_index = 1; // IPv6 source, IPv4 destination
    CHECK(ibv_modify_qp(qp, &rtr, rtr_mask) == EINVAL);
    rtr.ah_attr.grh.sgid_index = 0;
    REQUIRE(ibv_modify_qp(qp, &rtr, rtr_mask) == 0);

    ibv_qp_attr got{};
    ibv_qp_init_attr got_init{};
    REQUIRE(ibv_query_qp(qp, &got, IBV_QP_STATE, &got_init) == 0);
    CHECK(got.qp_state == IBV_QPS_RTR);
    CHECK(got.dest_qp_num == qp->qp_num);
    CHECK(got.path_mtu == IBV_MTU_1024);
    CHECK(got_init.qp_type == IBV_QPT_RC);
    CHECK(got_init.cap.max_send_wr == init.cap.max_send_wr);

    // Entering ERR flushes the posted receive.
    attr.qp_state = IBV_QPS_ERR;
    REQUIRE(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == 0);
    ibv_wc wc{};
    int n = 0;
    for (int i = 0; i < 1000 && n == 0; ++i) {
        n = ibv_poll_cq(cq, 1, &wc);
        usleep(1000);
    }
    REQUIRE(n == 1);
    CHECK(wc.status == IBV_WC_WR_FLUSH_ERR);

    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
}

TEST_CASE("address handles need a GID of the port of the destination's family") {
    ibv_pd* pd = ibv_alloc_pd(context());
    REQUIRE(pd);
    ibv_port_attr port{};
    REQUIRE(ibv_query_port(context(), 1, &port) == 0);
    REQUIRE(port.gid_tbl_len >= 2);
    ibv_gid ipv4{}, link_local{};
    REQUIRE(ibv_query_gid(context(), 1, 0, &ipv4) == 0);
    REQUIRE(ibv_query_gid(context(), 1, 1, &link_local) == 0);
    CHECK(link_local.raw[0] == 0xfe);
    CHECK(link_local.raw[1] == 0x80);
    ibv_gid_entry entry{};
    REQUIRE(ibv_query_gid_ex(context(), 1, 1, &entry, 0) == 0);
    CHECK(entry.gid_type == IBV_GID_TYPE_ROCE_V2);
    auto ah_with = [&](uint8_t sgid_index, const ibv_gid& dgid) {
        ibv_ah_attr attr{};
        attr.is_global = 1;
        attr.port_num = 1;
        attr.grh.sgid_index = sgid_index;
        attr.grh.hop_limit = 64;
        attr.grh.dgid = dgid;
        errno = 0;
        return ibv_create_ah(pd, &attr);
    };
    for (auto [index, dgid] : {std::pair{0, ipv4}, std::pair{1, link_local}}) {
        ibv_ah* ah = ah_with(static_cast<uint8_t>(index), dgid);
        CHECK(ah);
        if (ah)
            CHECK(ibv_destroy_ah(ah) == 0);
    }
    CHECK(ah_with(0, link_local) == nullptr); // IPv4 source, IPv6 destination
    CHECK(errno == EINVAL);
    CHECK(ah_with(1, ipv4) == nullptr);
    CHECK(errno == EINVAL);
    CHECK(ah_with(static_cast<uint8_t>(port.gid_tbl_len), ipv4) == nullptr);
    CHECK(errno == EINVAL);
    CHECK(ibv_dealloc_pd(pd) == 0);
}

TEST_CASE("garbage and truncated control messages get error replies; the engine serves on") {
    int fd = connect_raw();
    const char junk[] = "\x01\x02\x03\x04\x05\x06\x07";
    CHECK(raw_exchange(fd, junk, sizeof(junk)) == EBADMSG);

    std::vector<char> noise(200, '\x5a');
    CHECK(raw_exchange(fd, noise.data(), noise.size()) == EBADMSG);

    // A header that promises more than was sent: truncated.
    di::MessageHeader h = header_for(di::Opcode::RegMr, sizeof(di::RegMrRequest));
    CHECK(raw_exchange(fd, &h, sizeof(h)) == EBADMSG);

    // The right length field but a body too short for the opcode.
    h = header_for(di::Opcode::QueryPort, sizeof(h));
    CHECK(raw_exchange(fd, &h, sizeof(h)) == ENODEV); // nothing before OpenDevice

    // A message larger than any the engine accepts.
    std::vector<char> huge(64 * 1024, '\0');
    CHECK(raw_exchange(fd, huge.data(), huge.size()) == EMSGSIZE);

    // Wrong version.
    h = header_for(di::Opcode::AllocPd, sizeof(h));
    h.version = 99;
    CHECK(raw_exchange(fd, &h, sizeof(h)) == EPROTO);

    // OpenDevice without the async event pipe, and for a device that does not exist.
    di::OpenDeviceRequest open{};
    open.header = header_for(di::Opcode::OpenDevice, sizeof(open));
    open.provider_abi = di::kControlVersion;
    std::snprintf(open.device_name, sizeof(open.device_name), "%s", test_device_name().c_str());
    CHECK(raw_exchange(fd, &open, sizeof(open)) == EBADF);
    std::snprintf(open.device_name, sizeof(open.device_name), "nosuchdevice9");
    CHECK(raw_exchange(fd, &open, sizeof(open)) == ENODEV);

    // OpenDevice without the process's memory file, or with another file in its place
    // (a procfs file the engine would write as root, a memory file opened read-only).
    int pipe_fds[2];
    REQUIRE(pipe(pipe_fds) == 0);
    std::snprintf(open.device_name, sizeof(open.device_name), "%s", test_device_name().c_str());
    raw_control::prove_memory(open);
    auto open_with = [&](int memory) {
        REQUIRE(di::send_message(fd, &open, sizeof(open), pipe_fds[1], memory) ==
                static_cast<ssize_t>(sizeof(open)));
        std::vector<char> bytes(256);
        di::ReceivedMessage m = di::receive_message(fd, bytes.data(), bytes.size());
        REQUIRE(m.size >= static_cast<ssize_t>(sizeof(di::ReplyHeader)));
        if (m.fd >= 0)
            close(m.fd);
        di::ReplyHeader r;
        std::memcpy(&r, bytes.data(), sizeof(r));
        return r.status;
    };
    CHECK(open_with(-1) == EBADF);
    for (const char* wrong : {"/proc/self/oom_score_adj", "/proc/self/comm", "/dev/null"}) {
        const int other = ::open(wrong, O_RDWR | O_CLOEXEC);
        REQUIRE(other >= 0);
        CHECK(open_with(other) == EBADF);
        close(other);
    }
    const int read_only = ::open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    CHECK(open_with(read_only) == EBADF);
    close(read_only);
    // The memory file of this process, but a probe that is not what is there.
    const int mine = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    static const uint8_t elsewhere[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    open.probe_addr = reinterpret_cast<uintptr_t>(elsewhere); // other bytes than the probe
    CHECK(open_with(mine) == EBADF);
    open.probe_addr = 0x1000; // too low: could be a small procfs file's text
    CHECK(open_with(mine) == EBADF);
    raw_control::prove_memory(open);
    close(mine);

    // Unknown opcode after a proper open.
    const int memory = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    REQUIRE(di::send_message(fd, &open, sizeof(open), pipe_fds[1], memory) ==
            static_cast<ssize_t>(sizeof(open)));
    close(memory);
    std::vector<char> reply(256);
    REQUIRE(di::receive_message(fd, reply.data(), reply.size()).size ==
            sizeof(di::OpenDeviceReply));
    h = header_for(static_cast<di::Opcode>(999), sizeof(h));
    CHECK(raw_exchange(fd, &h, sizeof(h)) == EOPNOTSUPP);
    di::HandleRequest bad_handle{};
    bad_handle.header = header_for(di::Opcode::DeallocPd, sizeof(bad_handle));
    bad_handle.handle = 12345;
    CHECK(raw_exchange(fd, &bad_handle, sizeof(bad_handle)) == EINVAL);

    // The same connection still answers a good request...
    h = header_for(di::Opcode::AllocPd, sizeof(h));
    CHECK(raw_exchange(fd, &h, sizeof(h)) == 0);
    close(fd);
    close(pipe_fds[0]);
    close(pipe_fds[1]);

    // ...and a connection that sends half a message and hangs up hurts nobody.
    int fd2 = connect_raw();
    REQUIRE(send(fd2, "\x48\x53", 2, MSG_NOSIGNAL) == 2);
    close(fd2);
    require_engine_serving();
}

TEST_CASE("a process that scribbles over its shared rings cannot crash the engine") {
    raw_control::Client client;
    int pipe_fds[2];
    REQUIRE(pipe(pipe_fds) == 0);
    auto call = [&](auto& request, di::Opcode opcode, int fd_to_pass, int* fd_back) {
        return client.call(opcode, request, fd_to_pass, fd_back);
    };
    std::vector<char>& reply = client.reply;
    REQUIRE(client.open_device(pipe_fds[1]) == 0);
    struct {
        di::MessageHeader header;
    } alloc{};
    int doorbells_fd = -1;
    REQUIRE(call(alloc, di::Opcode::MapDoorbells, -1, &doorbells_fd) == 0);
    di::MapDoorbellsReply doorbells_reply;
    std::memcpy(&doorbells_reply, reply.data(), sizeof(doorbells_reply));
    REQUIRE(doorbells_reply.bytes >= sizeof(di::DoorbellPage));
    REQUIRE(call(alloc, di::Opcode::AllocPd, -1, nullptr) == 0);
    di::HandleReply pd;
    std::memcpy(&pd, reply.data(), sizeof(pd));
    di::CreateCqRequest cq_request{};
    cq_request.cqe = 4;
    // A completion channel flag without its descriptor, or a flag the engine does not
    // know: EINVAL, nothing created.
    cq_request.flags = di::kCreateCqChannel;
    CHECK(call(cq_request, di::Opcode::CreateCq, -1, nullptr) == EINVAL);
    cq_request.flags = 0x80;
    CHECK(call(cq_request, di::Opcode::CreateCq, -1, nullptr) == EINVAL);
    // ... or a "channel" that is not a pipe (a write to it could block the engine).
    cq_request.flags = di::kCreateCqChannel;
    const int not_a_pipe = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    REQUIRE(not_a_pipe >= 0);
    CHECK(call(cq_request, di::Opcode::CreateCq, not_a_pipe, nullptr) == EINVAL);
    close(not_a_pipe);
    cq_request.flags = 0;
    int cq_fd = -1;
    REQUIRE(call(cq_request, di::Opcode::CreateCq, -1, &cq_fd) == 0);
    di::CreateCqReply cq;
    std::memcpy(&cq, reply.data(), sizeof(cq));
    di::CreateQpRequest qp_request{};
    qp_request.pd_handle = pd.handle;
    qp_request.send_cq_handle = cq.cq_handle;
    qp_request.recv_cq_handle = cq.cq_handle;
    qp_request.qp_type = IBV_QPT_RC;
    qp_request.caps = {4, 4, 1, 1, 0, 0};
    int qp_fd = -1;
    REQUIRE(call(qp_request, di::Opcode::CreateQp, -1, &qp_fd) == 0);
    di::CreateQpReply qp;
    std::memcpy(&qp, reply.data(), sizeof(qp));

    // Scribble: absurd sizes and offsets in both headers, indices far ahead, and
    // garbage work requests in every slot.
    void* qp_map = mmap(nullptr, qp.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, qp_fd, 0);
    void* cq_map = mmap(nullptr, cq.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, cq_fd, 0);
    REQUIRE((qp_map != MAP_FAILED && cq_map != MAP_FAILED));
    auto* ring = static_cast<di::QpRingHeader*>(qp_map);
    const uint64_t sq_offset = ring->sq_offset;
    std::memset(static_cast<char*>(qp_map) + sq_offset, 0xff, qp.ring_bytes - sq_offset);
    ring->sq_slots = 0;
    ring->sq_slot_size = 0xffffffffu;
    ring->sq_offset = ~0ull;
    ring->rq_offset = ~0ull;
    ring->sq_producer.store(3);
    ring->rq_producer.store(~0ull - 5);
    auto* cq_ring = static_cast<di::CqRingHeader*>(cq_map);
    cq_ring->slots = 0;
    cq_ring->consumer.store(~0ull);
    // Every doorbell rung, the summary's unused bits too, the header garbage: the
    // engine looks at the scribbled QP's rings, and at no queue that is not there.
    void* doorbells_map =
        mmap(nullptr, doorbells_reply.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, doorbells_fd, 0);
    REQUIRE(doorbells_map != MAP_FAILED);
    std::memset(doorbells_map, 0xff, doorbells_reply.bytes);
    usleep(100000); // let the engine look at the rings
    std::memset(doorbells_map, 0xff, doorbells_reply.bytes);
    usleep(100000);

    // Resizing the scribbled CQ and destroying everything still works.
    di::ResizeCqRequest resize{};
    resize.cq_handle = cq.cq_handle;
    resize.cqe = 8;
    CHECK(call(resize, di::Opcode::ResizeCq, -1, nullptr) == 0);
    di::HandleRequest destroy{};
    destroy.handle = qp.qp_handle;
    CHECK(call(destroy, di::Opcode::DestroyQp, -1, nullptr) == 0);
    munmap(qp_map, qp.ring_bytes);
    munmap(cq_map, cq.ring_bytes);
    munmap(doorbells_map, doorbells_reply.bytes);
    close(doorbells_fd);
    close(qp_fd);
    close(cq_fd);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    require_engine_serving();
}

TEST_CASE("QPs with no send or no receive work requests are created, as kernel drivers "
          "create them (qperf's rc_bw and rc_rdma_read_bw ask for max_recv_wr 0)") {
    Pd pd;
    REQUIRE(pd.pd);
    ibv_cq* cq = ibv_create_cq(context(), 16, nullptr, nullptr, 0);
    REQUIRE(cq);
    for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD}) {
        for (auto [send_wr, recv_wr] :
             {std::pair{0u, 16u}, std::pair{16u, 0u}, std::pair{0u, 0u}}) {
            ibv_qp_init_attr init{};
            init.send_cq = cq;
            init.recv_cq = cq;
            init.qp_type = type;
            init.cap = {send_wr, recv_wr, 1, 1, 0};
            errno = 0;
            ibv_qp* qp = ibv_create_qp(pd.pd, &init);
            INFO("type " << type << " max_send_wr " << send_wr << " max_recv_wr " << recv_wr
                         << " errno " << errno);
            REQUIRE(qp != nullptr);
            // What the QP has: at least what was asked (0 rounds up to the least queue).
            CHECK(init.cap.max_send_wr >= send_wr);
            CHECK(init.cap.max_recv_wr >= recv_wr);
            ibv_qp_attr attr{};
            attr.qp_state = IBV_QPS_INIT;
            attr.port_num = 1;
            int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
            if (type == IBV_QPT_UD) {
                attr.qkey = 0x11111111;
                mask |= IBV_QP_QKEY;
            } else {
                attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
                mask |= IBV_QP_ACCESS_FLAGS;
            }
            CHECK(ibv_modify_qp(qp, &attr, mask) == 0);
            CHECK(ibv_destroy_qp(qp) == 0);
        }
    }
    CHECK(ibv_destroy_cq(cq) == 0);
}

TEST_CASE("a verb that fails leaves its errno in errno as well (qperf prints strerror(errno))") {
    Pd pd;
    REQUIRE(pd.pd);
    ibv_cq* cq = ibv_create_cq(context(), 16, nullptr, nullptr, 0);
    REQUIRE(cq);
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {4, 4, 1, 1, 0};
    ibv_qp* qp = ibv_create_qp(pd.pd, &init);
    REQUIRE(qp);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTS; // RESET to RTS: not a transition (IBTA 10.3.1)
    errno = 0;
    CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == EINVAL);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ibv_destroy_cq(cq) == EBUSY); // the QP still uses it
    CHECK(errno == EBUSY);
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
}
