// One user taking as much of an engine-wide resource as it is given (issue 40, items 2, 5
// and 6): makes objects of one kind until a make fails or LIMIT are made, prints how many
// it made and the errno of the one that failed, says "ready" and waits to be killed (or,
// with --exit, exits at once: the test's honest client uses it to make one of its own).
//   flood_attack cm_ids ADDRESS LIMIT [--exit]   rdma_cm ids, each bound to ADDRESS on an
//                                                ephemeral port, on one event channel
//   flood_attack resolving ADDRESS LIMIT [--exit]  rdma_cm ids, each resolving ADDRESS
//                                                (which nobody answers) for 10 minutes
//   flood_attack pds DEVICE LIMIT [--exit]       protection domains, on a context after
//                                                another
//   flood_attack contexts DEVICE LIMIT [--exit]  open contexts (a control connection each)
//   flood_attack cm_files ANY LIMIT [--exit]     rdma_cm event channels (an rdma_cm file
//                                                and connection each)
//   flood_attack vmas DEVICE LIMIT               splits its memory into LIMIT mappings (or
//                                                as many as vm.max_map_count allows), then
//                                                registers and deregisters an MR in them
//                                                until killed
#include "test_device.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

namespace {

// rdma_cm ids on one event channel, each bound to ADDRESS on an ephemeral port or, with
// `resolve`, resolving ADDRESS for 10 minutes.
size_t make_cm_ids(const char* address, size_t limit, bool resolve, int& error) {
    rdma_event_channel* channel = rdma_create_event_channel();
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (!channel || inet_pton(AF_INET, address, &addr.sin_addr) != 1) {
        error = channel ? EINVAL : errno;
        return 0;
    }
    auto* to = reinterpret_cast<sockaddr*>(&addr);
    size_t made = 0;
    while (made < limit) {
        rdma_cm_id* id = nullptr;
        if (rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0) {
            error = errno;
            break;
        }
        ++made;
        // A bind failing: the ephemeral ports ran out (the id stays, unbound).
        if ((resolve ? rdma_resolve_addr(id, nullptr, to, 600'000) : rdma_bind_addr(id, to)) != 0) {
            error = errno;
            break;
        }
    }
    return made;
}

// On as many contexts as it takes: a context's own cap is below its user's.
size_t make_pds(const std::string& device, size_t limit, int& error) {
    size_t made = 0;
    for (;;) {
        ibv_context* context = open_test_device(device);
        if (!context) {
            error = errno;
            return made;
        }
        size_t here = 0;
        while (made < limit) {
            if (!ibv_alloc_pd(context)) {
                error = errno;
                break;
            }
            ++made;
            ++here;
        }
        if (made == limit || here == 0)
            return made;
    }
}

// Opens DEVICE; null with `error` set to ibv_open_device's errno (taken before anything
// else can change it).
ibv_context* open_device(const std::string& device, int& error) {
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    ibv_context* context = nullptr;
    error = ENODEV;
    for (int i = 0; list && i < count && !context; ++i)
        if (device == ibv_get_device_name(list[i])) {
            context = ibv_open_device(list[i]);
            error = context ? 0 : errno;
        }
    if (list)
        ibv_free_device_list(list);
    return context;
}

// The preload serves 64 rdma_cm files per process: children open them, 60 each, and
// stay (killed with this process) holding them.
size_t open_cm_files(size_t limit, int& error) {
    size_t made = 0;
    while (made < limit) {
        int report_pipe[2];
        if (pipe(report_pipe) != 0)
            break;
        const pid_t child = fork();
        if (child == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            uint64_t report[2] = {0, 0}; // opened, errno
            while (report[0] < 60 && report[0] < limit - made) {
                if (!rdma_create_event_channel()) {
                    report[1] = static_cast<uint64_t>(errno);
                    break;
                }
                ++report[0];
            }
            [[maybe_unused]] ssize_t w = write(report_pipe[1], report, sizeof(report));
            for (;;)
                pause();
        }
        close(report_pipe[1]);
        uint64_t report[2] = {0, 0};
        const bool got = child > 0 && read(report_pipe[0], report, sizeof(report)) ==
                                          static_cast<ssize_t>(sizeof(report));
        close(report_pipe[0]);
        made += report[0];
        if (!got || report[1] || report[0] == 0) {
            error = got ? static_cast<int>(report[1]) : EIO;
            break;
        }
    }
    return made;
}

size_t open_contexts(const std::string& device, size_t limit, int& error) {
    size_t made = 0;
    while (made < limit && open_device(device, error))
        ++made;
    return made;
}

// Splits a region into up to `limit` mappings (every other page read-only), then registers
// and deregisters a page of it in a loop, after saying "ready".
size_t split_and_register(const std::string& device, size_t limit, int& error) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    auto* region = static_cast<char*>(mmap(nullptr, 2 * limit * page, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (region == MAP_FAILED) {
        error = errno;
        return 0;
    }
    size_t made = 1;
    for (size_t i = 1; made < limit && i < 2 * limit; i += 2) {
        if (mprotect(region + i * page, page, PROT_READ) != 0) {
            error = errno; // vm.max_map_count
            break;
        }
        made += 2;
    }
    ibv_context* context = open_test_device(device);
    ibv_pd* pd = context ? ibv_alloc_pd(context) : nullptr;
    if (!pd) {
        error = errno;
        return 0;
    }
    std::printf("made %zu errno %d (%s)\nready\n", made, error, error ? std::strerror(error) : "");
    std::fflush(stdout);
    for (size_t i = 0;; i = (i + 2) % (2 * limit - 2)) {
        ibv_mr* mr = ibv_reg_mr(pd, region + i * page, page, IBV_ACCESS_LOCAL_WRITE);
        if (mr)
            ibv_dereg_mr(mr);
    }
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: flood_attack cm_ids|pds|contexts TARGET LIMIT [--exit]\n");
        return 2;
    }
    const std::string mode = argv[1];
    const size_t limit = std::stoul(argv[3]);
    const bool exit_at_once = argc > 4 && std::string(argv[4]) == "--exit";
    // Descriptors enough of its own: the engine's cap, not this process's, is the test.
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    int error = 0;
    size_t made = 0;
    if (mode == "cm_ids")
        made = make_cm_ids(argv[2], limit, false, error);
    else if (mode == "resolving")
        made = make_cm_ids(argv[2], limit, true, error);
    else if (mode == "pds")
        made = make_pds(argv[2], limit, error);
    else if (mode == "contexts")
        made = open_contexts(argv[2], limit, error);
    else if (mode == "cm_files")
        made = open_cm_files(limit, error);
    else if (mode == "vmas")
        made = split_and_register(argv[2], limit, error);
    else
        return 2;
    std::printf("made %zu errno %d (%s)\nready\n", made, error, error ? std::strerror(error) : "");
    std::fflush(stdout);
    if (exit_at_once)
        return made == limit ? 0 : 1;
    for (;;)
        pause();
}
