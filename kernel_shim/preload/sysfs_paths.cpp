// Hard-coded sysfs paths. libibverbs honours SYSFS_PATH, but NCCL and UCX open some
// files at /sys/class/infiniband/<dev>/... directly (GID types, netdevs, local_cpus,
// the device link). For a process run with this library those paths, and the class
// directories themselves, resolve into the softhca tree when it holds that device;
// every other path is untouched.
#undef _FORTIFY_SOURCE
#include "device_tree.hpp"
#include "next_symbol.hpp"
#include "rdma_cm_device.hpp"

#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

namespace softhca::preload {
namespace {

// When `path` names one of the two class directories, or something under a device the
// tree holds, writes the tree's path into `out` and returns it; otherwise `path`.
const char* redirect(const char* path, char (&out)[PATH_MAX]) {
    static constexpr const char* kClasses[] = {"/sys/class/infiniband_verbs",
                                               "/sys/class/infiniband"};
    const char* root = device_tree_root();
    if (!root || !path || std::strncmp(path, "/sys/class/infiniband", 21) != 0)
        return path;
    for (const char* cls : kClasses) {
        const size_t n = std::strlen(cls);
        if (std::strncmp(path, cls, n) != 0 || (path[n] != '\0' && path[n] != '/'))
            continue;
        const int written = std::snprintf(out, sizeof(out), "%s%s", root, path + 4); // drop "/sys"
        if (written <= 0 || static_cast<size_t>(written) >= sizeof(out))
            return path;
        if (path[n] == '\0' || path[n + 1] == '\0')
            return out; // the class directory itself
        // Only devices the tree has: <root>/class/<class>/<name> must exist. (The tree's
        // own paths never start with /sys/class, so the check does not come back here.)
        const size_t name_end = n + 1 + std::strcspn(path + n + 1, "/");
        char device[PATH_MAX];
        std::snprintf(device, sizeof(device), "%s%.*s", root, static_cast<int>(name_end - 4),
                      path + 4);
        return ::faccessat(AT_FDCWD, device, F_OK, 0) == 0 ? out : path;
    }
    return path;
}

// open(2)'s mode is read only when the flags create a file.
mode_t mode_from(int flags, va_list args) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(args, mode_t) : 0;
}

} // namespace
} // namespace softhca::preload

using softhca::preload::next_symbol;
using softhca::preload::redirect;

#define SOFTHCA_EXPORT extern "C" __attribute__((visibility("default")))

SOFTHCA_EXPORT int open(const char* path, int flags, ...) {
    static const auto real = next_symbol<int (*)(const char*, int, ...)>("open");
    va_list args;
    va_start(args, flags);
    const mode_t mode = softhca::preload::mode_from(flags, args);
    va_end(args);
    if (int fd; softhca::preload::open_rdma_cm(path, flags, fd))
        return fd;
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), flags, mode);
}

SOFTHCA_EXPORT int open64(const char* path, int flags, ...) {
    static const auto real = next_symbol<int (*)(const char*, int, ...)>("open64");
    va_list args;
    va_start(args, flags);
    const mode_t mode = softhca::preload::mode_from(flags, args);
    va_end(args);
    if (int fd; softhca::preload::open_rdma_cm(path, flags, fd))
        return fd;
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), flags, mode);
}

SOFTHCA_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
    static const auto real = next_symbol<int (*)(int, const char*, int, ...)>("openat");
    va_list args;
    va_start(args, flags);
    const mode_t mode = softhca::preload::mode_from(flags, args);
    va_end(args);
    if (int fd; softhca::preload::open_rdma_cm(path, flags, fd))
        return fd;
    char buffer[PATH_MAX];
    return real(dirfd, redirect(path, buffer), flags, mode);
}

SOFTHCA_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
    static const auto real = next_symbol<int (*)(int, const char*, int, ...)>("openat64");
    va_list args;
    va_start(args, flags);
    const mode_t mode = softhca::preload::mode_from(flags, args);
    va_end(args);
    if (int fd; softhca::preload::open_rdma_cm(path, flags, fd))
        return fd;
    char buffer[PATH_MAX];
    return real(dirfd, redirect(path, buffer), flags, mode);
}

// What programs built with _FORTIFY_SOURCE call instead of open/open64.
SOFTHCA_EXPORT int __open_2(const char* path, int flags) {
    static const auto real = next_symbol<int (*)(const char*, int)>("__open_2");
    if (int fd; softhca::preload::open_rdma_cm(path, flags, fd))
        return fd;
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), flags);
}

SOFTHCA_EXPORT int __open64_2(const char* path, int flags) {
    static const auto real = next_symbol<int (*)(const char*, int)>("__open64_2");
    if (int fd; softhca::preload::open_rdma_cm(path, flags, fd))
        return fd;
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), flags);
}

SOFTHCA_EXPORT FILE* fopen(const char* path, const char* mode) {
    static const auto real = next_symbol<FILE* (*)(const char*, const char*)>("fopen");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), mode);
}

SOFTHCA_EXPORT FILE* fopen64(const char* path, const char* mode) {
    static const auto real = next_symbol<FILE* (*)(const char*, const char*)>("fopen64");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), mode);
}

