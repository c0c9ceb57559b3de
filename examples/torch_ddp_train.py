"""DistributedDataParallel training over the "ringguard" backend (CRC32-verified gradient AllReduce).

    python3 -m pip install --no-build-isolation .          # once, from the repository root
    torchrun --nproc-per-node=2 examples/torch_ddp_train.py
    torchrun --nproc-per-node=2 examples/torch_ddp_train.py --fault-prob 0.01   # inject corruptions
    ringguard-run --nproc-per-node=4 examples/torch_ddp_train.py --device cuda  # GPUs, if present

A small MLP learns a fixed random "teacher" network from synthetic data (each rank draws its own
batches). Every gradient bucket crosses the ring in CRC-checked slices; with --fault-prob, slices are
corrupted in transit on purpose, detected and retransmitted. The last line is

    final: ranks=<N> steps=<S> loss=<L> params_identical=yes detected=<d> retransmitted=<r> injected=<i> escaped=0

(counters summed over the ranks); the exit status is non-zero if the ranks' parameters differ, a
corruption went undetected, or the loss stopped being finite (every rank stops at the next log point).
"""

import argparse
import math
import os
import sys
import time
import zlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ringguard


def positive_int(text: str) -> int:
    v = int(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return v


def positive_float(text: str) -> float:
    v = float(text)
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be a finite positive number, got {text}")
    return v


def probability(text: str) -> float:
    v = float(text)
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return v


def diverged(loss: torch.Tensor, step: int, rank: int) -> bool:
    """True on every rank when any rank's loss is not finite; call it at the same steps on every rank."""
    bad = torch.tensor([0 if math.isfinite(loss.item()) else 1], dtype=torch.int64)
    dist.all_reduce(bad, op=dist.ReduceOp.MAX)
    if bad.item() and rank == 0:
        print(f"step {step}: the loss is not finite on some rank (here {loss.item()}): training diverged "
              f"(try a smaller --lr)", file=sys.stderr, flush=True)
    return bool(bad.item())


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=positive_int, default=300)
    p.add_argument("--batch", type=positive_int, default=64, help="samples per rank and step")
    p.add_argument("--hidden", type=positive_int, default=256)
    p.add_argument("--lr", type=positive_float, default=0.05)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: one GPU per local rank (shared round-robin if there are fewer)")
    p.add_argument("--fault-prob", type=probability, default=0.0, help="probability that a slice is corrupted")
    p.add_argument("--fault-mode", default="bitflip",
                   help="bitflip|multibit|burst|garbage|trailer|retransmit|delay")
    p.add_argument("--fault-seed", type=int, default=1)
    p.add_argument("--bucket-cap-mb", type=positive_float, default=1.0)
    p.add_argument("--log-every", type=positive_int, default=50)
    return p.parse_args()


def mlp(d_in, hidden, d_out):
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, d_out))


def params_crc(model) -> int:
    crc = 0
    for p in model.parameters():
        crc = zlib.crc32(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes(), crc)
    return crc


def main():
    args = parse_args()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no GPU visible")
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local % torch.cuda.device_count())
    device = torch.device(args.device, torch.cuda.current_device()) if args.device == "cuda" else \
        torch.device("cpu")

    options = None
    if args.fault_prob > 0:
        options = ringguard.Options(fault_mode=args.fault_mode, fault_prob=args.fault_prob,
                                    fault_seed=args.fault_seed)
    dist.init_process_group("ringguard", pg_options=options)
    rank, size = dist.get_rank(), dist.get_world_size()

    d_in, d_out = 32, 8
    torch.manual_seed(0)  # same teacher and initial model on every rank (DDP broadcasts rank 0's anyway)
    teacher = mlp(d_in, 64, d_out).to(device).requires_grad_(False)
    model = DDP(mlp(d_in, args.hidden, d_out).to(device), bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    data = torch.Generator().manual_seed(1000 + rank)

    t0 = time.monotonic()
    loss = torch.zeros(())
    ran, stopped = 0, False
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch, d_in, generator=data).to(device)
        loss = F.mse_loss(model(x), teacher(x))
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        ran = step
        if (step % args.log_every == 0 or step == args.steps) and diverged(loss, step, rank):
            stopped = True
            break
        if rank == 0 and (step % args.log_every == 0 or step == 1):
            c = ringguard.counters()
            rate = step * args.batch * size / (time.monotonic() - t0)
            print(f"step {step:5d}  loss {loss.item():.5f}  samples/s {rate:9.0f}  "
                  f"slices_verified {c['slices_verified']}  detected {c['detected']}  "
                  f"retransmitted {c['retransmitted']}", flush=True)

    # Same parameters everywhere: min and max of the CRC-32 of every rank's parameter bytes agree.
    crc = params_crc(model.module)
    lo = torch.tensor([crc], dtype=torch.int64)
    hi = lo.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    identical = bool(lo.item() == hi.item())

    keys = ["detected", "retransmitted", "injected", "escaped"]
    c = ringguard.counters()
    totals = torch.tensor([c[k] for k in keys], dtype=torch.int64)
    dist.all_reduce(totals)
    total = dict(zip(keys, totals.tolist()))
    mean_loss = torch.tensor([loss.item()], dtype=torch.float64)
    dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)
    transport = ringguard.transport(device)
    dist.destroy_process_group()

    ok = identical and total["escaped"] == 0 and total["detected"] == total["injected"] and not stopped
    if rank == 0:
        print(f"final: ranks={size} steps={ran} loss={mean_loss.item():.5f} "
              f"params_identical={'yes' if identical else 'NO'} detected={total['detected']} "
              f"retransmitted={total['retransmitted']} injected={total['injected']} "
              f"escaped={total['escaped']} transport={transport}", flush=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
