// libFuzzer target: the IB CM's state machine (transport/ib_cm.hpp) alone, without the
// engine. Two CMs, each with a consumer that serves one RC and one UD service id, send
// their MADs into a queue; the input says what each side's consumer commands (REQ, REP,
// RTU, REJ, DREQ, DREP, SIDR_REQ, SIDR_REP, destroy), what becomes of each MAD (delivered
// whole, with a byte changed, twice, late, or lost), injects MADs of its own bytes, and
// lets simulated time pass so that retransmissions, time-outs and time wait run.
//
// Each step is a byte saying what to do, then its operands (see the switch below).
// Invariants: no crash or sanitizer report; every event names a connection the CM has,
// with the context its consumer gave; a command on a connection the CM does not have is
// refused; what a command answers agrees with the state it leaves; and once every
// connection is destroyed and time has run on far enough, neither CM holds any (nothing
// outlives its timers) and no timer is left.
#include "softhca/transport/ib_cm.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <string>
#include <vector>

namespace tp = softhca::transport;
using tp::CmConnectionState;
using tp::CmEventType;

namespace {

[[gnu::format(printf, 1, 2)]] [[noreturn]] void fail(const char* format, ...) {
    std::va_list args;
    va_start(args, format);
    std::fprintf(stderr, "fuzz_ib_cm: ");
    std::vfprintf(stderr, format, args);
    std::fprintf(stderr, "\n");
    va_end(args);
    std::abort();
}

constexpr uint64_t kRcService = tp::rdma_cm_service_id(0x0106, 7000);
constexpr uint64_t kUdService = tp::rdma_cm_service_id(0x0111, 7000);

struct Input {
    const uint8_t* data;
    size_t size;
    size_t at = 0;
    bool done() const { return at >= size; }
    uint8_t byte() { return at < size ? data[at++] : 0; }
    void take(uint8_t* to, size_t n) {
        const size_t have = std::min(n, size - std::min(at, size));
        std::memcpy(to, data + at, have);
        std::memset(to + have, 0, n - have);
        at += have;
    }
};

struct Queued {
    int to;
    tp::CmMad mad;
};

struct Side final : tp::CmConsumer {
    int index;
    tp::MadPeer self;
    uint64_t guid;
    std::deque<Queued>& queue;
    tp::IbCm cm;
    std::set<uint32_t> handles;   // connections the consumer holds
    std::set<uint32_t> destroyed; // destroyed, still on the wire: released by their end
    uint64_t next_context = 1;
    std::vector<uint64_t> contexts; // by handle: what each was given

