// Gloo (Debian's libgloo, the collective library PyTorch uses on CPUs) between RANKS
// processes of one machine: ring allreduce of SIZE bytes of floats over Gloo's ibverbs
// transport on DEVICE (port 1, GID index 0) or over its TCP transport on loopback, every
// element of every result checked. The ranks meet through a FileStore in DIR. Rank 0
// prints "allreduce SIZE us VALUE" (the average time of one allreduce).
//   softhca-gloo-bench ibverbs:DEVICE|tcp RANK RANKS DIR [SIZE] [ITERATIONS]
// Exit status 1 when a sum is wrong.
#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/ibverbs/device.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: %s ibverbs:DEVICE|tcp RANK RANKS DIR [SIZE] [ITERATIONS]\n",
                     argv[0]);
        return 2;
    }
    const std::string transport = argv[1];
    const int rank = std::atoi(argv[2]);
    const int ranks = std::atoi(argv[3]);
    const std::string dir = argv[4];
    const size_t size = argc > 5 ? std::strtoull(argv[5], nullptr, 0) : 1 << 20;
    const int iterations = argc > 6 ? std::atoi(argv[6]) : 100;
    std::shared_ptr<gloo::transport::Device> device;
    if (transport.rfind("ibverbs:", 0) == 0) {
        gloo::transport::ibverbs::attr attr;
        attr.name = transport.substr(8);
        attr.port = 1;
        attr.index = 0;
        device = gloo::transport::ibverbs::CreateDevice(attr);
    } else {
        device = gloo::transport::tcp::CreateDevice("127.0.0.1");
    }
    gloo::rendezvous::FileStore store(dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
    context->connectFullMesh(store, device);

    const int count = static_cast<int>(size / sizeof(float));
    std::vector<float> data(count);
    gloo::AllreduceRing<float> allreduce(context, {data.data()}, count);
    const int warmup = iterations / 10 + 1;
    auto start = std::chrono::steady_clock::now();
    for (int round = 0; round < warmup + iterations; ++round) {
        if (round == warmup)
            start = std::chrono::steady_clock::now();
        for (int i = 0; i < count; ++i)
            data[i] = static_cast<float>(i % 1000 + rank * 3 + round % 7);
        allreduce.run();
        for (int i = 0; i < count; ++i) {
            // Small integers: exact in float whatever the order of the additions.
            const float want =
                static_cast<float>(ranks * (i % 1000 + round % 7) + 3 * ranks * (ranks - 1) / 2);
            if (data[i] != want) {
                std::fprintf(stderr, "gloo-bench: rank %d round %d: element %d is %g, not %g\n",
                             rank, round, i, data[i], want);
                // Done too, so the others report at once rather than after the store's wait.
                store.set("softhca-bench-done-" + std::to_string(rank), {1});
                return 1;
            }
        }
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        iterations;
    if (rank == 0)
        std::printf("allreduce %zu us %.0f\n", size, us);
    std::fflush(stdout);
    // AllreduceRing's last step posts a notification to the left neighbour and returns
    // without waiting for it to complete. A rank that left now could take that write
    // with it (a dead process's QPs are destroyed, as the kernel destroys them, whatever
    // they had posted) and leave its neighbour waiting for it until Gloo's timeout. So
    // each rank says it is done and leaves only when every rank is: none is done before
    // it has received all its neighbours sent.
    store.set("softhca-bench-done-" + std::to_string(rank), {1});
    std::vector<std::string> done;
    for (int r = 0; r < ranks; ++r)
        done.push_back("softhca-bench-done-" + std::to_string(r));
    store.wait(done);
    // Out without the destructors: Gloo's ibverbs buffers refuse to be destroyed while a
    // send is pending ("Destructing buffer expecting completions"); PyTorch keeps them
    // for the process's life.
    std::_Exit(0);
}
