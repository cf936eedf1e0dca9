// Completion channels, the extended CQ and resizing, through the system libibverbs: run under
// `softhca exec`, whose interposer (kernel_shim/preload) makes ibv_create_comp_channel
// work. Events come from the engine while nobody polls.
#define CATCH_CONFIG_MAIN
#include "verbs_fixture.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <ctime>
#include <fcntl.h>
#include <sys/epoll.h>
#include <thread>

namespace {

// An RC pair whose CQs the test chooses (one per side, send and receive together).
struct ChannelPair {
    ibv_qp* a = nullptr;
    ibv_qp* b = nullptr;
    ChannelPair(ibv_cq* cq_a, ibv_cq* cq_b) {
        a = make(dev(0), cq_a);
        b = make(dev(1), cq_b);
        connect(a, b->qp_num, dev(1).gid);
        connect(b, a->qp_num, dev(0).gid);
    }
    ~ChannelPair() {
        ibv_destroy_qp(a);
        ibv_destroy_qp(b);
    }
    static ibv_qp* make(Device& d, ibv_cq* cq) {
        return create_qp_on(d, IBV_QPT_RC, {64, 64, 2, 2, 64}, cq);
    }
};

// A channel with one CQ on it, both destroyed at the end.
struct ChannelCq {
    ibv_comp_channel* channel = nullptr;
    ibv_cq* cq = nullptr;
    ChannelCq(Device& d, int cqe, void* cq_context = nullptr) {
        channel = ibv_create_comp_channel(d.context);
        REQUIRE(channel);
        cq = ibv_create_cq(d.context, cqe, cq_context, channel, 0);
        REQUIRE(cq);
    }
    ~ChannelCq() {
        ibv_destroy_cq(cq);
        ibv_destroy_comp_channel(channel);
    }
};

bool readable(int fd, int timeout_ms) {
    pollfd pfd{fd, POLLIN, 0};
    return poll(&pfd, 1, timeout_ms) == 1 && (pfd.revents & POLLIN);
}

// Waits (bounded) for the channel's next event, acknowledges it and returns its CQ (and
// the CQ's context in *cq_context).
ibv_cq* next_event(ibv_comp_channel* channel, void** cq_context = nullptr) {
    REQUIRE(readable(channel->fd, 5000));
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    REQUIRE(ibv_get_cq_event(channel, &cq, &context) == 0);
    ibv_ack_cq_events(cq, 1);
    if (cq_context)
        *cq_context = context;
    return cq;
}

// A QP of `d` connected to itself, completing into `cq`.
ibv_qp* self_connected(Device& d, ibv_cq* cq) {
    ibv_qp* qp = ChannelPair::make(d, cq);
    connect(qp, qp->qp_num, d.gid);
    return qp;
}

// A signaled 8-byte RDMA WRITE within `buf`, by a QP connected to itself.
void write_within(ibv_qp* qp, Buffer& buf, uint64_t id = 0) {
    ibv_sge sge{buf.addr(), 8, buf.mr->lkey};
    ibv_send_wr wr = signaled_wr(IBV_WR_RDMA_WRITE, &sge, 1, id);
    wr.wr.rdma.remote_addr = buf.addr(64);
    wr.wr.rdma.rkey = buf.mr->rkey;
    post(qp, wr);
}

void send_message(ibv_qp* qp, Buffer& buf, uint32_t length, unsigned flags, uint64_t id) {
    ibv_sge sge{buf.addr(), length, buf.mr->lkey};
    ibv_send_wr wr = signaled_wr(IBV_WR_SEND, &sge, 1, id);
    wr.send_flags |= flags;
    post(qp, wr);
}

} // namespace

