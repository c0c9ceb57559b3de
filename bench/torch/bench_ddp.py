"""DDP step time: "ringguard" vs "gloo" (or "nccl"), same model, same data, same processes.

    torchrun --nproc-per-node=2 bench/torch/bench_ddp.py                 # CPU tensors
    torchrun --nproc-per-node=2 bench/torch/bench_ddp.py --device cuda   # CUDA tensors (gloo copies to host)
    torchrun --nproc-per-node=2 bench/torch/bench_ddp.py --device cuda --baseline nccl   # one GPU per rank
    mpirun -np 2 python3 bench/torch/bench_ddp.py                        # CPU tensors over MPI
    torchrun --nproc-per-node=2 bench/torch/bench_ddp.py --model gpt --device cuda --baseline nccl
    torchrun --nproc-per-node=2 bench/torch/bench_ddp.py --model gpt --device cuda --profile DIR  # + torch.profiler

Models: ``mlp`` (default: layers x Linear(hidden, hidden) + ReLU, a classifier head) and ``gpt`` (a small
decoder-only transformer on synthetic tokens: token + position embeddings, pre-norm causal self-attention
blocks, a language-model head; ~27 M parameters with the defaults).

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
    p.add_argument("--model", choices=["mlp", "gpt"], default="mlp")
    p.add_argument("--hidden", type=int, help="mlp width (default 1024) / gpt model dimension (512)")
    p.add_argument("--layers", type=int, help="mlp layers (default 4) / gpt blocks (6)")
    p.add_argument("--heads", type=int, default=8, help="gpt attention heads")
    p.add_argument("--seq", type=int, default=256, help="gpt tokens per sample")
    p.add_argument("--vocab", type=int, default=8192, help="gpt vocabulary")
    p.add_argument("--batch", type=int, help="samples per rank and step (default mlp 32, gpt 8)")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--warmup", type=int, default=5, help="steps per backend before timing")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=5, help="timed steps per backend and round")
    p.add_argument("--baseline", choices=["gloo", "nccl"], default="gloo",
                   help="backend to compare with (nccl: CUDA tensors, one GPU per rank)")
    p.add_argument("--json", help="also write the results to this file (rank 0)")
    p.add_argument("--profile", metavar="DIR",
                   help="also profile 3 steps of each backend (torch.profiler) after the timed rounds: a Chrome "
                        "trace per rank and backend in DIR, and rank 0's tables")
    args = p.parse_args()
    defaults = {"mlp": (1024, 4, 32), "gpt": (512, 6, 8)}[args.model]
    for name, value in zip(("hidden", "layers", "batch"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


class Gpt(nn.Module):
    """Decoder-only transformer: embeddings, pre-norm causal blocks, a language-model head."""

    def __init__(self, args):
        super().__init__()
        self.tokens = nn.Embedding(args.vocab, args.hidden)
        self.positions = nn.Embedding(args.seq, args.hidden)
        block = nn.TransformerEncoderLayer(args.hidden, args.heads, 4 * args.hidden, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, args.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(args.hidden)
        self.head = nn.Linear(args.hidden, args.vocab, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(args.seq), persistent=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        h = self.tokens(idx) + self.positions(pos)
        h = self.blocks(h, mask=self.mask, is_causal=True)
        return self.head(self.norm(h))


def model(args, device):
    torch.manual_seed(0)
    if args.model == "gpt":
        return Gpt(args).to(device)
    layers = [nn.Linear(args.hidden, args.hidden) for _ in range(args.layers)]
    seq = []
    for layer in layers:
        seq += [layer, nn.ReLU()]
    return nn.Sequential(*seq, nn.Linear(args.hidden, 10)).to(device)


def batch(args, rank, device):
    """Synthetic data, different on every rank: (inputs, targets)."""
    data = torch.Generator().manual_seed(rank)
    if args.model == "gpt":
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=data)
        return tokens[:, :-1].to(device), tokens[:, 1:].to(device)
    x = torch.randn(args.batch, args.hidden, generator=data)
    return x.to(device), torch.randint(0, 10, (args.batch,), generator=data).to(device)


def profile_steps(path, label, rank, device, step, sync):
    """torch.profiler over 3 calls of `step` (then `sync`): a Chrome trace at `path`, and on rank 0 the
    table by self CPU time, and by self device time on CUDA. Shared with bench_replica_check.py."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        for _ in range(3):
            step()
        sync()
    prof.export_chrome_trace(path)
    if rank == 0:
        sorts = ["self_cpu_time_total"] + (["self_cuda_time_total"] if device.type == "cuda" else [])
        for sort in sorts:
            print(f"# {label}: 3 steps, by {sort}", flush=True)
            print(prof.key_averages().table(sort_by=sort, row_limit=20), flush=True)


def profile(out_dir, rank, device, runs, step, sync):
    """Where a step's time goes on each backend: 3 profiled steps each, after the timed rounds."""
    os.makedirs(out_dir, exist_ok=True)
    for name in runs:
        sync()
        profile_steps(os.path.join(out_dir, f"ddp_{name}_rank{rank}.json"), name, rank, device,
                      lambda: step(name), sync)


def main():
    args = parse_args()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no GPU visible")
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
    x, y = batch(args, rank, device)

    def step(name):
        net, opt, _ = runs[name]
        opt.zero_grad(set_to_none=False)
        logits = net(x)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
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
    if args.profile:
        profile(args.profile, rank, device, runs, step, sync)
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
        print(f"model={args.model} ranks={size} device={args.device} params={params} grad_bytes={params * 4} "
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
