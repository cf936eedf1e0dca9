// The control path between the provider (user-space driver) and the engine (the card):
// one SOCK_SEQPACKET Unix socket per open device context, one request and one reply
// per message. This header is the whole contract: both sides include it, nothing else.
//
// Versioning: every message starts with MessageHeader; `version` must equal
// kControlVersion or the engine answers EPROTO. Fields are host byte order (both ends
// are on one host). Layouts are fixed-size, naturally aligned, and checked below.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softhca::device_interface {

constexpr uint16_t kControlMagic = 0x5348; // "SH"
constexpr uint16_t kControlVersion = 8;
constexpr size_t kMaxControlMessage = 4096;

enum class Opcode : uint16_t {
    OpenDevice = 1, // names the device this connection serves; must come first
    QueryDevice = 2,
    QueryPort = 3,
    AllocPd = 4,
    DeallocPd = 5,
    RegMr = 6,
    DeregMr = 7,
    CreateCq = 8,
    ResizeCq = 9,
    DestroyCq = 10,
    EngineStatus = 11, // text report for `softhca status`; allowed without OpenDevice
    SetPortState = 12, // administrator takes a port down or up; allowed without OpenDevice
    CreateQp = 13,
    ModifyQp = 14,
    QueryQp = 15,
    DestroyQp = 16,
    CreateSrq = 17,
    ModifySrq = 18,
    QuerySrq = 19,
    DestroySrq = 20,
    AttachMcast = 21,
    DetachMcast = 22,
    OpenXrcd = 23,          // OpenXrcdRequest, reply HandleReply
    CloseXrcd = 24,         // HandleRequest
    OpenQp = 25,            // OpenQpRequest, reply CreateQpReply with the QP's ring fd
    AllocMw = 26,           // AllocMwRequest, reply AllocMwReply
    DeallocMw = 27,         // HandleRequest
    ReregMr = 28,           // ReregMrRequest, reply RegMrReply (the keys stay)
    EngineStatusJson = 29,  // the status as JSON (docs/status-schema.md); without OpenDevice
    MapDoorbells = 30,      // MessageHeader, reply MapDoorbellsReply with the page's memfd
    AllocDm = 31,           // AllocDmRequest, reply AllocDmReply with the memory's memfd
    FreeDm = 32,            // HandleRequest
    RegDmMr = 33,           // RegDmMrRequest, reply RegMrReply
    SetFabricLink = 34,     // administrator takes a fabric link down or up; without OpenDevice
    GrantRemoteMemory = 35, // GrantRequest, reply GrantReply with the grant page's memfd
    LinkAdd = 36,           // LinkRequest: administrator adds a device; without OpenDevice
    LinkDelete = 37,        // LinkRequest: administrator removes a device; without OpenDevice
    QpCounter = 38,         // QpCounterRequest, reply QpCounterReply; without OpenDevice
};

struct MessageHeader {
    uint16_t magic;
    uint16_t version;
    uint16_t opcode;
    uint16_t reserved;
    uint32_t length; // whole message, header included
    uint32_t sequence;
};
static_assert(sizeof(MessageHeader) == 16);

// Every reply starts with this; status is 0 or a positive errno value. A reply whose
// sequence is 0 answers no request: it is the engine refusing the connection (a user at
// its cap of connections: EMFILE), sent before the engine closes it; the provider fails
// the call it was waiting on with that status. Requests never carry sequence 0.
struct ReplyHeader {
    MessageHeader header;
    int32_t status;
    uint32_t reserved;
};
static_assert(sizeof(ReplyHeader) == 24);

// Memory access rights, numerically equal to the verbs access flags.
enum AccessFlags : uint32_t {
    kAccessLocalWrite = 1u << 0,
    kAccessRemoteWrite = 1u << 1,
    kAccessRemoteRead = 1u << 2,
    kAccessRemoteAtomic = 1u << 3,
    kAccessMwBind = 1u << 4,
    kAccessZeroBased = 1u << 5,
    kAccessOnDemand = 1u << 6,
    kAccessHugetlb = 1u << 7,
    kAccessRelaxedOrdering = 1u << 20, // first of the optional flags
    kAccessOptionalRange = 0x3ffu << 20,
};

