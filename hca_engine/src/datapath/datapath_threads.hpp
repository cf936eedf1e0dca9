// The engine's data-path threads (softhca-engine --threads N): the ports, and with each
// port its device's QPs, SRQs, CQs and doorbell pages, are shared out among N data paths,
// port p to data path p mod N. Data path 0 is run by the engine's main loop (which also
// serves the control socket and rdma_cm); each other one by a thread of its own, with its
// own polling round, its own spinning and its own sleep on its devices' doorbell pipes.
//
// What a round touches belongs to one data path: its ports' receive and transmit queues
// (the built-in wire's rings have one producer and one consumer, the two ports' threads;
// DPDK's packet pools take frames back from any thread), its QPs and their memory (each
// thread's write-behind list is its own), its timers and neighbour tables. Nothing on the
// per-packet path is locked.
//
// The control path changes what the rounds read (QP and MR tables, QP states, the lists of
// doorbell pages) only while it holds the world (world()): every other thread between two
// rounds. A thread holds its round lock for one round and never waits for the main loop
// while holding it; the main loop takes every round lock for each control request, each
// rdma_cm step, each link check. With more than one thread, the MADs that reach any QP1
// wait in an inbox until the main loop hands them to rdma_cm under the world (what it
// answers may leave from any port, so it never runs inside a round).
//
// With one thread (the default on a machine of few cores, engine_config.hpp) there is no
// other thread, the world costs nothing, and the engine is the one loop it always was.
#pragma once

#include "datapath.hpp"
#include "management_datagrams.hpp"
#include "queue_directory.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <sched.h>
#include <thread>
#include <vector>

namespace softhca::engine {

class DatapathThreads final : public QpSchedule, public MadSender {
  public:
    // `threads` data paths (at least 1, at most one per port).
    DatapathThreads(PortSet& ports, const std::vector<Device>& devices, QueueDirectory& tables,
                    size_t threads);
    ~DatapathThreads() override;
    DatapathThreads(const DatapathThreads&) = delete;
    DatapathThreads& operator=(const DatapathThreads&) = delete;

    size_t count() const { return paths_.size(); }
    // The main loop's data path (0), and the one serving `port`.
    Datapath& main() { return *paths_[0]->datapath; }
    Datapath& path(size_t thread) { return *paths_[thread]->datapath; }
    size_t thread_of_port(size_t port) const { return thread_of_port_[port]; }
    const std::vector<size_t>& ports_of(size_t thread) const { return paths_[thread]->ports; }

    // How a thread of its own spins and sleeps (the main loop's rules, main.cpp).
    struct Loop {
        uint64_t spin_ns = 200'000;
        bool idle_yield = true;
        int idle_wake_ms = 200; // no QP on any device
        int busy_wake_ms = 200; // QPs, and frames that arrive wake nothing (a PMD port)
        // The CPUs the engine was given (read before DPDK's EAL pinned the main loop to
        // one): the threads run on all of them, or they would only take turns on its.
        cpu_set_t cpus;
    };
    // Starts data paths 1..N-1. `doorbell_pipes[d]`: the epoll set of device d's doorbell
    // pipes (ControlServer::wakeup_fd), which the thread serving d sleeps on.
    void start(const Loop& loop, const std::vector<int>& doorbell_pipes);
    // Stops and joins them (also on destruction).
    void stop();

    // A round of the main loop's data path.
    bool poll_main(uint64_t now) {
        const bool busy = paths_[0]->datapath->poll(now);
        after_round(*paths_[0], busy);
        return busy;
    }
    // The main loop's sleep: readable when another thread gave it work (kick_fd), and
    // the two calls around its last look before sleeping and its wake-up.
    int main_kick_fd() const { return paths_[0]->kick; }
    void main_going_to_sleep() { going_to_sleep(*paths_[0]); }
    void main_awake() { paths_[0]->sleeping.store(false, std::memory_order_relaxed); }

    // Every other thread between two rounds while it lives (nothing with one thread).
    class World {
      public:
        explicit World(DatapathThreads& threads);
        ~World();
        World(const World&) = delete;
        World& operator=(const World&) = delete;

