// End to end through the system libibverbs: XRC (ibv_open_xrcd, XRC SRQs, XRC initiator
// and target QPs) between the two softhca devices of an instance. A domain opened by
// file is one domain for every context that opens it; each message lands in the SRQ it
// names; an SRQ of another domain, or none at all, is a remote invalid request.
#define CATCH_CONFIG_MAIN
#include "verbs_fixture.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fcntl.h>
#include <unistd.h>

namespace {

ibv_xrcd* open_xrcd(ibv_context* context, int fd, int oflags) {
    ibv_xrcd_init_attr attr{};
    attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    attr.fd = fd;
    attr.oflags = oflags;
    return ibv_open_xrcd(context, &attr);
}

ibv_srq* xrc_srq(ibv_context* context, ibv_pd* pd, ibv_xrcd* xrcd, ibv_cq* cq) {
    ibv_srq_init_attr_ex attr{};
    attr.attr = {16, 1, 0};
    attr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                     IBV_SRQ_INIT_ATTR_PD;
    attr.srq_type = IBV_SRQT_XRC;
    attr.xrcd = xrcd;
    attr.cq = cq;
    attr.pd = pd;
    ibv_srq* srq = ibv_create_srq_ex(context, &attr);
    REQUIRE(srq);
    return srq;
}

ibv_qp* xrc_target(ibv_context* context, ibv_xrcd* xrcd) {
    ibv_qp_init_attr_ex attr{};
    attr.qp_type = IBV_QPT_XRC_RECV;
    attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    attr.xrcd = xrcd;
    ibv_qp* qp = ibv_create_qp_ex(context, &attr);
    REQUIRE(qp);
    return qp;
}

ibv_qp* xrc_initiator(Device& d) {
    ibv_qp_init_attr_ex attr{};
    attr.qp_type = IBV_QPT_XRC_SEND;
    attr.send_cq = d.cq;
    attr.cap.max_send_wr = 16;
    attr.cap.max_send_sge = 1;
    attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    attr.pd = d.pd;
    ibv_qp* qp = ibv_create_qp_ex(d.context, &attr);
    REQUIRE(qp);
    return qp;
}

uint32_t srq_num(ibv_srq* srq) {
    uint32_t n = 0;
    REQUIRE(ibv_get_srq_num(srq, &n) == 0);
    return n;
}

void send_to_srq(ibv_qp* qp, Buffer& b, uint32_t length, uint32_t srqn, uint64_t id) {
    ibv_sge sge{b.addr(), length, b.mr->lkey};
    ibv_send_wr wr = signaled_wr(IBV_WR_SEND, &sge, 1, id);
    wr.qp_type.xrc.remote_srqn = srqn;
    post(qp, wr);
}

// The target QP's context hears of its error (QP_REQ_ERR), then that it will take no more
// from its SRQs (QP_LAST_WQE_REACHED).
void expect_target_error(ibv_context* context, ibv_qp* target) {
    for (ibv_event_type type : {IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_LAST_WQE_REACHED}) {
        pollfd pfd{context->async_fd, POLLIN, 0};
        REQUIRE(poll(&pfd, 1, 5000) == 1);
        ibv_async_event event{};
        REQUIRE(ibv_get_async_event(context, &event) == 0);
        CHECK(event.event_type == type);
        CHECK(event.element.qp == target);
        ibv_ack_async_event(&event);
    }
}

// A second context of device 1 with its own PD and CQ (a second process would do the
// same: the engine keys everything by context).
struct OtherContext {
    ibv_context* context = open_test_device(device_name(1));
    ibv_pd* pd = nullptr;
    OtherContext() {
        REQUIRE(context);
        pd = ibv_alloc_pd(context);
        REQUIRE(pd);
    }
    ~OtherContext() {
        ibv_dealloc_pd(pd);
        ibv_close_device(context);
    }
};

} // namespace

