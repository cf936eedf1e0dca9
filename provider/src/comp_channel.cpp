// Completion channels, the provider's part. The channel itself is a pipe that the
// interposer (kernel_shim/preload) made in place of the kernel's event file; the
// engine writes one ib_uverbs_comp_event_desc into it per event. Here: the engine's
// write end for a new CQ, the arm (ibv_req_notify_cq), and what destroying a CQ owes
// the channel, as ib_uverbs does it.
#include "provider.hpp"

#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace softhca::provider {

namespace di = device_interface;

namespace {

// A description of the channel's pipe of our own (through /proc), so that flags set on
// it, by us or by the engine, leave the application's fd as the application set it.
int reopen_channel(const ibv_comp_channel& channel, int flags) {
    char path[48];
    std::snprintf(path, sizeof(path), "/proc/self/fd/%d", channel.fd);
    return ::open(path, flags | O_CLOEXEC);
}

// Takes this CQ's unread events out of its channel (ib_uverbs_release_ucq): a later
// ibv_get_cq_event must never hand out a CQ that no longer exists. Events of other CQs
// sharing the channel go back in their order. Returns how many it took out.
uint32_t forget_channel_events(const ibv_cq& cq) {
    const int fd = reopen_channel(*cq.channel, O_RDWR | O_NONBLOCK);
    if (fd < 0)
        return 0;
    const auto gone = reinterpret_cast<uintptr_t>(&cq);
    std::vector<uint64_t> kept;
    uint64_t records[256];
    uint32_t taken = 0;
    ssize_t n;
    while ((n = ::read(fd, records, sizeof(records))) > 0) {
        for (ssize_t i = 0; i < n / static_cast<ssize_t>(sizeof(uint64_t)); ++i) {
            if (records[i] != gone)
                kept.push_back(records[i]);
            else
                ++taken;
        }
    }
    if (!kept.empty()) {
        [[maybe_unused]] const ssize_t w = ::write(fd, kept.data(), kept.size() * sizeof(uint64_t));
    }
    ::close(fd);
    return taken;
}

} // namespace

int open_channel_writer(const ibv_comp_channel& channel) {
    struct stat st {};
    if (::fstat(channel.fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
        errno = EINVAL; // not a channel the interposer made
        return -1;
    }
    return reopen_channel(channel, O_WRONLY);
}

int req_notify_cq(ibv_cq* ibcq, int solicited_only) {
    // Arming is a store into the shared ring: the engine reads it when it adds the next
    // completion and writes the event itself (see take_notification in the engine). A CQ
    // without a channel can be armed too; its events go nowhere, as with the kernel.
    Cq* cq = to_cq(ibcq);
    std::lock_guard<std::mutex> lock(cq->lock); // resize swaps the ring
    cq->ring->notify.store(solicited_only ? di::kNotifySolicited : di::kNotifyNext,
                           std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst); // before the application polls
    return 0;
}

void release_channel(ibv_cq& cq, uint32_t events_written) {
    if (!cq.channel)
        return;
    const uint32_t delivered = events_written - forget_channel_events(cq);
    // ibv_ack_cq_events(3): the CQ goes only once the application has acknowledged every
    // event it received for it (libibverbs counts the acknowledgements in the ibv_cq;
    // the kernel would report how many it delivered, here the engine counts them).
    pthread_mutex_lock(&cq.mutex);
    while (cq.comp_events_completed < delivered)
        pthread_cond_wait(&cq.cond, &cq.mutex);
    pthread_mutex_unlock(&cq.mutex);
}

} // namespace softhca::provider
