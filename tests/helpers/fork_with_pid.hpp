// Forking a process with a chosen PID, to force PID reuse in the attack tests: CRIU's
// way, /proc/sys/kernel/ns_last_pid written under its lock (root only; nothing else may
// fork meanwhile, so the tests that use it run alone).
#pragma once

#include <fcntl.h>
#include <string>
#include <sys/file.h>
#include <sys/types.h>
#include <unistd.h>

namespace softhca::test {

// fork() whose child should get `pid`; the caller checks that it did (another process
// may have forked in between). -1 when fork fails, -2 when ns_last_pid cannot be set.
inline pid_t fork_with_pid(pid_t pid) {
    const int fd = open("/proc/sys/kernel/ns_last_pid", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -2;
    if (flock(fd, LOCK_EX) != 0) {
        close(fd);
        return -2;
    }
    const std::string last = std::to_string(pid - 1);
    if (write(fd, last.data(), last.size()) != static_cast<ssize_t>(last.size())) {
        close(fd);
        return -2;
    }
    const pid_t child = fork();
    if (child != 0) {
        flock(fd, LOCK_UN);
        close(fd);
    }
    return child;
}

} // namespace softhca::test
