// The emulated rdma_cm device's hooks into the interposed calls (rdma_cm_device.cpp).
#pragma once

#include <cstddef>
#include <sys/stat.h>
#include <sys/types.h>

namespace softhca::preload {

// open(2) of /dev/infiniband/rdma_cm: true when handled here (`result` is the new fd or
// -1 with errno); false when the path is another or no softhca instance is there.
bool open_rdma_cm(const char* path, int flags, int& result);
// write(2) to an rdma_cm file: true when `fd` is one (`result` is what write returns).
bool rdma_cm_write(int fd, const void* buffer, size_t count, ssize_t& result);

} // namespace softhca::preload
