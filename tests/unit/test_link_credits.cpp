// Transport: link-level credit flow control per VL (link_credits.hpp, IBTA 7.9.4): a
// sender keeps to the receiver's advertised limit through the 12-bit wrap, a receiver
// that keeps its limit is never overrun however slowly it drains, a lost packet's blocks
// come back when the sender's FCTBS arrives, and the flow-control packet's codec.
#include "softhca/transport/link_credits.hpp"

#include <catch2/catch.hpp>
#include <deque>
#include <random>

using namespace softhca::transport;

TEST_CASE("link credits: nothing before the first advertisement, then up to the limit") {
    CreditSender s;
    CHECK_FALSE(s.may_send(1));
    CHECK(s.available_blocks() == 0);
    CreditReceiver r(100);
    s.on_credit_limit(r.credit_limit()); // 100 blocks free
    CHECK(s.available_blocks() == 100);
    CHECK(s.may_send(100 * 64));
    CHECK_FALSE(s.may_send(100 * 64 + 1)); // 101 blocks
    s.sent(60 * 64);
    CHECK(r.on_packet(60 * 64));
    CHECK(s.available_blocks() == 40);
    CHECK(s.may_send(40 * 64));
    CHECK_FALSE(s.may_send(41 * 64));
    r.released(60 * 64);
    s.on_credit_limit(r.credit_limit());
    CHECK(s.available_blocks() == 100);
}

TEST_CASE("link credits: a receiver buffer of 2048+ blocks advertises at most 2048 ahead") {
    CreditReceiver r(10000);
    CHECK(r.credit_limit() == 2048);
    CreditSender s;
    s.on_credit_limit(r.credit_limit());
    CHECK(s.available_blocks() == 2048);
}

TEST_CASE("link credits: a slow receiver is never overrun, through many wraps of the 12-bit "
          "counters, and every packet arrives") {
    std::mt19937 random(3);
    CreditSender s;
    CreditReceiver r(300); // blocks of buffer
    std::deque<uint32_t> buffer;
    uint64_t sent = 0, delivered = 0, waited = 0;
    s.on_credit_limit(r.credit_limit());
    for (int step = 0; step < 200000; ++step) {
        const uint32_t bytes = 64 + static_cast<uint32_t>(random() % 4096);
        if (s.may_send(bytes)) {
            s.sent(bytes);
            REQUIRE(r.on_packet(bytes)); // never overrun
            buffer.push_back(bytes);
            ++sent;
        } else {
            ++waited;
        }
        // The receiver drains one packet in three steps; credits go back now and then.
        if (step % 3 == 0 && !buffer.empty()) {
            r.released(buffer.front());
            buffer.pop_front();
            ++delivered;
        }
        if (step % 7 == 0)
            s.on_credit_limit(r.credit_limit());
    }
    CHECK(sent > 20000); // FCTBS wrapped many times (12 bits of 64-byte blocks)
    CHECK(waited > 0);   // and the sender did wait for credits
    CHECK(sent - delivered == buffer.size());
}

TEST_CASE("link credits: the blocks of a packet lost on the link come back with the "
          "sender's FCTBS") {
    CreditSender s;
    CreditReceiver r(64);
    s.on_credit_limit(r.credit_limit());
    s.sent(32 * 64); // lost: the receiver never sees it
    CHECK(s.available_blocks() == 32);
    s.on_credit_limit(r.credit_limit()); // the receiver's ABR still lags
    CHECK(s.available_blocks() == 32);
    r.on_sender_total(s.fctbs()); // the sender's flow-control packet
    s.on_credit_limit(r.credit_limit());
    CHECK(s.available_blocks() == 64);
}

TEST_CASE("flow-control packet: fields, the 12-bit counters and the CRC") {
    FlowControlPacket p;
    p.set(FlowControlPacket::kOpNormal, 0xabc, 5, 0x123);
    CHECK(p.op() == 0);
    CHECK(p.fctbs() == 0xabc);
    CHECK(p.vl() == 5);
    CHECK(p.fccl() == 0x123);
    CHECK(p.bytes[0] == 0x0a);
    CHECK(p.bytes[1] == 0xbc);
    CHECK(p.bytes[2] == 0x51);
    CHECK(p.bytes[3] == 0x23);
    CHECK(p.crc_ok());
    for (int byte = 0; byte < 6; ++byte)
        for (int bit = 0; bit < 8; ++bit) {
            FlowControlPacket damaged = p;
            damaged.bytes[byte] ^= static_cast<uint8_t>(1 << bit);
            CHECK_FALSE(damaged.crc_ok()); // every single-bit error is caught
        }
    p.set(FlowControlPacket::kOpInit, 0xffff, 0xff, 0xffff); // wider values are cut
    CHECK(p.op() == 1);
    CHECK(p.fctbs() == 0xfff);
    CHECK(p.vl() == 0xf);
    CHECK(p.fccl() == 0xfff);
}
