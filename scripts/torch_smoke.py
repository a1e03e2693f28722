"""PyTorch smoke test for Theseus: torch.distributed's NCCL backend on CUDA tensors,
with Theseus' libnccl.so.2 preloaded (scripts/gpu-check.sh). Checks that our library
is the one loaded, then runs the collectives PyTorch uses and verifies every result."""
import os
import sys

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    expect = os.environ.get("THESEUS_EXPECT_LIB", "")
    maps = open("/proc/self/maps").read()
    nccl_libs = sorted({l.split()[-1] for l in maps.splitlines() if "libnccl" in l})
    torch.cuda.set_device(0)  # one GPU is enough: each process has its own context
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    maps = open("/proc/self/maps").read()
    nccl_libs = sorted({l.split()[-1] for l in maps.splitlines() if "libnccl" in l})
    if expect and not any(p.startswith(expect) for p in nccl_libs):
        print(f"rank {rank}: Theseus is not the loaded libnccl: {nccl_libs}", flush=True)
        sys.exit(2)
    dev = torch.device("cuda", 0)
    n = 1 << 20

    x = torch.full((n,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    assert torch.all(x == world * (world + 1) / 2), "all_reduce"

    y = torch.arange(n, device=dev, dtype=torch.float32) if rank == 0 else torch.zeros(n, device=dev)
    dist.broadcast(y, src=0)
    assert torch.equal(y, torch.arange(n, device=dev, dtype=torch.float32)), "broadcast"

    parts = [torch.zeros(4096, device=dev, dtype=torch.bfloat16) for _ in range(world)]
    dist.all_gather(parts, torch.full((4096,), float(rank), device=dev, dtype=torch.bfloat16))
    assert all(torch.all(p == r) for r, p in enumerate(parts)), "all_gather"

    out = torch.zeros(1000, device=dev)
    dist.reduce_scatter(out, [torch.full((1000,), float(rank * 10 + r), device=dev) for r in range(world)])
    assert torch.all(out == sum(q * 10 + rank for q in range(world))), "reduce_scatter"

    inp = torch.arange(world * 8, device=dev, dtype=torch.int64) + 1000 * rank
    res = torch.empty_like(inp)
    dist.all_to_all_single(res, inp)  # grouped send/recv inside PyTorch
    expect_a2a = torch.cat([torch.arange(rank * 8, rank * 8 + 8, device=dev) + 1000 * q for q in range(world)])
    assert torch.equal(res, expect_a2a), "all_to_all_single"

    if world >= 2:
        t = torch.full((777,), float(rank), device=dev)
        if rank == 0:
            dist.send(t, dst=1)
        elif rank == 1:
            dist.recv(t, src=0)
            assert torch.all(t == 0), "send/recv"

    dist.all_reduce(torch.ones(1, device=dev), op=dist.ReduceOp.AVG)
    dist.barrier()
    torch.cuda.synchronize()
    print(f"rank {rank}: torch {torch.__version__} with {nccl_libs}: all collectives correct", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
