// The extended verbs through the system libibverbs: the ibv_qp_ex work-request API
// (ibv_wr_*), memory windows, ibv_rereg_mr and the complete ibv_query_qp/ibv_query_srq.
#define CATCH_CONFIG_MAIN
#include "verbs_fixture.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cstring>
#include <sys/mman.h>
#include <thread>

namespace {

constexpr uint64_t kAllSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

ibv_qp* make_qp_ex(Device& d, ibv_qp_type type, uint64_t send_ops = kAllSendOps) {
    ibv_qp_init_attr_ex init{};
    init.send_cq = d.cq;
    init.recv_cq = d.cq;
    init.qp_type = type;
    init.cap = {64, 64, 4, 4, 128};
    init.pd = d.pd;
    init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    init.send_ops_flags = send_ops;
    ibv_qp* qp = ibv_create_qp_ex(d.context, &init);
    REQUIRE(qp);
    REQUIRE(ibv_qp_to_qp_ex(qp));
    return qp;
}

struct ExPair {
    ibv_qp* a = make_qp_ex(dev(0), IBV_QPT_RC);
    ibv_qp* b = make_qp_ex(dev(1), IBV_QPT_RC);
    ExPair() {
        connect(a, b->qp_num, dev(1).gid);
        connect(b, a->qp_num, dev(0).gid);
    }
    ~ExPair() {
        ibv_destroy_qp(a);
        ibv_destroy_qp(b);
    }
};

// Polls `d`'s CQ until `count` completions came, sorted by wr_id for checking.
std::vector<ibv_wc> completions_by_id(Device& d, size_t count) {
    auto wcs = wait_completions(d, count);
    std::sort(wcs.begin(), wcs.end(),
              [](const ibv_wc& x, const ibv_wc& y) { return x.wr_id < y.wr_id; });
    return wcs;
}

} // namespace

