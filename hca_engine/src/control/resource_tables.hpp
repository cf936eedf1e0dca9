// The card's resource tables for one open context (one process's ibv_context): its
// PDs, MRs and CQs, each known by a handle local to the context. Every request is
// validated here; errors are the errno values the kernel's uverbs would return.
// Keys (lkey/rkey) and device-wide limits live in KeySpace, shared by all contexts.
#pragma once

#include "qp_counter_sets.hpp"

#include "client_process.hpp"
#include "completion_queue.hpp"
#include "grant_page.hpp"
#include "memory_regions.hpp"
#include "queue_context.hpp"
#include "queue_directory.hpp"
#include "resource_limits.hpp"
#include "shared_memory.hpp"
#include "softhca/device_interface/control.hpp"
#include "softhca/transport/queue_pair.hpp" // QpCounters
#include "softhca/transport/work_requests.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <sys/types.h>
#include <unordered_map>
#include <vector>

namespace softhca::engine {

class EngineQp;
class EngineSrq;
class ContextResources;
struct PortInfo;

// Engine-wide accounting: unique MR keys, QP numbers, the QPs of each device by number
// (where arriving packets find them: the data path's QueueDirectory) and the max_pd /
// max_mr / max_cq / max_qp limits.
class KeySpace : public QueueDirectory {
  public:
    uint32_t next_key();
    uint32_t next_qp_num();
    uint32_t next_srq_num();
    uint32_t pds = 0, mrs = 0, mws = 0, cqs = 0, srqs = 0; // QPs: QueueDirectory::qps
    // device index -> QP number -> QP
    std::vector<std::unordered_map<uint32_t, EngineQp*>> qps_by_device;
    // The counters of each device's destroyed QPs, summed (the device's totals must not
    // go back when a QP goes).
    std::vector<transport::QpCounters> retired_qp_counters_by_device;
    // Every QP counter of a device: the destroyed QPs' and the live ones'.
    transport::QpCounters qp_counters_of_device(size_t device) const;
    // The per-QP counters of each device's port (`rdma statistic qp`).
    QpCounterSets qp_counter_sets;
    // Device memory in use on each device (of kDeviceMemoryPoolBytes each).
    std::vector<uint64_t> dm_bytes_by_device;
    // Registered (pinned) bytes of each process, over all its contexts, charged against
    // its RLIMIT_MEMLOCK as the kernel charges mm->pinned_vm (ib_umem_get).
    std::map<pid_t, uint64_t> pinned_by_process;
    // The caps on each context and each user (--limits), and what each user holds over
    // all its contexts, kept as objects come and go: a create's check reads one entry,
    // whatever the user holds (no entry for a user that holds nothing).
    ResourceLimits limits;
    std::map<uid_t, ResourceUsage> usage_by_user;
    // Sizes the per-device tables, the data path's too.
    void set_device_count(size_t count);

    // XRC domains (ibv_open_xrcd(3)), shared by every context that opens them: those
    // opened through a file are found again by its inode, on the same device.
    // Returns 0 or EINVAL (no such domain without O_CREAT, or one exists with O_EXCL).
    // A domain made over a file keeps it open, and the user who made it is charged for
    // its close (client_descriptors.hpp).
    int open_xrc_domain(size_t device, int fd, uint32_t oflags, uid_t account, uint32_t& domain);
    void close_xrc_domain(uint32_t domain);
    // XRC target QPs opened by other contexts (ibv_open_qp): the QP, the opener and the
    // opener's handle.
    std::multimap<const EngineQp*, std::pair<ContextResources*, uint32_t>> opened_qps;

  private:
    uint32_t next_index_ = 1;
    uint32_t tag_ = 0;
    static constexpr uint32_t kFirstQpn = 0x11; // QP0 and QP1 are special (IBTA 3.5.3)
    uint32_t next_qpn_ = kFirstQpn;
    uint32_t next_srqn_ = 1;
    struct XrcDomain {
        size_t device = 0;
        bool has_inode = false;
        uint64_t dev = 0, ino = 0;
        int file = -1;       // held open while the domain lives, so the inode stays
        uint32_t opened = 0; // contexts' handles to it
        uid_t account = 0;   // who made it over its file
    };
    std::map<uint32_t, XrcDomain> xrc_domains_;
    uint32_t next_xrc_domain_ = 1;
};

struct ProtectionDomain {
    uint32_t mw_count = 0;
    uint32_t mr_count = 0;
    uint32_t qp_count = 0;
    uint32_t srq_count = 0;
};

// Device memory (ibv_alloc_dm(3)): a memfd of the engine's that the process maps and
// copies to and from itself; MRs on it reach it through the engine's own mapping.
struct DeviceMemory {
    SharedMemory memory;
    uint64_t length = 0;   // as allocated (the memfd is rounded up to pages)
    uint32_t mr_count = 0; // freeing is EBUSY while MRs are registered on it
};

struct RegisteredMr {
    uint32_t handle, lkey, rkey;
    uint32_t grant_slot = UINT32_MAX; // rereg of a granted MR: its slot, revoked
};

// One context's resources; the keys and queue context its QPs and SRQs reach
// (QueueContext).
class ContextResources final : public QueueContext {
  public:
    // Throws std::system_error when the context's doorbell page cannot be made.
    ContextResources(std::shared_ptr<ClientProcess> client, KeySpace& keys, size_t device = 0);
    ~ContextResources();
    ContextResources(const ContextResources&) = delete;
    ContextResources& operator=(const ContextResources&) = delete;

