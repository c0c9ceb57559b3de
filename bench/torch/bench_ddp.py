"""DDP step time: "ringguard" vs "gloo" (or "nccl"), same model, same data, same processes.

    torchrun --nproc-per-node=2 bench/torch/bench_ddp.py                 # CPU tensors
    torchrun --nproc-per-node=2 bench/torch/bench_ddp.py --device cuda   # CUDA tensors (gloo copies to host)
    torchrun --nproc-per-node=2 bench/torch/bench_ddp.py --device cuda --baseline nccl   # one GPU per rank
    mpirun -np 2 python3 bench/torch/bench_ddp.py                        # CPU tensors over MPI

The default group is ringguard; a gloo group over the same ranks is the baseline. Each backend gets its
own copy of the model (same initial weights) wrapped in DDP. Rounds alternate between the two (and
which one goes first), so load from other processes hits both alike. A step is forward, backward
(DDP's bucketed allreduces overlap it), optimizer step; its time is the slowest rank's. Rank 0 prints
the medians and

    ringguard_vs_<baseline>=<baseline median / ringguard median>      (> 1: ringguard is faster)
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ringguard


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--warmup", type=int, default=5, help="steps per backend before timing")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=5, help="timed steps per backend and round")
    p.add_argument("--baseline", choices=["gloo", "nccl"], default="gloo",
                   help="backend to compare with (nccl: CUDA tensors, one GPU per rank)")
    p.add_argument("--json", help="also write the results to this file (rank 0)")
    return p.parse_args()


def model(args, device):
    torch.manual_seed(0)
    layers = [nn.Linear(args.hidden, args.hidden) for _ in range(args.layers)]
    seq = []
    for layer in layers:
        seq += [layer, nn.ReLU()]
    return nn.Sequential(*seq, nn.Linear(args.hidden, 10)).to(device)


def main():
    args = parse_args()
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    device = torch.device(args.device)
    if "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ:
        ringguard.init_from_mpi()  # started by mpirun: CPU tensors ride MPI
    dist.init_process_group("ringguard")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")  # timing barriers and the max over ranks
    base = args.baseline
    baseline = gloo if base == "gloo" else dist.new_group(backend=base)

    runs = {}
    for name, group in (("ringguard", None), (base, baseline)):
        net = DDP(model(args, device), process_group=group, bucket_cap_mb=args.bucket_cap_mb)
        runs[name] = (net, torch.optim.SGD(net.parameters(), lr=1e-3), group)
    data = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.hidden, generator=data).to(device)
    y = torch.randint(0, 10, (args.batch,), generator=data).to(device)

    def step(name):
        net, opt, _ = runs[name]
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()
        dist.barrier(group=gloo)

    for name in runs:
        for _ in range(args.warmup):
            step(name)
    times = {name: [] for name in runs}
    order = list(runs)
    for r in range(args.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            sync()
            for _ in range(args.steps):
                t0 = time.perf_counter()
                step(name)
                if args.device == "cuda":
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - t0)
    # The slowest rank's time of each step.
    for name in runs:
        t = torch.tensor(times[name], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        times[name] = t.tolist()

    c = ringguard.counters()
    transport = ringguard.transport(args.device)
    params = sum(p.numel() for p in runs[base][0].parameters())
    dist.destroy_process_group()
    if rank == 0:
        med = {name: statistics.median(v) for name, v in times.items()}
        ratio = med[base] / med["ringguard"]
        print(f"ranks={size} device={args.device} params={params} grad_bytes={params * 4} "
              f"steps={len(times[base])} per backend", flush=True)
        for name, m in med.items():
            print(f"{name}: median {m * 1e3:.2f} ms/step  (min {min(times[name]) * 1e3:.2f}, "
                  f"max {max(times[name]) * 1e3:.2f})", flush=True)
        print(f"ringguard_vs_{base}={ratio:.3f} ringguard_ms={med['ringguard'] * 1e3:.2f} "
              f"{base}_ms={med[base] * 1e3:.2f} slices_verified={c['slices_verified']} "
              f"transport={transport}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": size, "device": args.device, "params": params,
                           "median_s": med, f"ringguard_vs_{base}": ratio, "times_s": times}, f, indent=1)


if __name__ == "__main__":
    main()