TEST_CASE("the ibv_wr API posts every RC operation in one batch and the data arrives") {
    ExPair pair;
    Buffer src(dev(0), 64 * 1024, kAllAccess), dst(dev(1), 64 * 1024, kAllAccess);
    Buffer back(dev(0), 4096, kAllAccess);
    fill(src, 11, 0, 8192);
    fill(dst, 12, 32 * 1024, 4096); // what the READ fetches
    uint64_t counter = 40, swap_word = 7;
    std::memcpy(&dst.bytes[48 * 1024], &counter, 8);
    std::memcpy(&dst.bytes[48 * 1024 + 8], &swap_word, 8);
    for (int i = 0; i < 3; ++i) {
        ibv_sge rsge{dst.addr(16 * 1024 + i * 4096), 4096, dst.mr->lkey};
        post_recv(pair.b, 100 + i, &rsge, 1);
    }

    ibv_qp_ex* qpx = ibv_qp_to_qp_ex(pair.a);
    ibv_wr_start(qpx);
    // 1: WRITE of two SGEs.
    qpx->wr_id = 1;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qpx, dst.mr->rkey, dst.addr(0));
    const ibv_sge two[2] = {{src.addr(0), 1000, src.mr->lkey},
                            {src.addr(1000), 3000, src.mr->lkey}};
    ibv_wr_set_sge_list(qpx, 2, two);
    // 2: WRITE with immediate (consumes receive 100).
    qpx->wr_id = 2;
    ibv_wr_rdma_write_imm(qpx, dst.mr->rkey, dst.addr(8192), htonl(0xabc));
    ibv_wr_set_sge(qpx, src.mr->lkey, src.addr(4000), 500);
    // 3: SEND inline (receive 101); the buffer is reused right after the call.
    qpx->wr_id = 3;
    ibv_wr_send(qpx);
    char text[] = "inline through ibv_wr_set_inline_data";
    ibv_wr_set_inline_data(qpx, text, sizeof(text));
    std::memset(text, 'x', sizeof(text));
    // 4: SEND with immediate, inline from two pieces (receive 102).
    qpx->wr_id = 4;
    ibv_wr_send_imm(qpx, htonl(0x4444));
    const ibv_data_buf pieces[2] = {{src.bytes.data() + 100, 20}, {src.bytes.data() + 200, 30}};
    ibv_wr_set_inline_data_list(qpx, 2, pieces);
    // 5: READ back 4 KiB.
    qpx->wr_id = 5;
    ibv_wr_rdma_read(qpx, dst.mr->rkey, dst.addr(32 * 1024));
    ibv_wr_set_sge(qpx, back.mr->lkey, back.addr(), 4096);
    // 6, 7: both atomics.
    qpx->wr_id = 6;
    ibv_wr_atomic_fetch_add(qpx, dst.mr->rkey, dst.addr(48 * 1024), 2);
    ibv_wr_set_sge(qpx, back.mr->lkey, back.addr(0), 8);
    qpx->wr_id = 7;
    ibv_wr_atomic_cmp_swp(qpx, dst.mr->rkey, dst.addr(48 * 1024 + 8), 7, 99);
    ibv_wr_set_sge(qpx, back.mr->lkey, back.addr(8), 8);
    REQUIRE(ibv_wr_complete(qpx) == 0);

    const auto sent = completions_by_id(dev(0), 7);
    for (size_t i = 0; i < sent.size(); ++i) {
        INFO("request " << sent[i].wr_id);
        CHECK(sent[i].wr_id == i + 1);
        CHECK(sent[i].status == IBV_WC_SUCCESS);
    }
    CHECK(sent[4].opcode == IBV_WC_RDMA_READ);
    CHECK(sent[5].opcode == IBV_WC_FETCH_ADD);
    CHECK(sent[6].opcode == IBV_WC_COMP_SWAP);
    const auto received = completions_by_id(dev(1), 3);
    CHECK(received[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(ntohl(received[0].imm_data) == 0xabc);
    CHECK(received[1].byte_len == sizeof(text));
    CHECK(std::memcmp(&dst.bytes[16 * 1024 + 4096], "inline through ibv_wr_set_inline_data",
                      sizeof(text)) == 0);
    CHECK(received[2].byte_len == 50);
    CHECK(ntohl(received[2].imm_data) == 0x4444);
    CHECK(std::memcmp(&dst.bytes[16 * 1024 + 8192], &src.bytes[100], 20) == 0);
    CHECK(std::memcmp(&dst.bytes[16 * 1024 + 8192 + 20], &src.bytes[200], 30) == 0);
    CHECK(matches(dst, 11, 0, 4000));                                 // the two SGEs
    CHECK(std::memcmp(&dst.bytes[8192], &src.bytes[4000], 500) == 0); // WRITE_WITH_IMM
    // READ landed before the atomics' results overwrote its first 16 bytes.
    CHECK(std::memcmp(&back.bytes[16], &dst.bytes[32 * 1024 + 16], 4096 - 16) == 0);
    uint64_t fetched = 0, swapped_was = 0, now_counter = 0, now_swap = 0;
    std::memcpy(&fetched, &back.bytes[0], 8);
    std::memcpy(&swapped_was, &back.bytes[8], 8);
    std::memcpy(&now_counter, &dst.bytes[48 * 1024], 8);
    std::memcpy(&now_swap, &dst.bytes[48 * 1024 + 8], 8);
    CHECK(fetched == 40);
    CHECK(now_counter == 42);
    CHECK(swapped_was == 7);
    CHECK(now_swap == 99);
}

TEST_CASE("ibv_wr_abort posts nothing and an error anywhere in a batch posts none of it") {
    ExPair pair;
    Buffer src(dev(0), 4096, kAllAccess), dst(dev(1), 4096, kAllAccess);
    ibv_qp_ex* qpx = ibv_qp_to_qp_ex(pair.a);
    qpx->wr_flags = IBV_SEND_SIGNALED;

    ibv_wr_start(qpx);
    ibv_wr_rdma_write(qpx, dst.mr->rkey, dst.addr());
    ibv_wr_set_sge(qpx, src.mr->lkey, src.addr(), 8);
    ibv_wr_abort(qpx);

    ibv_wr_start(qpx);
    qpx->wr_id = 1;
    ibv_wr_rdma_write(qpx, dst.mr->rkey, dst.addr());
    ibv_wr_set_sge(qpx, src.mr->lkey, src.addr(), 8);
    qpx->wr_id = 2;
    ibv_wr_rdma_write(qpx, dst.mr->rkey, dst.addr());
    const ibv_sge five[5] = {}; // more than the QP's 4 SGEs
    ibv_wr_set_sge_list(qpx, 5, five);
    CHECK(ibv_wr_complete(qpx) == EINVAL);

    ibv_wr_start(qpx);
    qpx->wr_id = 3;
    ibv_wr_send(qpx);
    std::vector<char> big(1024); // more than the QP's inline room
    ibv_wr_set_inline_data(qpx, big.data(), big.size());
    CHECK(ibv_wr_complete(qpx) == EINVAL);

    // Only this one completes: the failed batches left nothing behind.
    ibv_wr_start(qpx);
    qpx->wr_id = 4;
    ibv_wr_rdma_write(qpx, dst.mr->rkey, dst.addr());
    ibv_wr_set_sge(qpx, src.mr->lkey, src.addr(), 8);
    REQUIRE(ibv_wr_complete(qpx) == 0);
    const auto wcs = wait_completions(dev(0), 1);
    CHECK(wcs[0].wr_id == 4);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ibv_wc extra;
    CHECK(ibv_poll_cq(dev(0).cq, 1, &extra) == 0);
}

TEST_CASE("ibv_wr_set_ud_addr sends a datagram") {
    ibv_qp* a = make_qp_ex(dev(0), IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
    ibv_qp* b = make_qp_ex(dev(1), IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
    ud_ready(a);
    ud_ready(b);
    ibv_ah* ah = make_ah(dev(0), dev(1).gid);
    Buffer src(dev(0), 4096, kAllAccess), dst(dev(1), 4096, kAllAccess);
    fill(src, 5, 0, 256);
    ibv_sge rsge{dst.addr(), 4096, dst.mr->lkey};
    post_recv(b, 9, &rsge, 1);
    ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a);
    ibv_wr_start(qpx);
    qpx->wr_id = 8;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qpx);
    ibv_wr_set_ud_addr(qpx, ah, b->qp_num, kQkey);
    ibv_wr_set_sge(qpx, src.mr->lkey, src.addr(), 256);
    REQUIRE(ibv_wr_complete(qpx) == 0);
    CHECK(wait_completions(dev(0), 1)[0].status == IBV_WC_SUCCESS);
    const auto wc = wait_completions(dev(1), 1);
    CHECK(wc[0].byte_len == 40 + 256);
    CHECK(wc[0].src_qp == a->qp_num);
    CHECK(std::memcmp(&dst.bytes[40], src.bytes.data(), 256) == 0);
    ibv_destroy_ah(ah);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
}

TEST_CASE("work-request builders we do not have are EOPNOTSUPP at creation") {
    for (uint64_t op : {uint64_t{IBV_QP_EX_WITH_TSO}, uint64_t{IBV_QP_EX_WITH_ATOMIC_WRITE}}) {
        ibv_qp_init_attr_ex init{};
        init.send_cq = dev(0).cq;
        init.recv_cq = dev(0).cq;
        init.qp_type = IBV_QPT_RC;
        init.cap = {4, 4, 1, 1, 0};
        init.pd = dev(0).pd;
        init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        init.send_ops_flags = IBV_QP_EX_WITH_SEND | op;
        errno = 0;
        CHECK(ibv_create_qp_ex(dev(0).context, &init) == nullptr);
        CHECK(errno == EOPNOTSUPP);
    }
    // A QP made without send_ops_flags has no work-request API.
    ibv_qp_init_attr init{};
    init.send_cq = dev(0).cq;
    init.recv_cq = dev(0).cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {4, 4, 1, 1, 0};
    ibv_qp* plain = ibv_create_qp(dev(0).pd, &init);
    REQUIRE(plain);
    CHECK(ibv_qp_to_qp_ex(plain) == nullptr);
    ibv_destroy_qp(plain);
}

namespace {

constexpr int kWindowMrAccess = kAllAccess | IBV_ACCESS_MW_BIND;

// Posts one signaled request and returns its completion on `d`'s CQ.
ibv_wc run_one(ibv_qp* qp, ibv_send_wr& wr, Device& d) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    post(qp, wr);
    return wait_completions(d, 1)[0];
}

ibv_wc rdma(ibv_qp* qp, ibv_wr_opcode opcode, Buffer& local, uint32_t length, uint32_t rkey,
            uint64_t remote_addr) {
    ibv_sge sge{local.addr(), length, local.mr->lkey};
    ibv_send_wr wr = signaled_wr(opcode, &sge);
    wr.wr.rdma.rkey = rkey;
    wr.wr.rdma.remote_addr = remote_addr;
    return run_one(qp, wr, dev(0));
}

// Binds type 2 window `mw` over [offset, offset + length) of `target` with `access`,
// posting on `qp` (of dev(1)); returns the new rkey.
uint32_t bind_type2(ibv_qp* qp, ibv_mw* mw, Buffer& target, size_t offset, size_t length,
                    unsigned access) {
    ibv_send_wr wr{};
    wr.wr_id = 77;
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = {target.mr, target.addr(offset), length, access};
    const ibv_wc wc = run_one(qp, wr, dev(1));
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.opcode == IBV_WC_BIND_MW);
    CHECK(wc.wr_id == 77);
    mw->rkey = wr.bind_mw.rkey;
    return mw->rkey;
}

} // namespace

