// The IB communication manager (IBTA chapter 12) as a state machine with no I/O: it takes
// the CM MADs that arrive on QP1, the commands of its consumer (the rdma_cm: send a REQ,
// accept with a REP, confirm with an RTU, reject, disconnect, SIDR) and the time, and it
// gives MADs to send, events for its consumer and the deadline of its next timer. It
// never calls the OS, a socket or the clock; the engine's rdma_cm drives it
// (hca_engine/src/rdma_cm/), the unit tests run two of them over a simulated wire.
//
// Each connection follows the CM's state diagrams (12.9.6): REQ, MRA, REP, RTU and REJ
// to establish it, DREQ and DREP to end it, then time wait; REQ, REP and DREQ are sent
// again until answered (a response timeout and a retry count, 12.7.29-12.7.31) and
// duplicates are answered from the last message sent. SIDR (12.11) resolves a UD QP
// behind a service id. Fields are filled as Linux's ib_cm fills them for RoCE (cm.c
// cm_format_req and friends), so a kernel peer finds what it checks.
#pragma once

#include "softhca/transport/cm_messages.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace softhca::transport {

// A connection's state as the CM tracks it (12.9.6, the CM state diagrams).
enum class CmConnectionState : uint8_t {
    Idle,
    ReqSent,      // active: REQ out, waiting for REP (an MRA lengthens the wait)
    ReqReceived,  // passive: the consumer was told, waiting for its REP (or REJ)
    RepSent,      // passive: REP out, waiting for RTU
    RepReceived,  // active: the consumer was told, waiting for its RTU (or REJ)
    Established,  // also a SIDR exchange answered
    DreqSent,     // waiting for DREP
    DreqReceived, // the consumer was told, waiting for its DREP
    TimeWait,     // disconnected; duplicates of the last exchange are answered
    Closed,       // rejected, unreachable, timed out or out of time wait
};

// One connection (or SIDR exchange) of the CM: the 12.6 fields, from this side's view.
struct CmConnection {
    uint32_t handle = 0;   // the CM's number for it, what commands name
    uint64_t context = 0;  // the consumer's (the rdma_cm's id)
    bool datagram = false; // a UD QP's: SIDR (12.11) answers it, nothing ends it
    bool passive = false;  // made for a REQ or SIDR_REQ that arrived
    size_t port = 0;       // the port whose QP1 carries it
    uint64_t local_ca_guid = 0;
    uint64_t service_id = 0;
    CmConnectionState state = CmConnectionState::Idle;

    uint32_t local_comm_id = 0; // 0 once out of time wait: free again
    uint32_t remote_comm_id = 0;
    uint64_t remote_ca_guid = 0;
    uint32_t local_qpn = 0;
    uint32_t remote_qpn = 0;
    uint32_t send_psn = 0;           // the Starting PSN the peer announced: this QP's sq_psn
    uint8_t responder_resources = 0; // RDMA reads and atomics this side accepts
    uint8_t initiator_depth = 0;     // that it may have outstanding
    uint8_t retry_count = 7;
    uint8_t rnr_retry_count = 7;
    uint8_t path_mtu = 0; // enum ibv_mtu
    bool srq = false;
    bool flow_control = false;
    uint8_t local_ack_timeout = 0;
    uint8_t peer_response_timeout = 20; // the peer's CM response timeout (IBA exponent)
    MadPeer peer;

    // What was sent last, for retransmission (REQ, REP, DREQ, SIDR_REQ) and for answering
    // duplicates (MRA, REP, RTU, DREP, REJ, SIDR_REP).
    uint64_t tid = 0; // the transaction id of the exchange in progress
    CmMad last_sent{};
    bool awaiting_reply = false;
    uint64_t retry_at = 0;
    uint64_t retry_interval_ns = 0;
    unsigned retries_left = 0;
    uint64_t time_wait_until = 0;
};

