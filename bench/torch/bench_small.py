"""Small-message latency: one all_reduce of a small CPU tensor, "ringguard" vs "gloo", same processes.

    torchrun --nproc-per-node=2 bench/torch/bench_small.py                # 4 KiB of f32 (1024 elements)
    torchrun --nproc-per-node=2 bench/torch/bench_small.py --bytes 65536
    torchrun --nproc-per-node=2 bench/torch/bench_small.py --op send_recv  # a round trip per call

With `--op send_recv` a call is a round trip between rank pairs (0, 1), (2, 3), ...: the even rank sends the
tensor and receives it back (`dist.send`, `dist.recv`); a rank without a partner only times its barrier.

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


def one_call(op, group, t):
    if op == "all_reduce":
        dist.all_reduce(t, group=group)
        return
    rank, size = dist.get_rank(), dist.get_world_size()
    partner = rank + 1 if rank % 2 == 0 else rank - 1
    if partner >= size:
        return
    if rank % 2 == 0:
        dist.send(t, partner, group=group)
        dist.recv(t, partner, group=group)
    else:
        dist.recv(t, partner, group=group)
        dist.send(t, partner, group=group)


def timed_calls(op, group, t, n):
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(n):
        one_call(op, group, t)
    return (time.perf_counter() - start) / n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=int, default=4096)
    p.add_argument("--op", choices=["all_reduce", "send_recv"], default="all_reduce")
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
            one_call(args.op, g, t)
    times = {name: [] for name in groups}
    for r in range(args.rounds):
        order = list(groups) if r % 2 == 0 else list(reversed(list(groups)))
        for name in order:
            per_call = torch.tensor([timed_calls(args.op, groups[name], t, args.calls)], dtype=torch.float64)
            dist.all_reduce(per_call, op=dist.ReduceOp.MAX, group=groups["gloo"])  # the slowest rank
            times[name].append(per_call.item())
    # Exact result once more: an all_reduce sums every rank's arange + rank; after a round trip both ends
    # of a pair hold the even rank's tensor.
    check = torch.arange(args.bytes // 4, dtype=torch.float32) + rank
    if args.op == "all_reduce":
        dist.all_reduce(check)
        want = torch.arange(args.bytes // 4, dtype=torch.float32) * size + size * (size - 1) // 2
    else:  # both ends of a pair hold the even rank's tensor
        want = torch.arange(args.bytes // 4, dtype=torch.float32) + (rank - rank % 2)
        one_call(args.op, dist.group.WORLD, check)
    ok = bool(torch.equal(check, want))
    ok_all = torch.tensor([1 if ok else 0])
    dist.all_reduce(ok_all, op=dist.ReduceOp.MIN, group=groups["gloo"])
    ok = bool(ok_all.item())
    if rank == 0:
        med = {name: statistics.median(v) * 1e6 for name, v in times.items()}
        print(f"# bench_small: op={args.op} np={size} bytes={args.bytes} calls={args.calls} rounds={args.rounds} "
              f"check={'ok' if ok else 'FAILED'}")
        for name, v in times.items():
            print(f"  {name:10s} median {med[name]:9.1f} us/call  [{min(v) * 1e6:.1f} .. {max(v) * 1e6:.1f}]")
        print(f"ringguard_vs_gloo={med['gloo'] / med['ringguard']:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
