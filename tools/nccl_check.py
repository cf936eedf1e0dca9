#!/usr/bin/env python3
"""One rank of tools/gpu-check.sh's NCCL check.

torch.distributed over NCCL, rank RANK of WORLD_SIZE (the rendezvous at MASTER_ADDR and
MASTER_PORT), on GPU 0: all_reduce, all_gather, reduce_scatter and a send/recv exchange
from 1 KiB to 64 MiB, each result checked element by element against what the ranks put
in, then timed. Rank 0 prints one line per operation and size:
    RESULT op bytes time_us busbw_GBs
and "CHECKED n" at the end; any wrong element raises and the rank exits non-zero.
With --cpu-only it checks its arguments and the size table and exits (the dry run).
"""
import os
import sys
import time

SIZES = [1024 << (2 * i) for i in range(9)]  # 1 KiB, 4 KiB, ... 64 MiB


def pattern(torch, count, rank, device, offset=0):
    """Small integers (exact in float32 whatever the sum): (index % 251) + rank + 1."""
    index = torch.arange(offset, offset + count, device=device, dtype=torch.int64)
    return ((index % 251) + rank + 1).to(torch.float32)


def timed(torch, run, iterations):
    run()  # warm-up (and the connection's setup on first use)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iterations):
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iterations


def main():
    if "--cpu-only" in sys.argv:
        print("nccl_check: sizes " + " ".join(str(s) for s in SIZES))
        return 0
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    checked = 0

    def report(op, nbytes, seconds, factor):
        if rank == 0:
            busbw = nbytes / seconds * factor / 1e9
            print(f"RESULT {op} {nbytes} {seconds * 1e6:.1f} {busbw:.3f}", flush=True)

    for nbytes in SIZES:
        count = nbytes // 4
        iterations = 20 if nbytes <= (1 << 20) else 5
        expected_sum = sum(pattern(torch, count, r, device) for r in range(world))

        # all_reduce: every rank ends with the sum of everyone's.
        x = pattern(torch, count, rank, device)
        dist.all_reduce(x)
        if not torch.equal(x, expected_sum):
            raise SystemExit(f"all_reduce of {nbytes} B: wrong result on rank {rank}")
        buffer = pattern(torch, count, rank, device)
        seconds = timed(torch, lambda: dist.all_reduce(buffer), iterations)
        report("all_reduce", nbytes, seconds, 2 * (world - 1) / world)

        # all_gather: rank r's part at r * count.
        mine = pattern(torch, count, rank, device)
        gathered = torch.empty(count * world, device=device)
        dist.all_gather_into_tensor(gathered, mine)
        for r in range(world):
            if not torch.equal(gathered[r * count:(r + 1) * count], pattern(torch, count, r, device)):
                raise SystemExit(f"all_gather of {nbytes} B: rank {r}'s part wrong on rank {rank}")
        seconds = timed(torch, lambda: dist.all_gather_into_tensor(gathered, mine), iterations)
        report("all_gather", nbytes * world, seconds, (world - 1) / world)

        # reduce_scatter: rank r gets the sum of everyone's slice r.
        whole = pattern(torch, count * world, rank, device)
        part = torch.empty(count, device=device)
        dist.reduce_scatter_tensor(part, whole)
        want = sum(pattern(torch, count, r, device, offset=rank * count) for r in range(world))
        if not torch.equal(part, want):
            raise SystemExit(f"reduce_scatter of {nbytes} B: wrong slice on rank {rank}")
        seconds = timed(torch, lambda: dist.reduce_scatter_tensor(part, whole), iterations)
        report("reduce_scatter", nbytes * world, seconds, (world - 1) / world)

        # send/recv: each rank sends its pattern to the next and receives the previous one's.
        outgoing = pattern(torch, count, rank, device)
        incoming = torch.empty(count, device=device)

        def exchange():
            ops = [dist.P2POp(dist.isend, outgoing, (rank + 1) % world),
                   dist.P2POp(dist.irecv, incoming, (rank - 1) % world)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()

        exchange()
        if not torch.equal(incoming, pattern(torch, count, (rank - 1) % world, device)):
            raise SystemExit(f"send/recv of {nbytes} B: wrong bytes on rank {rank}")
        seconds = timed(torch, exchange, iterations)
        report("sendrecv", nbytes, seconds, 1.0)
        checked += 4

    dist.barrier()
    if rank == 0:
        print(f"CHECKED {checked}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