      private:
        DatapathThreads& threads_;
    };
    World world() { return World(*this); }

    // Under the world: a round of every data path (a control request then sees the work
    // posted before it, as a card's command interface would).
    bool poll_all(uint64_t now);
    void set_congestion_control(const Datapath::CongestionControl& control);
    // QP1's MADs go to `receiver`: directly with one data path; with more, every data
    // path's (the main loop's too, whose round runs beside the others) through the inbox,
    // since what rdma_cm does with one may send on any port.
    void set_mad_receiver(MadReceiver* receiver);
    bool mads_waiting() const { return inbox_waiting_.load(std::memory_order_acquire); }
    // A thread stopped on an error (it said why on stderr): the engine must stop.
    bool failed() const { return failed_.load(std::memory_order_acquire); }
    // Under the world: hands the MADs waiting in the inbox to the receiver.
    bool deliver_mads(uint64_t now);

    // QpSchedule (the control path, under the world; a data path for its own QPs): to the
    // data path serving the QP's device.
    void activate(EngineQp& qp) override;
    void forget(EngineQp& qp) override;
    // MadSender (rdma_cm, under the world): through the data path serving the port.
    bool send_mad(size_t port, const MadPeer& to, const transport::CmMad& mad,
                  uint64_t now) override;
    bool neighbor_resolved(size_t port, const transport::Gid& peer, uint64_t now) override;

    // A port added at run time (`rdma link add`, under the world; its device already in
    // the device list): the main loop's data path serves it, which sleeps on its device's
    // doorbell pipe (main.cpp). A port removed: nobody serves it any more.
    void add_port(size_t port);
    void remove_port(size_t port);

    // Rounds each thread has run (status, tests).
    uint64_t rounds(size_t thread) const {
        return paths_[thread]->rounds.load(std::memory_order_relaxed);
    }

  private:
    struct Path {
        std::vector<size_t> ports;
        std::unique_ptr<Datapath> datapath;
        std::mutex round; // held by the thread for one round, by the main loop for the world
        std::thread thread;
        int kick = -1; // eventfd: wakes the thread from its sleep
        std::atomic<bool> sleeping{false};
        std::atomic<uint64_t> rounds{0};
    };
    // MADs from data paths 1..N-1 (rare: connection setup), for the main loop.
    class Inbox final : public MadReceiver {
      public:
        explicit Inbox(DatapathThreads& threads) : threads_(threads) {}
        void receive_mad(size_t port, const MadPeer& from, const uint8_t* mad, size_t length,
                         uint64_t now) override;

      private:
        DatapathThreads& threads_;
    };
    struct WaitingMad {
        size_t port;
        MadPeer from;
        std::vector<uint8_t> bytes;
    };

    Datapath& serving_port(size_t port) { return *paths_[thread_of_port(port)]->datapath; }
    void run(size_t index, Loop loop, std::vector<int> doorbell_pipes);
    void serve(size_t index, const Loop& loop, const std::vector<int>& doorbell_pipes);
    void kick(Path& path);
    // Sleeping: a thread says so before its last look at its queues, and a thread whose
    // round sent frames (the built-in wire's go straight into the other port's queue, which
    // wakes nothing) or queued a MAD kicks every sleeping one after it. With the fences
    // between, either the sleeper's last look sees the frames or the sender sees it asleep.
    void going_to_sleep(Path& path);
    void after_round(Path& path, bool busy);

    const std::vector<Device>& devices_;
    QueueDirectory& tables_;
    std::vector<std::unique_ptr<Path>> paths_;
    std::vector<size_t> thread_of_port_; // port p: p mod N from the start, 0 if added later
    std::atomic<unsigned> world_wanted_{0};
    std::atomic<bool> stopping_{false};
    std::atomic<bool> failed_{false};
    Inbox mad_inbox_{*this};
    MadReceiver* mad_receiver_ = nullptr;
    std::mutex inbox_lock_;
    std::vector<WaitingMad> inbox_;
    std::atomic<bool> inbox_waiting_{false};
};

} // namespace softhca::engine
