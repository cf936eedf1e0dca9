#include "datapath_threads.hpp"

#include "clock.hpp"
#include "doorbells.hpp"
#include "engine_qp.hpp"

#include <algorithm>
#include <cstdio>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace softhca::engine {

DatapathThreads::DatapathThreads(PortSet& ports, const std::vector<Device>& devices,
                                 QueueDirectory& tables, size_t threads)
    : devices_(devices), tables_(tables) {
    // Port sets whose ports share one engine-wide resource (the udp ports' io_uring) run
    // on one thread.
    if (!ports.ports_serve_threads())
        threads = 1;
    threads = std::clamp<size_t>(threads, 1, std::max<size_t>(ports.size(), 1));
    for (size_t t = 0; t < threads; ++t)
        paths_.push_back(std::make_unique<Path>());
    thread_of_port_.reserve(kMaxPorts);
    for (size_t port = 0; port < ports.size(); ++port) {
        thread_of_port_.push_back(port % threads);
        paths_[thread_of_port(port)]->ports.push_back(port);
    }
    for (auto& path : paths_) {
        path->datapath = std::make_unique<Datapath>(ports, devices, tables, path->ports);
        path->kick = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    }
    tables_.schedule = this;
}

DatapathThreads::~DatapathThreads() {
    stop();
    if (tables_.schedule == this)
        tables_.schedule = nullptr;
    for (auto& path : paths_)
        if (path->kick >= 0)
            ::close(path->kick);
}

void DatapathThreads::start(const Loop& loop, const std::vector<int>& doorbell_pipes) {
    for (size_t t = 1; t < paths_.size(); ++t) {
        Path& path = *paths_[t];
        std::vector<int> pipes;
        for (size_t device = 0; device < devices_.size(); ++device)
            if (thread_of_port(devices_[device].port_index) == t && device < doorbell_pipes.size())
                pipes.push_back(doorbell_pipes[device]);
        path.thread = std::thread([this, t, loop, pipes] { run(t, loop, pipes); });
    }
}

void DatapathThreads::add_port(size_t port) {
    thread_of_port_.resize(port + 1, 0);
    thread_of_port_[port] = 0;
    paths_[0]->ports.push_back(port);
    paths_[0]->datapath->add_port(port);
}

void DatapathThreads::remove_port(size_t port) {
    Path& path = *paths_[thread_of_port(port)];
    std::erase(path.ports, port);
    path.datapath->remove_port(port);
}

void DatapathThreads::stop() {
    stopping_.store(true, std::memory_order_release);
    for (auto& path : paths_) {
        if (!path->thread.joinable())
            continue;
        kick(*path);
        path->thread.join();
    }
}

void DatapathThreads::kick(Path& path) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(path.kick, &one, sizeof(one));
}

void DatapathThreads::going_to_sleep(Path& path) {
    path.sleeping.store(true, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

void DatapathThreads::after_round(Path& path, bool busy) {
    path.rounds.fetch_add(1, std::memory_order_relaxed);
    if (!busy || paths_.size() == 1)
        return;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (auto& other : paths_)
        if (other.get() != &path && other->sleeping.load(std::memory_order_seq_cst))
            kick(*other);
}

void DatapathThreads::run(size_t index, Loop loop, std::vector<int> doorbell_pipes) {
    try {
        serve(index, loop, doorbell_pipes);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "softhca-engine: data-path thread: %s\n", e.what());
        failed_.store(true, std::memory_order_release);
        kick(*paths_[0]);
    }
}

void DatapathThreads::serve(size_t index, const Loop& loop,
                            const std::vector<int>& doorbell_pipes) {
    Path& path = *paths_[index];
    // Named for top -H and /proc (softhca-dp1, ...), on every CPU the engine was given.
    const std::string name = "softhca-dp" + std::to_string(index);
    pthread_setname_np(pthread_self(), name.c_str());
    pthread_setaffinity_np(pthread_self(), sizeof(loop.cpus), &loop.cpus);
    Datapath& datapath = *path.datapath;
    const int sleep_set = ::epoll_create1(EPOLL_CLOEXEC);
    auto watch = [&](int fd) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        ::epoll_ctl(sleep_set, EPOLL_CTL_ADD, fd, &ev);
    };
    watch(path.kick);
    for (int pipes : doorbell_pipes)
        watch(pipes);
    uint64_t last_busy = monotonic_ns();
    while (!stopping_.load(std::memory_order_acquire)) {
        // The main loop wants the world: stay out of the next round until it is done.
        if (world_wanted_.load(std::memory_order_acquire) != 0) {
            { const std::lock_guard wait(path.round); } // blocks while the main loop holds it
            sched_yield();
            continue;
        }
        uint64_t now = monotonic_ns();
        bool busy;
        {
            const std::lock_guard round(path.round);
            busy = datapath.poll(now);
        }
        after_round(path, busy);
        if (busy) {
            last_busy = now;
            continue;
        }
        if (now - last_busy < loop.spin_ns) {
            // Spinning with nothing to do: the applications that will give us work share
            // the cores (main.cpp, SCHEDULING).
            if (loop.idle_yield)
                sched_yield();
            continue;
        }
        // Sleep: arm the doorbells, look once more (a post racing with the decision),
        // then wait for a doorbell, a kick (the control path gave this thread work, or
        // stop) or the next deadline.
        uint64_t deadline;
        bool has_qps;
        going_to_sleep(path);
        {
            const std::lock_guard round(path.round);
            datapath.arm_doorbells();
            busy = datapath.poll(now);
            deadline = datapath.next_deadline();
            has_qps = datapath.has_qps(); // the control path's count: read in a round
        }
        after_round(path, busy);
        if (busy) {
            path.sleeping.store(false, std::memory_order_relaxed);
            last_busy = now;
            continue;
        }
        const uint64_t wake_ms = has_qps ? loop.busy_wake_ms : loop.idle_wake_ms;
        const int timeout_ms = static_cast<int>(
            deadline <= now ? 0 : std::min<uint64_t>(wake_ms, (deadline - now) / 1'000'000 + 1));
        epoll_event events[8];
        const int n = stopping_.load(std::memory_order_acquire)
                          ? 0
                          : ::epoll_wait(sleep_set, events, 8, timeout_ms);
        path.sleeping.store(false, std::memory_order_relaxed);
        for (int i = 0; i < n; ++i) {
            if (events[i].data.fd == path.kick) {
                uint64_t kicks = 0;
                [[maybe_unused]] ssize_t r = ::read(path.kick, &kicks, sizeof(kicks));
            } else {
                // A context's pipe may close under the control path: drain in a round.
                const std::lock_guard round(path.round);
                drain_doorbell_pipes(events[i].data.fd);
            }
        }
        if (n > 0)
            last_busy = monotonic_ns();
    }
    ::close(sleep_set);
}

