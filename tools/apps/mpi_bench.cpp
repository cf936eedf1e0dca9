// Open MPI over whatever transport mpirun picks (tools/bench.sh runs it once with pml ucx
// over softhca's devices and once with ob1/tcp over loopback): a ping-pong and an
// MPI_Allreduce between two ranks, every received byte checked. Prints one line per
// figure, "pingpong SIZE us|MBps VALUE" and "allreduce SIZE us VALUE", from rank 0.
//   softhca-mpi-bench [ITERATIONS] [allreduce]
//   softhca-mpi-bench ITERATIONS alltoall SIZE
// With "allreduce", only ITERATIONS 1 MiB all-reduces (tools/bench-fabric.sh fails a link
// under them). With "alltoall", only ITERATIONS MPI_Alltoalls of SIZE bytes from every rank
// to every rank, checked as the ping-pong is, printed as "alltoall SIZE us T MBps B": T
// microseconds per MPI_Alltoall and B the MB/s all ranks together sent to other ranks
// (ranks * (ranks - 1) * SIZE / T; tools/bench-fabric.sh runs it across a leaf-spine).
// Exit status 1 when a byte or a sum is wrong.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int rank = 0;

[[noreturn]] void fail(const char* what, size_t at) {
    std::fprintf(stderr, "mpi-bench: rank %d: %s wrong at %zu\n", rank, what, at);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}

uint8_t pattern(size_t i, int round) {
    return static_cast<uint8_t>(i * 131 + round * 7 + 1);
}

// The byte at I of what rank FROM sends rank TO in an all-to-all's ROUND.
uint8_t pattern(size_t i, int round, int from, int to) {
    return static_cast<uint8_t>(i * 131 + round * 7 + from * 17 + to * 61 + 1);
}

// Runs body(round, edge) for iterations / 10 + 1 warm-up rounds, then `iterations` timed
// ones after a barrier; `edge` is true for the first and the last round. Returns the
// seconds the timed rounds took.
template <typename Body> double timed_rounds(int iterations, Body body) {
    const int warmup = iterations / 10 + 1;
    double start = 0;
    for (int round = 0; round < warmup + iterations; ++round) {
        if (round == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            start = MPI_Wtime();
        }
        body(round, round == 0 || round == warmup + iterations - 1);
    }
    return MPI_Wtime() - start;
}