TEST_CASE("a thread blocked in epoll on a completion channel wakes on a completion") {
    int marker = 0;
    ChannelCq events(dev(1), 16, &marker);
    ChannelPair pair(dev(0).cq, events.cq);
    Buffer src(dev(0), 4096, kAllAccess), dst(dev(1), 4096, kAllAccess);
    ibv_sge rsge{dst.addr(), 4096, dst.mr->lkey};
    post_recv(pair.b, 7, &rsge, 1);
    REQUIRE(ibv_req_notify_cq(events.cq, 0) == 0);

    const int ep = epoll_create1(EPOLL_CLOEXEC);
    REQUIRE(ep >= 0);
    epoll_event ev{};
    ev.events = EPOLLIN;
    REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, events.channel->fd, &ev) == 0);
    std::atomic<int> woke{-1};
    std::thread waiter([&] { woke = epoll_wait(ep, &ev, 1, 20000); });
    // The waiter sleeps: nothing has completed yet.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(woke.load() == -1);
    fill(src, 3, 0, 1000);
    send_message(pair.a, src, 1000, 0, 1);
    waiter.join();
    close(ep);
    REQUIRE(woke.load() == 1);

    void* context = nullptr;
    CHECK(next_event(events.channel, &context) == events.cq);
    CHECK(context == &marker);
    const auto wc = wait_completions(events.cq, 1);
    CHECK(wc[0].status == IBV_WC_SUCCESS);
    CHECK(wc[0].wr_id == 7);
    CHECK(wc[0].byte_len == 1000);
    CHECK(matches(dst, 3, 0, 1000));
    wait_completions(dev(0), 1);
}

TEST_CASE("one arm gives one event and a non-blocking channel says EAGAIN when empty") {
    ChannelCq events(dev(1), 16);
    ChannelPair pair(dev(0).cq, events.cq);
    Buffer src(dev(0), 256, kAllAccess), dst(dev(1), 4096, kAllAccess);
    const int flags = fcntl(events.channel->fd, F_GETFL);
    REQUIRE(fcntl(events.channel->fd, F_SETFL, flags | O_NONBLOCK) == 0);
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    errno = 0;
    CHECK(ibv_get_cq_event(events.channel, &cq, &context) == -1);
    CHECK(errno == EAGAIN);

    for (int i = 0; i < 3; ++i) {
        ibv_sge rsge{dst.addr(i * 1024), 1024, dst.mr->lkey};
        post_recv(pair.b, i, &rsge, 1);
    }
    // Not armed: a completion raises nothing.
    send_message(pair.a, src, 64, 0, 10);
    wait_completions(events.cq, 1);
    CHECK_FALSE(readable(events.channel->fd, 100));
    // Armed once, two completions: one event.
    REQUIRE(ibv_req_notify_cq(events.cq, 0) == 0);
    send_message(pair.a, src, 64, 0, 11);
    send_message(pair.a, src, 64, 0, 12);
    wait_completions(events.cq, 2);
    CHECK(next_event(events.channel) == events.cq);
    CHECK_FALSE(readable(events.channel->fd, 100));
    wait_completions(dev(0), 3);
}

TEST_CASE("a solicited-only arm ignores unsolicited completions and wakes on a solicited one") {
    ChannelCq events(dev(1), 16);
    ChannelPair pair(dev(0).cq, events.cq);
    Buffer src(dev(0), 256, kAllAccess), dst(dev(1), 4096, kAllAccess);
    for (int i = 0; i < 2; ++i) {
        ibv_sge rsge{dst.addr(i * 1024), 1024, dst.mr->lkey};
        post_recv(pair.b, i, &rsge, 1);
    }
    REQUIRE(ibv_req_notify_cq(events.cq, 1) == 0);
    send_message(pair.a, src, 100, 0, 20);
    const auto first = wait_completions(events.cq, 1);
    CHECK(first[0].status == IBV_WC_SUCCESS);
    CHECK_FALSE(readable(events.channel->fd, 200));

    send_message(pair.a, src, 100, IBV_SEND_SOLICITED, 21);
    CHECK(next_event(events.channel) == events.cq);
    const auto second = wait_completions(events.cq, 1);
    CHECK(second[0].wr_id == 1);
    wait_completions(dev(0), 2);
}

