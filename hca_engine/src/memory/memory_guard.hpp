// Touching client memory that the engine maps (shared_mapping.hpp) can meet a page that
// is no longer there: the client truncated the file under its MR, and the kernel
// answers the touch with SIGBUS. These run such a touch so that a SIGBUS fails that one
// operation (the caller reports a fault: the QP errors, the peer gets a NAK) instead of
// stopping the engine for everyone. A SIGBUS anywhere else still ends the engine, as it
// would without the guard.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softhca::engine {

// memcpy(dst, src, n); false when a page of either was gone.
bool guarded_copy(void* dst, const void* src, size_t n);
// The same into client memory in ascending order, as an HCA places a packet: a CPU that
// sees the last byte sees every other (NCCL polls the last word of a FIFO entry that an
// RDMA WRITE places, perftest's write_lat the last byte). memcpy promises no order: glibc's
// stores the first 32 bytes of a large copy last. So the body goes first, then the last
// bytes one store each after a release fence (x86 keeps stores in program order, and a
// string copy's stores before the stores that follow it).
bool guarded_copy_ascending(void* dst, const void* src, size_t n);
// An 8-byte atomic on `word`: compare-and-swap (compare_add the expected value, swap the
// new one) or fetch-and-add (compare_add the addend); `original` gets the value found.
// False when the page was gone.
bool guarded_atomic(uint64_t* word, bool compare_swap, uint64_t compare_add, uint64_t swap,
                    uint64_t& original);

} // namespace softhca::engine
