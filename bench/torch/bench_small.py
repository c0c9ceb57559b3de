"""Small-message latency: one all_reduce of a small CPU tensor, "ringguard" vs "gloo", same processes.

    torchrun --nproc-per-node=2 bench/torch/bench_small.py                # 4 KiB of f32 (1024 elements)
    torchrun --nproc-per-node=2 bench/torch/bench_small.py --bytes 65536

The default group is ringguard; a gloo group over the same ranks is the baseline. Rounds alternate between
the two (and which one goes first), so load from other processes hits both alike. A call is
`dist.all_reduce(t, group=g)` (issue, then wait), timed on every rank; the figure is the slowest rank's
median per call. Rank 0 prints the medians and

    ringguard_vs_gloo=<gloo median / ringguard median>      (> 1: ringguard is faster)
"""

import argparse
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ringguard  # noqa: F401  (registers the backend)


def timed_calls(group, t, n):
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - start) / n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=int, default=4096)
    p.add_argument("--calls", type=int, default=200, help="timed calls per backend and round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup", type=int, default=50)
    args = p.parse_args()

    dist.init_process_group("ringguard", timeout=timedelta(seconds=120))
    rank, size = dist.get_rank(), dist.get_world_size()
    groups = {"ringguard": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    t = torch.ones(args.bytes // 4)
    for g in groups.values():
        for _ in range(args.warmup):
            dist.all_reduce(t, group=g)
    times = {name: [] for name in groups}
    for r in range(args.rounds):
        order = list(groups) if r % 2 == 0 else list(reversed(list(groups)))
        for name in order:
            per_call = torch.tensor([timed_calls(groups[name], t, args.calls)], dtype=torch.float64)
            dist.all_reduce(per_call, op=dist.ReduceOp.MAX, group=groups["gloo"])  # the slowest rank
            times[name].append(per_call.item())
    # Exact result once more: every element is the sum of `size` ones after the last call of each.
    check = torch.ones(args.bytes // 4)
    dist.all_reduce(check)
    ok = bool(torch.equal(check, torch.full_like(check, float(size))))
    if rank == 0:
        med = {name: statistics.median(v) * 1e6 for name, v in times.items()}
        print(f"# bench_small: np={size} bytes={args.bytes} calls={args.calls} rounds={args.rounds} "
              f"check={'ok' if ok else 'FAILED'}")
        for name, v in times.items():
            print(f"  {name:10s} median {med[name]:9.1f} us/call  [{min(v) * 1e6:.1f} .. {max(v) * 1e6:.1f}]")
        print(f"ringguard_vs_gloo={med['gloo'] / med['ringguard']:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
