// The control path: a listening SOCK_SEQPACKET Unix socket, one connection per open
// device context, one request and one reply per message (layouts in
// device_interface/control.hpp). A connection's resources die with it, so a process
// that exits or is killed leaves nothing behind, as closing the uverbs fd does.
#pragma once

#include "device_model.hpp"
#include "resource_tables.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/types.h>
#include <vector>

namespace softhca::engine {

// `softhca status` as one JSON document (docs/status-schema.md), members in order.
using StatusDocument = nlohmann::ordered_json;

class ControlServer {
  public:
    ControlServer(const std::string& socket_path, const std::vector<Device>& devices,
                  PortSet& ports, std::string prefix, int doorbell_fd);
    ~ControlServer();
    ControlServer(const ControlServer&) = delete;
    ControlServer& operator=(const ControlServer&) = delete;

    int listen_fd() const { return listen_fd_; }

    // Accepts pending connections; returns the new fds (to be watched for input).
    std::vector<int> accept_pending();
    // Handles input on a connection. Returns false when the connection is gone and
    // its fd was closed (the caller stops watching it).
    bool handle_input(int fd);

    // Writes an async event record to every context open on the device.
    void raise_device_event(size_t device_index, uint64_t element, uint32_t event_type);

    KeySpace& tables() { return keys_; }
    // The rdma_cm's part of the status document (its "rdma_cm" member).
    void set_rdma_cm_status(std::function<StatusDocument()> report) {
        rdma_cm_status_ = std::move(report);
    }
    // status_document.cpp: the whole status.
    StatusDocument status_document() const;

  private:
    struct Connection {
        int fd = -1;
        pid_t pid = 0;
        uid_t uid = 0;
        std::string command;
        uint32_t context_id = 0;
        int device = -1;   // index into devices_, -1 until OpenDevice
        int async_fd = -1; // write end of the provider's async event pipe
        std::unique_ptr<ContextResources> resources;
    };

    void close_connection(Connection& connection);
    void dispatch(Connection& c, const void* message, size_t size, int received_fd);
    void reply(Connection& c, const void* message, size_t size, int fd_to_pass = -1);
    void reply_status(Connection& c, const device_interface::MessageHeader& request, int status);
    void set_port_state(Connection& c, const void* message, size_t size);
    // control_queues.cpp: QPs, SRQs and multicast; false when the opcode is not theirs.
    bool dispatch_qp(Connection& c, const device_interface::MessageHeader& header,
                     const void* message, size_t size);
    bool dispatch_srq(Connection& c, const device_interface::MessageHeader& header,
                      const void* message, size_t size);
    const PortInfo& port_of(const Connection& c) const;

    int listen_fd_ = -1;
    std::string socket_path_;
    const std::vector<Device>& devices_;
    PortSet& ports_;
    std::string prefix_;
    KeySpace keys_;
    uint32_t next_context_id_ = 1;
    uint64_t refused_connections_ = 0;
    int spare_fd_ = -1; // reserve descriptor, see accept_pending()
    int doorbell_fd_;   // eventfd every context rings when the engine sleeps
    std::map<int, Connection> connections_;
    std::function<StatusDocument()> rdma_cm_status_;
};

// The text report of `softhca status`, rendered from the status document.
std::string status_text(const StatusDocument& doc);

} // namespace softhca::engine
