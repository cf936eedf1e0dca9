// What one engine instance serves: its name prefix, where it keeps its files, and the
// ports (one device per port). Parsed from the command line of softhca-engine.
#pragma once

#include "fabric_topology.hpp"
#include "port_config.hpp"
#include "resource_limits.hpp"
#include "softhca/transport/congestion_control.hpp"
#include "softhca/transport/roce_address.hpp"
#include "softhca/transport/service_levels.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace softhca::engine {

// The ports' part (ports/port_config.hpp: prefix, MTU, DPDK memory, the ports and what
// their transmitters do) and the rest of the engine's.
struct EngineConfig : PortsConfig {
    std::string run_dir;         // socket, pid file, manifest, device tree
    std::string provider_prefix; // path libibverbs loads (+ "-rdmav34.so")
    std::string driver_dir = "/etc/libibverbs.d";
    std::string cdev_dir = "/dev/infiniband";
    // --limits: what one context and one user may hold in the engine.
    ResourceLimits limits;
    // --dcqcn, off by default: requests sent ECN-capable, CNPs for marked ones,
    // requesters paced at the rate CNPs leave them.
    bool dcqcn = false;
    transport::DcqcnParameters dcqcn_parameters;
    uint64_t cnp_interval_ns = 50'000;
    // --threads N (or SOFTHCA_ENGINE_THREADS): data-path threads, the ports shared out
    // among them (datapath_threads.hpp). 0: one per four cores the engine may run on, at
    // least 1, at most one per port; udp ports always take one (one io_uring: their
    // PortSet says so, PortSet::ports_serve_threads).
    uint32_t datapath_threads = 0;
    // --fabric SPEC: the devices are the endpoints of a fabric of switches inside the
    // engine (ports/fabric), instead of DPDK or UDP ports.
    std::optional<fabric::FabricSpec> fabric;

    std::string socket_path() const { return run_dir + "/engine.sock"; }
    std::string rdma_cm_socket_path() const { return run_dir + "/rdma_cm.sock"; }
    std::string sysfs_root() const { return run_dir + "/sysfs"; }
    std::string manifest_path() const { return run_dir + "/manifest"; }
    std::string pid_path() const { return run_dir + "/engine.pid"; }
};

// The data-path threads an engine of `config` runs (datapath_threads above): what was asked,
// or what `cores` (the CPUs it may run on) suggest, within 1..ports.
size_t datapath_threads_for(const EngineConfig& config, size_t port_count, size_t cores);

// Parses argv; on error returns nullopt and fills `error`.
std::optional<EngineConfig> parse_engine_args(int argc, char** argv, std::string& error);

const char* engine_usage();

} // namespace softhca::engine