constexpr uint32_t kMaxDeviceName = 64;

struct OpenDeviceRequest {
    MessageHeader header;
    char device_name[kMaxDeviceName];
    uint32_t provider_abi; // kControlVersion the provider was built with
    uint32_t reserved;
    // 16 bytes the process holds at probe_addr (this request's own `probe`, random):
    // the engine reads them back through the memory file that comes along, which
    // proves that file reaches this process's memory.
    uint64_t probe_addr;
    uint8_t probe[16];
};
static_assert(sizeof(OpenDeviceRequest) == 112);

// Sent with two SCM_RIGHTS fds: the write end of the context's async event pipe (the
// engine writes 16-byte async event records (element, event_type, reserved) to it),
// and the process's own /proc/self/mem, opened O_RDWR: the memory the context reaches
// (hca_engine/src/memory/client_process.hpp). The reply carries the write end of the
// context's doorbell pipe (see qp_ring.hpp).
struct OpenDeviceReply {
    ReplyHeader reply;
    uint32_t context_id;
    uint32_t phys_port_cnt;
};
static_assert(sizeof(OpenDeviceReply) == 32);

// The context's doorbell page (doorbell_page.hpp), sent with its memfd.
struct MapDoorbellsReply {
    ReplyHeader reply;
    uint32_t bytes; // to map
    uint32_t slots;
};
static_assert(sizeof(MapDoorbellsReply) == 32);

// Device memory (ibv_alloc_dm(3)): engine memory the process maps. Each device has a
// pool of kDeviceMemoryPoolBytes; one allocation may take kDeviceMemoryBytes of it
// (max_dm_size), which is also what one user may hold by default (--limits user_dm_kb):
// one user leaves the rest of the pool to the others.
constexpr uint64_t kDeviceMemoryBytes = 256 * 1024;
constexpr uint64_t kDeviceMemoryPoolBytes = 1024 * 1024;
constexpr uint32_t kMaxDmLogAlign = 12; // a page

struct AllocDmRequest {
    MessageHeader header;
    uint64_t length;
    uint32_t log_align_req;
    uint32_t reserved;
};
static_assert(sizeof(AllocDmRequest) == 32);

// Sent with the memfd of the memory, `bytes` long (the length rounded up to pages).
struct AllocDmReply {
    ReplyHeader reply;
    uint32_t dm_handle;
    uint32_t reserved;
    uint64_t bytes;
};
static_assert(sizeof(AllocDmReply) == 40);

// ibv_reg_dm_mr: a zero-based MR over [offset, offset + length) of the memory.
struct RegDmMrRequest {
    MessageHeader header;
    uint64_t offset;
    uint64_t length;
    uint32_t pd_handle;
    uint32_t dm_handle;
    uint32_t access;
    uint32_t reserved;
};
static_assert(sizeof(RegDmMrRequest) == 48);

struct DeviceAttributes {
    char fw_ver[64];
    uint64_t node_guid;      // wire order packed into a number, first byte most significant
    uint64_t sys_image_guid; // same encoding
    uint64_t max_mr_size;
    uint64_t page_size_cap;
    uint32_t vendor_id;
    uint32_t vendor_part_id;
    uint32_t hw_ver;
    uint32_t max_qp;
    uint32_t max_qp_wr;
    uint32_t device_cap_flags;
    uint32_t max_sge;
    uint32_t max_sge_rd;
    uint32_t max_cq;
    uint32_t max_cqe;
    uint32_t max_mr;
    uint32_t max_pd;
    uint32_t max_qp_rd_atom;
    uint32_t max_ee_rd_atom;
    uint32_t max_res_rd_atom;
    uint32_t max_qp_init_rd_atom;
    uint32_t atomic_cap; // enum ibv_atomic_cap value
    uint32_t max_srq;
    uint32_t max_srq_wr;
    uint32_t max_srq_sge;
    uint32_t max_pkeys;
    uint32_t local_ca_ack_delay;
    uint32_t phys_port_cnt;
    uint32_t num_comp_vectors;
    uint32_t max_inline_data;
    uint32_t max_ah;
    uint32_t max_mcast_grp;
    uint32_t max_mcast_qp_attach;
    uint32_t max_total_mcast_qp_attach;
    uint32_t max_mw;
};
static_assert(sizeof(DeviceAttributes) == 216);

