// A record of every path a registration created, so that removal takes away exactly
// that and nothing else, even after the engine that created it was killed.
#pragma once

#include <string>
#include <vector>

namespace softhca::device_interface {

class Manifest {
  public:
    // Shared: a directory several instances use (/dev/infiniband) that a softhca
    // instance created and marked; whichever instance leaves it empty but for the
    // mark removes it. NetNamespace: a network namespace mounted at a file of /run/netns
    // (a fabric's hosts), removed as `ip netns delete` removes one: unmounted, then
    // unlinked; the namespace goes with its last process.
    enum class Kind : char {
        Directory = 'd',
        File = 'f',
        Tree = 't',
        Shared = 's',
        NetNamespace = 'n'
    };
    static constexpr const char* kSharedMark = ".softhca-created";

    explicit Manifest(std::string path) : path_(std::move(path)) {}

    // Appends one created path; written through to disk at once so that a crash
    // right after still leaves an accurate record.
    void record(Kind kind, const std::string& created_path);

    // Removes everything recorded, newest first (files unlinked, directories removed
    // when empty, trees removed whole), then the manifest itself. Missing paths are
    // not errors. Returns the number of paths that could not be removed.
    int remove_all() const;

    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

} // namespace softhca::device_interface