TEST_CASE("a type 2 window bound, used remotely, invalidated by SEND_WITH_INV, then used again "
          "gets REM_ACCESS_ERR") {
    ExPair pair;
    Buffer target(dev(1), 64 * 1024, kWindowMrAccess), src(dev(0), 16 * 1024, kAllAccess);
    Buffer recv(dev(1), 4096, kAllAccess);
    ibv_mw* mw = ibv_alloc_mw(dev(1).pd, IBV_MW_TYPE_2);
    REQUIRE(mw);
    const uint32_t rkey = bind_type2(pair.b, mw, target, 8192, 16384,
                                     IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    // The MR under a bound window cannot go.
    CHECK(ibv_dereg_mr(target.mr) == EBUSY);

    fill(src, 21, 0, 16384);
    CHECK(rdma(pair.a, IBV_WR_RDMA_WRITE, src, 16384, rkey, target.addr(8192)).status ==
          IBV_WC_SUCCESS);
    CHECK(matches(target, 21, 8192, 16384));
    Buffer back(dev(0), 4096, kAllAccess);
    CHECK(rdma(pair.a, IBV_WR_RDMA_READ, back, 4096, rkey, target.addr(8192)).status ==
          IBV_WC_SUCCESS);
    CHECK(std::memcmp(back.bytes.data(), &target.bytes[8192], 4096) == 0);

    ibv_sge rsge{recv.addr(), 4096, recv.mr->lkey};
    post_recv(pair.b, 5, &rsge, 1);
    ibv_sge sge{src.addr(), 100, src.mr->lkey};
    ibv_send_wr inv = signaled_wr(IBV_WR_SEND_WITH_INV, &sge);
    inv.invalidate_rkey = rkey;
    CHECK(run_one(pair.a, inv, dev(0)).status == IBV_WC_SUCCESS);
    const ibv_wc got = wait_completions(dev(1), 1)[0];
    CHECK(got.status == IBV_WC_SUCCESS);
    CHECK(got.opcode == IBV_WC_RECV);
    CHECK((got.wc_flags & IBV_WC_WITH_INV));
    CHECK(got.invalidated_rkey == rkey);
    CHECK(got.byte_len == 100);

    // Invalidated: the window grants nothing, and its MR may go once it is freed.
    CHECK(rdma(pair.a, IBV_WR_RDMA_WRITE, src, 64, rkey, target.addr(8192)).status ==
          IBV_WC_REM_ACCESS_ERR);
    expect_async_event(dev(1), IBV_EVENT_QP_ACCESS_ERR, pair.b);
    CHECK(ibv_dealloc_mw(mw) == 0);
}

TEST_CASE("a type 2 window grants only its range and rights, on the QP it was bound on") {
    Buffer target(dev(1), 64 * 1024, kWindowMrAccess), src(dev(0), 8192, kAllAccess);
    ibv_mw* mw = ibv_alloc_mw(dev(1).pd, IBV_MW_TYPE_2);
    REQUIRE(mw);
    uint32_t rkey = 0;
    {
        ExPair pair;
        rkey = bind_type2(pair.b, mw, target, 4096, 4096, IBV_ACCESS_REMOTE_READ);
        SECTION("past its end") {
            Buffer back(dev(0), 8192, kAllAccess);
            CHECK(rdma(pair.a, IBV_WR_RDMA_READ, back, 4097, rkey, target.addr(4096)).status ==
                  IBV_WC_REM_ACCESS_ERR);
        }
        SECTION("a right it does not grant") {
            CHECK(rdma(pair.a, IBV_WR_RDMA_WRITE, src, 8, rkey, target.addr(4096)).status ==
                  IBV_WC_REM_ACCESS_ERR);
        }
        SECTION("from another QP") {
            ExPair other;
            CHECK(rdma(other.a, IBV_WR_RDMA_READ, src, 8, rkey, target.addr(4096)).status ==
                  IBV_WC_REM_ACCESS_ERR);
            expect_async_event(dev(1), IBV_EVENT_QP_ACCESS_ERR, other.b);
            // ... while on its own QP it still works.
            CHECK(rdma(pair.a, IBV_WR_RDMA_READ, src, 8, rkey, target.addr(4096)).status ==
                  IBV_WC_SUCCESS);
        }
        SECTION("after LOCAL_INV") {
            ibv_send_wr wr{};
            wr.opcode = IBV_WR_LOCAL_INV;
            wr.invalidate_rkey = rkey;
            const ibv_wc wc = run_one(pair.b, wr, dev(1));
            CHECK(wc.status == IBV_WC_SUCCESS);
            CHECK(wc.opcode == IBV_WC_LOCAL_INV);
            CHECK(rdma(pair.a, IBV_WR_RDMA_READ, src, 8, rkey, target.addr(4096)).status ==
                  IBV_WC_REM_ACCESS_ERR);
        }
    }
    // Drain the access error events the sections caused (at most one each).
    pollfd pfd{dev(1).context->async_fd, POLLIN, 0};
    while (poll(&pfd, 1, 200) == 1) {
        ibv_async_event event{};
        REQUIRE(ibv_get_async_event(dev(1).context, &event) == 0);
        CHECK(event.event_type == IBV_EVENT_QP_ACCESS_ERR);
        ibv_ack_async_event(&event);
    }
    CHECK(ibv_dealloc_mw(mw) == 0);
}

TEST_CASE("a type 1 window: ibv_bind_mw gives a new rkey each time and the old one stops "
          "working") {
    ExPair pair;
    Buffer target(dev(1), 16 * 1024, kWindowMrAccess), src(dev(0), 4096, kAllAccess);
    ibv_mw* mw = ibv_alloc_mw(dev(1).pd, IBV_MW_TYPE_1);
    REQUIRE(mw);
    const uint32_t unbound = mw->rkey;
    ibv_mw_bind bind{};
    bind.wr_id = 3;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_info = {target.mr, target.addr(0), 8192, IBV_ACCESS_REMOTE_WRITE};
    REQUIRE(ibv_bind_mw(pair.b, mw, &bind) == 0);
    const uint32_t first = mw->rkey;
    CHECK(first != unbound);
    CHECK((first >> 8) == (unbound >> 8));
    ibv_wc wc = wait_completions(dev(1), 1)[0];
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.opcode == IBV_WC_BIND_MW);
    fill(src, 31, 0, 4096);
    CHECK(rdma(pair.a, IBV_WR_RDMA_WRITE, src, 4096, first, target.addr(100)).status ==
          IBV_WC_SUCCESS);
    CHECK(matches(target, 31, 100, 4096));

    REQUIRE(ibv_bind_mw(pair.b, mw, &bind) == 0); // rebinding: a type 1 window may
    const uint32_t second = mw->rkey;
    CHECK(second != first);
    CHECK(wait_completions(dev(1), 1)[0].status == IBV_WC_SUCCESS);
    CHECK(rdma(pair.a, IBV_WR_RDMA_WRITE, src, 8, second, target.addr(0)).status == IBV_WC_SUCCESS);
    // Type 1 windows go through ibv_bind_mw, not ibv_post_send, and LOCAL_INV cannot
    // invalidate them.
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = bind.bind_info;
    ibv_send_wr* bad = nullptr;
    CHECK(ibv_post_send(pair.b, &wr, &bad) == EINVAL);
    CHECK(rdma(pair.a, IBV_WR_RDMA_WRITE, src, 8, first, target.addr(0)).status ==
          IBV_WC_REM_ACCESS_ERR);
    expect_async_event(dev(1), IBV_EVENT_QP_ACCESS_ERR, pair.b);
    CHECK(ibv_dealloc_mw(mw) == 0);
    CHECK(ibv_dereg_mr(target.mr) == 0); // dealloc unbound it
    target.mr = ibv_reg_mr(dev(1).pd, target.bytes.data(), target.bytes.size(), kAllAccess);
    REQUIRE(target.mr);
}