struct QueryDeviceReply {
    ReplyHeader reply;
    DeviceAttributes attr;
};

enum class PortState : uint32_t { Down = 1, Init = 2, Armed = 3, Active = 4 };

// The port's capability mask (IBTA 14.2.5.6 PortInfo:CapabilityMask), as ibv_query_port's
// port_cap_flags and sysfs's ports/N/cap_mask give it: the communication manager is
// supported (IsCommunicationManagementSupported, bit 16), as Linux rxe says.
constexpr uint32_t kPortCapabilityMask = 1u << 16;

struct PortAttributes {
    uint32_t state;      // PortState
    uint32_t phys_state; // 5 = LinkUp, 3 = Disabled (IBTA PortInfo PortPhysicalState)
    uint32_t max_mtu;    // IBTA MTU code 1..5
    uint32_t active_mtu;
    uint32_t eth_mtu;
    uint32_t gid_tbl_len;
    uint32_t pkey_tbl_len;
    uint32_t port_cap_flags;
    uint32_t max_msg_sz;
    uint32_t active_width; // IBTA encoding: 1=1x 2=4x 4=8x 8=12x
    uint32_t active_speed; // IBTA encoding: 1=SDR ... 32=EDR, 64=HDR
    uint32_t link_layer;   // 2 = Ethernet (IBV_LINK_LAYER_ETHERNET)
    uint32_t ipv4;         // host order
    uint8_t mac[6];
    uint8_t reserved[2];
};
static_assert(sizeof(PortAttributes) == 60);

struct QueryPortRequest {
    MessageHeader header;
    uint32_t port_num;
    uint32_t reserved;
};

struct QueryPortReply {
    ReplyHeader reply;
    PortAttributes attr;
    uint32_t reserved;
};
static_assert(sizeof(QueryPortReply) == 88);

struct HandleRequest { // DeallocPd, DeregMr, DestroyCq
    MessageHeader header;
    uint32_t handle;
    uint32_t reserved;
};
static_assert(sizeof(HandleRequest) == 24);

struct HandleReply { // AllocPd
    ReplyHeader reply;
    uint32_t handle;
    uint32_t reserved;
};
static_assert(sizeof(HandleReply) == 32);

struct RegMrRequest {
    MessageHeader header;
    uint64_t addr;
    uint64_t length;
    uint64_t iova;
    uint32_t pd_handle;
    uint32_t access;
};
static_assert(sizeof(RegMrRequest) == 48);

struct RegMrReply {
    ReplyHeader reply;
    uint32_t mr_handle;
    uint32_t lkey;
    uint32_t rkey;
    uint32_t flags; // none defined: 0
    // ReregMr of a granted MR: its grant slot, its generation now raised, sent with the
    // context's grant page (as DeregMrReply); kNoGrantSlot otherwise.
    uint32_t grant_slot;
    uint32_t reserved;
};
static_assert(sizeof(RegMrReply) == 48);

// ibv_rereg_mr(3): what changes (the IBV_REREG_MR_CHANGE_* values).
constexpr uint32_t kReregTranslation = 1u << 0;
constexpr uint32_t kReregPd = 1u << 1;
constexpr uint32_t kReregAccess = 1u << 2;

