// Single copy between processes of one engine: grants, and the page that revokes them.
//
// For an RDMA WRITE (with or without immediate) or READ from one QP to another of the
// same engine, the provider may move the bytes itself, inside ibv_post_send, with one
// process_vm_writev into (or process_vm_readv from) the responder's process, and post the
// request with kSendPlaced (qp_ring.hpp). The kernel decides whether it may (the ptrace rule of
// process_vm_readv(2)); the engine decides whether the RDMA operation is allowed, as the
// responder's HCA would: on GrantRemoteMemory (control.hpp) it checks the QP's
// connection, the responder QP's state and rights, the rkey, its PD and its access, and
// answers with a grant: the responder's PID as the requester's PID namespace numbers it,
// where the MR lies in that process, and two words of the responder context's grant
// page (sent with the reply) with the generations they had.
//
// A grant page is a memfd per context, an array of kGrantSlots 64-bit words: one for
// each MR and QP of the context that a grant names. The high 32 bits are the slot's
// generation, which the engine raises to revoke every grant of it: an MR's when it is
// deregistered or re-registered or its context closes, a QP's whenever the QP leaves
// the states that accept requests (RTR, RTS, SQD) or is destroyed. The low 32 bits of an
// MR's word count the copies under way into or out of it: the requester adds one,
// checks that both generations are still the grant's, copies, and takes it off again;
// ibv_dereg_mr of a granted MR, after the engine's reply (the generation is raised),
// waits until the count is 0 (at most kDeregWaitMs), so no copy that began before it
// lands after it. Every operation on a word is a single atomic read-modify-write or
// load of the whole word, so the order of the two sides is the word's own.
//
// The page is shared only with processes the engine granted, that is processes the
// kernel lets reach the responder's memory anyway (same credentials, or CAP_SYS_PTRACE):
// what they write there can only confuse that responder's own grants. The engine reads
// a word only to tell a grant its generation and to see whether a freed slot's count
// is 0 (a slot with copies left is not used again).
#pragma once

#include <atomic>
#include <cstdint>

namespace softhca::device_interface {

constexpr uint32_t kGrantSlots = 8192;
constexpr uint32_t kNoGrantSlot = UINT32_MAX;
constexpr uint64_t kGrantPageBytes = uint64_t{kGrantSlots} * sizeof(uint64_t);
constexpr uint64_t kGrantGenerationOne = uint64_t{1} << 32;
constexpr uint64_t kGrantCopiesMask = kGrantGenerationOne - 1;
constexpr uint32_t kDeregWaitMs = 1000;

inline uint32_t grant_generation(uint64_t word) {
    return static_cast<uint32_t>(word >> 32);
}

using GrantWord = std::atomic<uint64_t>;
static_assert(sizeof(GrantWord) == 8 && GrantWord::is_always_lock_free);

} // namespace softhca::device_interface