DatapathThreads::World::World(DatapathThreads& threads) : threads_(threads) {
    if (threads_.paths_.size() == 1)
        return;
    threads_.world_wanted_.fetch_add(1, std::memory_order_acq_rel);
    for (size_t t = 1; t < threads_.paths_.size(); ++t)
        threads_.paths_[t]->round.lock();
}

DatapathThreads::World::~World() {
    if (threads_.paths_.size() == 1)
        return;
    for (size_t t = 1; t < threads_.paths_.size(); ++t)
        threads_.paths_[t]->round.unlock();
    threads_.world_wanted_.fetch_sub(1, std::memory_order_acq_rel);
    // What the control path did may be work for a sleeping thread (a QP activated, a MAD
    // queued on its port): it runs a round now rather than at its next deadline.
    for (size_t t = 1; t < threads_.paths_.size(); ++t)
        if (threads_.paths_[t]->sleeping.load(std::memory_order_seq_cst))
            threads_.kick(*threads_.paths_[t]);
}

bool DatapathThreads::poll_all(uint64_t now) {
    bool busy = false;
    for (auto& path : paths_)
        busy |= path->datapath->poll(now);
    return busy;
}

void DatapathThreads::set_congestion_control(const Datapath::CongestionControl& control) {
    for (auto& path : paths_)
        path->datapath->set_congestion_control(control);
}

void DatapathThreads::set_mad_receiver(MadReceiver* receiver) {
    mad_receiver_ = receiver;
    for (auto& path : paths_)
        path->datapath->set_mad_receiver(!receiver || paths_.size() == 1 ? receiver : &mad_inbox_);
}

void DatapathThreads::Inbox::receive_mad(size_t port, const MadPeer& from, const uint8_t* mad,
                                         size_t length, uint64_t) {
    const std::lock_guard lock(threads_.inbox_lock_);
    threads_.inbox_.push_back({port, from, std::vector<uint8_t>(mad, mad + length)});
    threads_.inbox_waiting_.store(true, std::memory_order_release);
}

bool DatapathThreads::deliver_mads(uint64_t now) {
    std::vector<WaitingMad> mads;
    {
        const std::lock_guard lock(inbox_lock_);
        mads.swap(inbox_);
        inbox_waiting_.store(false, std::memory_order_release);
    }
    for (const WaitingMad& m : mads)
        if (mad_receiver_)
            mad_receiver_->receive_mad(m.port, m.from, m.bytes.data(), m.bytes.size(), now);
    return !mads.empty();
}

void DatapathThreads::activate(EngineQp& qp) {
    serving_port(devices_[qp.device()].port_index).activate(qp);
}

void DatapathThreads::forget(EngineQp& qp) {
    serving_port(devices_[qp.device()].port_index).forget(qp);
}

bool DatapathThreads::send_mad(size_t port, const MadPeer& to, const transport::CmMad& mad,
                               uint64_t now) {
    return serving_port(port).send_mad(port, to, mad, now);
}

bool DatapathThreads::neighbor_resolved(size_t port, const transport::Gid& peer, uint64_t now) {
    return serving_port(port).neighbor_resolved(port, peer, now);
}

} // namespace softhca::engine
