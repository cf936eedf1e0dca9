// The rdma_cm room (rdma_cm/): may use datapath/ (QP1 through MadSender/MadReceiver),
// memory/, neighbors/, ports/ and support/; the daemon uses it. It does not use the
// control room.
//
// The engine's rdma_cm: what the kernel's rdma_ucm and ib_cm are, for programs that use
// librdmacm. A listening SOCK_SEQPACKET socket takes one connection per open rdma_cm
// file (the preload library makes them); each connection carries librdmacm's commands
// unchanged (rdma/rdma_user_cm.h) and this class answers them as the kernel would:
// ids, addresses and routes from the engine's own ports, events queued per file, and
// the IB CM protocol (IBTA chapter 12) on each port's QP1 through the data path: the
// transport's IbCm (softhca/transport/ib_cm.hpp), a state machine with no I/O, whose
// consumer this class is, as the kernel's cma is ib_cm's.
//
// rdma_cm_server.cpp: files, ids and events. rdma_cm_methods.cpp: the command table;
// rdma_cm_commands.cpp: a handler per command.
// rdma_cm_addresses.cpp: binds, address and route resolution, QP attributes.
// rdma_cm_connections.cpp: connections through the IB CM, the rdma_cm's events of them.
#pragma once

#include "client_descriptors.hpp"
#include "device_model.hpp"
#include "management_datagrams.hpp"
#include "rdma_cm_ids.hpp"
#include "resource_limits.hpp"
#include "softhca/transport/ib_cm.hpp"
#include "user_counts.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace softhca::engine {

class RdmaCmServer final : public MadReceiver, private transport::CmConsumer {
  public:
    RdmaCmServer(const std::string& socket_path, const std::vector<Device>& devices,
                 const PortSet& ports, MadSender& wire);
    ~RdmaCmServer() override;
    RdmaCmServer(const RdmaCmServer&) = delete;
    RdmaCmServer& operator=(const RdmaCmServer&) = delete;

    // What one user may hold (user_cm_files, user_cm_ids of --limits) under the engine's
    // maxima (kEngineMaxima): a file past a cap is refused (its open fails), an id past
    // one is ENOMEM (CREATE_ID) or a rejected connection request.
    void set_limits(const ResourceLimits& limits) { limits_ = limits; }
    // `rdma link delete` removed `device` (marked removed already, under the world): each
    // id bound to it gets RDMA_CM_EVENT_DEVICE_REMOVAL, as the kernel's cma tells the ids
    // of a device that goes (its port is down and deaf: what the ids do next fails).
    void device_removed(size_t device);

    int listen_fd() const { return listen_fd_; }
    std::vector<int> accept_pending();
    // Closed when the connection is gone (its ids destroyed, as closing the file does),
    // Paused as ControlServer::handle_input pauses a connection; resumed() likewise.
    Served handle_input(int fd);
    std::vector<int> resumed();
    void set_unwatch(std::function<void(int)> unwatch) { unwatch_ = std::move(unwatch); }
    bool has_paused() const { return !paused_.empty(); }

    // Address resolution and CM retransmissions that are due. True when anything happened.
    bool poll(uint64_t now);
    // The earliest of those, or UINT64_MAX.
    uint64_t next_deadline() const;

    void receive_mad(size_t port, const MadPeer& from, const uint8_t* mad, size_t length,
                     uint64_t now) override;

    // Its part of `softhca status`: the counts, and each live id (as `rdma resource show
    // cm_id` lists them) of the files the viewer may see: all of them when `sees_all`,
    // else those of files opened by `uid` in PID namespace `pidns` (their PIDs as that
    // namespace numbers them), as the kernel's resource tracker shows a namespace its own.
    nlohmann::ordered_json status_document(bool sees_all, uid_t uid, ino_t pidns) const;

    // A fabric's hosts in network namespaces of their own (--fabric ...,netns=1):
    // device_host[d] is device d's host, host_of_namespace(dev, ino) the host whose
    // namespace that is (-1: none). An id made in a host's namespace reaches only that
    // host's devices, and its ports and listeners are its own, as the kernel keeps rdma_cm
    // ids per network namespace; one made in any other namespace (the engine's) reaches
    // none of them, as the engine's namespace has none of the hosts' interfaces.
    void set_hosts(std::vector<int> device_host,
                   std::function<int(dev_t, ino_t)> host_of_namespace) {
        device_host_ = std::move(device_host);
        host_of_namespace_ = std::move(host_of_namespace);
    }