TEST_CASE("several CQs share a channel and each event names its CQ") {
    Device& d = dev(0);
    ibv_comp_channel* channel = ibv_create_comp_channel(d.context);
    REQUIRE(channel);
    ibv_cq* first = ibv_create_cq(d.context, 8, nullptr, channel, 0);
    ibv_cq* second = ibv_create_cq(d.context, 8, nullptr, channel, 0);
    REQUIRE((first && second));
    // A channel in use cannot go (libibverbs counts the CQs on it).
    CHECK(ibv_destroy_comp_channel(channel) == EBUSY);
    ibv_qp* qp1 = self_connected(d, first);
    ibv_qp* qp2 = self_connected(d, second);
    REQUIRE(ibv_req_notify_cq(first, 0) == 0);
    REQUIRE(ibv_req_notify_cq(second, 0) == 0);
    Buffer buf(d, 4096, kAllAccess);
    for (ibv_qp* qp : {qp2, qp1})
        write_within(qp, buf, qp->qp_num);
    std::vector<ibv_cq*> seen;
    for (int i = 0; i < 2; ++i)
        seen.push_back(next_event(channel));
    CHECK(((seen[0] == first && seen[1] == second) || (seen[0] == second && seen[1] == first)));
    CHECK(wait_completions(first, 1)[0].wr_id == qp1->qp_num);
    CHECK(wait_completions(second, 1)[0].wr_id == qp2->qp_num);
    ibv_destroy_qp(qp1);
    ibv_destroy_qp(qp2);
    REQUIRE(ibv_destroy_cq(first) == 0);
    REQUIRE(ibv_destroy_cq(second) == 0);
    CHECK(ibv_destroy_comp_channel(channel) == 0);
}

TEST_CASE("an error completion wakes a solicited-only arm") {
    ChannelCq events(dev(0), 16);
    ChannelPair pair(events.cq, dev(1).cq);
    Buffer src(dev(0), 256, kAllAccess);
    REQUIRE(ibv_req_notify_cq(events.cq, 1) == 0);
    // An RDMA WRITE with a wrong rkey: REM_ACCESS_ERR on the requester's CQ.
    ibv_sge sge{src.addr(), 8, src.mr->lkey};
    ibv_send_wr wr = signaled_wr(IBV_WR_RDMA_WRITE, &sge, 1, 30);
    wr.wr.rdma.remote_addr = 0x1000;
    wr.wr.rdma.rkey = 0xdead;
    post(pair.a, wr);
    CHECK(next_event(events.channel) == events.cq);
    CHECK(wait_completions(events.cq, 1)[0].status == IBV_WC_REM_ACCESS_ERR);
    expect_async_event(dev(1), IBV_EVENT_QP_ACCESS_ERR, pair.b);
}

TEST_CASE("a CQ cannot be resized below the completions of sends posted just before") {
    // 11.2.7.3: a resize smaller than the entries on the CQ fails. The sends' completions
    // count although the engine may still have been reading this context's previous
    // request (the resize to 7) when they were posted: rdma-core's test_resize_cq.
    Device& d = dev(0);
    ibv_cq* cq = ibv_create_cq(d.context, 7, nullptr, nullptr, 0);
    REQUIRE(cq);
    ibv_qp* qp = create_qp_on(d, IBV_QPT_UD, {8, 1, 1, 1, 64}, cq);
    ud_ready(qp);
    ibv_ah* ah = make_ah(d, dev(1).gid);
    char byte = 'x';
    ibv_sge sge{reinterpret_cast<uintptr_t>(&byte), 1, 0};
    for (int round = 0; round < 200; ++round) {
        REQUIRE(ibv_resize_cq(cq, 7) == 0);
        REQUIRE(cq->cqe >= 7);
        for (int i = 0; i < 6; ++i) {
            ibv_send_wr wr = signaled_wr(IBV_WR_SEND, &sge, 1, i);
            wr.send_flags |= IBV_SEND_INLINE;
            wr.wr.ud.ah = ah;
            wr.wr.ud.remote_qpn = 0xabcd; // no such QP: the receiver drops it
            wr.wr.ud.remote_qkey = kQkey;
            post(qp, wr);
        }
        INFO("round " << round);
        REQUIRE(ibv_resize_cq(cq, 1) == EINVAL);
        for (const ibv_wc& wc : wait_completions(cq, 6, 5))
            REQUIRE(wc.status == IBV_WC_SUCCESS);
    }
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_ah(ah) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
}

