// Opens a device, holds a PD and a CQ, says "ready", then waits in ibv_get_async_event.
// When the engine dies it must see IBV_EVENT_DEVICE_FATAL, and later verbs must fail
// promptly instead of hanging. Exit status 0 means all of that held.
#include "test_device.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <unistd.h>

namespace {
int failures = 0;
void expect(bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok)
        ++failures;
}
} // namespace

int main(int argc, char** argv) {
    const std::string name = argc > 1 ? argv[1] : test_device_name();
    alarm(60); // bounded: a hang is a failure, not a stuck suite
    ibv_context* context = open_test_device(name);
    if (!context)
        return 1;
    ibv_pd* pd = ibv_alloc_pd(context);
    ibv_cq* cq = ibv_create_cq(context, 16, nullptr, nullptr, 0);
    if (!pd || !cq)
        return 1;
    std::printf("ready\n");
    std::fflush(stdout);

    ibv_async_event event{};
    int rc = ibv_get_async_event(context, &event);
    expect(rc == 0, "ibv_get_async_event returned an event");
    expect(rc == 0 && event.event_type == IBV_EVENT_DEVICE_FATAL, "the event is DEVICE_FATAL");
    if (rc == 0) {
        std::printf("event: %s\n", ibv_event_type_str(event.event_type));
        ibv_ack_async_event(&event);
    }

    const auto start = std::chrono::steady_clock::now();
    errno = 0;
    ibv_pd* pd2 = ibv_alloc_pd(context);
    expect(pd2 == nullptr && errno != 0, "ibv_alloc_pd fails with an errno");
    static char buffer[4096];
    expect(ibv_reg_mr(pd, buffer, sizeof(buffer), IBV_ACCESS_LOCAL_WRITE) == nullptr,
           "ibv_reg_mr fails");
    ibv_port_attr port{};
    expect(ibv_query_port(context, 1, &port) != 0, "ibv_query_port fails");
    expect(ibv_create_cq(context, 16, nullptr, nullptr, 0) == nullptr, "ibv_create_cq fails");
    ibv_wc wc[4];
    expect(ibv_poll_cq(cq, 4, wc) >= 0, "ibv_poll_cq on an existing CQ does not crash");
    expect(ibv_destroy_cq(cq) == 0, "destroying a CQ of a dead device succeeds");
    expect(ibv_dealloc_pd(pd) == 0, "deallocating a PD of a dead device succeeds");
    const auto elapsed = std::chrono::steady_clock::now() - start;
    expect(elapsed < std::chrono::seconds(2), "the failing verbs returned promptly");
    expect(ibv_close_device(context) == 0, "ibv_close_device succeeds");
    return failures ? 1 : 0;
}