    // Counters (status and tests): the commands', and the IB CM's.
    struct Counters {
        uint64_t commands = 0;
        uint64_t bad_commands = 0; // refused with an errno
        uint64_t mads_in = 0;
        uint64_t mads_out = 0;
        uint64_t mads_dropped = 0; // malformed, unknown attribute, or matching no id
        uint64_t retransmissions = 0;
        uint64_t duplicates = 0;    // answered from the last message sent
        uint64_t backlog_full = 0;  // connection requests refused past a listener's backlog
        uint64_t over_limit = 0;    // connection requests refused: the user's ids at the cap
        uint64_t refused_files = 0; // files refused: the user's files at the cap
    };
    Counters counters() const;

  private:
    // What a command answers besides its result: bytes for the response pointer.
    struct Reply {
        uint64_t address = 0;
        std::vector<uint8_t> bytes;
        bool wait_again = false;
        template <typename T> void set(uint64_t to, const T& value, size_t out) {
            address = to;
            bytes.assign(reinterpret_cast<const uint8_t*>(&value),
                         reinterpret_cast<const uint8_t*>(&value) + std::min(out, sizeof(T)));
        }
    };

    // rdma_cm_server.cpp
    void close_file(CmFile& file);
    // `passed_fd`: the descriptor the message brought (MIGRATE_ID's), -1: none; the
    // caller keeps it and closes it.
    void dispatch(CmFile& file, const uint8_t* message, size_t size, int passed_fd = -1);
    // What every command's handler gets besides its input: the file it was written on,
    // the bytes past the command (SET_OPTION's value), the time and the descriptor the
    // command brought (-1: none).
    struct Call {
        CmFile& file;
        const uint8_t* extra;
        size_t extra_bytes;
        uint64_t now;
        int passed_fd;
    };
    // rdma_cm_methods.cpp: every command as one table indexed by command number (as the
    // kernel's ucma_cmd_table): the sizes of its input and of its response, and its
    // handler, which gets the input copied in as the kernel copies it (a shorter one
    // reads as zeros). A command with no handler (GET_OPTION) is ENOSYS, one with no
    // method EINVAL, as ucma_write answers them.
    struct Method {
        size_t in_bytes;
        size_t out_bytes;
        int (*handler)(RdmaCmServer& server, Call& call, const uint8_t* in, size_t in_bytes,
                       Reply& reply);
    };
    static const Method* method_for(uint32_t cmd);
    // A Method's handler: the input copied into the command's structure, then `Handler`.
    template <typename In, int (RdmaCmServer::*Handler)(Call&, const In&, Reply&)>
    static int invoke(RdmaCmServer& server, Call& call, const uint8_t* in, size_t in_bytes,
                      Reply& reply);
    int command(CmFile& file, uint32_t cmd, const uint8_t* in, size_t in_bytes,
                const uint8_t* extra, size_t extra_bytes, Reply& reply, int passed_fd = -1);
    // rdma_cm_commands.cpp: one handler per command (RDMA_USER_CM_CMD_*).
    int cmd_create_id(Call& call, const rdma_ucm_create_id& c, Reply& reply);
    int cmd_destroy_id(Call& call, const rdma_ucm_destroy_id& c, Reply& reply);
    int cmd_bind_ip(Call& call, const rdma_ucm_bind_ip& c, Reply& reply);
    int cmd_resolve_ip(Call& call, const rdma_ucm_resolve_ip& c, Reply& reply);
    int cmd_resolve_route(Call& call, const rdma_ucm_resolve_route& c, Reply& reply);
    int cmd_query_route(Call& call, const rdma_ucm_query& c, Reply& reply);
    int cmd_connect(Call& call, const rdma_ucm_connect& c, Reply& reply);
    int cmd_listen(Call& call, const rdma_ucm_listen& c, Reply& reply);
    int cmd_accept(Call& call, const rdma_ucm_accept& c, Reply& reply);
    int cmd_reject(Call& call, const rdma_ucm_reject& c, Reply& reply);
    int cmd_disconnect(Call& call, const rdma_ucm_disconnect& c, Reply& reply);
    int cmd_init_qp_attr(Call& call, const rdma_ucm_init_qp_attr& c, Reply& reply);
    int cmd_get_event(Call& call, const rdma_ucm_get_event& c, Reply& reply);
    int cmd_set_option(Call& call, const rdma_ucm_set_option& c, Reply& reply);
    int cmd_notify(Call& call, const rdma_ucm_notify& c, Reply& reply);
    int cmd_join_ip_mcast(Call& call, const rdma_ucm_join_ip_mcast& c, Reply& reply);
    int cmd_leave_mcast(Call& call, const rdma_ucm_destroy_id& c, Reply& reply);
    int cmd_migrate_id(Call& call, const rdma_ucm_migrate_id& c, Reply& reply);
    int cmd_query(Call& call, const rdma_ucm_query& c, Reply& reply);
    int cmd_bind(Call& call, const rdma_ucm_bind& c, Reply& reply);
    int cmd_resolve_addr(Call& call, const rdma_ucm_resolve_addr& c, Reply& reply);
    int cmd_join_mcast(Call& call, const rdma_ucm_join_mcast& c, Reply& reply);
    CmId* find_id(const CmFile& file, uint32_t handle);
    // Charged to the file's user; null past the user's cap or the engine's maximum.
    CmId* create_id(CmFile& file, uint64_t uid, uint16_t port_space, uint8_t qp_type);
    void destroy_id(CmId& id); // tears the connection down on the wire, drops its events
    void release_id(CmId& id); // forgets it entirely
    // A connection request's listener while it has one (null once it is destroyed).
    CmId* listener_of(const CmId& id) {
        if (!id.listener)
            return nullptr;
        auto it = ids_.find(id.listener);
        return it == ids_.end() ? nullptr : it->second.get();
    }
    // The ids bound to a port (not those of a connection request), by port space and
    // port: what binds, listens and arriving requests look at, not every id.
    void index_bound_port(const CmId& id);
    void forget_bound_port(const CmId& id);
    // rdma_cm_addresses.cpp
    int bind(CmId& id, const sockaddr* addr, size_t length);
    // `room`: the bytes each address has in its command (sockaddr_in6 for RESOLVE_IP,
    // sockaddr_storage for RESOLVE_ADDR); no more is read.
    int resolve_address(CmId& id, const sockaddr* src, const sockaddr* dst, size_t room,
                        uint32_t timeout_ms, uint64_t now);
    // `host`: only that host's devices (set_hosts; without hosts, every device).
    int device_for_address(const sockaddr* addr, int host) const;
    int device_toward(const transport::Gid& destination, int host) const;
    bool device_in_host(size_t device, int host) const {
        if (devices_[device].removed)
            return false;
        return device_host_.empty() ||
               (device < device_host_.size() && device_host_[device] == host);
    }
    int host_of_socket(int fd) const;
    // The port's own address of the destination's family (zeros when it has none).
    transport::Gid own_gid_toward(size_t device, const transport::Gid& destination) const;
    // The id's source address as a GID (its bound address, or the port's toward the
    // peer), and its index in the port's GID table.
    transport::Gid source_gid(const CmId& id) const;
    uint8_t source_gid_index(const CmId& id) const;
    size_t device_of_port(size_t port) const; // devices_.size() when none
    int first_active_device(int host) const;  // -1 when every port is down
    bool port_in_use(const CmId& id, uint16_t port) const;
    void queue_event(CmId& owner, uint32_t type, int32_t status, uint32_t reported_id = 0);
    void queue_event(CmId& owner, const CmEvent& event);
    // An event of `owner`'s, counted on it and reported with its uid and handle.
    static CmEvent event_for(const CmId& owner, uint32_t type, int32_t status = 0);
    // Drops the events of these ids and groups (owned by or naming them) from the file.
    void drop_events(CmFile& file, const std::vector<uint32_t>& owners);
    // Events queued for a user's files, at most kMaxQueuedEventsPerUser: a command that
    // would queue one more (a resolution, a join) fails with ENOMEM instead; the wire's
    // events (a few per connection) are never refused.
    static constexpr uint64_t kMaxQueuedEventsPerUser = 65536;
    bool events_full(const CmFile& file) const {
        return events_by_user_.of(file.account) >= kMaxQueuedEventsPerUser;
    }
    // An id or a multicast join charged to a user (user_cm_ids) under the engine's
    // maximum; false past either.
    bool charge_id(uid_t user) {
        return ids_.size() + multicasts_.size() < kEngineMaxima.cm_ids &&
               ids_by_user_.take(user, limits_.user_cm_ids);
    }
    // A handle no live id or group has (the counter wraps only after 2^32 of them).
    uint32_t next_free_handle();
    int join_multicast(CmId& id, uint64_t uid, const sockaddr* group, size_t length,
                       uint16_t join_flags, uint32_t& handle);
    int init_qp_attr(const CmId& id, uint32_t qp_state, struct ib_uverbs_qp_attr& attr) const;
    void fill_route(const CmId& id, struct ib_user_path_rec& path) const;
    static void fill_roce_ah(ib_uverbs_ah_attr& ah, const transport::Gid& dgid, uint8_t tos,
                             uint8_t sgid_index = 0);
    uint8_t active_mtu(const CmId& id) const;