struct ReregMrRequest {
    MessageHeader header;
    uint32_t mr_handle;
    uint32_t flags; // kRereg*
    uint64_t addr;  // with kReregTranslation (the iova is the address)
    uint64_t length;
    uint32_t pd_handle; // with kReregPd
    uint32_t access;    // with kReregAccess
};
static_assert(sizeof(ReregMrRequest) == 48);

// Memory windows (ibv_alloc_mw(3)): type 1 or 2; the reply's rkey is the window's
// first (the index is fixed, a bind changes the low 8 bits).
struct AllocMwRequest {
    MessageHeader header;
    uint32_t pd_handle;
    uint32_t type;
};
static_assert(sizeof(AllocMwRequest) == 24);

struct AllocMwReply {
    ReplyHeader reply;
    uint32_t mw_handle;
    uint32_t rkey;
};
static_assert(sizeof(AllocMwReply) == 32);

// With kCreateCqChannel, an SCM_RIGHTS fd rides along: the write end of the completion
// channel (a pipe) that receives one ib_uverbs_comp_event_desc {user_handle} per event.
constexpr uint32_t kCreateCqChannel = 1u << 0;
// Every completion carries its time (CompletionEntry::completion_ns).
constexpr uint32_t kCreateCqTimestamps = 1u << 1;

struct CreateCqRequest {
    MessageHeader header;
    uint64_t user_handle; // the element of CQ async events and of completion events
    uint32_t cqe;
    uint32_t comp_vector;
    uint32_t flags; // kCreateCq*
    uint32_t reserved;
};
static_assert(sizeof(CreateCqRequest) == 40);

// Sent with an SCM_RIGHTS fd: the memfd holding the CQ ring (see cq_ring.hpp).
struct CreateCqReply {
    ReplyHeader reply;
    uint32_t cq_handle;
    uint32_t cqe;        // usable entries, >= requested
    uint64_t ring_bytes; // size to map
};
static_assert(sizeof(CreateCqReply) == 40);

struct ResizeCqRequest {
    MessageHeader header;
    uint32_t cq_handle;
    uint32_t cqe;
};
static_assert(sizeof(ResizeCqRequest) == 24);

using ResizeCqReply = CreateCqReply; // same fields, new ring fd attached

struct QpCaps {
    uint32_t max_send_wr;
    uint32_t max_recv_wr;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t max_inline_data;
    uint32_t reserved;
};
static_assert(sizeof(QpCaps) == 24);

struct CreateQpRequest {
    MessageHeader header;
    uint64_t user_handle; // the ibv_qp, element of QP async events
    uint32_t pd_handle;
    uint32_t send_cq_handle;
    uint32_t recv_cq_handle;
    uint32_t qp_type; // enum ibv_qp_type
    uint32_t sq_sig_all;
    uint32_t srq_handle; // 0: the QP has its own receive queue
    QpCaps caps;
    uint32_t xrcd_handle; // XRC target QPs
    uint32_t reserved;
};
static_assert(sizeof(CreateQpRequest) == 80);

// Sent with an SCM_RIGHTS fd: the memfd with the work queues (qp_ring.hpp).
struct CreateQpReply {
    ReplyHeader reply;
    uint32_t qp_handle;
    uint32_t qp_num;
    QpCaps caps; // what was granted (>= what was asked)
    uint64_t ring_bytes;
};
static_assert(sizeof(CreateQpReply) == 64);