TEST_CASE("binding errors complete with MW_BIND_ERR and windows need MW_BIND on their MR") {
    ExPair pair;
    Buffer plain(dev(1), 8192, kAllAccess); // no IBV_ACCESS_MW_BIND
    Buffer readonly(dev(1), 8192, IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_READ);
    ibv_mw* mw = ibv_alloc_mw(dev(1).pd, IBV_MW_TYPE_2);
    REQUIRE(mw);
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    SECTION("an MR without MW_BIND") {
        wr.bind_mw.bind_info = {plain.mr, plain.addr(), 4096, IBV_ACCESS_REMOTE_READ};
    }
    SECTION("remote write on an MR without local write") {
        wr.bind_mw.bind_info = {readonly.mr, readonly.addr(), 4096, IBV_ACCESS_REMOTE_WRITE};
    }
    SECTION("a window past the MR") {
        wr.bind_mw.bind_info = {readonly.mr, readonly.addr(4096), 8192, IBV_ACCESS_REMOTE_READ};
    }
    SECTION("an rkey of another index") {
        wr.bind_mw.rkey = mw->rkey + 0x100;
        wr.bind_mw.bind_info = {readonly.mr, readonly.addr(), 4096, IBV_ACCESS_REMOTE_READ};
    }
    CHECK(run_one(pair.b, wr, dev(1)).status == IBV_WC_MW_BIND_ERR);
    CHECK(ibv_dealloc_mw(mw) == 0);
}

