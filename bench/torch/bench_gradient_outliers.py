"""False positives of the gradient-outlier signal (docs/REPLICAS.md): the small GPT of bench_ddp.py under DDP
with ``ringguard.GradientOutliers(on_outlier="warn")`` for a few hundred clean steps, every rank on its own
batches of a learnable synthetic language (each next token a fixed function of the last, with noise). Reports
the outliers the configured factor reported (every one a false positive: nothing is injected) and, from the
gathered norms, the largest ratio any rank's bucket norm reached against the median of the other ranks' (the
factor below which the run would have raised a false alarm). With ``--replica-check`` the same run also checks the
replicas after every step with ``ringguard.ReplicaCheck(on_mismatch="raise")`` (a false alarm ends the run) and
reports its checks and mismatches: the issue's clean run, both signals at once.

    torchrun --nproc-per-node=3 bench/torch/bench_gradient_outliers.py --steps 300           # CPU
    torchrun --nproc-per-node=4 bench/torch/bench_gradient_outliers.py --device cuda --hidden 512 --layers 6
    torchrun --nproc-per-node=3 bench/torch/bench_gradient_outliers.py --device cuda --steps 1000 --replica-check

Rank 0 prints one JSON line.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ringguard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_ddp  # noqa: E402  the small GPT


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--factor", type=float, default=8.0)
    p.add_argument("--bucket-mb", type=float, default=0.25, help="DDP bucket_cap_mb (several buckets)")
    p.add_argument("--replica-check", action="store_true", help="also check the replicas after every step (raise)")
    args = p.parse_args()
    args.model = "gpt"
    return args


class Recording(ringguard.GradientOutliers):
    """Keeps the largest ratio of a rank's norm to the median of the others' (either way) over the run."""

    max_ratio = 1.0

    def _before_step(self, optimizer, args, kwargs):
        for _, gathered in self._pending:
            norms = gathered.double().cpu().tolist()
            for r, x in enumerate(norms):
                others = sorted(norms[:r] + norms[r + 1:])
                k = len(others)
                m = others[k // 2] if k % 2 else 0.5 * (others[k // 2 - 1] + others[k // 2])
                if m > 0 and x > 0:
                    self.max_ratio = max(self.max_ratio, x / m, m / x)
        return super()._before_step(optimizer, args, kwargs)


def language(args, rank, step):
    g = torch.Generator().manual_seed(7919 * rank + step)
    start = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
    noise = (torch.rand(args.batch, args.seq, generator=g) < 0.1) * torch.randint(
        1, args.vocab, (args.batch, args.seq), generator=g)
    tokens = [start]
    for i in range(args.seq):
        tokens.append((tokens[-1] * 5 + 3 + noise[:, i:i + 1]) % args.vocab)
    t = torch.cat(tokens, dim=1)
    return t[:, :-1], t[:, 1:]


def main():
    args = parse_args()
    dist.init_process_group("ringguard")
    rank, size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    ddp = DDP(bench_ddp.model(args, device), bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    outliers = Recording(ddp, opt, factor=args.factor, on_outlier="warn")
    check = ringguard.ReplicaCheck(ddp, opt, on_mismatch="raise") if args.replica_check else None
    t0 = time.perf_counter()
    first_loss = loss = None
    for step in range(args.steps):
        x, y = language(args, rank, step)
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        out = ddp(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        first_loss = loss.item() if first_loss is None else first_loss
    c = outliers.counters()
    replicas = {}
    if check is not None:
        check.flush()
        r = check.counters()
        replicas = {"replica_checks": r["checks"], "replica_mismatches": r["mismatches"]}
    if rank == 0:
        print(json.dumps({**replicas, "ranks": size, "steps": args.steps, "factor": args.factor,
                          "bucket_verdicts": c["buckets"], "buckets_per_step": c["buckets"] // max(c["steps"], 1),
                          "false_positives": c["outliers"], "max_ratio": round(outliers.max_ratio, 3),
                          "loss_first": round(first_loss, 3), "loss_last": round(loss.item(), 3),
                          "seconds": round(time.perf_counter() - t0, 1), "device": args.device}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
