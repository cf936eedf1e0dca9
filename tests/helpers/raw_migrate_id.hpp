// MIGRATE_ID written raw on an rdma_cm file, as librdmacm writes it (the kernel's uapi
// rdma_user_cm.h, which cannot be included beside rdma_cma.h): the command header, then
// the command. For the attacks that name a file librdmacm would not.
#pragma once

#include <cstdint>
#include <unistd.h>

namespace raw_cm {

constexpr uint32_t kMigrateIdCommand = 18; // RDMA_USER_CM_CMD_MIGRATE_ID
struct MigrateIdMessage {
    uint32_t cmd;
    uint16_t in;
    uint16_t out;
    uint64_t response;
    uint32_t id;
    uint32_t fd;
};
static_assert(sizeof(MigrateIdMessage) == 8 + 16);

// Moves id `id` from the file at descriptor number `from_fd` onto `file`: true when the
// engine took it; else errno says why.
inline bool migrate_id(int file, uint32_t id, int from_fd) {
    uint32_t events_reported = 0; // struct rdma_ucm_migrate_resp
    MigrateIdMessage message{};
    message.cmd = kMigrateIdCommand;
    message.in = sizeof(message) - 8;
    message.out = sizeof(events_reported);
    message.response = reinterpret_cast<uintptr_t>(&events_reported);
    message.id = id;
    message.fd = static_cast<uint32_t>(from_fd);
    return ::write(file, &message, sizeof(message)) == static_cast<ssize_t>(sizeof(message));
}

} // namespace raw_cm
