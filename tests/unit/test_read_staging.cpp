// Read staging (qp_ring.hpp, SOFTHCA_READ_STAGING=1): the responses of a signaled RDMA
// READ into private memory go into the requester QP's read staging area, and whoever
// polls the completion (here the bench, as the provider's poll_cq) copies them into the
// READ's buffer. What is not staged is written by the engine as before: an unsignaled
// READ (no completion would land it), one larger than a quarter of the area. A READ that
// fails or flushes gives its room back without touching the buffer.
#include "engine_bench.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

using namespace engine_bench;

namespace {

constexpr uint8_t kRead = 4; // IBV_WR_RDMA_READ
constexpr uint8_t kUntouched = 0xee;

bool untouched(const uint8_t* at, uint32_t length) {
    for (uint32_t i = 0; i < length; ++i)
        if (at[i] != kUntouched)
            return false;
    return true;
}

// Rounds until A's CQ holds a completion, which stays unpolled.
bool completion_waiting(Bench& bench) {
    for (int round = 0; round < 100'000; ++round) {
        bench.round();
        const di::CqRingHeader& cq = *bench.a->cq_ring;
        if (cq.producer.load(std::memory_order_acquire) != cq.consumer.load())
            return true;
    }
    return false;
}

// Rounds until the first response of READ `message`, whose room starts the area, is in
// A's read staging area.
bool first_response_staged(Bench& bench, uint64_t message) {
    const di::QpRingHeader* ring = bench.a->ring;
    const uint8_t* area = reinterpret_cast<const uint8_t*>(ring) + ring->read_staging_offset;
    for (int round = 0; round < 100'000; ++round) {
        bench.round();
        if (first_mismatch(area, message, 1024) == -1)
            return true;
    }
    return false;
}

// Posts a READ of B's bytes at `offset` into A's at the same offset, after filling B's
// with message `message`'s pattern and A's with kUntouched.
void post_read(Bench& bench, uint64_t message, uint64_t offset, uint32_t length,
               uint8_t flags = di::kSendSignaled) {
    Host& a = *bench.a;
    Host& b = *bench.b;
    fill(b.buffer.data() + offset, message, length);
    std::memset(a.buffer.data() + offset, kUntouched, length);
    a.post_send(message, kRead, offset, length, b.buffer.addr() + offset, b.mr.rkey, flags);
}

} // namespace

