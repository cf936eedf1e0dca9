// An address oracle on a set-ID program (issue 40, item 8): a process connects to the
// engine (which pins it), forks, and execs SETUID_PROGRAM (argument "60": sleep for a
// minute); the child keeps the connection. For each address the test writes to
// ADDRESS_FILE (hex, one per label: "stack" and "unmapped"), the child maps a page of its
// own there, puts OpenDevice's probe bytes in it and sends OpenDevice with its own
// /proc/self/mem. If the answer depended on whether that address is anonymous memory of
// the pinned (now set-ID) process, the child would learn the program's address space.
// Prints "pinned PID", then "LABEL status N" (or "LABEL unusable") for each address.
//   setuid_oracle_attack SETUID_PROGRAM ADDRESS_FILE      (under softhca exec)
#include "softhca/device_interface/control.hpp"
#include "softhca/device_interface/socket_io.hpp"
#include "test_device.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace di = softhca::device_interface;

namespace {

int connect_engine() {
    const char* sysfs = std::getenv("SYSFS_PATH");
    if (!sysfs)
        return -1;
    std::ifstream in(std::string(sysfs) + "/class/infiniband/" + test_device_name() +
                     "/softhca_engine_socket");
    std::string path;
    std::getline(in, path);
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
        return -1;
    timeval timeout{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    return fd;
}

// OpenDevice with the probe at `address` (a page of this process mapped there): the
// reply's status, or -1 when the page could not be mapped or the engine did not answer.
int probe_at(int engine, uint64_t address) {
    void* page =
        ::mmap(reinterpret_cast<void*>(address & ~uint64_t{4095}), 4096, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (page == MAP_FAILED)
        return -1;
    di::OpenDeviceRequest open{};
    open.header = {di::kControlMagic,
                   di::kControlVersion,
                   static_cast<uint16_t>(di::Opcode::OpenDevice),
                   0,
                   sizeof(open),
                   1};
    open.provider_abi = di::kControlVersion;
    std::snprintf(open.device_name, sizeof(open.device_name), "%s", test_device_name().c_str());
    for (size_t i = 0; i < sizeof(open.probe); ++i)
        open.probe[i] = static_cast<uint8_t>(0xa5 ^ (i * 31));
    std::memcpy(reinterpret_cast<void*>(address), open.probe, sizeof(open.probe));
    open.probe_addr = address;
    int events[2];
    if (::pipe2(events, O_CLOEXEC) != 0)
        return -1;
    const int memory = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    const ssize_t sent = di::send_message(engine, &open, sizeof(open), events[1], memory);
    ::close(memory);
    ::close(events[0]);
    ::close(events[1]);
    if (sent != static_cast<ssize_t>(sizeof(open)))
        return -1;
    alignas(8) char reply[4096];
    di::ReceivedMessage m = di::receive_message(engine, reply, sizeof(reply));
    ::munmap(page, 4096); // the engine reads the probe while it answers
    if (m.fd >= 0)
        ::close(m.fd);
    if (m.size < static_cast<ssize_t>(sizeof(di::ReplyHeader)))
        return -1;
    di::ReplyHeader h;
    std::memcpy(&h, reply, sizeof(h));
    return h.status;
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: setuid_oracle_attack SETUID_PROGRAM ADDRESS_FILE\n");
        return 2;
    }
    const int engine = connect_engine(); // the engine pins this process
    if (engine < 0) {
        std::perror("connect to the engine");
        return 1;
    }
    const pid_t pinned = ::getpid();
    const pid_t child = ::fork();
    if (child < 0)
        return 1;
    if (child > 0) {
        // The pinned process becomes the set-ID program (the connection is close-on-exec:
        // only the child holds it now).
        ::execl(argv[1], "sleep", "60", static_cast<char*>(nullptr));
        std::perror("exec");
        return 1;
    }
    std::printf("pinned %d\n", static_cast<int>(pinned));
    std::fflush(stdout);
    unsigned long long addresses[2] = {0, 0};
    for (int tries = 0; tries < 600; ++tries) {
        std::ifstream in(argv[2]);
        if (in >> std::hex >> addresses[0] >> addresses[1])
            break;
        ::usleep(100'000);
    }
    const char* labels[2] = {"stack", "unmapped"};
    for (int i = 0; i < 2; ++i) {
        if (!addresses[i]) {
            std::printf("%s unusable\n", labels[i]);
            continue;
        }
        const int status = probe_at(engine, addresses[i]);
        if (status < 0)
            std::printf("%s unusable\n", labels[i]);
        else
            std::printf("%s status %d\n", labels[i], status);
        std::fflush(stdout);
    }
    return 0;
}