// The fields of ibv_qp_attr that exist in RoCE, with the ibv_qp_attr_mask that says
// which are set.
struct QpAttributes {
    uint32_t qp_state;
    uint32_t cur_qp_state;
    uint32_t path_mtu;
    uint32_t qkey;
    uint32_t rq_psn;
    uint32_t sq_psn;
    uint32_t dest_qp_num;
    uint32_t qp_access_flags;
    uint16_t pkey_index;
    uint8_t port_num;
    uint8_t sq_draining;
    uint8_t max_rd_atomic;
    uint8_t max_dest_rd_atomic;
    uint8_t min_rnr_timer;
    uint8_t timeout;
    uint8_t retry_cnt;
    uint8_t rnr_retry;
    uint8_t en_sqd_async_notify;
    uint8_t reserved0;
    // Address vector (ibv_ah_attr with its GRH)
    uint8_t dgid[16];
    uint32_t flow_label;
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t traffic_class;
    uint8_t sl;
    uint8_t is_global;
    uint8_t ah_port_num;
    uint16_t dlid;
    uint32_t reserved1;
};
static_assert(sizeof(QpAttributes) == 76);

struct ModifyQpRequest {
    MessageHeader header;
    uint32_t qp_handle;
    uint32_t attr_mask;
    QpAttributes attr;
};
static_assert(sizeof(ModifyQpRequest) == 100);

struct QueryQpRequest {
    MessageHeader header;
    uint32_t qp_handle;
    uint32_t reserved;
};

struct QueryQpReply {
    ReplyHeader reply;
    QpAttributes attr;
    QpCaps caps;
    uint32_t sq_sig_all;
    uint32_t reserved;
};
static_assert(sizeof(QueryQpReply) == 132);

// Shared receive queues (ibv_create_srq / ibv_create_srq_ex).
struct CreateSrqRequest {
    MessageHeader header;
    uint64_t user_handle; // the ibv_srq, element of SRQ async events
    uint32_t pd_handle;
    uint32_t max_wr;
    uint32_t max_sge;
    uint32_t srq_limit;
    uint32_t srq_type; // enum ibv_srq_type: 0 basic, 1 XRC
    uint32_t xrcd_handle;
    uint32_t cq_handle; // XRC: where the SRQ's receives complete
    uint32_t reserved;
};
static_assert(sizeof(CreateSrqRequest) == 56);

// Sent with an SCM_RIGHTS fd: the memfd of the SRQ's ring (qp_ring.hpp, receive side
// only).
struct CreateSrqReply {
    ReplyHeader reply;
    uint32_t srq_handle;
    uint32_t srq_num; // ibv_get_srq_num
    uint32_t max_wr;  // granted
    uint32_t max_sge;
    uint64_t ring_bytes;
};
static_assert(sizeof(CreateSrqReply) == 48);

// attr_mask: IBV_SRQ_MAX_WR (1) resizes, IBV_SRQ_LIMIT (2) arms the limit event.
struct ModifySrqRequest {
    MessageHeader header;
    uint32_t srq_handle;
    uint32_t attr_mask;
    uint32_t max_wr;
    uint32_t srq_limit;
};
static_assert(sizeof(ModifySrqRequest) == 32);

// After a resize the reply carries the new ring's fd (an empty ring: everything posted
// before was taken into the engine) and max_wr/ring_bytes describe it.
using ModifySrqReply = CreateSrqReply;

struct QuerySrqReply {
    ReplyHeader reply;
    uint32_t max_wr;
    uint32_t max_sge;
    uint32_t srq_limit;
    uint32_t reserved;
};
static_assert(sizeof(QuerySrqReply) == 40);

// ibv_open_xrcd: sent with an SCM_RIGHTS fd when the domain is named by a file (its
// inode is the domain's name, shared by every process that opens it); without one a new
// anonymous domain is made. oflags: O_CREAT and O_EXCL as ibv_open_xrcd(3) has them.
struct OpenXrcdRequest {
    MessageHeader header;
    uint32_t oflags;
    uint32_t with_fd; // 1 when an fd comes along
};
static_assert(sizeof(OpenXrcdRequest) == 24);

// ibv_open_qp: another handle to an XRC target QP of the same XRC domain. The handle
// is closed with DestroyQp.
struct OpenQpRequest {
    MessageHeader header;
    uint64_t user_handle; // the opener's ibv_qp
    uint32_t qp_num;
    uint32_t xrcd_handle;
};
static_assert(sizeof(OpenQpRequest) == 32);