// One-way time of a SIZE-byte message, microseconds: rank 0 sends, rank 1 checks and sends
// it back changed, rank 0 checks. The first rounds warm up.
double pingpong(size_t size, int iterations) {
    std::vector<uint8_t> out(size), in(size);
    const double seconds = timed_rounds(iterations, [&](int round, bool edge) {
        // Every byte of the first and last rounds is checked, and a sample of each other.
        const size_t step = edge ? 1 : 4093;
        if (rank == 0) {
            for (size_t i = 0; i < size; i += step)
                out[i] = pattern(i, round);
            if (size && (size - 1) % step != 0)
                out[size - 1] = pattern(size - 1, round);
            MPI_Send(out.data(), static_cast<int>(size), MPI_BYTE, 1, round, MPI_COMM_WORLD);
            MPI_Recv(in.data(), static_cast<int>(size), MPI_BYTE, 1, round, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            for (size_t i = 0; i < size; i += step)
                if (in[i] != static_cast<uint8_t>(pattern(i, round) ^ 0xff))
                    fail("ping-pong reply", i);
        } else if (rank == 1) {
            MPI_Recv(in.data(), static_cast<int>(size), MPI_BYTE, 0, round, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            for (size_t i = 0; i < size; i += step) {
                if (in[i] != pattern(i, round))
                    fail("ping-pong message", i);
                in[i] ^= 0xff;
            }
            if (size && (size - 1) % step != 0) { // the last byte, always
                if (in[size - 1] != pattern(size - 1, round))
                    fail("ping-pong message", size - 1);
                in[size - 1] ^= 0xff;
            }
            MPI_Send(in.data(), static_cast<int>(size), MPI_BYTE, 0, round, MPI_COMM_WORLD);
        }
    });
    return seconds * 1e6 / iterations / 2;
}

// Time of one MPI_Allreduce (sum) of SIZE bytes of doubles, microseconds; every element
// of every result checked.
double allreduce(size_t size, int iterations, int ranks) {
    const size_t n = size / sizeof(double);
    std::vector<double> in(n), out(n);
    const double seconds = timed_rounds(iterations, [&](int round, bool) {
        for (size_t i = 0; i < n; ++i)
            in[i] = static_cast<double>((i % 1000) + rank * 3 + round);
        MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD);
        for (size_t i = 0; i < n; ++i) {
            const double want =
                static_cast<double>(ranks) * static_cast<double>((i % 1000) + round) +
                3.0 * ranks * (ranks - 1) / 2;
            if (out[i] != want)
                fail("allreduce sum", i);
        }
    });
    return seconds * 1e6 / iterations;
}

// Time of one MPI_Alltoall of SIZE bytes from every rank to every rank, microseconds.
// Every byte of every block of the first and last rounds is checked, and a sample of
// each block (and its last byte) of the others.
double alltoall(size_t size, int iterations, int ranks) {
    std::vector<uint8_t> out(size * ranks), in(size * ranks);
    const double seconds = timed_rounds(iterations, [&](int round, bool edge) {
        const size_t step = edge ? 1 : 4093;
        for (int to = 0; to < ranks; ++to) {
            uint8_t* block = out.data() + size * to;
            for (size_t i = 0; i < size; i += step)
                block[i] = pattern(i, round, rank, to);
            if (size && (size - 1) % step != 0)
                block[size - 1] = pattern(size - 1, round, rank, to);
        }
        MPI_Alltoall(out.data(), static_cast<int>(size), MPI_BYTE, in.data(),
                     static_cast<int>(size), MPI_BYTE, MPI_COMM_WORLD);
        for (int from = 0; from < ranks; ++from) {
            const uint8_t* block = in.data() + size * from;
            for (size_t i = 0; i < size; i += step)
                if (block[i] != pattern(i, round, from, rank))
                    fail("alltoall block", size * from + i);
            if (size && (size - 1) % step != 0 &&
                block[size - 1] != pattern(size - 1, round, from, rank))
                fail("alltoall block", size * from + size - 1);
        }
    });
    return seconds * 1e6 / iterations;
}

} // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int ranks = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const int iterations = argc > 1 ? std::atoi(argv[1]) : 1000;
    if (ranks < 2 || iterations < 1) {
        if (rank == 0)
            std::fprintf(stderr, "mpi-bench: needs 2 ranks or more and ITERATIONS >= 1\n");
        MPI_Finalize();
        return 2;
    }
    if (argc > 2 && std::string(argv[2]) == "allreduce") {
        const double sum = allreduce(1 << 20, iterations, ranks);
        if (rank == 0)
            std::printf("allreduce 1048576 us %.0f\n", sum);
        MPI_Finalize();
        return 0;
    }
    if (argc > 2 && std::string(argv[2]) == "alltoall") {
        const long size = argc > 3 ? std::atol(argv[3]) : 0;
        if (size < 1 || size > (1L << 30) / ranks) {
            if (rank == 0)
                std::fprintf(stderr, "mpi-bench: alltoall needs a SIZE of 1 to %ld bytes\n",
                             (1L << 30) / ranks);
            MPI_Finalize();
            return 2;
        }
        const double us = alltoall(static_cast<size_t>(size), iterations, ranks);
        if (rank == 0)
            std::printf("alltoall %ld us %.0f MBps %.0f\n", size, us,
                        static_cast<double>(ranks) * (ranks - 1) * size / us);
        MPI_Finalize();
        return 0;
    }
    const double lat = pingpong(8, iterations);
    const double big = pingpong(1 << 20, iterations / 10 + 1);
    const double sum = allreduce(1 << 20, iterations / 10 + 1, ranks);
    if (rank == 0) {
        std::printf("pingpong 8 us %.2f\n", lat);
        std::printf("pingpong 1048576 MBps %.0f\n", (1 << 20) / big);
        std::printf("allreduce 1048576 us %.0f\n", sum);
    }
    MPI_Finalize();
    return 0;
}
