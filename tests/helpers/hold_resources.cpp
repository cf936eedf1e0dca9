// Opens a device, allocates PDs, MRs, CQs and a QP, says "ready" and waits to be killed.
// Used to check that the engine frees everything of a process that dies, shared memory
// it mapped included.
#include "test_device.hpp"

#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

int main(int argc, char** argv) {
    const std::string name = argc > 1 ? argv[1] : test_device_name();
    ibv_context* context = open_test_device(name);
    if (!context)
        return 1;
    static char buffers[4][65536];
    for (int i = 0; i < 3; ++i) {
        ibv_pd* pd = ibv_alloc_pd(context);
        if (!pd || !ibv_create_cq(context, 64, nullptr, nullptr, 0))
            return 1;
        if (!ibv_reg_mr(pd, buffers[i], sizeof(buffers[i]),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
            return 1;
    }
    // One MR on shared memory, which the engine maps (named so the test can find it in
    // the engine's mappings), and one registered and deregistered again, which it must
    // have unmapped.
    for (const char* kind : {"softhca-hold-", "softhca-dereg-"}) {
        const std::string memfd_name = kind + std::to_string(getpid());
        const int fd = memfd_create(memfd_name.c_str(), MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, 65536) != 0)
            return 1;
        void* shared = mmap(nullptr, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        ibv_pd* pd = ibv_alloc_pd(context);
        ibv_mr* mr =
            shared == MAP_FAILED || !pd
                ? nullptr
                : ibv_reg_mr(pd, shared, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (!mr)
            return 1;
        if (std::string(kind) == "softhca-dereg-" && (ibv_dereg_mr(mr) || ibv_dealloc_pd(pd)))
            return 1;
    }
    // And one RC queue pair, left in RESET.
    ibv_pd* pd = ibv_alloc_pd(context);
    ibv_cq* cq = ibv_create_cq(context, 16, nullptr, nullptr, 0);
    if (!pd || !cq)
        return 1;
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {16, 16, 1, 1, 0};
    if (!ibv_create_qp(pd, &init))
        return 1;
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;)
        pause();
}