// ibv_attach_mcast / ibv_detach_mcast.
struct McastRequest {
    MessageHeader header;
    uint32_t qp_handle;
    uint16_t lid;
    uint16_t reserved;
    uint8_t gid[16];
};
static_assert(sizeof(McastRequest) == 40);

// SetPortState: only the engine's own user or root may send it (EPERM otherwise).
// The reply is a bare ReplyHeader. Open contexts of the device get PORT_ERR or
// PORT_ACTIVE when the state changes.
struct SetPortStateRequest {
    MessageHeader header;
    char device_name[kMaxDeviceName];
    uint32_t port_num;
    uint32_t up; // 0 = down, 1 = up
};
static_assert(sizeof(SetPortStateRequest) == 88);

// SetFabricLink: the link between two nodes of the engine's fabric (softhca up --fabric;
// names as `softhca status` shows them, e.g. "leaf0" and "spine1") goes down or up. Only
// the engine's own user or root may send it (EPERM otherwise); ENOENT without such a link,
// EOPNOTSUPP without a fabric. The reply is a bare ReplyHeader.
struct SetFabricLinkRequest {
    MessageHeader header;
    char node_a[32];
    char node_b[32];
    uint32_t up; // 0 = down, 1 = up
    uint32_t reserved;
};
static_assert(sizeof(SetFabricLinkRequest) == 88);

// LinkAdd and LinkDelete: what `rdma link add NAME type softhca netdev IF` and `rdma link
// delete NAME` ask (the kernel's RDMA_NLDEV_CMD_NEWLINK and DELLINK). LinkAdd makes
// device `device_name` with one port of the engine's kind (a DPDK af_packet port, or a
// kernel UDP socket port) on network interface `netdev` of the engine's network
// namespace, the interface's addresses its GIDs; LinkDelete removes the device, its open
// contexts getting IBV_EVENT_DEVICE_FATAL. Only the engine's own user or root may send
// them (EPERM). The reply is a bare ReplyHeader; errors as the kernel's link add gives
// them: EINVAL (a name empty, with '%' or not NUL-terminated), ENODEV (no such
// interface; LinkDelete: no such device), EEXIST (the name taken, or the interface
// already a port's), EADDRNOTAVAIL (the interface has no address), EOPNOTSUPP (the
// engine runs a fabric), ENOSPC (the engine's kMaxDevices devices exist).
constexpr uint32_t kMaxNetdevName = 16; // IFNAMSIZ
constexpr uint32_t kMaxDevices = 64;
struct LinkRequest {
    MessageHeader header;
    char device_name[kMaxDeviceName];
    char netdev[kMaxNetdevName]; // LinkAdd only
};
static_assert(sizeof(LinkRequest) == 96);

// QpCounter: per-QP counters as the kernel's rdma_counter keeps them (`rdma statistic qp
// set|bind|unbind`, RDMA_NLDEV_CMD_STAT_SET and STAT_DEL). A port's mode is none (no
// counter), auto (every QP that reaches INIT is bound to a counter of QPs alike: of its
// type with kCounterMaskQpType, of its process with kCounterMaskPid) or manual (counters
// made by binding a QP). A counter counts what its QPs did while bound, and goes when its
// last QP leaves it. The counters are in the status document (devices[].qp_counters).
// Only the engine's own user or root may send it (EPERM), as the kernel asks for
// CAP_NET_ADMIN. Errors as the kernel's: ENODEV (no such device), EINVAL (a mask bit
// unknown; bind or unbind while the port is in auto mode; a QP bound already, or not to
// that counter; another port), EBUSY (auto mode while counters exist), ENOENT (no such QP
// or counter).
enum QpCounterOp : uint32_t {
    kQpCounterSetAuto = 1, // auto_mask: 0 turns auto mode off
    kQpCounterBind = 2,    // qpn to counter_id, or to a new counter when new_counter is 1
    kQpCounterUnbind = 3,  // qpn from counter_id
};
constexpr uint32_t kCounterMaskQpType = 1; // RDMA_COUNTER_MASK_QP_TYPE
constexpr uint32_t kCounterMaskPid = 2;    // RDMA_COUNTER_MASK_PID
struct QpCounterRequest {
    MessageHeader header;
    char device_name[kMaxDeviceName];
    uint32_t op; // QpCounterOp
    uint32_t auto_mask;
    uint32_t qpn;
    uint32_t counter_id;
    uint32_t new_counter;
    uint32_t reserved;
};
static_assert(sizeof(QpCounterRequest) == 104);
struct QpCounterReply {
    ReplyHeader reply;
    uint32_t counter_id; // Bind: the counter the QP is bound to
    uint32_t qpn;
};
static_assert(sizeof(QpCounterReply) == 32);

