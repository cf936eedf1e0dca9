// The control room (control/): the control server and its method table
// (control_methods.cpp; control_device, control_memory, control_queues.cpp), each
// context's resource tables (resource_tables.hpp) with the engine's limits, and the
// status document. It may use datapath/, memory/, neighbors/, ports/ and support/; the
// daemon uses it. The data path reaches its tables only through the interfaces they
// implement (QueueDirectory, QueueContext, MemoryKeys).
//
// The control path: a listening SOCK_SEQPACKET Unix socket, one connection per open
// device context, one request and one reply per message (layouts in
// device_interface/control.hpp). A connection's resources die with it, so a process
// that exits or is killed leaves nothing behind, as closing the uverbs fd does.
#pragma once

#include "client_descriptors.hpp"
#include "client_process.hpp"
#include "device_model.hpp"
#include "resource_tables.hpp"
#include "user_counts.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <sys/types.h>
#include <unistd.h>
#include <vector>

namespace softhca::engine {

// `softhca status` as one JSON document (docs/status-schema.md), members in order.
using StatusDocument = nlohmann::ordered_json;

class ControlServer {
  public:
    ControlServer(const std::string& socket_path, const std::vector<Device>& devices,
                  PortSet& ports, std::string prefix);
    ~ControlServer();
    ControlServer(const ControlServer&) = delete;
    ControlServer& operator=(const ControlServer&) = delete;

    int listen_fd() const { return listen_fd_; }
    // Requests served from one connection before the others get their turn.
    static constexpr unsigned kRequestsPerRound = 16;
    // Readable when some context of `device` rang its doorbell pipe (its provider does so
    // after posting when the engine said it sleeps): an epoll set of those pipes, which
    // drain_doorbell_pipes() (doorbells.hpp) empties. One per device, so that each
    // data-path thread sleeps on its own devices' (datapath_threads.hpp).
    int wakeup_fd(size_t device) const { return wakeups_[device]; }

    // Accepts pending connections; returns the new fds (to be watched for input).
    std::vector<int> accept_pending();
    // Handles input on a connection: Closed when the connection is gone and its fd was
    // closed, Paused when its user's descriptors wait to be closed past the bound
    // (client_descriptors.hpp); the caller stops watching it in both cases.
    Served handle_input(int fd);
    // Called with a connection's descriptor before the server lets it go (the loop stops
    // watching it: the file may outlive the descriptor, in the descriptor sink).
    void set_unwatch(std::function<void(int)> unwatch) { unwatch_ = std::move(unwatch); }
    // The paused connections that may be read again (their user's closes drained), to be
    // watched again; those closed meanwhile are forgotten. Cheap when none is paused.
    std::vector<int> resumed();
    bool has_paused() const { return !paused_.empty(); }

    // Devices added and removed at run time (`rdma link add` and `delete`, under the
    // world; daemon/device_links.hpp). add_device: the last of the device list is new:
    // its tables and doorbell wake-up set. remove_device: every context open on it is
    // closed as if its process had gone (every object destroyed; its provider sees the
    // connection end and reports IBV_EVENT_DEVICE_FATAL, later verbs fail with EIO, as
    // after the kernel's disassociation), and its wake-up set closed (the caller stopped
    // watching it).
    void add_device();
    void remove_device(size_t device);
    // LinkAdd and LinkDelete from the engine's user or root, their names checked for
    // length: the engine's loop does the rest (daemon/device_links.hpp) and answers an
    // errno value or 0.
    using LinkHandler =
        std::function<int(bool add, const std::string& device, const std::string& netdev)>;
    void set_link_handler(LinkHandler handler) { link_handler_ = std::move(handler); }

    // Writes an async event record to every context open on the device.
    void raise_device_event(size_t device_index, uint64_t element, uint32_t event_type);

    // Called before each request is served: the data path takes the work requests
    // posted so far (main.cpp), so a request sees what its process posted before it,
    // whatever the engine was doing when the request came (a resize of a CQ counts the
    // completions of sends posted just before it; 11.2.7.3).
    void set_before_request(std::function<void()> take_posted_work) {
        take_posted_work_ = std::move(take_posted_work);
    }

    KeySpace& tables() { return keys_; }
    // The rdma_cm's part of the status document (its "rdma_cm" member), as a viewer may
    // see it: everything, or what a user's files in a PID namespace hold.
    using RdmaCmStatus = std::function<StatusDocument(bool sees_all, uid_t uid, ino_t pidns)>;
    void set_rdma_cm_status(RdmaCmStatus report) { rdma_cm_status_ = std::move(report); }
    // What the engine's loop adds to the status's "engine" object (its data-path threads).
    void set_engine_status(std::function<StatusDocument()> report) {
        engine_status_ = std::move(report);
    }
    // status_document.cpp: the whole status.
    StatusDocument status_document() const { return status_document_for(nullptr); }

  private:
    struct Connection;

  public:
    // One request being served: its connection, its header, its body (exactly the
    // size its method names) and a descriptor that came with it (-1 if none; a handler
    // that keeps it sets it to -1, else it is closed).
    struct Call {
        Connection& c;
        const device_interface::MessageHeader& header;
        const void* message;
        int& fd;
        int& second_fd; // a second descriptor (OpenDevice's memory file), the same way
        template <typename T> const T& request() const { return *static_cast<const T*>(message); }
        ContextResources& resources() const; // the connection's context (device open)
    };

    // control_methods.cpp: every request as one table of {opcode, request size, whether
    // the device must be open, handler}, where dispatch finds it.
    struct Method {
        device_interface::Opcode opcode;
        size_t request_size;
        bool needs_device;
        void (ControlServer::*handler)(Call&);
    };
    static const Method* method_for(uint16_t opcode);