    // rdma_cm_connections.cpp: CONNECT (a REQ, or a SIDR_REQ for a UD id) and the IB CM's
    // consumer: its MADs onto the wire, the requests it asks about, its events.
    int connect(CmId& id, const rdma_ucm_conn_param& param, uint64_t now);
    int connect_datagram(CmId& id, const rdma_ucm_conn_param& param, uint64_t now);
    // The IB CM's connection of an id, or null.
    const transport::CmConnection* connection_of(const CmId& id) const {
        return id.connection ? cm_.connection(id.connection) : nullptr;
    }
    transport::CmConnectionState connection_state(const CmId& id) const {
        const transport::CmConnection* c = connection_of(id);
        return c ? c->state : transport::CmConnectionState::Idle;
    }
    void send_mad(size_t port, const MadPeer& to, const transport::CmMad& mad,
                  uint64_t now) override;
    transport::CmRequestAnswer connection_request(size_t port, const MadPeer& from,
                                                  const transport::CmMad& mad) override;
    void cm_event(const transport::CmConnection& connection, transport::CmEventType type,
                  const transport::CmMad* mad, uint64_t now) override;
    CmId* new_request(CmId& listener, size_t device, const MadPeer& from,
                      const transport::CmaHeader& cma, uint64_t sid);
    void fill_ud_event(CmEvent& event, const CmId& id, uint32_t qpn, uint32_t qkey,
                       const uint8_t* data, size_t bytes) const;
    CmId* listener_for(uint16_t port_space, uint16_t port, size_t device,
                       const transport::Gid& destination);
    // The rdma_cm's IP addressing header of an id's REQ or SIDR_REQ.
    transport::CmaHeader cma_header(const CmId& id) const;
    void fill_conn_event(CmEvent& event, const transport::CmConnection& connection,
                         const uint8_t* data, size_t bytes) const;
    // A timer starts (a neighbour to wait for): poll() looks at the ids no later than `at`.
    void schedule(uint64_t at) { wake_at_ = std::min(wake_at_, at); }
    // An address query's neighbour is known (ADDR_RESOLVED queued) or its time is up
    // (ADDR_ERROR queued): true, and the id has left AddrQuery.
    bool resolution_ended(CmId& id, uint64_t now);

