// The provider's objects: each wraps the libibverbs object it hands out (first member,
// so the public pointer converts back), plus what the driver keeps beside it.
#pragma once

#include "../abi/verbs_private_abi34.h"
#include "control_channel.hpp"
#include "mr_directory.hpp"
#include "single_copy.hpp"
#include "softhca/device_interface/control.hpp"
#include "softhca/device_interface/cq_ring.hpp"
#include "softhca/device_interface/doorbell_page.hpp"
#include "softhca/device_interface/qp_ring.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <vector>

namespace softhca::provider {

struct Device {
    verbs_device vdev; // must be first: libibverbs owns the ibv_device inside
    char engine_socket[108];
};

// How a work queue wakes the engine: its context's doorbell page (the queue's bit says
// it has new requests) and the context's doorbell pipe (written when the engine sleeps).
struct Doorbell {
    device_interface::DoorbellPage* page = nullptr;
    int fd = -1;
};

struct ContextState {
    ControlChannel control;
    device_interface::DeviceAttributes attributes{};
    uint32_t context_id = 0;
    int async_write_fd = -1; // our copy, for DEVICE_FATAL when the engine dies
    Doorbell doorbell;       // the context's doorbell page and its doorbell pipe
    size_t doorbell_page_bytes = 0;
    int wake_fd = -1; // eventfd that stops the watchdog thread
    pthread_t watchdog{};
    bool watchdog_running = false;
    MrDirectory mrs;        // what small sends may be gathered from at post time
    GrantPages grant_pages; // single copy: the grant pages mapped (single_copy.hpp)
};

struct Context {
    verbs_context vctx; // must be first (allocated by _verbs_init_and_alloc_context)
    ContextState* state;
};
static_assert(offsetof(Context, vctx) == 0);

struct Pd {
    ibv_pd ibv;
    uint32_t handle = 0; // the engine's PD
    // A parent domain (ibv_alloc_parent_domain(3)) is a PD of its own over a plain one:
    // it names the same engine PD, so every verb given it acts on that PD. Its queues
    // live in engine memory (memfds), so the allocators are kept and never called.
    Pd* protection_domain = nullptr; // a parent domain's PD; null for a plain PD
    ibv_td* td = nullptr;
    void* pd_context = nullptr;
    std::atomic<uint32_t> parent_domains{0}; // over this PD: it cannot go first
};

// A thread domain (ibv_alloc_td(3)): a promise that one thread uses what it is given
// to. softhca's locks are uncontended then and stay.
struct Td {
    ibv_td ibv;
    std::atomic<uint32_t> parent_domains{0};
};

struct Mr {
    verbs_mr vmr;
    uint32_t handle;
    uint64_t iova, addr, length; // where it lies, for the directory (MrDirectory)
};

// Requests of the ibv_wr_* API between ibv_wr_start and ibv_wr_complete (qp_ex.cpp),
// in memory reserved when the QP is created.
struct WrStaging {
    std::mutex lock;       // held from ibv_wr_start to ibv_wr_complete / ibv_wr_abort
    uint32_t capacity = 0; // max_send_wr
    uint32_t max_sge = 0;
    uint32_t sge_stride = 1;
    uint32_t max_inline = 0;
    ibv_send_wr* wrs = nullptr;      // capacity
    ibv_sge* sges = nullptr;         // capacity * sge_stride
    uint8_t* inline_bytes = nullptr; // capacity * max_inline
    uint32_t count = 0;
    int error = 0; // the first error of the batch, returned by ibv_wr_complete
    ~WrStaging();
};

struct Qp {
    verbs_qp vqp; // must be first
    uint32_t handle = 0;
    device_interface::QpRingHeader* ring = nullptr;
    size_t ring_bytes = 0;
    device_interface::QpCaps caps{};
    Doorbell doorbell;
    std::mutex sq_lock;
    std::mutex rq_lock;
    uint64_t sq_next = 0; // producer indices, published to the ring after each post
    uint64_t rq_next = 0;
    std::unique_ptr<WrStaging> wr_staging; // with ibv_qp_ex's work-request API only
    QpGrants grants;                       // single copy (single_copy.hpp), under sq_lock
};

struct Srq {
    ibv_srq ibv; // must be first
    uint32_t handle = 0;
    uint32_t srq_num = 0;
    uint32_t max_sge = 0;
    device_interface::QpRingHeader* ring = nullptr;
    size_t ring_bytes = 0;
    Doorbell doorbell;
    std::mutex lock; // posting and resizing exclude each other
    uint64_t next = 0;
};

struct Xrcd {
    verbs_xrcd vxrcd; // must be first; vxrcd.handle is the engine's
};

// An address handle lives in the provider only: its vector travels in each UD work
// request (the engine resolves the MAC, as the kernel would at ibv_create_ah).
struct Ah {
    ibv_ah ibv; // must be first
    ibv_ah_attr attr;
};

struct Cq {
    verbs_cq vcq;
    uint32_t handle;
    std::mutex lock; // poll and resize exclude each other
    device_interface::CqRingHeader* ring = nullptr;
    size_t ring_bytes = 0;
    // ibv_start_poll .. ibv_end_poll (lock held in between): the entry the read_*
    // accessors read, and how far the batch has consumed.
    const device_interface::CompletionEntry* current = nullptr;
    uint64_t batch_consumer = 0;
};

inline Context* to_context(ibv_context* ibctx) {
    return reinterpret_cast<Context*>(reinterpret_cast<char*>(ibctx) -
                                      offsetof(verbs_context, context));
}
inline ContextState& state_of(ibv_context* ibctx) {
    return *to_context(ibctx)->state;
}
inline Pd* to_pd(ibv_pd* pd) {
    return reinterpret_cast<Pd*>(pd);
}
inline Cq* to_cq(ibv_cq* cq) {
    return reinterpret_cast<Cq*>(cq);
}
inline Srq* to_srq(ibv_srq* srq) {
    return reinterpret_cast<Srq*>(srq);
}
inline Ah* to_ah(ibv_ah* ah) {
    return reinterpret_cast<Ah*>(ah);
}
inline Xrcd* to_xrcd(ibv_xrcd* xrcd) {
    return reinterpret_cast<Xrcd*>(xrcd);
}

// A switch in the application's environment: on unless `name` is "0" (qp.cpp).
bool switch_on(const char* name);
// The most SGEs a work request has (QpLimits::kMaxSge; validate_send bounds num_sge).
constexpr int kMostSges = 16;

// Sets errno and returns nullptr: how a verb that creates something reports failure.
template <typename T> T* fail_with(int err) {
    errno = err;
    return nullptr;
}

// The operations, one group per file.
int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size);
int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr);
// ibv_query_rt_values_ex: the card's free-running clock now (clock.cpp).
int query_rt_values(ibv_context* context, ibv_values_ex* values);
// The card's clock (CLOCK_MONOTONIC, ns) at 1 GHz, and how far CLOCK_REALTIME is
// ahead of it now (clock.cpp).
constexpr uint64_t kHcaCoreClockKhz = 1'000'000;
uint64_t realtime_offset_ns();
ibv_pd* alloc_pd(ibv_context* context);
int dealloc_pd(ibv_pd* pd);
ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr);
ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* attr);
int dealloc_td(ibv_td* td);
ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t hca_va, int access);
int dereg_mr(verbs_mr* vmr);
// Device memory (dm.cpp).
ibv_dm* alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr);
int free_dm(ibv_dm* dm);
ibv_mr* reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t offset, size_t length, unsigned int access);
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge);
ibv_cq* create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector);
ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);
// What both creates share (cq.cpp): nullptr with errno on failure.
// With `timestamps` every completion carries the time it was made.
Cq* create_completion_queue(ibv_context* context, int cqe, ibv_comp_channel* channel,
                            int comp_vector, bool timestamps = false);
