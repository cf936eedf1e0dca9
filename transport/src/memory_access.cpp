#include "softhca/transport/memory_access.hpp"

namespace softhca::transport {

int split_pieces(const Sge* sge, uint32_t num_sge, uint64_t offset, uint32_t length,
                 MemoryPiece* pieces) {
    uint32_t done = 0;
    int count = 0;
    for (uint32_t i = 0; i < num_sge && done < length; ++i) {
        if (offset >= sge[i].length) {
            offset -= sge[i].length;
            continue;
        }
        const uint64_t room = sge[i].length - offset;
        const uint32_t chunk = static_cast<uint32_t>(room < length - done ? room : length - done);
        pieces[count++] = {sge[i].lkey, chunk, sge[i].addr + offset, done};
        done += chunk;
        offset = 0;
    }
    return done == length ? count : -1;
}

namespace {

// Reads each piece with its own read() call.
MemoryStatus read_each(MemoryAccess& memory, const MemoryPiece* pieces, uint32_t count, bool remote,
                       uint32_t rights, uint8_t* buffer) {
    for (uint32_t i = 0; i < count; ++i) {
        const MemoryPiece& p = pieces[i];
        if (MemoryStatus s =
                memory.read(p.key, remote, rights, p.addr, buffer + p.buffer_offset, p.length);
            s != MemoryStatus::Ok)
            return s;
    }
    return MemoryStatus::Ok;
}

} // namespace

MemoryStatus MemoryAccess::read_message(uint64_t /*tag*/, bool remote, uint32_t rights,
                                        const Sge* sge, uint32_t num_sge,
                                        uint32_t /*message_length*/, uint32_t offset, uint8_t* dst,
                                        uint32_t length) {
    if (!remote)
        return gather(*this, sge, num_sge, offset, dst, length);
    MemoryPiece pieces[kMaxSge];
    const int count = split_pieces(sge, num_sge, offset, length, pieces);
    if (count < 0)
        return MemoryStatus::OutOfRange;
    return read_each(*this, pieces, static_cast<uint32_t>(count), true, rights, dst);
}

MemoryStatus MemoryAccess::read_pieces(const MemoryPiece* pieces, uint32_t count, uint8_t* buffer) {
    return read_each(*this, pieces, count, false, 0, buffer);
}

MemoryStatus MemoryAccess::write_pieces(const MemoryPiece* pieces, uint32_t count,
                                        const uint8_t* buffer) {
    for (uint32_t i = 0; i < count; ++i) {
        const MemoryPiece& p = pieces[i];
        if (MemoryStatus s = write(p.key, false, access::kLocalWrite, p.addr,
                                   buffer + p.buffer_offset, p.length);
            s != MemoryStatus::Ok)
            return s;
    }
    return MemoryStatus::Ok;
}

MemoryStatus gather(MemoryAccess& memory, const Sge* sge, uint32_t num_sge, uint64_t offset,
                    uint8_t* dst, uint32_t length) {
    MemoryPiece pieces[kMaxSge];
    const int count = split_pieces(sge, num_sge, offset, length, pieces);
    if (count < 0)
        return MemoryStatus::OutOfRange;
    return memory.read_pieces(pieces, static_cast<uint32_t>(count), dst);
}

MemoryStatus scatter(MemoryAccess& memory, const Sge* sge, uint32_t num_sge, uint64_t offset,
                     const uint8_t* src, uint32_t length) {
    MemoryPiece pieces[kMaxSge];
    const int count = split_pieces(sge, num_sge, offset, length, pieces);
    if (count < 0)
        return MemoryStatus::OutOfRange;
    return memory.write_pieces(pieces, static_cast<uint32_t>(count), src);
}

MemoryStatus MemoryAccess::bind_window(const WindowBind& /*bind*/) {
    return MemoryStatus::BadKey;
}

MemoryStatus MemoryAccess::invalidate(uint32_t /*rkey*/, bool /*remote*/) {
    return MemoryStatus::BadKey;
}

} // namespace softhca::transport