    int alloc_pd(uint32_t& handle);
    int dealloc_pd(uint32_t handle);
    int reg_mr(const device_interface::RegMrRequest& request, RegisteredMr& out);
    int dereg_mr(uint32_t handle);
    // The same; `grant_slot` is the MR's grant slot, now revoked, or kNoGrantSlot (and
    // always on failure).
    int dereg_mr(uint32_t handle, uint32_t& grant_slot);
    // Single copy (resource_tables_grants.cpp): a grant on `rkey` through `responder`, a
    // QP of this context, for `wanted` (GrantAccess). Fills the responder's half of the
    // reply (its page by id: grant_page().share() gives it). 0, EACCES (no MR of the QP's
    // PD with such a right) or ENOSPC (the page is full).
    int grant(EngineQp& responder, uint32_t rkey, uint32_t wanted,
              device_interface::GrantReply& reply);
    // This context's grant page (DeregMr's reply), and revoking every grant on it (a
    // port changed state: grants hold only while the path stays as it was checked).
    const GrantPage& grant_page() const { return grants_; }
    void revoke_grants() { grants_.revoke_all(); }
    // The grant pages this context's process has been sent (it keeps them mapped:
    // GrantReply carries no descriptor for one it holds).
    std::set<uint64_t>& grant_pages_sent() { return grant_pages_sent_; }
    // The PID namespace of the process that opened it, and its PID there (0: unknown).
    void set_pid_namespace(ino_t pidns, pid_t ns_pid) {
        pidns_ = pidns;
        ns_pid_ = ns_pid;
    }
    ino_t pid_namespace() const { return pidns_; }
    pid_t pid_in_namespace() const { return ns_pid_; }
    int rereg_mr(const device_interface::ReregMrRequest& request, RegisteredMr& out);
    // Device memory: on success `dm` points at the memory whose memfd goes to the
    // provider. 0 or an errno (EINVAL: a bad length or alignment; ENOMEM: the device's
    // memory is used up).
    int alloc_dm(uint64_t length, uint32_t log_align_req, uint32_t& handle,
                 const DeviceMemory*& dm);
    int free_dm(uint32_t handle);
    int reg_dm_mr(const device_interface::RegDmMrRequest& request, RegisteredMr& out);
    // Memory windows (resource_tables_mw.cpp).
    int alloc_mw(uint32_t pd_handle, uint32_t type, uint32_t& handle, uint32_t& rkey);
    int dealloc_mw(uint32_t handle);
    // MemoryKeys
    int bind_mw(const transport::WindowBind& bind, uint32_t pd_handle, uint32_t qp_num) override;
    int invalidate_mw(uint32_t rkey, uint32_t pd_handle, uint32_t qp_num, bool remote) override;
    const MemoryWindow* find_window(uint32_t rkey) const override;
    // On success `cq` points at the new CQ (its ring fd is sent to the provider).
    // `channel` is the completion channel's write end, or a detached one; with
    // `timestamps` every completion carries its time.
    int create_cq(uint32_t cqe, uint32_t comp_vector, uint64_t user_handle,
                  CompletionChannel channel, uint32_t& handle, const CompletionQueue*& cq,
                  bool timestamps = false);
    int resize_cq(uint32_t handle, uint32_t cqe, const CompletionQueue*& cq);
    int destroy_cq(uint32_t handle);
    // On success `qp` points at the new QP (its ring fd is sent to the provider).
    int create_qp(const device_interface::CreateQpRequest& request, const PortInfo& port,
                  EngineQp*& qp);
    // Destroys a QP, or closes a handle ibv_open_qp gave. The creator of an XRC target
    // others have opened gets EBUSY (its handle goes only with its context, which closes
    // theirs too).
    int destroy_qp(uint32_t handle);
    // The QP of a handle, created here or opened here.
    EngineQp* find_qp(uint32_t handle);
    // ibv_open_qp: a handle to the XRC target `qp_num` of this context's domain `xrcd`.
    int open_qp(uint32_t qp_num, uint32_t xrcd_handle, uint64_t user_handle, uint32_t& handle,
                EngineQp*& qp);
    // Shared receive queues (resource_tables_srq.cpp). On success `srq` points at the
    // SRQ whose ring fd goes to the provider.
    int create_srq(const device_interface::CreateSrqRequest& request, EngineSrq*& srq);
    int modify_srq(const device_interface::ModifySrqRequest& request, EngineSrq*& srq,
                   bool& new_ring);
    int destroy_srq(uint32_t handle);
    EngineSrq* find_srq(uint32_t handle);
    // Multicast: only UD QPs join groups (ibv_attach_mcast(3)).
    int attach_mcast(uint32_t qp_handle, const uint8_t* gid);
    int detach_mcast(uint32_t qp_handle, const uint8_t* gid);
    // XRC domains: `fd` is the file naming a shared domain, or -1.
    int open_xrcd(int fd, uint32_t oflags, uint32_t& handle);
    int close_xrcd(uint32_t handle);
    // QueueContext
    EngineSrq* find_xrc_srq(uint32_t srqn, uint32_t domain) const override;
    const MemoryRegion* find_mr_by_key(uint32_t key) const override;
    QpSchedule* schedule() const override { return keys_.schedule; }
    const std::map<uint32_t, std::unique_ptr<EngineQp>>& qps() const { return qps_; }
    const std::map<uint32_t, CompletionQueue>& cqs() const { return cqs_; }
    const std::map<uint32_t, MemoryRegion>& mrs() const { return mrs_; }
    const std::map<uint32_t, ProtectionDomain>& pds() const { return pds_; }
    const std::map<uint32_t, std::unique_ptr<EngineSrq>>& srqs() const { return srqs_; }