TEST_CASE("a CQ polled with both ibv_poll_cq and the ibv_start_poll family gives the same "
          "completions and lands the same data") {
    // Receives of up to 64 bytes into private memory are copied into place by whichever
    // poll returns their completion (they travel in the CQE): both ways are checked.
    Device& d = dev(1);
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 64;
    attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                    IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_SLID |
                    IBV_WC_EX_WITH_DLID_PATH_BITS;
    ibv_cq_ex* cq_ex = ibv_create_cq_ex(d.context, &attr);
    REQUIRE(cq_ex);
    ibv_cq* cq = ibv_cq_ex_to_cq(cq_ex);
    ibv_poll_cq_attr poll_attr{};
    CHECK(ibv_start_poll(cq_ex, &poll_attr) == ENOENT); // empty (no end_poll after ENOENT)
    {
        ChannelPair pair(dev(0).cq, cq);
        Buffer src(dev(0), 4096, kAllAccess), dst(d, 64 * 1024, kAllAccess);
        constexpr int kMessages = 40;
        fill(src, 17, 0, 4096);
        for (int i = 0; i < kMessages; ++i) {
            ibv_sge rsge{dst.addr(i * 1024), 1024, dst.mr->lkey};
            post_recv(pair.b, 100 + i, &rsge, 1);
        }
        for (int i = 0; i < kMessages; ++i) {
            ibv_sge sge{src.addr(), static_cast<uint32_t>(i * 10 + 1), src.mr->lkey};
            ibv_send_wr wr = signaled_wr(i % 2 ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM, &sge, 1, i);
            wr.imm_data = htonl(0x1000 + i);
            post(pair.a, wr);
        }
        wait_completions(dev(0), kMessages);
        // Alternate: five by the extended API, five by ibv_poll_cq, ...
        std::vector<ibv_wc> got;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (got.size() < kMessages && std::chrono::steady_clock::now() < deadline) {
            if ((got.size() / 5) % 2 == 0) {
                if (ibv_start_poll(cq_ex, &poll_attr) != 0)
                    continue;
                int taken = 0;
                do {
                    ibv_wc wc{};
                    wc.wr_id = cq_ex->wr_id;
                    wc.status = cq_ex->status;
                    wc.opcode = ibv_wc_read_opcode(cq_ex);
                    wc.byte_len = ibv_wc_read_byte_len(cq_ex);
                    wc.wc_flags = ibv_wc_read_wc_flags(cq_ex);
                    wc.imm_data = ibv_wc_read_imm_data(cq_ex);
                    wc.qp_num = ibv_wc_read_qp_num(cq_ex);
                    wc.src_qp = ibv_wc_read_src_qp(cq_ex);
                    wc.sl = ibv_wc_read_sl(cq_ex);
                    wc.slid = ibv_wc_read_slid(cq_ex);
                    wc.dlid_path_bits = ibv_wc_read_dlid_path_bits(cq_ex);
                    got.push_back(wc);
                } while (++taken < 5 && ibv_next_poll(cq_ex) == 0);
                ibv_end_poll(cq_ex);
            } else {
                ibv_wc wc[5];
                const int n = ibv_poll_cq(cq, 5, wc);
                REQUIRE(n >= 0);
                got.insert(got.end(), wc, wc + n);
            }
        }
        REQUIRE(got.size() == kMessages);
        for (int i = 0; i < kMessages; ++i) {
            INFO("message " << i);
            CHECK(got[i].wr_id == static_cast<uint64_t>(100 + i));
            CHECK(got[i].status == IBV_WC_SUCCESS);
            CHECK(got[i].opcode == IBV_WC_RECV);
            CHECK(got[i].byte_len == static_cast<uint32_t>(i * 10 + 1));
            CHECK(matches(dst, 17, i * 1024, i * 10 + 1));
            CHECK(got[i].qp_num == pair.b->qp_num);
            CHECK(got[i].src_qp == pair.a->qp_num);
            if (i % 2 == 0) {
                CHECK((got[i].wc_flags & IBV_WC_WITH_IMM));
                CHECK(ntohl(got[i].imm_data) == static_cast<uint32_t>(0x1000 + i));
            } else {
                CHECK_FALSE((got[i].wc_flags & IBV_WC_WITH_IMM));
            }
        }
        // Nothing left, either way.
        ibv_wc wc;
        CHECK(ibv_poll_cq(cq, 1, &wc) == 0);
        CHECK(ibv_start_poll(cq_ex, &poll_attr) == ENOENT);
    }
    CHECK(ibv_destroy_cq(cq) == 0);
}