TEST_CASE("XRC: a file names one domain across contexts; the SRQ is chosen per message") {
    char path[] = "/tmp/softhca-xrc-XXXXXX";
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    OtherContext other;
    // Opened by file in two contexts: one domain. O_EXCL refuses an existing one; without
    // O_CREAT a file no domain has is refused; fd -1 makes a domain of its own.
    ibv_xrcd* mine = open_xrcd(dev(1).context, fd, O_CREAT);
    REQUIRE(mine);
    ibv_xrcd* shared = open_xrcd(other.context, fd, O_CREAT);
    REQUIRE(shared);
    errno = 0;
    CHECK(open_xrcd(other.context, fd, O_CREAT | O_EXCL) == nullptr);
    CHECK(errno == EINVAL);
    char fresh_path[] = "/tmp/softhca-xrc-XXXXXX";
    const int fresh = ::mkstemp(fresh_path);
    REQUIRE(fresh >= 0);
    errno = 0;
    CHECK(open_xrcd(other.context, fresh, 0) == nullptr);
    CHECK(errno == EINVAL);
    ibv_xrcd* stranger = open_xrcd(dev(1).context, -1, O_CREAT);
    REQUIRE(stranger);

    // Two SRQs in the shared domain (made through the first context), one in another.
    ibv_srq* first = xrc_srq(dev(1).context, dev(1).pd, mine, dev(1).cq);
    ibv_srq* second = xrc_srq(dev(1).context, dev(1).pd, mine, dev(1).cq);
    ibv_srq* foreign = xrc_srq(dev(1).context, dev(1).pd, stranger, dev(1).cq);
    CHECK(srq_num(first) != srq_num(second));
    CHECK(ibv_close_xrcd(mine) == EBUSY); // SRQs are still in it
    Buffer dst(dev(1), 8192, kAllAccess), src(dev(0), 4096, kAllAccess);
    ibv_sge s1{dst.addr(), 4096, dst.mr->lkey}, s2{dst.addr(4096), 4096, dst.mr->lkey};
    ibv_recv_wr r1{}, r2{};
    r1.wr_id = 1;
    r1.sg_list = &s1;
    r1.num_sge = 1;
    r2 = r1;
    r2.wr_id = 2;
    r2.sg_list = &s2;
    ibv_recv_wr* bad = nullptr;
    REQUIRE(ibv_post_srq_recv(first, &r1, &bad) == 0);
    REQUIRE(ibv_post_srq_recv(second, &r2, &bad) == 0);

    // The target QP lives in the other context's handle of the same domain.
    ibv_qp* target = xrc_target(other.context, shared);
    ibv_qp* initiator = xrc_initiator(dev(0));
    connect(initiator, target->qp_num, dev(1).gid);
    connect(target, initiator->qp_num, dev(0).gid);
    // A target has no queues of its own.
    ibv_sge probe{dst.addr(), 16, dst.mr->lkey};
    ibv_recv_wr own{};
    own.sg_list = &probe;
    own.num_sge = 1;
    CHECK(ibv_post_recv(target, &own, &bad) == EINVAL);

    fill(src, 7, 0, 3000);
    send_to_srq(initiator, src, 3000, srq_num(second), 10);
    send_to_srq(initiator, src, 1000, srq_num(first), 11);
    std::vector<ibv_wc> sent = wait_completions(dev(0), 2);
    for (const ibv_wc& wc : sent)
        CHECK(wc.status == IBV_WC_SUCCESS);
    std::vector<ibv_wc> got = wait_completions(dev(1), 2); // the SRQs' CQ
    CHECK(got[0].wr_id == 2);                              // into the second SRQ, as named
    CHECK(got[0].byte_len == 3000);
    CHECK(got[0].qp_num == target->qp_num);
    CHECK(got[1].wr_id == 1);
    CHECK(got[1].byte_len == 1000);
    CHECK(matches(dst, 7, 4096, 3000));
    CHECK(matches(dst, 7, 0, 1000));

    // ibv_open_qp: the first context opens the target made by the other, through its own
    // handle of the same domain; a stranger's domain or a QP that is no target is EINVAL.
    ibv_qp_open_attr open_attr{};
    open_attr.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    open_attr.qp_num = target->qp_num;
    open_attr.xrcd = mine;
    open_attr.qp_type = IBV_QPT_XRC_RECV;
    ibv_qp* opened = ibv_open_qp(dev(1).context, &open_attr);
    REQUIRE(opened);
    CHECK(opened->qp_num == target->qp_num);
    CHECK(opened->state == IBV_QPS_RTS);
    ibv_qp_attr qattr{};
    ibv_qp_init_attr qinit{};
    REQUIRE(ibv_query_qp(opened, &qattr, IBV_QP_STATE, &qinit) == 0);
    CHECK(qattr.qp_state == IBV_QPS_RTS);
    CHECK(qinit.qp_type == IBV_QPT_XRC_RECV);
    open_attr.xrcd = stranger;
    errno = 0;
    CHECK(ibv_open_qp(dev(1).context, &open_attr) == nullptr);
    CHECK(errno == EINVAL);
    open_attr.xrcd = mine;
    open_attr.qp_num = initiator->qp_num; // on the other device, and no target
    errno = 0;
    CHECK(ibv_open_qp(dev(1).context, &open_attr) == nullptr);
    CHECK(errno == EINVAL);
    CHECK(ibv_destroy_qp(target) == EBUSY); // still open in another context

    // An SRQ of another domain: the target refuses (remote invalid request) and its QP
    // reports the error to its own context and to the one that opened it, each with its
    // own ibv_qp as the element.
    send_to_srq(initiator, src, 100, srq_num(foreign), 12);
    CHECK(wait_completions(dev(0), 1)[0].status == IBV_WC_REM_INV_REQ_ERR);
    expect_target_error(other.context, target);
    expect_target_error(dev(1).context, opened);
    CHECK(ibv_destroy_qp(opened) == 0); // closes that handle only
    ibv_destroy_qp(initiator);
    ibv_destroy_qp(target);

    // No SRQ of that number at all: the same.
    target = xrc_target(other.context, shared);
    initiator = xrc_initiator(dev(0));
    connect(initiator, target->qp_num, dev(1).gid);
    connect(target, initiator->qp_num, dev(0).gid);
    send_to_srq(initiator, src, 100, 0xfffff0, 13);
    CHECK(wait_completions(dev(0), 1)[0].status == IBV_WC_REM_INV_REQ_ERR);
    expect_target_error(other.context, target);
    ibv_destroy_qp(initiator);
    ibv_destroy_qp(target);

    for (ibv_srq* srq : {first, second, foreign})
        CHECK(ibv_destroy_srq(srq) == 0);
    CHECK(ibv_close_xrcd(mine) == 0);
    CHECK(ibv_close_xrcd(shared) == 0);
    CHECK(ibv_close_xrcd(stranger) == 0);
    ::close(fd);
    ::close(fresh);
    ::unlink(path);
    ::unlink(fresh_path);
}
