// softhca-engine: the adapter card. One process per host (per instance prefix) owns the
// ports, the resource tables and the polling loop, and serves every process that opens
// one of its devices.
//
// The daemon room (daemon/): this main loop and the command line (engine_config.hpp). It
// is the only room that may use every other one: it makes the ports, the data path, the
// control server and the rdma_cm server and wires them together.
#include "clock.hpp"
#include "control_server.hpp"
#include "datapath.hpp"
#include "datapath_threads.hpp"
#include "descriptor_sink.hpp"
#include "device_links.hpp"
#include "device_model.hpp"
#include "doorbells.hpp"
#include "dpdk_ports.hpp"
#include "engine_config.hpp"
#include "environment.hpp"
#include "fabric_ports.hpp"
#include "fast_crc32.hpp"
#include "host_namespaces.hpp"
#include "port_counter_files.hpp"
#include "rdma_cm_server.hpp"
#include "stall_watch.hpp"
#include "udp_ports.hpp"

#include "softhca/device_interface/async_event.hpp"
#include "softhca/device_interface/registration.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sched.h>
#include <set>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

using namespace softhca;
using namespace softhca::engine;

namespace {

// With no queue pair the loop sleeps in epoll and wakes this often to service the
// ports (answer ARP, read link state).
constexpr int kIdleWakeMs = 200;
constexpr uint64_t kLinkCheckMs = 1000;
constexpr uint64_t kResumeCheckMs = 50;
// After the last activity the loop keeps spinning this long before it sleeps
// (SOFTHCA_ENGINE_SPIN_US). Sleeping costs the next message a wake-up: the provider
// finds the doorbell armed, writes its doorbell pipe, and the engine returns from epoll_wait.
//
// SCHEDULING, measured on a 2-core machine (perftest 8 B, heap buffers, the built-in
// wire, two runs each, typical latency in µs / ib_write_bw message rate in M/s):
//   spin 200 µs, yield (default)   send_lat 2.34-2.63  write_lat 2.51-2.61  1.23-1.33
//   spin 200 µs, no yield          send_lat 1.69-1.74  write_lat 2.52-2.61  1.24-1.30
//   no spin (sleep at once)        send_lat 4.85-5.17  write_lat 6.53-6.97  0.89-1.04
//   spin 2 ms, yield               send_lat 2.72-3.05  write_lat 2.55-2.61  1.03-1.17
// Not yielding wins the typical latency but loses the average (send_lat 3.5-4.9 µs
// against 2.6-3.0, write_lat up to 15 µs): the engine then holds a core that one of
// the two perftest processes needs. A longer spin buys nothing and takes the cores
// from the applications between messages.
constexpr uint64_t kSpinNs = 200'000;
// While spinning, the control sockets are looked at every this many rounds, and at
// least this often: under load a round (with the yield to the applications) can take
// milliseconds, and 256 of them kept control requests (creating QPs, `softhca status`)
// waiting for seconds while 8 processes ran traffic (tools/soak.sh saw it).
constexpr unsigned kControlCheckEvery = 256;
constexpr uint64_t kControlCheckNs = 1'000'000;

// The trees of the fabric hosts' views (softhca exec --host NAME reads one).
std::string host_views_dir(const EngineConfig& config) {
    return config.run_dir + "/hosts";
}
std::string host_view_root(const EngineConfig& config, const std::string& host) {
    return host_views_dir(config) + "/" + host + "/sysfs";
}

device_interface::InstanceRegistration
make_registration(const EngineConfig& config, const std::vector<Device>& devices,
                  const PortSet& ports, const std::vector<fabric::HostNamespace>& hosts) {
    device_interface::InstanceRegistration reg;
    reg.sysfs_root = config.sysfs_root();
    reg.cdev_dir = config.cdev_dir;
    reg.driver_file = config.driver_dir + "/" + config.prefix + ".driver";
    reg.provider_prefix = config.provider_prefix;
    for (const auto& device : devices)
        reg.devices.push_back(device_registration(config, device, ports.info(device.port_index)));
    reg.rdma_cm_socket = config.rdma_cm_socket_path();
    // A fabric's hosts in namespaces of their own: each sees its NICs, on its interfaces.
    reg.host_views_dir = host_views_dir(config);
    for (const fabric::HostNamespace& host : hosts) {
        device_interface::HostView view;
        view.sysfs_root = host_view_root(config, host.host);
        for (size_t nic = 0; nic < host.nics.size(); ++nic) {
            device_interface::DeviceRegistration d = reg.devices[host.nics[nic]];
            d.ports[0].netdev = fabric::HostNamespace::interface_of_nic(nic);
            d.netdev_elsewhere = true;
            view.devices.push_back(std::move(d));
        }
        reg.host_views.push_back(std::move(view));
    }
    return reg;
}

int run(const EngineConfig& config) {
    ::mkdir(config.run_dir.c_str(), 0755);
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGHUP);
    sigprocmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    // The card is a separate piece of hardware: applications spinning on their
    // completions must not starve it of CPU on a machine with few cores. A raised
    // priority costs nothing when idle, since the loop sleeps then.
    setpriority(PRIO_PROCESS, 0, -10);
    // One descriptor per open context (plus its async pipe): allow as many as the
    // hard limit permits, as a card serves as many contexts as it has resources.
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }

    // The process that takes the client sockets the engine lets go of
    // (descriptor_sink.hpp): forked now, while the engine is one thread.
    start_descriptor_sink();
    install_fast_crc32();
    // The CPUs the engine may run on, before DPDK's EAL pins this thread to one of them:
    // the data-path threads get them all back.
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0)
        CPU_SET(0, &cpus);
    const auto cores = static_cast<size_t>(CPU_COUNT(&cpus));
    // One kind of port per instance: DPDK ethdevs (the built-in wire among them), kernel
    // UDP sockets, or the endpoints of a fabric inside the engine.
    std::unique_ptr<PortSet> port_set;
    if (config.fabric)
        port_set = std::make_unique<FabricPortSet>(config, *config.fabric);
    else if (!config.ports.empty() && config.ports.front().is_kernel_udp())
        port_set = std::make_unique<UdpPortSet>(config);
    else
        port_set = std::make_unique<DpdkPortSet>(config);
    PortSet& ports = *port_set;
    // DPDK's EAL pinned this thread to one CPU; it serves the control path and the first
    // data path, so it gets every CPU back as the other data-path threads do. Pinned, it
    // waits for that one CPU however idle the others are: two processes busy on it (an
    // application under strace and strace itself, measured) held it off for seconds, and
    // every client with it. The threads made from here on inherit this.
    sched_setaffinity(0, sizeof(cpus), &cpus);
    // A client's FUSE page under an MR must not hold a thread that serves others
    // (stall_watch.hpp).
    StallWatch::start();
    // Room for the devices `rdma link add` makes (device_links.hpp): what refers to one
    // stays valid.
    std::vector<Device> devices;
    devices.reserve(device_interface::kMaxDevices);
    for (size_t i = 0; i < ports.size(); ++i)
        devices.push_back(
            {config.prefix + std::to_string(i), i, transport::guid_from_mac(ports.info(i).mac)});

    ControlServer server(config.socket_path(), devices, ports, config.prefix);
    server.tables().limits = config.limits;
    // The data paths (datapath_threads.hpp): this loop runs the first, each other one has
    // a thread; everything below that touches what they read holds the world.
    DatapathThreads threads(ports, devices, server.tables(),
                            datapath_threads_for(config, ports.size(), cores));
    Datapath& datapath = threads.main();
    RdmaCmServer rdma_cm(config.rdma_cm_socket_path(), devices, ports, threads);
    rdma_cm.set_limits(config.limits);
    threads.set_mad_receiver(&rdma_cm);
    server.set_before_request([&threads] { threads.poll_all(monotonic_ns()); });
    threads.set_congestion_control({config.dcqcn, config.dcqcn_parameters, config.cnp_interval_ns});
    server.set_rdma_cm_status([&rdma_cm](bool sees_all, uid_t uid, ino_t pidns) {
        return rdma_cm.status_document(sees_all, uid, pidns);
    });
    server.set_engine_status([&threads] {
        StatusDocument threads_status = StatusDocument::array();
        for (size_t t = 0; t < threads.count(); ++t)
            threads_status.push_back(
                {{"ports", threads.ports_of(t)}, {"rounds", threads.rounds(t)}});
        return StatusDocument{{"datapath_threads", threads_status}};
    });

    // A fabric's hosts, with namespaces of their own on request (netns=1).
    std::vector<fabric::HostNamespace> hosts;
    if (config.fabric && config.fabric->host_namespaces)
        hosts = fabric::fabric_hosts(static_cast<FabricPortSet&>(ports).fabric().topology(),
                                     config.prefix);

    device_interface::Manifest manifest(config.manifest_path());
    manifest.remove_all(); // leftovers of an engine that died without cleaning up
    device_interface::register_instance(make_registration(config, devices, ports, hosts), manifest);
    if (!hosts.empty()) {
        fabric::make_host_namespaces(hosts, fabric::management_namespace(config.prefix), ports,
                                     [&manifest](const std::string& path) {
                                         manifest.record(
                                             device_interface::Manifest::Kind::NetNamespace, path);
                                     });
        std::vector<int> device_host(devices.size(), -1);
        std::vector<std::string> namespaces(devices.size());
        for (size_t h = 0; h < hosts.size(); ++h)
            for (uint32_t nic : hosts[h].nics) {
                device_host[nic] = static_cast<int>(h);
                namespaces[nic] = hosts[h].name;
            }
        rdma_cm.set_hosts(std::move(device_host), [&hosts](dev_t dev, ino_t ino) {
            return fabric::host_of_namespace(hosts, dev, ino);
        });
        static_cast<FabricPortSet&>(ports).set_host_namespaces(std::move(namespaces));
    }
    // The ports' counters in every device tree (port_counter_files.hpp).
    std::vector<PortCounterFiles::Target> counter_targets;
    for (size_t d = 0; d < devices.size(); ++d)
        counter_targets.push_back(
            {port_folder(config.sysfs_root(), devices[d]), devices[d].port_index, d});
    for (const fabric::HostNamespace& host : hosts)
        for (uint32_t nic : host.nics)
            counter_targets.push_back({port_folder(host_view_root(config, host.host), devices[nic]),
                                       devices[nic].port_index, nic});
    PortCounterFiles counter_files(std::move(counter_targets));
    {
        std::ofstream pid(config.pid_path());
        pid << getpid() << "\n";
    }
    std::fprintf(stderr, "softhca-engine: serving %zu devices on %s (%zu data-path threads)\n",
                 devices.size(), config.socket_path().c_str(), threads.count());

    int epfd = epoll_create1(EPOLL_CLOEXEC);
    int sigfd = signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
    auto watch = [&](int fd) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    };
    const auto unwatch = [epfd](int fd) { epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr); };
    server.set_unwatch(unwatch);
    rdma_cm.set_unwatch(unwatch);
    watch(sigfd);
    watch(server.listen_fd());
    watch(rdma_cm.listen_fd());
    std::set<int> rdma_cm_files;
    // Providers write their context's doorbell pipe after posting when the engine said it
    // sleeps: this loop sleeps on those of its own data path's devices.
    std::vector<int> doorbell_pipes, own_doorbells;
    for (size_t device = 0; device < devices.size(); ++device) {
        doorbell_pipes.push_back(server.wakeup_fd(device));
        if (threads.thread_of_port(devices[device].port_index) == 0)
            own_doorbells.push_back(doorbell_pipes.back());
    }
    for (int fd : own_doorbells)
        watch(fd);
    // Ports of a PMD (not the built-in wire) receive what wakes nothing: the loop sleeps
    // 1 ms at most then, as the data-path threads do.
    bool external_ports = false;
    for (size_t i = 0; i < ports.size(); ++i)
        external_ports |= !ports.info(i).devargs.empty();
    // `rdma link add` and `delete` (device_links.hpp): an added device's doorbells are this
    // loop's to sleep on, and an added PMD port's frames too.
    DeviceLinks links({config, devices, ports, server, threads, rdma_cm, manifest,
                       [&](int fd) {
                           own_doorbells.push_back(fd);
                           watch(fd);
                       },
                       [&](int fd) {
                           std::erase(own_doorbells, fd);
                           unwatch(fd);
                       },
                       [&](const PortInfo& port) { external_ports |= !port.devargs.empty(); }});
    server.set_link_handler([&links](bool add, const std::string& name, const std::string& netdev) {
        return add ? links.add(name, netdev) : links.remove(name);
    });
    // Another data-path thread sent this loop's ports frames or MADs while it slept.
    const int kicked = threads.main_kick_fd();
    watch(kicked);
    const std::vector<int> port_wakeups = ports.wakeup_fds(); // udp ports: one thread
    for (int fd : port_wakeups)
        watch(fd);

    // Scheduling on few cores (SCHEDULING above): the applications, their provider's polling
    // and this loop share the cores. While spinning with nothing to do the loop yields,
    // because on 2 cores the work it waits for comes from a process that needs the core
    // it holds; on a machine with a core to spare for the engine SOFTHCA_ENGINE_YIELD=0
    // keeps it on its core instead.
    const char* spin_us = std::getenv("SOFTHCA_ENGINE_SPIN_US");
    const uint64_t spin_ns = spin_us ? std::strtoull(spin_us, nullptr, 10) * 1000 : kSpinNs;
    const bool idle_yield = environment_switch_on("SOFTHCA_ENGINE_YIELD");
    threads.start({spin_ns, idle_yield, kIdleWakeMs, external_ports ? 1 : kIdleWakeMs, cpus},
                  doorbell_pipes);
    uint64_t next_link_check = monotonic_ns() + kLinkCheckMs * 1'000'000ull;
    uint64_t next_resume_check = 0;
    uint64_t last_busy = 0;
    uint64_t last_control_check = 0;
    unsigned spins = 0;
    bool stop = false;
    while (!stop && !threads.failed()) {
        uint64_t now = monotonic_ns();
        bool busy = threads.poll_main(now);
        if (threads.mads_waiting()) {
            const auto world = threads.world();
            busy |= threads.deliver_mads(now);
        }
        if (now >= rdma_cm.next_deadline()) {
            const auto world = threads.world();
            busy |= rdma_cm.poll(now);
        }
        if (counter_files.due(now)) {
            const auto world = threads.world();
            counter_files.collect(now, ports, [&server](size_t device) {
                return server.tables().qp_counters_of_device(device);
            });
        }
        if (links.counters_due(now)) {
            const auto world = threads.world();
            links.collect_counters(now, server);
        }
        if (busy)
            last_busy = now;
        // Adaptive polling: spin while there is traffic, look at the control sockets
        // every so often, and sleep once idle for a while (an idle engine must not
        // burn a core). Sleeping arms the doorbells, then looks once more so that a
        // post racing with the decision is not missed.
        int timeout_ms = 0;
        if (!datapath.has_qps() && now - last_busy >= spin_ns) {
            // Nothing to serve: wake for the ports, for the CM's next timer, for a frame
            // held by a shaped link, or for what another data-path thread sends here (a
            // frame, a MAD for the inbox: it looks once more after saying it sleeps).
            threads.main_going_to_sleep();
            const uint64_t deadline = std::min(rdma_cm.next_deadline(), datapath.next_deadline());
            timeout_ms = static_cast<int>(
                deadline <= now
                    ? 0
                    : std::min<uint64_t>(kIdleWakeMs, (deadline - now) / 1'000'000 + 1));
            if (threads.count() > 1 && (threads.poll_main(now) || threads.mads_waiting())) {
                last_busy = now;
                timeout_ms = 0;
            }
        } else if (now - last_busy < spin_ns) {
            // Spinning with nothing to do: let the applications (which share the
            // cores) run; they are who will give us work.
            if (last_busy != now && idle_yield)
                sched_yield();
            if (++spins % kControlCheckEvery != 0 && now - last_control_check < kControlCheckNs)
                continue;
        } else {
            datapath.arm_doorbells();
            threads.main_going_to_sleep();
            if (threads.poll_main(now) || threads.mads_waiting()) {
                threads.main_awake();
                last_busy = now;
            } else {
                const uint64_t deadline =
                    std::min(datapath.next_deadline(), rdma_cm.next_deadline());
                const uint64_t wake_ms = external_ports ? 1 : kIdleWakeMs;
                timeout_ms = static_cast<int>(
                    deadline <= now
                        ? 0
                        : std::min<uint64_t>(wake_ms, (deadline - now) / 1'000'000 + 1));
            }
        }
        epoll_event events[32];
        last_control_check = now;
        int n = epoll_wait(epfd, events, 32, timeout_ms);
        threads.main_awake();
        for (int i = 0; i < n; ++i) {
            const int fd = events[i].data.fd;
            if (fd == sigfd) {
                stop = true;
            } else if (std::find(own_doorbells.begin(), own_doorbells.end(), fd) !=
                       own_doorbells.end()) {
                drain_doorbell_pipes(fd);
                last_busy = monotonic_ns();
            } else if (fd == kicked || std::find(port_wakeups.begin(), port_wakeups.end(), fd) !=
                                           port_wakeups.end()) {
                uint64_t received = 0;
                [[maybe_unused]] ssize_t r = read(fd, &received, sizeof(received));
            } else {
                // The control path and rdma_cm: every other data-path thread between rounds.
                const auto world = threads.world();
                if (fd == server.listen_fd()) {
                    for (int accepted : server.accept_pending())
                        watch(accepted);
                } else if (fd == rdma_cm.listen_fd()) {
                    for (int accepted : rdma_cm.accept_pending()) {
                        watch(accepted);
                        rdma_cm_files.insert(accepted);
                    }
                } else if (rdma_cm_files.count(fd)) {
                    // A closed one was unwatched before it went (set_unwatch).
                    const Served served = rdma_cm.handle_input(fd);
                    if (served == Served::Paused)
                        epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
                    if (served == Served::Closed)
                        rdma_cm_files.erase(fd);
                } else if (server.handle_input(fd) == Served::Paused) {
                    epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
                }
            }
            if (fd != sigfd)
                last_busy = monotonic_ns();
        }
        now = monotonic_ns();
        // Connections paused while their user's descriptors wait to be closed
        // (client_descriptors.hpp) are watched again once those drain.
        if ((server.has_paused() || rdma_cm.has_paused()) && now >= next_resume_check) {
            next_resume_check = now + kResumeCheckMs * 1'000'000ull;
            const auto world = threads.world();
            for (int fd : server.resumed())
                watch(fd);
            for (int fd : rdma_cm.resumed())
                watch(fd);
        }
        if (now >= next_link_check) {
            const auto world = threads.world();
            next_link_check = now + kLinkCheckMs * 1'000'000ull;
            for (size_t port : ports.refresh_links()) {
                const bool up = ports.info(port).link_up;
                server.raise_device_event(port, 1,
                                          up ? device_interface::kEventPortActive
                                             : device_interface::kEventPortErr);
            }
        }
    }
    std::fprintf(stderr, "softhca-engine: shutting down\n");
    threads.stop();
    manifest.remove_all();
    ::unlink(config.pid_path().c_str());
    ::close(sigfd);
    ::close(epfd);
    return threads.failed() ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
    std::string error;
    auto config = parse_engine_args(argc, argv, error);
    if (!config) {
        std::fprintf(stderr, "softhca-engine: %s\n%s", error.c_str(), engine_usage());
        return 2;
    }
    try {
        return run(*config);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "softhca-engine: %s\n", e.what());
        device_interface::Manifest(config->manifest_path()).remove_all();
        return 1;
    }
}