// A completion as ibv_poll_cq returns it (cq.cpp).
// Copies a small receive's bytes that travel in its completion into place
// (CompletionEntry::staged); to_wc does. Under cq.lock.
void land_staged(const device_interface::CompletionEntry& e);
void to_wc(const device_interface::CompletionEntry& e, ibv_wc& wc);
uint8_t wc_sl(const device_interface::CompletionEntry& e);
// An application that polls an empty CQ gives the engine a turn now and then (cq.cpp).
void note_empty_poll(bool empty);
// Marks the unpolled completions of QP `qp_num` discarded (the QP was reset or destroyed).
void discard_completions(Cq& cq, uint32_t qp_num);
// Completion channels (comp_channel.cpp): the engine's write end of `channel` (-1 with
// errno EINVAL when it is not one of ours), and, once the engine has destroyed `cq`,
// its unread events taken out and the delivered ones waited for.
int open_channel_writer(const ibv_comp_channel& channel);
void release_channel(ibv_cq& cq, uint32_t events_written);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int resize_cq(ibv_cq* cq, int cqe);
int destroy_cq(ibv_cq* cq);
int req_notify_cq(ibv_cq* cq, int solicited_only);
ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr);
ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);
ibv_qp* open_qp(ibv_context* context, ibv_qp_open_attr* attr);
int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask);
int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr);
int destroy_qp(ibv_qp* qp);
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
// ibv_post_send's work (qp.cpp). Modes: kPostAllOrNothing, a failing list posts nothing
// (ibv_wr_complete); kPostType1Bind, the BIND_MW of ibv_bind_mw (type 1 windows).
constexpr unsigned kPostAllOrNothing = 1u << 0;
constexpr unsigned kPostType1Bind = 1u << 1;
int post_send_requests(Qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr, unsigned mode);
// Gives a QP created with send_ops_flags the ibv_wr_* API (qp_ex.cpp). 0 or ENOMEM.
int enable_wr_api(Qp& qp, uint64_t send_ops_flags);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr);
ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
int get_srq_num(ibv_srq* srq, uint32_t* srq_num);
ibv_xrcd* open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr);
int close_xrcd(ibv_xrcd* xrcd);
int modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask);
int query_srq(ibv_srq* srq, ibv_srq_attr* attr);
int destroy_srq(ibv_srq* srq);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr);
int destroy_ah(ibv_ah* ah);
int attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid);
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);
int rereg_mr(verbs_mr* vmr, int flags, ibv_pd* pd, void* addr, size_t length, int access);
int detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid);

// Async events: the watchdog thread that turns the engine's death into DEVICE_FATAL.
int start_async_events(ContextState& state);
void stop_async_events(ContextState& state);

} // namespace softhca::provider
