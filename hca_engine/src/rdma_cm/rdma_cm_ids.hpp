// The rdma_cm's objects in the engine: open files (one per open of /dev/infiniband/rdma_cm),
// their ids, and the events queued on a file. The numbers of librdmacm's ABI that the
// kernel's rdma_ucm defines (events, QP types, QP attribute masks) are spelled here so the
// engine needs no librdmacm header.
#pragma once

#include "management_datagrams.hpp"
#include "softhca/transport/cm_messages.hpp"

#include <cstdint>
#include <deque>
#include <rdma/rdma_user_cm.h>
#include <set>
#include <sys/socket.h>
#include <sys/types.h>
#include <vector>

namespace softhca::engine {

// enum rdma_cm_event_type (librdmacm rdma_cma.h; the kernel's rdma_cm.h).
enum CmEventType : uint32_t {
    kEventAddrResolved = 0,
    kEventAddrError = 1,
    kEventRouteResolved = 2,
    kEventRouteError = 3,
    kEventConnectRequest = 4,
    kEventConnectResponse = 5,
    kEventConnectError = 6,
    kEventUnreachable = 7,
    kEventRejected = 8,
    kEventEstablished = 9,
    kEventDisconnected = 10,
    kEventDeviceRemoval = 11,
    kEventMulticastJoin = 12,
    kEventMulticastError = 13,
    kEventAddrChange = 14,
    kEventTimewaitExit = 15,
};

// enum ibv_qp_type values the CREATE_ID command carries.
constexpr uint8_t kQpTypeRc = 2;
constexpr uint8_t kQpTypeUc = 3;
constexpr uint8_t kQpTypeUd = 4;
// The largest backlog a listener gets (the kernel's net.rdma_ucm.max_backlog default).
constexpr uint32_t kMaxBacklog = 1024;
// RDMA_UDP_QKEY: the Q_Key of UDP port space ids and IP multicast groups.
constexpr uint32_t kRdmaUdpQkey = 0x01234567;

// An id's state as the rdma_cm tracks it (the kernel's enum rdma_cm_state): its address
// and route steps, listening, then its connection, whose state is the IB CM's
// (transport::CmConnectionState of CmId::connection).
enum class CmState : uint8_t {
    Idle,          // created, maybe bound
    AddrQuery,     // RESOLVE_IP: waiting for the neighbour
    AddrResolved,  // ADDR_RESOLVED reported
    RouteResolved, // ROUTE_RESOLVED reported
    Listen,
    Connect, // the IB CM has its connection (CONNECT, or made for a REQ or SIDR_REQ)
};

struct CmFile;

struct CmId {
    uint32_t handle = 0;    // the id number librdmacm uses in commands
    uint64_t uid = 0;       // librdmacm's pointer, returned in events
    CmFile* file = nullptr; // null once destroyed while the CM finishes on the wire
    uid_t user = 0;         // the user it is charged to (its file's), until released
    // The fabric host whose namespace the id was made in (its file's, kept when the id
    // moves to another file, as the kernel keeps an id's namespace), -1: none.
    int host = -1;
    uint16_t port_space = 0;
    uint8_t qp_type = 0;
    CmState state = CmState::Idle;

    // Addresses (sockaddr_in or sockaddr_in6 in the storage) and the device.
    sockaddr_storage src{};
    sockaddr_storage dst{};
    bool bound = false;
    bool from_request = false; // made for an arriving REQ: shares its listener's port
    int device = -1;           // index into the engine's devices; -1 until bound or resolved
    bool route_resolved = false;
    uint64_t resolve_deadline = 0;

    // Options (SET_OPTION).
    uint8_t tos = 0;
    bool reuse_address = false;
    bool af_only = false;
    uint8_t ack_timeout = 0; // 0: the CM's own

    uint32_t events_reported = 0;
    // A connection request's listener until ACCEPT, by handle (0: none). A listener
    // destroyed before its requests are accepted is simply not found any more: nothing
    // walks the ids to forget it.
    uint32_t listener = 0;
    uint32_t pending_requests = 0; // a listener's unaccepted connection requests
    // A listener's backlog (LISTEN) and its connection requests not yet taken with
    // GET_EVENT: a request past the backlog is refused, as the kernel's ucma does.
    uint32_t backlog = 0;
    uint32_t unretrieved_requests = 0;

    // The connection: the IB CM's (transport::IbCm), 0 until CONNECT or a request.
    uint32_t connection = 0;
    // What the rdma_cm gives its connection: the PSN the QP's receive queue expects (its
    // rq_psn, drawn at creation and announced in the REQ or REP), the Q_Key of a UD id,
    // and the peer (the resolved destination, or where the request came from).
    uint32_t receive_psn = 0;
    uint32_t qkey = 0;
    MadPeer peer;

    std::vector<uint32_t> multicasts; // the groups it joined (CmMulticast handles)
};

// A multicast group an id joined (JOIN_IP_MCAST, JOIN_MCAST). Over RoCE the join sends
// no MAD (the kernel's cma_iboe_join_multicast): the group's GID is ::ffff:<group>.
struct CmMulticast {
    uint32_t handle = 0; // what LEAVE_MCAST names
    uint64_t uid = 0;    // librdmacm's pointer, returned in its events
    uint32_t id = 0;     // the id that joined
    uid_t user = 0;      // charged to, as an id (user_cm_ids)
    sockaddr_storage group{};
    uint32_t events_reported = 0;
};

// One queued event; `owner` is the id whose events_reported counts it (a connection
// request counts on its listener, as the kernel counts it).
struct CmEvent {
    uint32_t owner = 0;
    rdma_ucm_event_resp resp{};
};

struct CmFile {
    int fd = -1;   // the connection to the preload library
    int pipe = -1; // the event doorbell (see device_interface/rdma_cm.hpp)
    // The process that opened it (its PID, for traces and status only: nothing is found
    // by it) and its user, charged for the file and its ids.
    pid_t pid = 0;
    uid_t uid = 0;
    uid_t account = 0; // charged for it, its ids and events (PeerProcess::account)
    // Its PID namespace and its PID there: `softhca status` and `rdma resource show
    // cm_id` show a viewer only the ids of files of its own user and PID namespace.
    ino_t pidns = 0;
    pid_t ns_pid = 0;
    int host = -1; // the fabric host whose namespace its socket is in (set_hosts), -1: none
    bool privileged_ports = false; // root: may bind below 1024
    // The pipe's inode (pipefs): MIGRATE_ID finds its source file by a descriptor of it.
    ino_t pipe_inode = 0;
    std::deque<CmEvent> events;
    // Its ids (not those destroyed and finishing on the wire): closing the file destroys
    // these and looks at no other.
    std::set<uint32_t> ids;
};

} // namespace softhca::engine
