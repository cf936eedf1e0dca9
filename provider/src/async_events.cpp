// The async event path. The engine writes event records straight into the context's
// async pipe; this thread only watches the control socket and, when the engine dies,
// writes IBV_EVENT_DEVICE_FATAL so ibv_get_async_event reports it, as a real device
// does when it fails. It blocks in poll() and uses no CPU while all is well.
#include "provider.hpp"

#include "softhca/device_interface/async_event.hpp"

#include <cstdint>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace softhca::provider {

namespace di = device_interface;

namespace {

void* watchdog_main(void* arg) {
    auto& state = *static_cast<ContextState*>(arg);
    for (;;) {
        // events = 0 on the control socket: only hang-up and error wake us, never the
        // replies that the verb-calling threads read themselves.
        pollfd fds[2] = {{state.control.fd(), 0, 0}, {state.wake_fd, POLLIN, 0}};
        int n = ::poll(fds, 2, -1);
        if (n < 0)
            continue;
        if (fds[1].revents)
            return nullptr;
        if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) {
            state.control.mark_dead();
            di::AsyncEventRecord record{0, di::kEventDeviceFatal, 0};
            [[maybe_unused]] ssize_t w = ::write(state.async_write_fd, &record, sizeof(record));
            return nullptr;
        }
    }
}

} // namespace

int start_async_events(ContextState& state) {
    state.wake_fd = ::eventfd(0, EFD_CLOEXEC);
    if (state.wake_fd < 0)
        return errno;
    if (int err = ::pthread_create(&state.watchdog, nullptr, watchdog_main, &state))
        return err;
    state.watchdog_running = true;
    return 0;
}

void stop_async_events(ContextState& state) {
    if (state.watchdog_running) {
        uint64_t one = 1;
        [[maybe_unused]] ssize_t w = ::write(state.wake_fd, &one, sizeof(one));
        ::pthread_join(state.watchdog, nullptr);
        state.watchdog_running = false;
    }
    if (state.wake_fd >= 0)
        ::close(state.wake_fd);
    state.wake_fd = -1;
}

} // namespace softhca::provider