SOFTHCA_EXPORT DIR* opendir(const char* path) {
    static const auto real = next_symbol<DIR* (*)(const char*)>("opendir");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer));
}

SOFTHCA_EXPORT int stat(const char* path, struct stat* st) {
    static const auto real = next_symbol<int (*)(const char*, struct stat*)>("stat");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), st);
}

SOFTHCA_EXPORT int lstat(const char* path, struct stat* st) {
    static const auto real = next_symbol<int (*)(const char*, struct stat*)>("lstat");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), st);
}

SOFTHCA_EXPORT int stat64(const char* path, struct stat64* st) {
    static const auto real = next_symbol<int (*)(const char*, struct stat64*)>("stat64");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), st);
}

SOFTHCA_EXPORT int lstat64(const char* path, struct stat64* st) {
    static const auto real = next_symbol<int (*)(const char*, struct stat64*)>("lstat64");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), st);
}

SOFTHCA_EXPORT int access(const char* path, int mode) {
    static const auto real = next_symbol<int (*)(const char*, int)>("access");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), mode);
}

SOFTHCA_EXPORT char* realpath(const char* path, char* resolved) {
    static const auto real = next_symbol<char* (*)(const char*, char*)>("realpath");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), resolved);
}

SOFTHCA_EXPORT ssize_t readlink(const char* path, char* target, size_t size) {
    static const auto real = next_symbol<ssize_t (*)(const char*, char*, size_t)>("readlink");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), target, size);
}

// What stat(), lstat() and ls use underneath (glibc 2.33+, coreutils).
SOFTHCA_EXPORT int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
    static const auto real = next_symbol<int (*)(int, const char*, struct stat*, int)>("fstatat");
    char buffer[PATH_MAX];
    return real(dirfd, redirect(path, buffer), st, flags);
}

SOFTHCA_EXPORT int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
    static const auto real =
        next_symbol<int (*)(int, const char*, struct stat64*, int)>("fstatat64");
    char buffer[PATH_MAX];
    return real(dirfd, redirect(path, buffer), st, flags);
}

SOFTHCA_EXPORT int statx(int dirfd, const char* path, int flags, unsigned int mask,
                         struct statx* st) {
    static const auto real =
        next_symbol<int (*)(int, const char*, int, unsigned int, struct statx*)>("statx");
    char buffer[PATH_MAX];
    return real(dirfd, redirect(path, buffer), flags, mask, st);
}

SOFTHCA_EXPORT int faccessat(int dirfd, const char* path, int mode, int flags) {
    static const auto real = next_symbol<int (*)(int, const char*, int, int)>("faccessat");
    char buffer[PATH_MAX];
    return real(dirfd, redirect(path, buffer), mode, flags);
}

// Directory scans: glibc's scandir and nftw open the directory through its own internal
// opendir, which the opendir above does not see (libibumad lists a device's ports and
// pkeys with scandir: ibstat; find and monitoring scripts walk the tree with nftw).
using DirentFilter = int (*)(const struct dirent*);
using DirentCompare = int (*)(const struct dirent**, const struct dirent**);
using Dirent64Filter = int (*)(const struct dirent64*);
using Dirent64Compare = int (*)(const struct dirent64**, const struct dirent64**);

SOFTHCA_EXPORT int scandir(const char* path, struct dirent*** list, DirentFilter filter,
                           DirentCompare compare) {
    static const auto real =
        next_symbol<int (*)(const char*, struct dirent***, DirentFilter, DirentCompare)>("scandir");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), list, filter, compare);
}

SOFTHCA_EXPORT int scandir64(const char* path, struct dirent64*** list, Dirent64Filter filter,
                             Dirent64Compare compare) {
    static const auto real =
        next_symbol<int (*)(const char*, struct dirent64***, Dirent64Filter, Dirent64Compare)>(
            "scandir64");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), list, filter, compare);
}

SOFTHCA_EXPORT int scandirat(int dirfd, const char* path, struct dirent*** list,
                             DirentFilter filter, DirentCompare compare) {
    static const auto real =
        next_symbol<int (*)(int, const char*, struct dirent***, DirentFilter, DirentCompare)>(
            "scandirat");
    char buffer[PATH_MAX];
    return real(dirfd, redirect(path, buffer), list, filter, compare);
}

using NftwVisit = int (*)(const char*, const struct stat*, int, struct FTW*);
using Nftw64Visit = int (*)(const char*, const struct stat64*, int, struct FTW*);

SOFTHCA_EXPORT int nftw(const char* path, NftwVisit visit, int descriptors, int flags) {
    static const auto real = next_symbol<int (*)(const char*, NftwVisit, int, int)>("nftw");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), visit, descriptors, flags);
}

SOFTHCA_EXPORT int nftw64(const char* path, Nftw64Visit visit, int descriptors, int flags) {
    static const auto real = next_symbol<int (*)(const char*, Nftw64Visit, int, int)>("nftw64");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer), visit, descriptors, flags);
}

// `cd /sys/class/infiniband` (ibstatus does, then lists `*`).
SOFTHCA_EXPORT int chdir(const char* path) {
    static const auto real = next_symbol<int (*)(const char*)>("chdir");
    char buffer[PATH_MAX];
    return real(redirect(path, buffer));
}
