#include "client_descriptors.hpp"

#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace softhca::engine {

namespace {

// The device of pipefs, where every anonymous pipe lives (a named FIFO lives on the
// filesystem that holds its name).
dev_t pipe_filesystem() {
    static const dev_t dev = [] {
        int fds[2];
        struct stat st {};
        if (::pipe2(fds, O_CLOEXEC) != 0)
            return dev_t{0};
        ::fstat(fds[0], &st);
        ::close(fds[0]);
        ::close(fds[1]);
        return st.st_dev;
    }();
    return dev;
}

} // namespace

int adopt_client_pipe(int fd, bool read_too) {
    if (fd < 0)
        return -1;
    struct stat st {};
    int own = -1;
    if (::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && st.st_dev == pipe_filesystem()) {
        char path[64];
        std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        own = ::open(path, (read_too ? O_RDWR : O_WRONLY) | O_NONBLOCK | O_CLOEXEC);
    }
    ::close(fd);
    return own;
}

} // namespace softhca::engine
