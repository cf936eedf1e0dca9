// The emulated rdma_cm device (what the kernel's rdma_ucm module is): the preload
// library gives librdmacm a file for /dev/infiniband/rdma_cm and carries each command
// librdmacm writes to it, unchanged, to the engine, where the ids, their events and the
// IB CM live. One SOCK_SEQPACKET connection per open rdma_cm file, on the engine's
// rdma_cm socket (named in the device tree, class/misc/rdma_cm/softhca_engine_socket).
//
// The file the application holds is a pipe, the event queue's doorbell: the engine
// writes one byte into it per queued event and takes one out when the event is
// reported (GET_EVENT) or dropped (DESTROY_ID), so it is readable exactly while events
// are queued and poll, epoll, select and O_NONBLOCK behave as on the kernel's file. The
// application never reads it. The engine's end is a second, non-blocking open of the
// same pipe, passed with OpenRequest.
//
// MIGRATE_ID is written on the file the id moves to and names, by descriptor number
// (`fd`), the file the id is on now; the kernel finds that file with fdget in the
// caller's own table. The preload library passes the descriptor the caller holds at that
// number along with the command (SCM_RIGHTS): the engine finds the source file by that
// descriptor's pipe, so a caller reaches only a file it holds, as with the kernel.
//
// Versioning: every message starts with RdmaCmHeader; `version` must equal
// kRdmaCmVersion or the engine answers EPROTO. Host byte order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softhca::device_interface {

constexpr uint16_t kRdmaCmMagic = 0x5243; // "RC"
// 2: MIGRATE_ID carries the source file's descriptor; Open no longer names it.
constexpr uint16_t kRdmaCmVersion = 2;
constexpr size_t kMaxRdmaCmMessage = 4096;
// The ABI version the kernel's rdma_ucm reports (RDMA_USER_CM_ABI_VERSION).
constexpr int kRdmaCmAbiVersion = 4;
constexpr const char* kRdmaCmDevicePath = "/dev/infiniband/rdma_cm";
constexpr const char* kRdmaCmSocketFile = "class/misc/rdma_cm/softhca_engine_socket";

enum class RdmaCmOp : uint16_t {
    Open = 1,    // first message; carries the engine's end of the event pipe
    Command = 2, // one write(2) of librdmacm, as written, then the command's extra input
};

struct RdmaCmHeader {
    uint16_t magic;
    uint16_t version;
    uint16_t op;
    uint16_t reserved;
    uint32_t length; // whole message, header included
    uint32_t sequence;
};
static_assert(sizeof(RdmaCmHeader) == 16);

// Open: the engine's end of the pipe rides along as SCM_RIGHTS.
struct RdmaCmOpen {
    RdmaCmHeader header;
    uint32_t reserved[2];
};
static_assert(sizeof(RdmaCmOpen) == 24);

// Command: the bytes of the write follow the header (rdma_ucm_cmd_hdr first), then
// `extra_bytes` the command points at that the engine cannot read itself: the option
// value of SET_OPTION. MIGRATE_ID's brings the descriptor its `fd` names (SCM_RIGHTS);
// any other command's descriptor is closed unread.
struct RdmaCmCommand {
    RdmaCmHeader header;
    uint32_t write_bytes;
    uint32_t extra_bytes;
};
static_assert(sizeof(RdmaCmCommand) == 24);

// The answer to either request. `result` is what write(2) returns: the length written,
// or -errno. The response bytes that follow are copied to `response_address` (the
// command's response pointer) before write(2) returns. `wait_again` (GET_EVENT only):
// the event the pipe announced was taken by another thread or dropped; wait again.
struct RdmaCmReply {
    RdmaCmHeader header;
    int32_t result;
    uint32_t response_bytes;
    uint64_t response_address;
    uint32_t wait_again;
    uint32_t reserved;
};
static_assert(sizeof(RdmaCmReply) == 40);

} // namespace softhca::device_interface
