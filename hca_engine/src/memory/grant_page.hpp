// A context's grant page (device_interface/grant_page.hpp): the words through which the
// engine revokes the grants it gave other processes on this context's MRs and QPs.
// Made at the first grant (most contexts are never granted anything); its slots are
// handed out to MRs and QPs as they are first granted and taken back when they go.
// The control path allocates and releases slots; any thread may revoke (a QP's state
// changes on its data path), which is one atomic add on the word.
#pragma once

#include "shared_memory.hpp"
#include "softhca/device_interface/grant_page.hpp"

#include <cstdint>
#include <vector>

namespace softhca::engine {

class GrantPage {
  public:
    // A slot (its generation now), or kNoGrantSlot when the page cannot be made or is
    // full.
    uint32_t allocate();
    // Raises the slot's generation: every grant naming it is void from now on.
    void revoke(uint32_t slot);
    // Revokes and frees the slot (its MR or QP is gone); one whose count of copies is not
    // 0 is retired instead.
    void release(uint32_t slot);
    // Revokes every slot in use (the context closes).
    void revoke_all();
    uint32_t generation(uint32_t slot) const;
    // A descriptor of the page for a provider (SharedMemory::share), -1 before any slot.
    int share() const { return memory_.data() ? memory_.share() : -1; }
    // Names this page among all the engine has made (GrantReply::page_id).
    uint64_t id() const { return id_; }

  private:
    device_interface::GrantWord* word(uint32_t slot) const;
    SharedMemory memory_;
    std::vector<uint32_t> free_;
    uint32_t next_ = 0; // slots never handed out start here
    std::vector<bool> in_use_;
    uint64_t id_ = 0;
};

} // namespace softhca::engine