TEST_CASE("ibv_rereg_mr changes rights and translation and keeps the keys") {
    ExPair pair;
    Buffer src(dev(0), 4096, kAllAccess);
    std::vector<uint8_t> first(8192), second(8192);
    ibv_mr* mr = ibv_reg_mr(dev(1).pd, first.data(), first.size(), IBV_ACCESS_REMOTE_READ);
    REQUIRE(mr);
    const uint32_t lkey = mr->lkey, rkey = mr->rkey;
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0);
    fill(src, 41, 0, 512);
    CHECK(rdma(pair.a, IBV_WR_RDMA_WRITE, src, 512, rkey, reinterpret_cast<uintptr_t>(first.data()))
              .status == IBV_WC_SUCCESS);
    CHECK(std::memcmp(first.data(), src.bytes.data(), 512) == 0);

    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, second.data(), second.size(),
                       0) == 0);
    CHECK(mr->lkey == lkey);
    CHECK(mr->rkey == rkey);
    CHECK(mr->addr == second.data());
    CHECK(rdma(pair.a, IBV_WR_RDMA_WRITE, src, 512, rkey,
               reinterpret_cast<uintptr_t>(second.data()) + 100)
              .status == IBV_WC_SUCCESS);
    CHECK(std::memcmp(second.data() + 100, src.bytes.data(), 512) == 0);

    // Bad input: flags libibverbs refuses, and rights the kernel refuses.
    CHECK(ibv_rereg_mr(mr, 0x80, nullptr, nullptr, 0, 0) == IBV_REREG_MR_ERR_INPUT);
    errno = 0;
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                       IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_CMD);
    CHECK(errno == EINVAL); // remote write without local write
    // The old address range grants nothing now.
    CHECK(rdma(pair.a, IBV_WR_RDMA_WRITE, src, 8, rkey, reinterpret_cast<uintptr_t>(first.data()))
              .status == IBV_WC_REM_ACCESS_ERR);
    expect_async_event(dev(1), IBV_EVENT_QP_ACCESS_ERR, pair.b);
    CHECK(ibv_dereg_mr(mr) == 0);
}