TEST_CASE("extended CQ fields we cannot report are EOPNOTSUPP") {
    for (uint64_t flag : {uint64_t{IBV_WC_EX_WITH_CVLAN}, uint64_t{IBV_WC_EX_WITH_FLOW_TAG},
                          uint64_t{IBV_WC_EX_WITH_TM_INFO}}) {
        ibv_cq_init_attr_ex attr{};
        attr.cqe = 8;
        attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | flag;
        errno = 0;
        CHECK(ibv_create_cq_ex(dev(0).context, &attr) == nullptr);
        CHECK(errno == EOPNOTSUPP);
    }
}

namespace {
uint64_t clock_ns(clockid_t clock) {
    timespec ts{};
    clock_gettime(clock, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}
} // namespace

TEST_CASE("completions carry their time on the card's clock, which hca_core_clock and "
          "ibv_query_rt_values_ex describe; the wall-clock form is real time") {
    Device& d = dev(0);
    ibv_device_attr_ex attr{};
    REQUIRE(ibv_query_device_ex(d.context, nullptr, &attr) == 0);
    CHECK(attr.hca_core_clock == 1'000'000); // kHz: one tick per nanosecond
    CHECK(attr.completion_timestamp_mask == UINT64_MAX);

    // The raw clock is CLOCK_MONOTONIC: read between two reads of it.
    ibv_values_ex values{};
    values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
    const uint64_t clock_before = clock_ns(CLOCK_MONOTONIC);
    REQUIRE(ibv_query_rt_values_ex(d.context, &values) == 0);
    const uint64_t clock_after = clock_ns(CLOCK_MONOTONIC);
    CHECK(values.comp_mask == IBV_VALUES_MASK_RAW_CLOCK);
    const uint64_t raw = static_cast<uint64_t>(values.raw_clock.tv_sec) * 1'000'000'000ull +
                         static_cast<uint64_t>(values.raw_clock.tv_nsec);
    CHECK(raw >= clock_before);
    CHECK(raw <= clock_after);

    ibv_cq_init_attr_ex cq_attr{};
    cq_attr.cqe = 16;
    cq_attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
    ibv_cq_ex* cq_ex = ibv_create_cq_ex(d.context, &cq_attr);
    REQUIRE(cq_ex);
    {
        ibv_qp* qp = self_connected(d, ibv_cq_ex_to_cq(cq_ex));
        Buffer buf(d, 4096, kAllAccess);
        std::vector<uint64_t> stamps;
        for (uint64_t id = 1; id <= 3; ++id) {
            const uint64_t mono_before = clock_ns(CLOCK_MONOTONIC);
            const uint64_t real_before = clock_ns(CLOCK_REALTIME);
            write_within(qp, buf, id);
            ibv_poll_cq_attr poll_attr{};
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            int rc = ENOENT;
            while ((rc = ibv_start_poll(cq_ex, &poll_attr)) == ENOENT &&
                   std::chrono::steady_clock::now() < deadline) {
            }
            REQUIRE(rc == 0);
            CHECK(cq_ex->wr_id == id);
            CHECK(cq_ex->status == IBV_WC_SUCCESS);
            const uint64_t stamp = ibv_wc_read_completion_ts(cq_ex);
            const uint64_t wall = ibv_wc_read_completion_wallclock_ns(cq_ex);
            ibv_end_poll(cq_ex);
            const uint64_t mono_after = clock_ns(CLOCK_MONOTONIC);
            const uint64_t real_after = clock_ns(CLOCK_REALTIME);
            // Made after the post and before the poll returned it.
            CHECK(stamp >= mono_before);
            CHECK(stamp <= mono_after);
            // The same instant in real time (the two clocks are read apart: 1 ms slack).
            CHECK(wall + 1'000'000 >= real_before);
            CHECK(wall <= real_after + 1'000'000);
            stamps.push_back(stamp);
        }
        CHECK(stamps[0] < stamps[1]);
        CHECK(stamps[1] < stamps[2]);
        ibv_destroy_qp(qp);
    }
    CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq_ex)) == 0);
}