    Side(int i, std::deque<Queued>& q, const tp::CmConfig& config, uint32_t seed)
        : index(i), guid(0x0253494d00000001ull + static_cast<uint64_t>(i)), queue(q),
          cm(*this, config, seed) {
        self.ipv4 = 0xc6120001u + static_cast<uint32_t>(i);
        self.gid = tp::gid_from_ipv4(self.ipv4);
    }
    void send_mad(size_t, const tp::MadPeer&, const tp::CmMad& mad, uint64_t) override {
        if (queue.size() < 256)
            queue.push_back({1 - index, mad});
    }
    tp::CmRequestAnswer connection_request(size_t, const tp::MadPeer&,
                                           const tp::CmMad& mad) override {
        tp::CmRequestAnswer answer;
        const bool sidr =
            static_cast<tp::CmAttribute>(mad.header.attribute_id()) == tp::CmAttribute::SidrReq;
        const uint64_t sid =
            sidr ? mad.as<tp::CmSidrReq>().service_id() : mad.as<tp::CmReq>().service_id();
        // Every port of the TCP port space over RC, of the UDP one over UD (so that the
        // kernel's REQs and SIDR_REQs of the captures, injected, find a service).
        const uint64_t space = sid >> 16;
        if ((sid >> 32) != 0 || (space != 0x0106 && space != 0x0111)) {
            answer.reject_reason = static_cast<uint16_t>(tp::CmRejectReason::InvalidServiceId);
            answer.sidr_status = tp::kSidrUnsupported;
            return answer;
        }
        answer.context = (static_cast<uint64_t>(index) << 32) | next_context++;
        answer.local_ca_guid = guid;
        answer.datagram = space == 0x0111;
        answer.path_mtu = 3;
        return answer;
    }
    void cm_event(const tp::CmConnection& c, CmEventType type, const tp::CmMad* mad,
                  uint64_t now) override {
        const tp::CmConnection* held = cm.connection(c.handle);
        if (held != &c)
            fail("side %d: an event for connection %u the CM does not hold", index, c.handle);
        const bool made = type == CmEventType::ReqReceived || type == CmEventType::SidrReqReceived;
        if (made) {
            if (handles.count(c.handle) || destroyed.count(c.handle))
                fail("side %d: a new connection %u with the handle of another", index, c.handle);
            handles.insert(c.handle);
        } else if (!handles.count(c.handle) && !destroyed.count(c.handle)) {
            fail("side %d: event %d for connection %u never made", index, static_cast<int>(type),
                 c.handle);
        }
        const bool with_mad =
            made || type == CmEventType::RepReceived || type == CmEventType::Rejected ||
            type == CmEventType::SidrRepReceived || type == CmEventType::DreqReceived;
        if (with_mad && !mad)
            fail("side %d: event %d without its MAD", index, static_cast<int>(type));
        if (!destroyed.count(c.handle))
            return;
        // Destroyed: the consumer only finishes what the CM still does (as the rdma_cm
        // does for an id whose file is gone).
        switch (type) {
        case CmEventType::DreqReceived:
            if (cm.send_drep(c.handle, now) != 0)
                fail("side %d: the DREP of a DREQ received refused", index);
            return;
        case CmEventType::TimewaitExit:
        case CmEventType::Rejected:
        case CmEventType::Unreachable:
            destroyed.erase(c.handle);
            cm.release(c.handle);
            return;
        default:
            return;
        }
    }
    // The n-th connection the consumer holds (0 when none: the CM must refuse it).
    uint32_t pick(uint8_t n) const {
        if (handles.empty())
            return n; // most likely no connection at all
        auto it = handles.begin();
        std::advance(it, n % handles.size());
        return *it;
    }
    void destroy(uint32_t handle, uint64_t now) {
        if (!handles.erase(handle))
            return;
        if (cm.destroy(handle, now))
            destroyed.insert(handle);
        else
            cm.release(handle);
    }
};

tp::CmConfig config_from(Input& in) {
    tp::CmConfig config;
    config.response_timeout = static_cast<uint8_t>(8 + in.byte() % 8);
    config.packet_life = static_cast<uint8_t>(8 + in.byte() % 8);
    config.max_retries = in.byte() % 16;
    return config;
}

void check_state(const Side& s, uint32_t handle, int rc, CmConnectionState expected,
                 const char* what) {
    const tp::CmConnection* c = s.cm.connection(handle);
    if (rc == 0 && (!c || c->state != expected))
        fail("side %d: %s answered 0, the connection is in state %d", s.index, what,
             c ? static_cast<int>(c->state) : -1);
    if (!c && rc == 0)
        fail("side %d: %s on no connection answered 0", s.index, what);
}

// A seed that goes the whole way: REQ, REP, RTU, DREQ, DREP, time wait; and a SIDR
// exchange. Written by LLVMFuzzerInitialize when SOFTHCA_FUZZ_SEEDS names a directory
// (tools/fuzz.sh), in this harness's step encoding. (fuzz/seeds.py adds the kernel's MADs
// of the captures, each injected into side 1.)
void write_seeds(const std::string& dir) {
    const std::vector<uint8_t> connection = {
        0,    0,    4,  // config: response timeout 8, packet life 8, 4 retries
        0x00, 0,        // side 0: REQ to the RC service
        0x90, 0x40,     // deliver it
        0x21, 0,        // side 1: REP
        0x90, 0x40,     // deliver it
        0x30, 0,        // side 0: RTU
        0x90, 0x40,     // deliver it
        0x50, 0,        // side 0: DREQ
        0x90, 0x40,     // deliver it
        0x61, 0,        // side 1: DREP
        0x90, 0x40,     // deliver it
        0xf0, 60,   20, // time passes: time wait ends
    };
    const std::vector<uint8_t> sidr = {
        0,    0,    4,  0x10, 1, // side 0: SIDR_REQ to the UD service
        0x90, 0x40,              // deliver it
        0x21, 0,                 // side 1: SIDR_REP
        0x90, 0x40,              // deliver it
        0x71, 0,                 // side 1: destroy
        0xf0, 60,   20,
    };
    for (const auto& [name, bytes] : {std::pair{"connection", connection}, {"sidr", sidr}})
        if (FILE* f = std::fopen((dir + "/" + name).c_str(), "wb")) {
            std::fwrite(bytes.data(), 1, bytes.size(), f);
            std::fclose(f);
        }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (const char* dir = std::getenv("SOFTHCA_FUZZ_SEEDS"))
        write_seeds(dir);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Input in{data, size};
    const tp::CmConfig config = config_from(in);
    std::deque<Queued> queue;
    Side sides[2] = {Side(0, queue, config, 1), Side(1, queue, config, 2)};
    uint64_t now = 1'000'000;
    for (int step = 0; step < 128 && !in.done(); ++step) {
        const uint8_t what = in.byte();
        Side& s = sides[what & 1];
        Side& peer = sides[(what & 1) ^ 1];
        const uint8_t operand = in.byte();
        switch (what >> 4) {
        case 0: { // REQ to the RC service (or another, when the operand says so)
            tp::CmReqParams p;
            p.peer = peer.self;
            p.context = (static_cast<uint64_t>(s.index) << 32) | s.next_context++;
            p.local_ca_guid = s.guid;
            p.service_id = operand & 0x80 ? tp::rdma_cm_service_id(0x0107, operand) : kRcService;
            p.qpn = 0x100u + operand;
            p.starting_psn = operand;
            p.unreliable_connection = operand & 1;
            p.path_mtu = 5;
            uint8_t private_data[tp::CmReq::kPrivateDataBytes] = {};
            p.private_data = private_data;
            p.private_data_bytes = operand & 0x40 ? sizeof(private_data) + 1 : operand % 93;
            const uint32_t h = s.cm.send_req(p, now);
            if (p.private_data_bytes > tp::CmReq::kPrivateDataBytes) {
                if (h)
                    fail("a REQ with too much private data was sent");
                break;
            }
            if (!h)
                fail("a REQ was refused");
            s.handles.insert(h);
            check_state(s, h, 0, CmConnectionState::ReqSent, "REQ");
            break;
        }
        case 1: { // SIDR_REQ to the UD service (or another)
            tp::CmSidrReqParams p;
            p.peer = peer.self;
            p.context = (static_cast<uint64_t>(s.index) << 32) | s.next_context++;
            p.service_id = operand & 0x80 ? tp::rdma_cm_service_id(0x0112, operand) : kUdService;
            p.qpn = 0x300u + operand;
            const uint32_t h = s.cm.send_sidr_req(p, now);
            if (!h)
                fail("a SIDR_REQ was refused");
            s.handles.insert(h);
            check_state(s, h, 0, CmConnectionState::ReqSent, "SIDR_REQ");
            break;
        }
        case 2: { // accept: a REP, or for a UD connection a SIDR_REP
            const uint32_t h = s.pick(operand);
            const tp::CmConnection* c = s.cm.connection(h);
            if (c && c->datagram) {
                const int rc = s.cm.send_sidr_rep(h, tp::kSidrSuccess, 0x400u + operand, 0x1234,
                                                  nullptr, 0, now);
                check_state(s, h, rc, CmConnectionState::Established, "SIDR_REP");
            } else {
                tp::CmRepParams p;
                p.qpn = 0x200u + operand;
                p.starting_psn = operand;
                p.private_data_bytes = operand & 0x40 ? tp::CmRep::kPrivateDataBytes + 1 : 0;
                const int rc = s.cm.send_rep(h, p, now);
                check_state(s, h, rc, CmConnectionState::RepSent, "REP");
            }
            break;
        }
        case 3: { // RTU
            const uint32_t h = s.pick(operand);
            check_state(s, h, s.cm.send_rtu(h, now), CmConnectionState::Established, "RTU");
            break;
        }
        case 4: { // REJ, or SIDR_REP "rejected"
            const uint32_t h = s.pick(operand);
            const tp::CmConnection* c = s.cm.connection(h);
            if (c && c->datagram) {
                const int rc = s.cm.send_sidr_rep(h, tp::kSidrReject, 0, 0, nullptr, 0, now);
                check_state(s, h, rc, CmConnectionState::Closed, "SIDR_REP rejected");
            } else {
                uint8_t private_data[tp::CmRej::kPrivateDataBytes] = {};
                const int rc = s.cm.send_rej(h, tp::CmRejectReason::ConsumerDefined, private_data,
                                             operand % (sizeof(private_data) + 2), now);
                check_state(s, h, rc, CmConnectionState::Closed, "REJ");
            }
            break;
        }
        case 5: { // DREQ
            const uint32_t h = s.pick(operand);
            check_state(s, h, s.cm.send_dreq(h, now), CmConnectionState::DreqSent, "DREQ");
            break;
        }
        case 6: { // DREP
            const uint32_t h = s.pick(operand);
            check_state(s, h, s.cm.send_drep(h, now), CmConnectionState::TimeWait, "DREP");
            break;
        }
        case 7: // the consumer is done with a connection
            s.destroy(s.pick(operand), now);
            break;
        case 8: // a command on a connection nobody has: refused
            if (s.cm.send_rtu(0x7fff0000u + operand, now) != -EINVAL ||
                s.cm.send_dreq(0x7fff0000u + operand, now) != -EINVAL ||
                s.cm.destroy(0x7fff0000u + operand, now))
                fail("a command on no connection was taken");
            break;
        case 9:
        case 10:
        case 11: { // the oldest MAD (or the newest): deliver, change a byte, twice, drop
            if (queue.empty())
                break;
            const bool newest = (what >> 4) == 11;
            Queued q = newest ? queue.back() : queue.front();
            if (newest)
                queue.pop_back();
            else
                queue.pop_front();
            if (operand < 32)
                break; // lost
            auto* bytes = reinterpret_cast<uint8_t*>(&q.mad);
            if (operand >= 224)
                bytes[in.byte() % sizeof(q.mad)] ^= static_cast<uint8_t>(1 + in.byte() % 255);
            Side& to = sides[q.to];
            to.cm.receive_mad(0, sides[q.to ^ 1].self, bytes, sizeof(q.mad), now);
            if (operand >= 128 && operand < 160) // duplicated
                to.cm.receive_mad(0, sides[q.to ^ 1].self, bytes, sizeof(q.mad), now);
            else if (operand >= 160 && operand < 192) // duplicated, later
                queue.push_back(q);
            break;
        }
        case 12: { // a MAD of the input's bytes
            uint8_t mad[256] = {};
            in.take(mad, sizeof(mad));
            s.cm.receive_mad(0, peer.self, mad, operand & 1 ? sizeof(mad) : operand, now);
            break;
        }
        default: // time passes: up to about 70 s in one step
            now += uint64_t{operand} << (in.byte() % 28);
            for (Side& side : sides)
                side.cm.poll(now);
            break;
        }
    }
    // Every connection destroyed, the MADs lost, the timers run out: nothing is left.
    for (Side& s : sides)
        while (!s.handles.empty())
            s.destroy(*s.handles.begin(), now);
    for (int i = 0; i < 256; ++i) {
        queue.clear();
        const uint64_t next = std::min(sides[0].cm.next_deadline(), sides[1].cm.next_deadline());
        if (next == UINT64_MAX)
            break;
        now = std::max(now + 1, next);
        for (Side& s : sides)
            s.cm.poll(now);
    }
    for (Side& s : sides)
        if (s.cm.connections() != 0 || !s.destroyed.empty() || s.cm.next_deadline() != UINT64_MAX)
            fail("side %d: %zu connections, %zu destroyed ones and a deadline at %llu left",
                 s.index, s.cm.connections(), s.destroyed.size(),
                 static_cast<unsigned long long>(s.cm.next_deadline()));
    return 0;
}