TEST_CASE("ibv_query_qp reads back every attribute the QP was given") {
    ExPair pair; // connect() set these (verbs_fixture.hpp)
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    const int all = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY |
                    IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
                    IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                    IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
                    IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                    IBV_QP_DEST_QPN | IBV_QP_CAP;
    REQUIRE(ibv_query_qp(pair.a, &attr, all, &init) == 0);
    CHECK(attr.qp_state == IBV_QPS_RTS);
    CHECK(attr.cur_qp_state == IBV_QPS_RTS);
    CHECK(attr.path_mtu == IBV_MTU_1024);
    CHECK(attr.path_mig_state == IBV_MIG_MIGRATED);
    CHECK(attr.dest_qp_num == pair.b->qp_num);
    CHECK(attr.rq_psn == 0xfffff0);
    CHECK(attr.sq_psn == 0xfffff0);
    CHECK(attr.qp_access_flags ==
          (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
    CHECK(attr.pkey_index == 0);
    CHECK(attr.port_num == 1);
    CHECK(attr.max_rd_atomic == 4);
    CHECK(attr.max_dest_rd_atomic == 4);
    CHECK(attr.min_rnr_timer == 1);
    CHECK(attr.timeout == 14);
    CHECK(attr.retry_cnt == 7);
    CHECK(attr.rnr_retry == 7);
    CHECK(attr.sq_draining == 0);
    CHECK(attr.ah_attr.is_global == 1);
    CHECK(attr.ah_attr.port_num == 1);
    CHECK(attr.ah_attr.grh.hop_limit == 64);
    CHECK(std::memcmp(attr.ah_attr.grh.dgid.raw, dev(1).gid.raw, 16) == 0);
    CHECK(attr.cap.max_send_wr >= 64);
    CHECK(attr.cap.max_recv_wr >= 64);
    CHECK(attr.cap.max_send_sge >= 4);
    CHECK(attr.cap.max_recv_sge >= 4);
    CHECK(attr.cap.max_inline_data >= 128);
    CHECK(init.qp_type == IBV_QPT_RC);
    CHECK(init.send_cq == dev(0).cq);
    CHECK(init.recv_cq == dev(0).cq);
    CHECK(init.srq == nullptr);
    CHECK(init.sq_sig_all == 0);
    CHECK(init.cap.max_send_wr == attr.cap.max_send_wr);

    // SQD with the async notification asked for: both read back.
    ibv_qp_attr sqd{};
    sqd.qp_state = IBV_QPS_SQD;
    sqd.en_sqd_async_notify = 1;
    REQUIRE(ibv_modify_qp(pair.a, &sqd, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY) == 0);
    expect_async_event(dev(0), IBV_EVENT_SQ_DRAINED, pair.a);
    REQUIRE(ibv_query_qp(pair.a, &attr, all, &init) == 0);
    CHECK(attr.qp_state == IBV_QPS_SQD);
    CHECK(attr.en_sqd_async_notify == 1);
    CHECK(attr.sq_draining == 0); // drained

    // A QP on an SRQ has no receive queue of its own.
    ibv_srq_init_attr srq_init{};
    srq_init.attr = {32, 2, 0};
    ibv_srq* srq = ibv_create_srq(dev(0).pd, &srq_init);
    REQUIRE(srq);
    ibv_qp_init_attr on_srq{};
    on_srq.send_cq = dev(0).cq;
    on_srq.recv_cq = dev(0).cq;
    on_srq.srq = srq;
    on_srq.qp_type = IBV_QPT_RC;
    on_srq.cap = {4, 0, 1, 0, 0};
    ibv_qp* qp = ibv_create_qp(dev(0).pd, &on_srq);
    REQUIRE(qp);
    REQUIRE(ibv_query_qp(qp, &attr, IBV_QP_CAP, &init) == 0);
    CHECK(attr.cap.max_recv_wr == 0);
    CHECK(attr.cap.max_recv_sge == 0);
    CHECK(init.srq == srq);
    CHECK(attr.qp_state == IBV_QPS_RESET);
    ibv_destroy_qp(qp);

    ibv_srq_attr srq_attr{};
    REQUIRE(ibv_query_srq(srq, &srq_attr) == 0);
    CHECK(srq_attr.max_wr >= 32);
    CHECK(srq_attr.max_sge >= 2);
    CHECK(srq_attr.srq_limit == 0);
    srq_attr.srq_limit = 5;
    REQUIRE(ibv_modify_srq(srq, &srq_attr, IBV_SRQ_LIMIT) == 0);
    REQUIRE(ibv_query_srq(srq, &srq_attr) == 0);
    CHECK(srq_attr.srq_limit == 5);
    ibv_destroy_srq(srq);
}

TEST_CASE("windows and rereg keep PDs and QP types honest") {
    // A PD with a window, or with an MR moved into it by ibv_rereg_mr, is in use.
    ibv_pd* pd = ibv_alloc_pd(dev(1).context);
    REQUIRE(pd);
    ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    REQUIRE(mw);
    CHECK(ibv_dealloc_pd(pd) == EBUSY);
    CHECK(ibv_dealloc_mw(mw) == 0);
    std::vector<uint8_t> bytes(4096);
    ibv_mr* mr = ibv_reg_mr(dev(1).pd, bytes.data(), bytes.size(), IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(mr);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, nullptr, 0, 0) == 0);
    CHECK(mr->pd == pd);
    CHECK(ibv_dealloc_pd(pd) == EBUSY);
    CHECK(ibv_dereg_mr(mr) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);

    // SEND with Invalidate is RC and XRC only; UD binds and invalidates nothing.
    ibv_qp* uc = create_qp_on(dev(0), IBV_QPT_UC, {4, 4, 1, 1, 0});
    ibv_qp* ud = create_qp_on(dev(0), IBV_QPT_UD, {4, 4, 1, 1, 0});
    connect(uc, uc->qp_num, dev(0).gid);
    ud_ready(ud);
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND_WITH_INV;
    ibv_send_wr* bad = nullptr;
    CHECK(ibv_post_send(uc, &wr, &bad) == EINVAL);
    wr.opcode = IBV_WR_LOCAL_INV;
    CHECK(ibv_post_send(ud, &wr, &bad) == EINVAL);
    wr.opcode = IBV_WR_BIND_MW;
    CHECK(ibv_post_send(ud, &wr, &bad) == EINVAL);
    ibv_destroy_qp(uc);
    ibv_destroy_qp(ud);
}

TEST_CASE("a parent domain over a PD with a thread domain carries MRs, QPs, SRQs and extended "
          "CQs of that PD, and each goes in order") {
    Device& d = dev(0);
    ibv_td_init_attr td_attr{};
    td_attr.comp_mask = 1; // no such field
    errno = 0;
    CHECK(ibv_alloc_td(d.context, &td_attr) == nullptr);
    CHECK(errno == EINVAL);
    td_attr.comp_mask = 0;
    ibv_td* td = ibv_alloc_td(d.context, &td_attr);
    REQUIRE(td);
    ibv_pd* pd = ibv_alloc_pd(d.context);
    REQUIRE(pd);
    int pd_context = 7;
    ibv_parent_domain_init_attr attr{};
    attr.pd = pd;
    attr.td = td;
    attr.comp_mask =
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    attr.alloc = [](ibv_pd*, void*, size_t, size_t, uint64_t) -> void* {
        return IBV_ALLOCATOR_USE_DEFAULT;
    };
    attr.free = [](ibv_pd*, void*, void*, uint64_t) {};
    attr.pd_context = &pd_context;
    ibv_pd* parent = ibv_alloc_parent_domain(d.context, &attr);
    REQUIRE(parent);
    // Not over another parent domain; not with allocators missing.
    ibv_parent_domain_init_attr nested = attr;
    nested.pd = parent;
    errno = 0;
    CHECK(ibv_alloc_parent_domain(d.context, &nested) == nullptr);
    CHECK(errno == EINVAL);
    ibv_parent_domain_init_attr no_free = attr;
    no_free.free = nullptr;
    CHECK(ibv_alloc_parent_domain(d.context, &no_free) == nullptr);

    {
        // An MR of the parent domain serves a QP of the plain PD and the other way round:
        // both are the one PD.
        TestMemory src_bytes(4096, false), dst_bytes(4096, false);
        ibv_mr* src = ibv_reg_mr(parent, src_bytes.data(), 4096, kAllAccess);
        ibv_mr* dst = ibv_reg_mr(pd, dst_bytes.data(), 4096, kAllAccess);
        REQUIRE((src && dst));
        ibv_cq_init_attr_ex cq_attr{};
        cq_attr.cqe = 16;
        cq_attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
        cq_attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
        cq_attr.parent_domain = pd; // a plain PD is not a parent domain
        errno = 0;
        CHECK(ibv_create_cq_ex(d.context, &cq_attr) == nullptr);
        CHECK(errno == EINVAL);
        cq_attr.parent_domain = parent;
        ibv_cq_ex* cq_ex = ibv_create_cq_ex(d.context, &cq_attr);
        REQUIRE(cq_ex);
        ibv_cq* cq = ibv_cq_ex_to_cq(cq_ex);
        ibv_srq_init_attr srq_attr{};
        srq_attr.attr = {16, 1, 0};
        ibv_srq* srq = ibv_create_srq(parent, &srq_attr);
        REQUIRE(srq);
        ibv_qp_init_attr init{};
        init.send_cq = init.recv_cq = cq;
        init.srq = srq;
        init.qp_type = IBV_QPT_RC;
        init.cap = {16, 0, 1, 0, 0};
        ibv_qp* qp = ibv_create_qp(parent, &init);
        REQUIRE(qp);
        CHECK(qp->pd == parent);
        connect(qp, qp->qp_num, d.gid);
        // The PD is busy under its parent domain (and under its objects).
        CHECK(ibv_dealloc_pd(pd) == EBUSY);
        CHECK(ibv_dealloc_td(td) == EBUSY);

        for (uint32_t i = 0; i < 64; ++i)
            src_bytes.data()[i] = static_cast<uint8_t>(i * 3 + 1);
        ibv_sge rsge{reinterpret_cast<uintptr_t>(dst_bytes.data()), 64, dst->lkey};
        ibv_recv_wr rwr{};
        rwr.wr_id = 9;
        rwr.sg_list = &rsge;
        rwr.num_sge = 1;
        ibv_recv_wr* bad_rwr = nullptr;
        REQUIRE(ibv_post_srq_recv(srq, &rwr, &bad_rwr) == 0);
        ibv_sge sge{reinterpret_cast<uintptr_t>(src_bytes.data()), 64, src->lkey};
        ibv_send_wr wr = signaled_wr(IBV_WR_SEND, &sge, 1, 8);
        post(qp, wr);
        const auto wcs = wait_completions(cq, 2);
        for (const ibv_wc& wc : wcs) {
            CHECK(wc.status == IBV_WC_SUCCESS);
            CHECK((wc.wr_id == 8 || wc.wr_id == 9));
        }
        CHECK(std::memcmp(src_bytes.data(), dst_bytes.data(), 64) == 0);

        CHECK(ibv_destroy_qp(qp) == 0);
        CHECK(ibv_destroy_srq(srq) == 0);
        CHECK(ibv_destroy_cq(cq) == 0);
        CHECK(ibv_dereg_mr(src) == 0);
        CHECK(ibv_dereg_mr(dst) == 0);
    }
    // The parent domain goes first; then its thread domain and its PD.
    CHECK(ibv_dealloc_pd(parent) == 0);
    CHECK(ibv_dealloc_td(td) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
}

namespace {
// An address range with nothing mapped at it (reserved, then given back).
uint8_t* unmapped_range(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    REQUIRE(munmap(p, bytes) == 0);
    return static_cast<uint8_t*>(p);
}

ibv_send_wr rdma_wr(ibv_wr_opcode opcode, ibv_sge* sge, uint64_t id, uint64_t remote,
                    uint32_t rkey) {
    ibv_send_wr wr = signaled_wr(opcode, sge, 1, id);
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    return wr;
}
} // namespace

TEST_CASE("on-demand paging: an MR over pages mapped only later, the implicit MR of the whole "
          "address space, prefetch, and what an access to never-mapped memory gives") {
    Device& d = dev(0);
    ibv_device_attr_ex attr{};
    REQUIRE(ibv_query_device_ex(d.context, nullptr, &attr) == 0);
    CHECK((attr.odp_caps.general_caps & IBV_ODP_SUPPORT));
    CHECK((attr.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT));
    const uint32_t rc_ops = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                            IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                            IBV_ODP_SUPPORT_SRQ_RECV;
    CHECK(attr.odp_caps.per_transport_caps.rc_odp_caps == rc_ops);

    constexpr size_t kBytes = 1 << 20;
    constexpr int kOdp = kAllAccess | IBV_ACCESS_ON_DEMAND;
    uint8_t* later = unmapped_range(kBytes);
    // Without ODP the hole cannot be registered; with it, it can.
    errno = 0;
    CHECK(ibv_reg_mr(d.pd, later, kBytes, kAllAccess) == nullptr);
    CHECK(errno == EFAULT);
    ibv_mr* odp = ibv_reg_mr(d.pd, later, kBytes, kOdp);
    REQUIRE(odp);
    ibv_mr* implicit = ibv_reg_mr(d.pd, nullptr, SIZE_MAX, kOdp);
    REQUIRE(implicit);
    Buffer plain(d, 4096, kAllAccess, false);

    // Prefetch: only for ODP regions, inside them; with FLUSH a range not mapped fails.
    ibv_sge advise{reinterpret_cast<uintptr_t>(later), 4096, odp->lkey};
    CHECK(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
                        &advise, 1) == EFAULT);
    CHECK(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &advise, 1) == 0); // a hint
    ibv_sge not_odp{plain.addr(), 64, plain.mr->lkey};
    CHECK(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &not_odp, 1) == EINVAL);
    ibv_sge outside{reinterpret_cast<uintptr_t>(later) + kBytes - 8, 64, odp->lkey};
    CHECK(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &outside, 1) == EFAULT);

    // Map the pages now, after registration: the MR reaches them.
    REQUIRE(mmap(later, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                 0) == later);
    CHECK(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
                        &advise, 1) == 0);
    std::vector<uint8_t> heap(8192);
    for (size_t i = 0; i < 4096; ++i)
        heap[i] = static_cast<uint8_t>(i * 7 + 3);
    ibv_qp* qp = create_qp_on(d, IBV_QPT_RC, {16, 16, 1, 1, 0});
    connect(qp, qp->qp_num, d.gid);
    // WRITE from the heap through the implicit lkey into the late-mapped pages...
    ibv_sge from_heap{reinterpret_cast<uintptr_t>(heap.data()), 4096, implicit->lkey};
    ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, &from_heap, 1,
                             reinterpret_cast<uintptr_t>(later) + 65536, odp->rkey);
    post(qp, wr);
    // ... and READ them back into the heap through the implicit rkey's memory.
    ibv_sge into_heap{reinterpret_cast<uintptr_t>(heap.data()) + 4096, 4096, implicit->lkey};
    wr = rdma_wr(IBV_WR_RDMA_READ, &into_heap, 2, reinterpret_cast<uintptr_t>(later) + 65536,
                 odp->rkey);
    post(qp, wr);
    for (const ibv_wc& wc : wait_completions(d, 2))
        CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(std::memcmp(later + 65536, heap.data(), 4096) == 0);
    CHECK(std::memcmp(heap.data() + 4096, heap.data(), 4096) == 0);

    // Memory that is never mapped, under the implicit MR: the local read fails the
    // request; a remote write into it is refused by the responder.
    uint8_t* never = unmapped_range(65536);
    ibv_sge from_nothing{reinterpret_cast<uintptr_t>(never), 64, implicit->lkey};
    wr =
        rdma_wr(IBV_WR_RDMA_WRITE, &from_nothing, 3, reinterpret_cast<uintptr_t>(later), odp->rkey);
    post(qp, wr);
    auto wcs = wait_completions(d, 1);
    CHECK(wcs[0].wr_id == 3);
    CHECK(wcs[0].status == IBV_WC_LOC_PROT_ERR);
    ibv_destroy_qp(qp);

    // (Two QPs: a QP connected to itself would flush its own request when its
    // responder fails.)
    qp = create_qp_on(d, IBV_QPT_RC, {16, 16, 1, 1, 0});
    ibv_qp* responder = create_qp_on(d, IBV_QPT_RC, {16, 16, 1, 1, 0});
    connect(qp, responder->qp_num, d.gid);
    connect(responder, qp->qp_num, d.gid);
    // A hole found after the QPs were made: their rings (mapped here) could have filled
    // the one above.
    never = unmapped_range(65536);
    wr = rdma_wr(IBV_WR_RDMA_WRITE, &from_heap, 4, reinterpret_cast<uintptr_t>(never),
                 implicit->rkey);
    post(qp, wr);
    wcs = wait_completions(d, 1);
    CHECK(wcs[0].wr_id == 4);
    CHECK(fatal_nak_status(wcs[0].status, IBV_WC_REM_OP_ERR));
    ibv_destroy_qp(qp);
    ibv_destroy_qp(responder);
    // Drain what the QPs' errors flushed (nothing else was posted).
    ibv_wc wc;
    while (ibv_poll_cq(d.cq, 1, &wc) > 0) {
    }

    CHECK(ibv_dereg_mr(odp) == 0);
    CHECK(ibv_dereg_mr(implicit) == 0);
    munmap(later, kBytes);
}