TEST_CASE("destroying a CQ takes its unread events out of a shared channel") {
    Device& d = dev(0);
    ibv_comp_channel* channel = ibv_create_comp_channel(d.context);
    REQUIRE(channel);
    ibv_cq* doomed = ibv_create_cq(d.context, 8, nullptr, channel, 0);
    ibv_cq* kept = ibv_create_cq(d.context, 8, nullptr, channel, 0);
    REQUIRE((doomed && kept));
    Buffer buf(d, 4096, kAllAccess);
    auto write_once = [&](ibv_cq* cq) {
        ibv_qp* qp = self_connected(d, cq);
        REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
        write_within(qp, buf);
        wait_completions(cq, 1);
        ibv_destroy_qp(qp);
    };
    write_once(doomed); // its event waits in the channel, unread
    REQUIRE(readable(channel->fd, 5000));
    REQUIRE(ibv_destroy_cq(doomed) == 0);
    CHECK_FALSE(readable(channel->fd, 100)); // gone with its CQ
    write_once(kept);
    CHECK(next_event(channel) == kept);
    CHECK_FALSE(readable(channel->fd, 100));
    REQUIRE(ibv_destroy_cq(kept) == 0);
    CHECK(ibv_destroy_comp_channel(channel) == 0);
}

TEST_CASE("ibv_destroy_cq waits until the events it delivered are acknowledged") {
    Device& d = dev(0);
    ibv_comp_channel* channel = ibv_create_comp_channel(d.context);
    REQUIRE(channel);
    ibv_cq* cq = ibv_create_cq(d.context, 8, nullptr, channel, 0);
    REQUIRE(cq);
    REQUIRE(ibv_resize_cq(cq, 32) == 0); // the count survives a resize
    ibv_qp* qp = self_connected(d, cq);
    REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
    Buffer buf(d, 4096, kAllAccess);
    write_within(qp, buf);
    ibv_cq* got = nullptr;
    void* context = nullptr;
    REQUIRE(ibv_get_cq_event(channel, &got, &context) == 0); // read, not yet acknowledged
    REQUIRE(got == cq);
    wait_completions(cq, 1);
    ibv_destroy_qp(qp);
    std::atomic<int> destroyed{-1};
    std::thread destroyer([&] { destroyed = ibv_destroy_cq(cq); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK(destroyed.load() == -1); // still waiting for the acknowledgement
    ibv_ack_cq_events(got, 1);
    destroyer.join();
    CHECK(destroyed.load() == 0);
    CHECK(ibv_destroy_comp_channel(channel) == 0);
}
