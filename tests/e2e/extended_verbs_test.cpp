// The extended verbs through the system libibverbs: the ibv_qp_ex work-request API
// (ibv_wr_*), memory windows, ibv_rereg_mr and the complete ibv_query_qp/ibv_query_srq.
#define CATCH_CONFIG_MAIN
#include "verbs_fixture.hpp"

#include <algorithm>
#include <arpa/inet.h>
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