TEST_CASE("device memory: allocated from the device's pool, copied to and from 4-byte aligned, "
          "registered zero-based and reached by RDMA like any MR") {
    Device& d = dev(0);
    ibv_device_attr_ex attr{};
    REQUIRE(ibv_query_device_ex(d.context, nullptr, &attr) == 0);
    REQUIRE(attr.max_dm_size >= 65536);
    ibv_alloc_dm_attr dm_attr{};
    dm_attr.length = attr.max_dm_size + 1;
    errno = 0;
    CHECK(ibv_alloc_dm(d.context, &dm_attr) == nullptr);
    CHECK(errno == EINVAL);
    dm_attr.length = 4096;
    dm_attr.comp_mask = 1;
    CHECK(ibv_alloc_dm(d.context, &dm_attr) == nullptr);
    dm_attr.comp_mask = 0;
    // A user's share of the pool (max_dm_size, the default --limits user_dm_kb): all of it
    // once, then nothing more until it is freed.
    dm_attr.length = attr.max_dm_size;
    ibv_dm* all = ibv_alloc_dm(d.context, &dm_attr);
    REQUIRE(all);
    dm_attr.length = 64;
    errno = 0;
    CHECK(ibv_alloc_dm(d.context, &dm_attr) == nullptr);
    CHECK(errno == ENOMEM);
    CHECK(ibv_free_dm(all) == 0);

    dm_attr.length = 8192;
    dm_attr.log_align_req = 6;
    ibv_dm* dm = ibv_alloc_dm(d.context, &dm_attr);
    REQUIRE(dm);
    std::vector<uint8_t> bytes(8192), back(8192);
    for (size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = static_cast<uint8_t>(i * 13 + 5);
    CHECK(ibv_memcpy_to_dm(dm, 0, bytes.data(), 8192) == 0);
    CHECK(ibv_memcpy_from_dm(back.data(), dm, 4096, 4096) == 0);
    CHECK(std::memcmp(back.data(), bytes.data() + 4096, 4096) == 0);
    CHECK(ibv_memcpy_to_dm(dm, 2, bytes.data(), 8) != 0);     // unaligned offset
    CHECK(ibv_memcpy_to_dm(dm, 0, bytes.data(), 6) != 0);     // unaligned length
    CHECK(ibv_memcpy_from_dm(back.data(), dm, 8188, 8) != 0); // past the end

    // Zero-based only, inside the memory.
    errno = 0;
    CHECK(ibv_reg_dm_mr(d.pd, dm, 0, 4096, IBV_ACCESS_LOCAL_WRITE) == nullptr);
    CHECK(errno == EINVAL);
    constexpr unsigned kDmAccess = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE |
                                   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    CHECK(ibv_reg_dm_mr(d.pd, dm, 4096, 8192, kDmAccess) == nullptr);
    ibv_mr* dm_mr = ibv_reg_dm_mr(d.pd, dm, 4096, 4096, kDmAccess); // the second half
    REQUIRE(dm_mr);
    CHECK(ibv_free_dm(dm) == EBUSY);

    // RDMA WRITE from the heap into the DM MR at zero-based offset 256, READ it back.
    Buffer heap(d, 8192, kAllAccess, false);
    fill(heap, 41, 0, 1024);
    ibv_qp* qp = create_qp_on(d, IBV_QPT_RC, {16, 16, 1, 1, 0});
    connect(qp, qp->qp_num, d.gid);
    ibv_sge from{heap.addr(), 1024, heap.mr->lkey};
    ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, &from, 1, 256, dm_mr->rkey);
    post(qp, wr);
    ibv_sge into{heap.addr(4096), 1024, heap.mr->lkey};
    wr = rdma_wr(IBV_WR_RDMA_READ, &into, 2, 256, dm_mr->rkey);
    post(qp, wr);
    // And a SEND out of the DM MR's own bytes (its lkey, zero-based) into the heap.
    ibv_sge recv_sge{heap.addr(6144), 512, heap.mr->lkey};
    post_recv(qp, 3, &recv_sge, 1);
    ibv_sge dm_sge{0, 512, dm_mr->lkey};
    wr = signaled_wr(IBV_WR_SEND, &dm_sge, 1, 4);
    post(qp, wr);
    for (const ibv_wc& wc : wait_completions(d, 4))
        CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(matches(heap, 41, 4096, 1024)); // read back what was written
    CHECK(ibv_memcpy_from_dm(back.data(), dm, 4096 + 256, 1024) == 0);
    CHECK(std::memcmp(back.data(), heap.bytes.data(), 1024) == 0);
    CHECK(std::memcmp(heap.bytes.data() + 6144, bytes.data() + 4096, 256) == 0);
    ibv_destroy_qp(qp);

    CHECK(ibv_dereg_mr(dm_mr) == 0);
    CHECK(ibv_free_dm(dm) == 0);
}