// What the CM tells its consumer.
enum class CmEventType : uint8_t {
    ReqReceived,     // a new connection from a REQ (the MAD: the REQ)
    RepReceived,     // the REP to our REQ (the MAD: the REP)
    Established,     // the RTU to our REP
    Rejected,        // a REJ ended it (the MAD: the REJ)
    DreqReceived,    // the peer disconnects: DREP it (send_drep)
    Disconnected,    // the DREP to our DREQ, a DREQ crossing ours, or our DREQ unanswered
    TimewaitExit,    // out of time wait: the comm id is free
    Unreachable,     // the REQ or SIDR_REQ went unanswered past the retries (12.7.29)
    SidrReqReceived, // a new SIDR exchange from a SIDR_REQ (the MAD: the SIDR_REQ)
    SidrRepReceived, // the SIDR_REP to our SIDR_REQ (the MAD: the SIDR_REP)
};

// What the consumer says of a REQ or SIDR_REQ that names no connection here.
struct CmRequestAnswer {
    // Refused: a REQ with a REJ of this reason (0: taken), a SIDR_REQ with a SIDR_REP of
    // this status (0: taken).
    uint16_t reject_reason = 0;
    uint8_t sidr_status = 0;
    // Taken: the new connection's context, CA GUID and QP type, and the port's MTU (the
    // connection's path MTU is the smaller of it and the REQ's).
    uint64_t context = 0;
    uint64_t local_ca_guid = 0;
    bool datagram = false;
    uint8_t path_mtu = 0;
};

class CmConsumer {
  public:
    virtual ~CmConsumer() = default;
    // One 256-byte MAD from QP1 of `port`.
    virtual void send_mad(size_t port, const MadPeer& to, const CmMad& mad, uint64_t now) = 0;
    // A REQ (SIDR_REQ) that is no duplicate: refuse it, or take it as a new connection.
    virtual CmRequestAnswer connection_request(size_t port, const MadPeer& from,
                                               const CmMad& mad) = 0;
    // Something happened to a connection. `mad`: the message that did it, when one did.
    // The consumer may call the CM from here (send_drep, release, ...).
    virtual void cm_event(const CmConnection& connection, CmEventType type, const CmMad* mad,
                          uint64_t now) = 0;
};

// SIDR_REP status values (12.11.2, table 121).
constexpr uint8_t kSidrSuccess = 0;
constexpr uint8_t kSidrUnsupported = 1; // no such service id
constexpr uint8_t kSidrReject = 2;

// A REQ's contents (what cm_format_req takes from the consumer and the path).
struct CmReqParams {
    size_t port = 0;
    MadPeer peer;
    uint64_t context = 0;
    uint64_t local_ca_guid = 0;
    uint64_t service_id = 0;
    uint32_t qpn = 0;
    uint32_t starting_psn = 0; // the PSN this side's receive queue expects
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t retry_count = 7;
    uint8_t rnr_retry_count = 7;
    bool srq = false;
    bool flow_control = false;
    bool unreliable_connection = false; // UC, else RC
    uint8_t path_mtu = 0;
    uint8_t local_ack_timeout = 0;
    Gid local_gid{};
    uint8_t traffic_class = 0;
    const uint8_t* private_data = nullptr;
    size_t private_data_bytes = 0;
};

// A REP's contents.
struct CmRepParams {
    uint32_t qpn = 0;
    uint32_t starting_psn = 0; // the PSN this side's receive queue expects
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t rnr_retry_count = 7;
    bool srq = false;
    bool flow_control = false;
    const uint8_t* private_data = nullptr;
    size_t private_data_bytes = 0;
};

// A SIDR_REQ's contents.
struct CmSidrReqParams {
    size_t port = 0;
    MadPeer peer;
    uint64_t context = 0;
    uint64_t service_id = 0;
    uint32_t qpn = 0;
    const uint8_t* private_data = nullptr;
    size_t private_data_bytes = 0;
};

struct CmConfig {
    uint8_t response_timeout = 20; // this CM's response timeout (IBA exponent), the kernel's
    unsigned max_retries = 15;     // Max CM Retries (12.7.29)
    uint8_t packet_life = 16;      // the path's packet life time (IBA exponent)
};

class IbCm {
  public:
    // `seed`: where comm ids and transaction ids are drawn from.
    IbCm(CmConsumer& consumer, const CmConfig& config, uint32_t seed);