  private:
    struct Connection {
        int fd = -1;
        pid_t pid = 0;
        uid_t uid = 0;
        uid_t account = 0; // charged for the connection (PeerProcess::account)
        PeerProcess peer;  // pinned at accept; its descriptors go to the context
        ino_t pidns = 0;   // its PID namespace, and its PID there
        pid_t ns_pid = 0;
        std::string command;
        uint32_t context_id = 0;
        int device = -1;      // index into devices_, -1 until OpenDevice
        int async_fd = -1;    // the engine's write end of the provider's async event pipe
        int doorbell_fd = -1; // the read end of the context's doorbell pipe
        std::unique_ptr<ContextResources> resources;
    };

    void close_connection(Connection& connection);
    // The status as `viewer` may see it: root in the engine's PID namespace sees every
    // context; anyone else only contexts of its own user in its own PID namespace, with
    // PIDs as that namespace numbers them (as the kernel's restrack filters). nullptr:
    // everything.
    StatusDocument status_document_for(const Connection* viewer) const;
    // A device's per-QP counters (`rdma statistic qp`) as the viewer may see them.
    StatusDocument qp_counters_document(size_t device, bool sees_all,
                                        const Connection* viewer) const;
    // Checks the header, finds the method, checks the device and the size, calls it.
    void dispatch(Connection& c, const void* message, size_t size, int received_fd, int second_fd);
    void reply(Connection& c, const void* message, size_t size, int fd_to_pass = -1);
    void reply(Call& call, const void* message, size_t size, int fd_to_pass = -1) {
        reply(call.c, message, size, fd_to_pass);
    }
    // reply() with a descriptor made for it (SharedMemory::share), closed once sent.
    void reply_sharing(Call& call, const void* message, size_t size, int shared) {
        reply(call.c, message, size, shared);
        if (shared >= 0)
            ::close(shared);
    }
    void reply_status(Connection& c, const device_interface::MessageHeader& request, int status);
    void reply_status(Call& call, int status) { reply_status(call.c, call.header, status); }
    const PortInfo& port_of(const Connection& c) const;

    // control_device.cpp: the device, its ports and the engine.
    void open_device(Call& call);
    void query_device(Call& call);
    void query_port(Call& call);
    void map_doorbells(Call& call);
    void engine_status(Call& call);
    void set_port_state(Call& call);
    void set_fabric_link(Call& call);
    // Whether the connection's process may administer the network (LinkAdd, LinkDelete,
    // QpCounter): the engine's own user, or root with CAP_NET_ADMIN.
    static bool network_administrator(const Connection& c);
    // The device a request names (its NUL-padded name field), if it is one not removed.
    std::optional<size_t> device_named(const char (&field)[device_interface::kMaxDeviceName]) const;
    void link(Call& call);       // LinkAdd and LinkDelete
    void qp_counter(Call& call); // QpCounter (qp_counter_sets.hpp)
    // The process that owns a QP of `device` as a counter shows it, and the QP's counts:
    // false when the device has no such QP.
    bool qp_owner(size_t device, uint32_t qpn, QpCounterSets::Owner& owner,
                  const EngineQp*& qp) const;
    // control_memory.cpp: protection and XRC domains, MRs, windows, device memory.
    void alloc_pd(Call& call);
    void dealloc_pd(Call& call);
    void reg_mr(Call& call);
    void rereg_mr(Call& call);
    void dereg_mr(Call& call);
    void alloc_mw(Call& call);
    void dealloc_mw(Call& call);
    void alloc_dm(Call& call);
    void free_dm(Call& call);
    void reg_dm_mr(Call& call);
    void open_xrcd(Call& call);
    void close_xrcd(Call& call);
    // Single copy (control_grants.cpp).
    void grant_remote_memory(Call& call);
    int grant(const Connection& c, const device_interface::GrantRequest& request,
              device_interface::GrantReply& reply, int& page_fd);
    // control_queues.cpp: CQs, QPs, SRQs and multicast.
    void create_cq(Call& call);
    void resize_cq(Call& call);
    void destroy_cq(Call& call);
    void create_qp(Call& call);
    void open_qp(Call& call);
    void modify_qp(Call& call);
    void query_qp(Call& call);
    void destroy_qp(Call& call);
    void attach_mcast(Call& call);
    void detach_mcast(Call& call);
    void create_srq(Call& call);
    void modify_srq(Call& call);
    void query_srq(Call& call);
    void destroy_srq(Call& call);

    int listen_fd_ = -1;
    std::string socket_path_;
    const std::vector<Device>& devices_;
    LinkHandler link_handler_;
    PortSet& ports_;
    std::string prefix_;
    KeySpace keys_;
    uint32_t next_context_id_ = 1;
    uint64_t refused_connections_ = 0; // out of descriptors, or past a cap of connections
    UserCounts connections_by_user_;
    static constexpr unsigned kAcceptsPerRound = 64;
    int spare_fd_ = -1;        // reserve descriptor, see accept_pending()
    PausedConnections paused_; // connections not watched until resumed()
    std::function<void(int)> unwatch_;
    std::vector<int> wakeups_; // by device: epoll set of its contexts' doorbell pipes
    std::map<int, Connection> connections_;
    RdmaCmStatus rdma_cm_status_;
    std::function<StatusDocument()> engine_status_;
    std::function<void()> take_posted_work_;
};

inline ContextResources& ControlServer::Call::resources() const {
    return *c.resources;
}

// The text report of `softhca status`, rendered from the status document.
std::string status_text(const StatusDocument& doc);

} // namespace softhca::engine
