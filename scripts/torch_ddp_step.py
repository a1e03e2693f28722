"""Time a PyTorch DDP training step (scripts/gpu-check.sh): the same script runs with
Theseus' libnccl.so.2 preloaded and without it (NVIDIA's library, the one PyTorch ships),
and rank 0 prints the median step time, so the two can be compared line by line.

Model: an MLP of THESEUS_DDP_LAYERS (8) Linear(4096, 4096) layers with GELU, bf16
autocast, batch 64: about 134 M parameters, so every step all-reduces ~0.5 GB of fp32
gradients in DDP's 25 MB buckets, overlapped with the backward pass. The loss after the
timed steps is checked against a plain, undistributed replay of the same steps on rank 0
(equal inputs on every rank, so the averaged gradient is the local one): a wrong
allreduce shows as a different loss, not only as a different time."""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def model(layers, width):
    torch.manual_seed(1234)
    parts = []
    for _ in range(layers):
        parts += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*parts).cuda()


def step(net, opt, x):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = net(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    return loss


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    layers = int(os.environ.get("THESEUS_DDP_LAYERS", "8"))
    steps = int(os.environ.get("THESEUS_DDP_STEPS", "20"))
    width = 4096
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    lib = sorted({l.split()[-1] for l in open("/proc/self/maps").read().splitlines() if "libnccl" in l})

    net = DDP(model(layers, width), device_ids=[0])
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    torch.manual_seed(99)
    x = torch.randn(64, width, device="cuda")
    for _ in range(3):
        step(net, opt, x)
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step(net, opt, x)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    dist.barrier()

    if rank == 0:
        ref = model(layers, width)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=1e-3)
        for _ in range(3 + steps - 1):
            step(ref, ref_opt, x)
        ref_loss = step(ref, ref_opt, x)
        ok = torch.allclose(loss.detach(), ref_loss.detach(), rtol=2e-2, atol=1e-6)
        print(f"[ddp] world {world}: {statistics.median(times):.2f} ms/step median of {steps} "
              f"(min {min(times):.2f}), loss {loss.item():.6g} vs undistributed {ref_loss.item():.6g} "
              f"{'OK' if ok else 'MISMATCH'}; libnccl {lib}", flush=True)
        if not ok:
            sys.exit(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