    // Commands. Each returns 0 or -EINVAL (not in a state that allows it, or too much
    // private data); send_req and send_sidr_req return the new connection's handle, 0 when
    // refused.
    uint32_t send_req(const CmReqParams& params, uint64_t now);
    int send_rep(uint32_t handle, const CmRepParams& params, uint64_t now);
    int send_rtu(uint32_t handle, uint64_t now);
    int send_rej(uint32_t handle, CmRejectReason reason, const uint8_t* data, size_t bytes,
                 uint64_t now);
    int send_dreq(uint32_t handle, uint64_t now);
    int send_drep(uint32_t handle, uint64_t now);
    uint32_t send_sidr_req(const CmSidrReqParams& params, uint64_t now);
    int send_sidr_rep(uint32_t handle, uint8_t status, uint32_t qpn, uint32_t qkey,
                      const uint8_t* data, size_t bytes, uint64_t now);
    // The consumer is done with the connection (ib_destroy_cm_id): what the CM does on
    // the wire, state by state. True when it still has something to do there (a DREQ to
    // repeat, a time wait to keep answering): the connection stays until an event says
    // it ended (Disconnected, then TimewaitExit).
    bool destroy(uint32_t handle, uint64_t now);
    // Forgets the connection entirely; nothing more is sent or told of it.
    void release(uint32_t handle);

    // A MAD that reached QP1 of `port`.
    void receive_mad(size_t port, const MadPeer& from, const uint8_t* payload, size_t length,
                     uint64_t now);
    // The timers that are due: retransmissions, retries run out, time waits ended. True
    // when any was.
    bool poll(uint64_t now);
    // The earliest of those, or UINT64_MAX.
    uint64_t next_deadline() const { return wake_at_; }

    const CmConnection* connection(uint32_t handle) const;
    size_t connections() const { return connections_.size(); }
    const CmConfig& config() const { return config_; }
    // Wait for a response (12.7.29): the peer's response time plus a round trip of packet
    // life times, as cm.c computes it.
    uint64_t cm_timeout_ns(uint8_t response_timeout) const;

    struct Counters {
        uint64_t mads_in = 0;
        uint64_t mads_out = 0;
        uint64_t mads_dropped = 0; // malformed, unknown attribute, or matching no connection
        uint64_t retransmissions = 0;
        uint64_t duplicates = 0; // answered from the last message sent, or ignored
    };
    const Counters& counters() const { return counters_; }

  private:
    CmConnection* find(uint32_t handle);
    CmConnection* by_local_comm_id(uint32_t comm_id);
    CmConnection& create(uint64_t context, size_t port, const MadPeer& peer);
    uint32_t new_comm_id();
    uint64_t new_tid();
    void answer(size_t port, const MadPeer& to, const CmMad& mad, uint64_t now);
    void transmit(CmConnection& c, uint64_t now, bool expect_reply);
    void schedule(uint64_t at) { wake_at_ = std::min(wake_at_, at); }
    void send_mra(CmConnection& c, uint64_t now);
    void enter_time_wait(CmConnection& c, uint64_t now);
    void on_req(size_t port, const MadPeer& from, const CmMad& mad, uint64_t now);
    void on_mra(const CmMad& mad, uint64_t now);
    void on_rej(const CmMad& mad, uint64_t now);
    void on_rep(const CmMad& mad, uint64_t now);
    void on_rtu(const CmMad& mad, uint64_t now);
    void on_dreq(size_t port, const MadPeer& from, const CmMad& mad, uint64_t now);
    void on_drep(const CmMad& mad, uint64_t now);
    void on_sidr_req(size_t port, const MadPeer& from, const CmMad& mad, uint64_t now);
    void on_sidr_rep(const CmMad& mad, uint64_t now);
    void on_timeout(CmConnection& c, uint64_t now);

    CmConsumer& consumer_;
    CmConfig config_;
    std::mt19937 random_;
    uint32_t next_handle_ = 1;
    uint64_t next_tid_ = 1;
    std::map<uint32_t, CmConnection> connections_; // by handle, in the order made
    std::map<uint32_t, uint32_t> by_comm_id_;      // local comm id to handle
    uint64_t wake_at_ = UINT64_MAX;                // no connection has anything due before
    Counters counters_;
};

} // namespace softhca::transport
