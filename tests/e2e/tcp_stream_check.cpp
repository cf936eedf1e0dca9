// A plain TCP program, run under rsockets' librspreload in the tests: the server accepts
// one connection, checks every byte of a counted pattern the client sends and echoes it;
// the client checks every byte of the echo. Nothing here knows about RDMA.
//   tcp_stream_check server ADDRESS PORT BYTES
//   tcp_stream_check client ADDRESS PORT BYTES
#include <arpa/inet.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace {

uint8_t pattern(size_t i) {
    return static_cast<uint8_t>((i * 131 + (i >> 12)) & 0xff);
}

bool send_all(int fd, const uint8_t* data, size_t bytes) {
    while (bytes) {
        const ssize_t n = ::send(fd, data, bytes, 0);
        if (n <= 0)
            return false;
        data += n;
        bytes -= static_cast<size_t>(n);
    }
    return true;
}

// Receives `bytes`, checking each against the pattern from `offset`.
bool receive_checked(int fd, size_t bytes, std::vector<uint8_t>& into) {
    into.resize(bytes);
    size_t got = 0;
    while (got < bytes) {
        const ssize_t n = ::recv(fd, into.data() + got, bytes - got, 0);
        if (n <= 0) {
            std::fprintf(stderr, "recv ended after %zu of %zu bytes\n", got, bytes);
            return false;
        }
        for (size_t i = got; i < got + static_cast<size_t>(n); ++i)
            if (into[i] != pattern(i)) {
                std::fprintf(stderr, "byte %zu is 0x%02x, not 0x%02x\n", i, into[i], pattern(i));
                return false;
            }
        got += static_cast<size_t>(n);
    }
    return true;
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s server|client ADDRESS PORT BYTES\n", argv[0]);
        return 2;
    }
    const bool server = std::string(argv[1]) == "server";
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[3])));
    if (inet_pton(AF_INET, argv[2], &addr.sin_addr) != 1)
        return 2;
    const size_t bytes = std::strtoull(argv[4], nullptr, 10);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        std::perror("socket");
        return 1;
    }
    std::vector<uint8_t> data;
    if (server) {
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
            ::listen(fd, 1) != 0) {
            std::perror("bind/listen");
            return 1;
        }
        std::printf("listening\n");
        std::fflush(stdout);
        const int conn = ::accept(fd, nullptr, nullptr);
        if (conn < 0) {
            std::perror("accept");
            return 1;
        }
        if (!receive_checked(conn, bytes, data) || !send_all(conn, data.data(), bytes))
            return 1;
        ::close(conn);
    } else {
        if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
            std::perror("connect");
            return 1;
        }
        std::vector<uint8_t> out(bytes);
        for (size_t i = 0; i < bytes; ++i)
            out[i] = pattern(i);
        if (!send_all(fd, out.data(), bytes) || !receive_checked(fd, bytes, data))
            return 1;
    }
    ::close(fd);
    std::printf("%s: %zu bytes checked\n", server ? "server" : "client", bytes);
    return 0;
}