TEST_CASE("read staging: a signaled READ into private memory lands when its completion is "
          "polled, unsignaled and oversized READs are written by the engine, later local writes "
          "survive it, and a flushed one gives its room back untouched") {
    ScopedEnvironment read_staging("SOFTHCA_READ_STAGING", "1");
    Bench bench(FaultConfig{}, false);
    Host& a = *bench.a;
    Host& b = *bench.b;
    REQUIRE(!a.shared_mapped());
    // 64 send queue slots: 512 KiB, a quarter of it (128 KiB) for one READ.
    REQUIRE(a.ring->read_staging_bytes == 512 * 1024);
    REQUIRE(bench.b->ring->read_staging_bytes == 512 * 1024); // RC QPs both
    di::CompletionEntry e{};

    SECTION("a signaled READ waits in the area until its completion is polled") {
        for (const uint32_t length : {57u, 1024u, 5000u, 131072u}) {
            INFO("READ of " << length << " bytes");
            const uint64_t message = length;
            post_read(bench, message, 4096, length);
            REQUIRE(completion_waiting(bench));
            CHECK(untouched(a.buffer.data() + 4096, length));
            REQUIRE(a.poll(e));
            REQUIRE(e.status == 0);
            CHECK(e.wr_id == message);
            CHECK(e.byte_len == length);
            CHECK(first_mismatch(a.buffer.data() + 4096, message, length) == -1);
        }
        CHECK(a.staged_from_area == 4);
        // Every room was given back: the area takes a quarter of itself again, many times.
        for (uint64_t i = 0; i < 12; ++i) {
            post_read(bench, 100 + i, 0, 131072);
            REQUIRE(completion_waiting(bench));
            REQUIRE(a.poll(e));
            CHECK(e.status == 0);
            CHECK(first_mismatch(a.buffer.data(), 100 + i, 131072) == -1);
        }
        CHECK(a.staged_from_area == 16);
    }

    SECTION("an unsignaled READ, and one larger than a quarter of the area, are written at "
            "once") {
        post_read(bench, 1, 0, 5000, 0);
        post_read(bench, 2, 8192, 131073);
        post_read(bench, 3, 262144, 5000);
        REQUIRE(completion_waiting(bench));
        for (int round = 0; round < 1000; ++round) // let the third complete too
            bench.round();
        CHECK(first_mismatch(a.buffer.data(), 1, 5000) == -1);
        CHECK(first_mismatch(a.buffer.data() + 8192, 2, 131073) == -1);
        CHECK(untouched(a.buffer.data() + 262144, 5000)); // staged: not yet
        REQUIRE(a.poll(e));
        CHECK(e.wr_id == 2);
        CHECK(e.staged_length == 0);
        REQUIRE(a.poll(e));
        CHECK(e.wr_id == 3);
        CHECK(first_mismatch(a.buffer.data() + 262144, 3, 5000) == -1);
        CHECK(a.staged_from_area == 1);
    }

    SECTION("a later atomic's result in a staged READ's buffer is not undone when the READ "
            "lands, and a later WRITE of that buffer sends what the READ placed") {
        // B holds a counter at 8192; the READ brings B's [0, 5000) into A's [0, 5000),
        // then a FETCH_ADD puts the counter's value over A's first 8 bytes, then a fenced
        // WRITE sends A's [0, 5000) to B's 16384. As on an HCA: A's buffer ends with the
        // counter over the READ's first 8 bytes, and B receives the same (placed by the
        // READ and the atomic before the WRITE read it), though A polls nothing until all
        // three have completed.
        const uint64_t counter = 0x1122334455667788ull;
        std::memcpy(b.buffer.data() + 8192, &counter, 8);
        post_read(bench, 21, 0, 5000);
        a.post_send(22, 6, 0, 8, b.buffer.addr() + 8192, b.mr.rkey); // IBV_WR_ATOMIC_FETCH_AND_ADD
        std::memset(b.buffer.data() + 16384, 0, 5000);
        a.post_send(23, 0, 0, 5000, b.buffer.addr() + 16384, b.mr.rkey,
                    di::kSendSignaled | di::kSendFence);
        const di::CqRingHeader& cq = *a.cq_ring;
        for (int round = 0; round < 100'000 && cq.producer.load() - cq.consumer.load() < 3; ++round)
            bench.round();
        REQUIRE(cq.producer.load() - cq.consumer.load() == 3);
        CHECK(untouched(a.buffer.data() + 8, 5000 - 8)); // the READ waits for its poll
        uint64_t sent_first = 0;
        std::memcpy(&sent_first, b.buffer.data() + 16384, 8);
        CHECK(sent_first == counter);
        std::vector<uint8_t> expected(5000);
        fill(expected.data(), 21, 5000);
        CHECK(std::memcmp(b.buffer.data() + 16384 + 8, expected.data() + 8, 5000 - 8) == 0);
        for (uint64_t id = 21; id <= 23; ++id) {
            REQUIRE(a.poll(e));
            CHECK(e.wr_id == id);
            CHECK(e.status == 0);
        }
        uint64_t first = 0;
        std::memcpy(&first, a.buffer.data(), 8);
        CHECK(first == counter); // the atomic's result, after the READ's bytes
        CHECK(std::memcmp(a.buffer.data() + 8, expected.data() + 8, 5000 - 8) == 0);
    }

    SECTION("a WRITE of a READ's buffer while the READ is halfway shows the READ's bytes so "
            "far and the buffer's own, never the rest of its room") {
        constexpr uint32_t kLength = 100 * 1024;
        post_read(bench, 31, 0, kLength);
        REQUIRE(first_response_staged(bench, 31));
        // The room past what has come is the area's zeros: they must not be sent.
        std::memset(b.buffer.data() + 262144, 0x11, kLength);
        a.post_send(32, 0, 0, kLength, b.buffer.addr() + 262144, b.mr.rkey);
        const di::CqRingHeader& cq = *a.cq_ring;
        for (int round = 0; round < 100'000 && cq.producer.load() - cq.consumer.load() < 2; ++round)
            bench.round();
        REQUIRE(cq.producer.load() - cq.consumer.load() == 2);
        std::vector<uint8_t> expected(kLength);
        fill(expected.data(), 31, kLength);
        const uint8_t* sent = b.buffer.data() + 262144;
        uint32_t from_read = 0, old = 0, other = 0;
        for (uint32_t i = 0; i < kLength; ++i) {
            if (sent[i] == expected[i])
                ++from_read;
            else if (sent[i] == kUntouched)
                ++old;
            else
                ++other;
        }
        INFO(from_read << " bytes of the READ, " << old << " old, " << other << " other");
        CHECK(other == 0);
        CHECK(from_read >= 1024);
    }

    SECTION("a READ flushed halfway gives its room back and leaves its buffer alone") {
        constexpr uint32_t kLength = 100 * 1024; // 100 packets of 1024 bytes
        post_read(bench, 7, 0, kLength);
        REQUIRE(first_response_staged(bench, 7));
        REQUIRE(a.ring->read_staging_released.load() == 0);
        a.modify(6, 0, {}, bench.ports.info(0)); // IBV_QPS_ERR: everything flushes
        bench.round();
        REQUIRE(a.poll(e));
        CHECK(e.wr_id == 7);
        CHECK(e.status == 5); // IBV_WC_WR_FLUSH_ERR
        CHECK(untouched(a.buffer.data(), kLength));
        CHECK(a.staged_from_area == 1);
        CHECK(a.ring->read_staging_released.load() >= kLength); // its room, given back
    }
}
