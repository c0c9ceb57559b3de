"""FSDP2 (fully_shard) training over the "ringguard" backend: sharded parameters, CRC32-verified collectives.

    python3 -m pip install --no-build-isolation .          # once, from the repository root
    torchrun --nproc-per-node=2 examples/torch_fsdp_train.py
    torchrun --nproc-per-node=3 examples/torch_fsdp_train.py --fault-prob 0.01   # inject corruptions
    ringguard-run --nproc-per-node=2 examples/torch_fsdp_train.py --bf16          # bf16 params, fp32 reduce

A small decoder-only transformer learns a synthetic "language" (each next token a fixed function of the
previous one, one token in ten random) from per-rank batches. Each block and the root are sharded with FSDP2: parameters
are all-gathered before use and gradients reduce-scattered, every byte crossing the ring in CRC-checked
slices; with --fault-prob slices are corrupted in transit on purpose, detected and retransmitted. The last
line is

    final: ranks=<N> steps=<S> loss=<L> params_identical=yes detected=<d> retransmitted=<r> injected=<i> escaped=0

(counters summed over the ranks); the exit status is non-zero if the ranks' full parameters differ, a
corruption went undetected, or the loss stopped being finite (every rank stops at the next log point). CPU tensors by default; --device cuda puts the model on this rank's GPU.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import ringguard
from torch_ddp_train import diverged, params_crc, positive_float, positive_int, probability


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=positive_int, default=100)
    p.add_argument("--batch", type=positive_int, default=16, help="sequences per rank and step")
    p.add_argument("--tokens", type=positive_int, default=32, help="sequence length")
    p.add_argument("--width", type=positive_int, default=64, help="model width, a multiple of the 4 heads")
    p.add_argument("--layers", type=positive_int, default=2)
    p.add_argument("--lr", type=positive_float, default=1e-2)
    p.add_argument("--bf16", action="store_true", help="bf16 parameters in compute, fp32 gradient reduction")
    p.add_argument("--keep-unsharded", action="store_true", help="reshard_after_forward=False")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--fault-prob", type=probability, default=0.0, help="probability that a slice is corrupted")
    p.add_argument("--fault-mode", default="bitflip",
                   help="bitflip|multibit|burst|garbage|trailer|retransmit|delay")
    p.add_argument("--fault-seed", type=int, default=1)
    p.add_argument("--log-every", type=positive_int, default=25)
    args = p.parse_args()
    if args.width % 4:
        p.error(f"argument --width: must be a multiple of 4 (the attention heads), got {args.width}")
    return args


VOCAB = 61


class Block(nn.Module):
    def __init__(self, width, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, w))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, width, layers, tokens):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, width), nn.Embedding(tokens, width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, VOCAB)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def batch(gen, n, tokens):
    """Sequences where token i is (7 * t[i-1] + 3) mod VOCAB, one in ten replaced at random."""
    seq = torch.zeros(n, tokens + 1, dtype=torch.int64)
    seq[:, 0] = torch.randint(0, VOCAB, (n,), generator=gen)
    for i in range(1, tokens + 1):
        seq[:, i] = (7 * seq[:, i - 1] + 3) % VOCAB
    noise = torch.rand(n, tokens + 1, generator=gen) < 0.1
    seq[noise] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=gen)
    return seq[:, :-1], seq[:, 1:]


def main():
    args = parse_args()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no GPU visible")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    device = torch.device(args.device, torch.cuda.current_device()) if args.device == "cuda" else \
        torch.device("cpu")

    options = None
    if args.fault_prob > 0:
        options = ringguard.Options(fault_mode=args.fault_mode, fault_prob=args.fault_prob,
                                    fault_seed=args.fault_seed)
    dist.init_process_group("ringguard", pg_options=options)
    rank, size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initial model on every rank
    model = TinyGPT(args.width, args.layers, args.tokens).to(device)
    shard = {"reshard_after_forward": not args.keep_unsharded}
    if args.bf16:
        shard["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for blk in model.blocks:
        fully_shard(blk, **shard)
    fully_shard(model, **shard)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    data = torch.Generator().manual_seed(1000 + rank)

    t0 = time.monotonic()
    loss = torch.zeros(())
    ran, stopped = 0, False
    for step in range(1, args.steps + 1):
        x, y = batch(data, args.batch, args.tokens)
        logits = model(x.to(device))
        loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), y.to(device).reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        ran = step
        if (step % args.log_every == 0 or step == args.steps) and diverged(loss, step, rank):
            stopped = True
            break
        if rank == 0 and (step % args.log_every == 0 or step == 1):
            c = ringguard.counters()
            rate = step * args.batch * size / (time.monotonic() - t0)
            print(f"step {step:5d}  loss {loss.item():.4f}  sequences/s {rate:8.0f}  "
                  f"slices_verified {c['slices_verified']}  detected {c['detected']}  "
                  f"retransmitted {c['retransmitted']}", flush=True)

    # The full (unsharded) parameters, the same on every rank: min and max of their CRC-32 agree.
    full = nn.ParameterList([nn.Parameter(p.full_tensor().detach(), requires_grad=False)
                             for p in model.parameters()])
    crc = torch.tensor([params_crc(full)], dtype=torch.int64)
    lo, hi = crc.clone(), crc.clone()
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
    transport = ringguard.transport(device.type)
    dist.destroy_process_group()

    ok = identical and total["escaped"] == 0 and total["detected"] == total["injected"] and not stopped
    if rank == 0:
        print(f"final: ranks={size} steps={ran} loss={mean_loss.item():.4f} "
              f"params_identical={'yes' if identical else 'NO'} detected={total['detected']} "
              f"retransmitted={total['retransmitted']} injected={total['injected']} "
              f"escaped={total['escaped']} transport={transport}", flush=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
