#include "softhca/transport/memory_access.hpp"

namespace softhca::transport {

namespace {

template <typename Copy>
MemoryStatus walk(const Sge* sge, uint32_t num_sge, uint64_t offset, uint32_t length, Copy copy) {
    uint32_t done = 0;
    for (uint32_t i = 0; i < num_sge && done < length; ++i) {
        if (offset >= sge[i].length) {
            offset -= sge[i].length;
            continue;
        }
        const uint64_t room = sge[i].length - offset;
        const uint32_t chunk = static_cast<uint32_t>(room < length - done ? room : length - done);
        if (MemoryStatus s = copy(sge[i], sge[i].addr + offset, done, chunk); s != MemoryStatus::Ok)
            return s;
        done += chunk;
        offset = 0;
    }
    return done == length ? MemoryStatus::Ok : MemoryStatus::OutOfRange;
}

} // namespace

MemoryStatus gather(MemoryAccess& memory, const Sge* sge, uint32_t num_sge, uint64_t offset,
                    uint8_t* dst, uint32_t length) {
    return walk(sge, num_sge, offset, length,
                [&](const Sge& s, uint64_t addr, uint32_t at, uint32_t n) {
                    return memory.read(s.lkey, false, 0, addr, dst + at, n);
                });
}

MemoryStatus scatter(MemoryAccess& memory, const Sge* sge, uint32_t num_sge, uint64_t offset,
                     const uint8_t* src, uint32_t length) {
    return walk(sge, num_sge, offset, length,
                [&](const Sge& s, uint64_t addr, uint32_t at, uint32_t n) {
                    return memory.write(s.lkey, false, access::kLocalWrite, addr, src + at, n);
                });
}

} // namespace softhca::transport
