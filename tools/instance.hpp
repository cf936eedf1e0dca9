// One engine instance as the command line sees it: its prefix, its run directory, and
// the files in there. Instances are independent: tests run their own beside the
// default one.
#pragma once

#include <string>
#include <sys/types.h>

namespace softhca::tools {

struct Instance {
    std::string prefix;  // device names are <prefix>0, <prefix>1, ...
    std::string run_dir; // /run/softhca/<prefix> unless SOFTHCA_RUN_ROOT says otherwise

    static Instance named(const std::string& prefix);

    std::string socket_path() const { return run_dir + "/engine.sock"; }
    std::string sysfs_root() const { return run_dir + "/sysfs"; }
    // The tree a fabric host's programs see (softhca exec --host NAME): its devices only.
    std::string host_sysfs_root(const std::string& host) const {
        return run_dir + "/hosts/" + host + "/sysfs";
    }
    std::string manifest_path() const { return run_dir + "/manifest"; }
    std::string pid_path() const { return run_dir + "/engine.pid"; }
    std::string log_path() const { return run_dir + "/engine.log"; }
    // The driver file the engine writes for the system's libibverbs (its default
    // --driver-dir): "driver <provider prefix>".
    std::string driver_path() const { return "/etc/libibverbs.d/" + prefix + ".driver"; }

    // The engine's pid if its pid file names a live softhca-engine, else 0.
    pid_t running_engine() const;
};

// Sends one administrative request (a complete control message) to the engine and
// waits for the reply. Returns the reply's status or an errno; the reply's body, if
// any, goes to `body`, and a descriptor passed with it to `passed_fd` (closed if null).
int engine_request(const Instance& instance, const void* request, size_t size, std::string& body,
                   int* passed_fd = nullptr);

// The engine's status: the text report, or with json the JSON document
// (docs/status-schema.md). 0 or an errno value.
int query_engine_status(const Instance& instance, std::string& text, bool json = false);

// Takes port 1 of `device` administratively down or up. Returns 0 or an errno.
int set_port_state(const Instance& instance, const std::string& device, bool up);
// Takes the link between fabric nodes `a` and `b` down or up (softhca up --fabric): 0 or
// an errno value (ENOENT: no such link; EOPNOTSUPP: no fabric; EPERM).
int set_fabric_link(const Instance& instance, const std::string& a, const std::string& b, bool up);

} // namespace softhca::tools