    size_t pd_count() const { return pds_.size(); }
    size_t mr_count() const { return mrs_.size(); }
    size_t cq_count() const { return cqs_.size(); }
    size_t qp_count() const { return qps_.size(); }
    pid_t owner() const { return client_->pid(); }
    // Bytes this context has registered (charged to its process's RLIMIT_MEMLOCK).
    uint64_t pinned() const { return pinned_; }
    // What it holds in the engine (resource_limits.hpp), kept as objects come and go.
    const ResourceUsage& usage() const { return usage_; }
    // The same, counted object by object (what usage() must always equal).
    ResourceUsage recount() const;
    const ClientProcess& client() const override { return *client_; }
    KeySpace& keys() { return keys_; }
    Doorbells& doorbells() { return doorbells_; }

    // Where this context's async events go: the write end of its async event pipe.
    void set_async_fd(int fd) { async_fd_ = fd; }
    void raise_event(uint64_t element, uint32_t event_type) const override;
    void raise_qp_event(const EngineQp& qp, uint64_t creator_handle,
                        uint32_t event_type) const override;

  private:
    // 0, or ENOMEM when `more` would take this context or its user past a cap.
    int admit(const ResourceUsage& more) const;
    // What a create adds to this context's and its user's usage, and a destroy takes back.
    void charge(const ResourceUsage& more);
    void uncharge(ResourceUsage less); // by value: usage() itself may be given
    // Charges `bytes` of a registration to the process's RLIMIT_MEMLOCK: ENOMEM past it.
    int charge_pinned(uint64_t bytes);
    // Whether `bytes` more would stay within it (nothing charged).
    bool fits_pinned(uint64_t bytes) const;
    void uncharge_pinned(uint64_t bytes);
    std::shared_ptr<ClientProcess> client_;
    uint64_t pinned_ = 0;
    ResourceUsage usage_;
    KeySpace& keys_;
    size_t device_;
    Doorbells doorbells_; // before the queues that ring it: it goes after them
    GrantPage grants_;    // before the QPs and MRs it names, likewise
    std::set<uint64_t> grant_pages_sent_;
    ino_t pidns_ = 0;
    pid_t ns_pid_ = 0;
    int async_fd_ = -1;
    uint32_t next_handle_ = 1;
    std::map<uint32_t, ProtectionDomain> pds_;
    std::map<uint32_t, MemoryRegion> mrs_;
    std::unordered_map<uint32_t, MemoryRegion*> mrs_by_key_;
    std::map<uint32_t, MemoryWindow> mws_;
    std::map<uint32_t, DeviceMemory> dms_;
    uint64_t attachments_ = 0;                                 // its UD QPs' multicast attachments
    std::unordered_map<uint32_t, MemoryWindow*> mws_by_index_; // rkey >> 8
    std::map<uint32_t, CompletionQueue> cqs_;
    std::map<uint32_t, std::unique_ptr<EngineQp>> qps_;
    std::map<uint32_t, std::unique_ptr<EngineSrq>> srqs_;
    struct XrcdHandle {
        uint32_t domain = 0;
        uint32_t users = 0; // SRQs and target QPs made in it through this handle
    };
    std::map<uint32_t, XrcdHandle> xrcds_;
    struct OpenedQp {
        EngineQp* qp = nullptr;
        uint32_t xrcd_handle = 0;
        uint64_t user_handle = 0; // the opener's ibv_qp, the element of its events
    };
    std::map<uint32_t, OpenedQp> opened_; // handles from ibv_open_qp
    // Registers a validated MR (reg_mr, reg_dm_mr): keys, handle, counts.
    RegisteredMr add_mr(MemoryRegion mr);
    void close_opened(uint32_t handle);
    void destroy_owned_qp(std::map<uint32_t, std::unique_ptr<EngineQp>>::iterator it);
};

// The slot count for a CQ of at least `cqe` usable entries (one slot stays spare, as
// a hardware CQ of 2^n entries reports 2^n - 1). Returns 0 when out of range.
uint32_t cq_slots_for(uint32_t cqe);

} // namespace softhca::engine
