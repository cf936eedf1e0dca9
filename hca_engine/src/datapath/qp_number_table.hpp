// Where an arriving packet finds its QP: the destination QP number (24 bits, BTH) to
// the QP, in two array lookups and no hash. Pages of 4096 entries are made when a QP
// number in them is first used (setup time) and kept; the data path only reads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace softhca::engine {

class EngineQp;

class QpNumberTable {
  public:
    QpNumberTable() : pages_(kPages) {}

    EngineQp* find(uint32_t qp_num) const {
        const Page* page = pages_[(qp_num >> kPageBits) & (kPages - 1)].get();
        return page ? (*page)[qp_num & (kPageSize - 1)] : nullptr;
    }
    void insert(uint32_t qp_num, EngineQp* qp) {
        auto& page = pages_[(qp_num >> kPageBits) & (kPages - 1)];
        if (!page)
            page = std::make_unique<Page>();
        (*page)[qp_num & (kPageSize - 1)] = qp;
    }
    void erase(uint32_t qp_num) {
        if (Page* page = pages_[(qp_num >> kPageBits) & (kPages - 1)].get())
            (*page)[qp_num & (kPageSize - 1)] = nullptr;
    }

  private:
    static constexpr uint32_t kPageBits = 12;
    static constexpr uint32_t kPageSize = 1u << kPageBits;
    static constexpr uint32_t kPages = 1u << (24 - kPageBits);
    using Page = std::array<EngineQp*, kPageSize>;
    std::vector<std::unique_ptr<Page>> pages_;
};

} // namespace softhca::engine