    int listen_fd_ = -1;
    int spare_fd_ = -1; // kept to refuse a client when descriptors run out

    std::string socket_path_;
    const std::vector<Device>& devices_;
    const PortSet& ports_;
    MadSender& wire_;
    std::map<int, std::unique_ptr<CmFile>> files_;
    PausedConnections paused_; // files not watched until resumed()
    std::function<void(int)> unwatch_;
    // By their pipe's inode (MIGRATE_ID). Pipe inode numbers are 32-bit and wrap, so two
    // live pipes may share one: a lookup takes only the caller's user's files.
    std::multimap<ino_t, CmFile*> files_by_pipe_;
    std::map<uint32_t, std::unique_ptr<CmId>> ids_;
    std::map<uint32_t, CmMulticast> multicasts_;
    // index_bound_port: by port space and port.
    std::multimap<std::pair<uint16_t, uint16_t>, uint32_t> bound_ports_;
    std::set<uint32_t> resolving_; // ids in AddrQuery: what poll() visits
    ResourceLimits limits_;
    UserCounts ids_by_user_, files_by_user_, events_by_user_;
    uint32_t next_handle_ = 1;
    std::mt19937 random_;
    // The IB CM: its response timeout (IBA exponent, as the kernel's), its retries and the
    // path's packet life time (the kernel's CMA_IBOE_PACKET_LIFETIME). Environment:
    // SOFTHCA_CM_RESPONSE_TIMEOUT, SOFTHCA_CM_MAX_RETRIES, SOFTHCA_CM_PACKET_LIFE.
    transport::IbCm cm_;
    bool trace_ = false;
    uint64_t wake_at_ = UINT64_MAX; // no address query has anything due before this
    // An address query looks again this often; at most kResolveChecks of them are looked
    // at per look, in turn (resolve_cursor_: the handle to go on after), so a user with
    // thousands of ids resolving addresses nobody answers costs every look the same.
    static constexpr uint64_t kNeighborCheckNs = 1'000'000;
    static constexpr size_t kResolveChecks = 256;
    uint32_t resolve_cursor_ = 0;
    // SOFTHCA_RDMA_CM_TRACE: each command and its result to the log
    Counters counters_;
    std::vector<int> device_host_;
    std::function<int(dev_t, ino_t)> host_of_namespace_;
};

} // namespace softhca::engine
