// Single copy between processes of one engine (device_interface/grant_page.hpp): an RDMA
// WRITE (with or without immediate) or READ of an RC QP whose peer is a QP of the same
// engine has its bytes moved by the posting thread, inside ibv_post_send, with one
// process_vm_writev (or process_vm_readv) into (from) the responder's process, under a
// grant the engine gave for the rkey; the request is then posted with kSendPlaced and
// the engine only completes it, in order (a WRITE with immediate: it sends one packet
// without payload, for the responder's receive). What is not granted, or fails to copy,
// goes the engine's way, which reports errors as an HCA does. SOFTHCA_SINGLE_COPY=0 in
// the application's environment turns it off for that process (docs/memory-model.md).
#pragma once

#include "softhca/device_interface/grant_page.hpp"

#include <array>
#include <cstdint>
#include <infiniband/verbs.h>
#include <mutex>
#include <sys/types.h>
#include <unordered_map>

namespace softhca::provider {

struct Qp;
struct ContextState;

// The grant pages this context has mapped, by page id (GrantReply::page_id), its own
// among them: what its grants name and what ibv_dereg_mr waits on.
class GrantPages {
  public:
    GrantPages() = default;
    ~GrantPages();
    GrantPages(const GrantPages&) = delete;
    GrantPages& operator=(const GrantPages&) = delete;
    // The page `id`, mapping `fd` when it is new (the fd is closed either way; -1: the
    // engine sent it before); nullptr when it cannot be mapped or too many are.
    device_interface::GrantWord* page(uint64_t id, int fd);
    // ibv_dereg_mr and ibv_rereg_mr, with their reply's slot and descriptor (-1: none):
    // for a granted MR, waits until no copy is under way into or out of its slot of this
    // context's own page, at most kDeregWaitMs. The descriptor is closed.
    void wait_for_copies(uint32_t slot, int fd);

  private:
    static constexpr size_t kMostPages = 256;
    std::mutex lock_;
    std::unordered_map<uint64_t, device_interface::GrantWord*> pages_;
    device_interface::GrantWord* own_ = nullptr;
};

// What a QP keeps of single copy, under its sq_lock.
struct QpGrants {
    struct Grant {
        uint32_t rkey = 0;
        uint32_t access = 0; // GrantAccess
        uint64_t iova = 0, length = 0, addr = 0;
        pid_t pid = 0;
        device_interface::GrantWord* mr_word = nullptr;
        device_interface::GrantWord* qp_word = nullptr;
        uint32_t mr_generation = 0, qp_generation = 0;
        bool valid = false;
        bool refused = false; // the engine said EACCES: this rkey goes the engine's way
    };
    bool off = false;         // the engine or the kernel said no for this connection
    uint32_t refusals = 0;    // grants refused for an rkey; past kMostRefusals, off
    uint64_t engine_tail = 0; // the send queue position after the last request the engine moves
    std::array<Grant, 8> cache{};
    uint32_t next_victim = 0;
    static constexpr uint32_t kMostRefusals = 64;
    // modify_qp: a new connection, or none; everything is asked again. (engine_tail
    // stays: requests posted before still go first.)
    void forget() {
        const uint64_t tail = engine_tail;
        *this = QpGrants{};
        engine_tail = tail;
    }
};

// Moves the bytes of `wr` (an RDMA WRITE, WRITE with immediate or READ of an RC QP)
// itself when it may: every earlier request of the QP has retired or was placed too
// (`completed`: the ring's sq_completed), the QP is RTS in the engine, a grant covers the
// remote range, and the SGEs lie in this context's MRs; a large request may wait a little
// for the earlier ones when `may_wait` (not in an all-or-nothing post, whose requests are
// published together or not at all). Returns true when the bytes have moved: the request
// is then posted with kSendPlaced. Called under the QP's sq_lock.
bool place_rdma(Qp& qp, const ibv_send_wr& wr, uint64_t total, uint64_t completed, bool may_wait);

} // namespace softhca::provider