// EngineStatus and EngineStatusJson replies: StatusReply, and a memfd passed with it
// whose first `bytes` bytes are the UTF-8 text (not NUL terminated): the text report, or
// one JSON document. A file, not the message itself: with thousands of QPs the document
// is megabytes, more than a socket takes in one message (version 5; before, the text
// followed the header and a large one was cut or never arrived).
struct StatusReply {
    ReplyHeader reply;
    uint64_t bytes;
};
static_assert(sizeof(StatusReply) == 32);

// GrantRemoteMemory: may the provider move the bytes of RDMA WRITEs (kGrantWrite) or
// READs (kGrantRead) of QP `qp_handle` to or from `rkey` itself (grant_page.hpp)? The
// engine answers 0 with a GrantReply and the responder context's grant page (its memfd),
// or refuses:
// - EOPNOTSUPP: not for this QP's connection: not RC, not RTS, its peer is not a QP of
//   this engine that is connected back to it, the path is not the built-in wire without
//   captures, faults, shaping, credits or PFC, or the engine's environment has
//   SOFTHCA_SINGLE_COPY=0. Nothing the QP sends until it is modified again will be
//   granted;
// - EPERM: the kernel would not let this process reach the responder's memory (another
//   user, no CAP_SYS_PTRACE, or another PID namespace);
// - EACCES: the rkey names no MR of the responder QP's PD with that right (or a memory
//   window, device memory): the request goes to the engine, which fails it as an HCA
//   does;
// - ENOSPC: the responder's grant page is full.
enum GrantAccess : uint32_t { kGrantWrite = 1u << 0, kGrantRead = 1u << 1 };

struct GrantRequest {
    MessageHeader header;
    uint32_t qp_handle;
    uint32_t rkey;
    uint32_t access; // GrantAccess
    uint32_t reserved;
};
static_assert(sizeof(GrantRequest) == 32);

struct GrantReply {
    ReplyHeader reply;
    uint64_t page_id; // the responder context's grant page, the same for all its grants
    uint64_t iova;    // the MR as the rkey addresses it: [iova, iova + length)
    uint64_t length;
    uint64_t addr;    // where iova lies in the responder's process
    int32_t pid;      // the responder's process, in the requester's PID namespace
    uint32_t access;  // GrantAccess the responder allows (both the QP's and the MR's)
    uint32_t mr_slot; // its grant page's words and their generations
    uint32_t mr_generation;
    uint32_t qp_slot;
    uint32_t qp_generation;
};
static_assert(sizeof(GrantReply) == 80);

// DeregMr's reply: a granted MR's grant slot (its generation now raised), with the
// context's grant page: ibv_dereg_mr waits there for copies under way (grant_page.hpp).
// kNoGrantSlot and no memfd for an MR never granted.
struct DeregMrReply {
    ReplyHeader reply;
    uint32_t grant_slot;
    uint32_t reserved;
};
static_assert(sizeof(DeregMrReply) == 32);

} // namespace softhca::device_interface
