"""FSDP2 step time: "ringguard" vs "gloo", same transformer, same seed, same data, same processes (CPU, or CUDA).

    torchrun --nproc-per-node=2 bench/torch/bench_fsdp.py
    torchrun --nproc-per-node=3 bench/torch/bench_fsdp.py --rounds 3
    torchrun --nproc-per-node=2 bench/torch/bench_fsdp.py --fault          # ringguard with injected corruptions
    torchrun --nproc-per-node=2 bench/torch/bench_fsdp.py --layers 1 --dim 32 --seq 8 --batch 2 --steps 2 --rounds 1
    torchrun --nproc-per-node=2 bench/torch/bench_fsdp.py --device cuda   # every rank on GPU 0 (peer windows)

``--device cuda``: the models, data and FSDP2's collectives are on GPU 0, shared by every rank (ringguard's
CUDA communicator then runs its all-gathers and reduce-scatters on the peer windows, run the ranks under MPS;
RINGGUARD_DEVICE_TRANSPORT=staged stages them through pinned host memory instead; the per-step slice, frame
and byte counts cover only what the host-driven path carries; gloo moves CUDA tensors by copying them to host
and back, and reduce-scatters through its all-reduce). TF32 is off, so the GPU's fp32 matmuls round as
torch's default does.

The model: token and position embeddings, ``--layers`` pre-norm blocks (LayerNorm, causal self-attention,
LayerNorm, a GELU MLP of 4 x ``--dim``), a final LayerNorm and an output projection over an odd vocabulary
(``--vocab``, 509 by default, so the embedding and the head split unevenly and FSDP2 pads their last shard).
Each block and the root are ``fully_shard``-ed (``reshard_after_forward=True``: parameters are all-gathered
in forward and again in backward, gradients reduce-scattered); AdamW. A step is forward, backward (FSDP2
waits for its reduce-scatters at the end of it), ``opt.step()``, ``opt.zero_grad()``.

Groups (one torchrun launch): the default group is gloo and carries only the harness (barriers before each
round, the max of the step times over ranks, the parameter checks). FSDP2 runs on two dedicated groups over
all ranks, ``dist.new_group(backend="ringguard")`` and ``dist.new_group(backend="gloo")``, each with its
own ``DeviceMesh`` and its own copy of the model built from the same seed, so neither backend's group
carries any traffic but its own FSDP2 collectives. Rounds alternate between the two (and which one goes
first), so load from other processes hits both alike; the figure is the median over all timed steps of the
slowest rank's step time. Both models see the same sequence of batches (per rank and step, seeded as in
tests/python/test_fsdp_transformer.py: different on every rank, so the reduce-scatter really adds
different values) and run the same number of steps (warm-up included).

Parameter check, after the last step: the full (unsharded) parameters of the two models compared with
``torch.equal`` on every rank, and the max |ringguard - gloo|. At 2 ranks they must be bit-identical: each
element of a reduce-scatter is the sum of two values (the same IEEE result in either order) and the
halving is exact on either side of the sum (FSDP2 over ringguard reduces with AVG, over gloo it divides
by 2 before a SUM: gloo has no AVG). At 3 ranks the ring adds three values in another order than gloo
and divides the sum by 3 where gloo pre-divides, so the last bit of a gradient may differ and AdamW carries
it along: then the max |diff| is reported with ``(3 addends: summation order)``. The ringguard model's full
parameters are also compared across ranks (CRC-32, must agree).

``--fault [PROB]`` gives the ringguard group fault injection (``ringguard.Options(fault_prob=PROB)``, bitflip,
the same as ``RINGGUARD_FAULT_PROB``; 0.02 when no value is given): every corrupted slice is detected and
repaired, so the parameters must still equal gloo's (at 2 ranks, bit for bit), with detected == injected
and escaped == 0 (retransmitted may be lower than detected when one replay covers two failed hops).

Rank 0 prints the medians, each backend's CPU time per step summed over ranks (``time.process_time``
over the timed steps: every thread of the process; where ranks share cores, CPU spent waiting is step time
taken from the others), the ringguard counters of the timed steps (per step, summed over ranks; rank 0's
collectives), the check, and

    ringguard_vs_gloo=<gloo median / ringguard median> ringguard_over_gloo=<ringguard / gloo> ...

(ringguard_vs_gloo as in bench_ddp.py and bench_small.py: > 1 means ringguard is faster; ringguard_over_gloo
is its inverse, the per-step cost of ringguard relative to gloo).

The exit status is non-zero if the ranks disagree, an injected corruption was not detected or escaped, or
(at 2 ranks) the parameters are not bit-identical to gloo's.
"""

import argparse
import json
import os
import statistics
import sys
import time
import zlib
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import ringguard

# The pre-norm block of the FSDP2 example (examples/torch_fsdp_train.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
from torch_fsdp_train import Block  # noqa: E402

COUNTERS = ["collectives", "bytes_sent", "slices_sent", "slices_verified", "control_frames", "control_bytes",
            "injected", "detected", "retransmitted", "escaped", "repair_rounds"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4, help="transformer blocks")
    p.add_argument("--dim", type=int, default=256, help="model width")
    p.add_argument("--heads", type=int, default=4, help="attention heads (must divide --dim)")
    p.add_argument("--seq", type=int, default=64, help="tokens per sequence")
    p.add_argument("--vocab", type=int, default=509, help="vocabulary (odd: uneven shards)")
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    p.add_argument("--warmup", type=int, default=2, help="steps per backend before timing")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=5, help="timed steps per backend and round")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--fault", type=float, nargs="?", const=0.02, default=0.0, metavar="PROB",
                   help="inject corruptions into the ringguard group's slices (probability; 0.02 if omitted)")
    p.add_argument("--fault-seed", type=int, default=17)
    p.add_argument("--json", help="also write the results to this file (rank 0)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the models and data live (cuda: GPU 0, shared by every rank)")
    args = p.parse_args()
    if args.dim % args.heads:
        p.error(f"--heads {args.heads} does not divide --dim {args.dim}")
    return args


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.tok, self.pos = nn.Embedding(args.vocab, args.dim), nn.Embedding(args.seq, args.dim)
        self.blocks = nn.ModuleList([Block(args.dim, args.heads) for _ in range(args.layers)])
        self.ln, self.head = nn.LayerNorm(args.dim), nn.Linear(args.dim, args.vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def sharded(args, group):
    """The model (seed 2024, the same on every rank and for both backends), FSDP2 over `group`, and AdamW."""
    torch.manual_seed(2024)
    model = Transformer(args).to(args.device)
    mesh = DeviceMesh.from_group(group, args.device)
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    return model, torch.optim.AdamW(model.parameters(), lr=args.lr)


def batches(args, rank, n):
    """n (inputs, targets) pairs, seeded per rank and step: different on every rank, the same for both backends."""
    out = []
    for step in range(n):
        g = torch.Generator().manual_seed(1000 * rank + step)
        idx = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g)
        out.append((idx[:, :-1].contiguous().to(args.device), idx[:, 1:].contiguous().to(args.device)))
    return out


def full_params(model):
    return [p.full_tensor().detach().cpu().clone() for p in model.parameters()]


def main():
    args = parse_args()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no GPU visible")
        torch.cuda.set_device(0)
        torch.backends.cuda.matmul.allow_tf32 = False
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))  # the harness's group
    rank, size = dist.get_rank(), dist.get_world_size()
    options = None
    if args.fault > 0:
        options = ringguard.Options(fault_mode="bitflip", fault_prob=args.fault, fault_seed=args.fault_seed)
    groups = {"ringguard": dist.new_group(backend="ringguard", pg_options=options),
              "gloo": dist.new_group(backend="gloo")}
    runs = {name: sharded(args, g) for name, g in groups.items()}
    total_steps = args.warmup + args.rounds * args.steps
    data = batches(args, rank, total_steps)
    done = {name: 0 for name in runs}  # steps taken: the index of the next batch
    losses = {}

    def step(name):
        model, opt = runs[name]
        x, y = data[done[name]]
        loss = F.cross_entropy(model(x).reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        done[name] += 1
        losses[name] = loss.detach()

    for name in runs:
        for _ in range(args.warmup):
            step(name)
    before = ringguard.counters(groups["ringguard"])
    times = {name: [] for name in runs}
    cpu = {name: 0.0 for name in runs}  # the process's CPU seconds (every thread) in the timed steps
    order = list(runs)
    for r in range(args.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            dist.barrier()
            for _ in range(args.steps):
                t0, c0 = time.perf_counter(), time.process_time()
                step(name)
                if args.device == "cuda":
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - t0)
                cpu[name] += time.process_time() - c0
    after = ringguard.counters(groups["ringguard"])
    assert done["ringguard"] == done["gloo"] == total_steps
    timed = args.rounds * args.steps

    # CPU time per step, summed over the ranks: where ranks share cores it bounds the step time.
    cpu_t = torch.tensor([cpu[name] for name in runs], dtype=torch.float64)
    dist.all_reduce(cpu_t)
    cpu = {name: float(c) / timed for name, c in zip(runs, cpu_t)}
    # The slowest rank's time of each step.
    for name in runs:
        t = torch.tensor(times[name], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times[name] = t.tolist()
    # Counters of the timed steps, summed over the ranks (collectives: rank 0's, every rank runs them all).
    delta = torch.tensor([after[k] - before[k] for k in COUNTERS], dtype=torch.int64)
    mine = dict(zip(COUNTERS, delta.tolist()))
    dist.all_reduce(delta)
    summed = dict(zip(COUNTERS, delta.tolist()))
    summed["collectives"] = mine["collectives"]

    # Parameters: ringguard's against gloo's on every rank, and ringguard's across ranks.
    rg, gl = full_params(runs["ringguard"][0]), full_params(runs["gloo"][0])
    same = all(torch.equal(a, b) for a, b in zip(rg, gl))
    worst = max(float((a - b).abs().max()) for a, b in zip(rg, gl))
    crc = 0
    for t in rg:
        crc = zlib.crc32(t.numpy().tobytes(), crc)
    check = torch.tensor([0 if same else 1, crc, -crc], dtype=torch.int64)
    dist.all_reduce(check, op=dist.ReduceOp.MAX)
    diff = torch.tensor([worst], dtype=torch.float64)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    loss = torch.stack([losses["ringguard"], losses["gloo"]]).double()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    identical = int(check[0]) == 0
    ranks_agree = int(check[1]) == -int(check[2])
    worst = float(diff)
    model = runs["gloo"][0]
    params = sum(p.numel() for p in model.parameters())
    uneven = sum(1 for p in model.parameters() if p.shape[0] % size)
    transport = ringguard.transport(args.device, groups["ringguard"])

    # The fault check covers the whole run (warm-up included), not only the timed steps.
    whole = torch.tensor([after[k] for k in ("injected", "detected", "escaped")], dtype=torch.int64)
    dist.all_reduce(whole)
    injected, detected, escaped = whole.tolist()
    faults_ok = escaped == 0 and detected == injected
    ok = ranks_agree and faults_ok and (identical or size > 2)
    if rank == 0:
        med = {name: statistics.median(v) for name, v in times.items()}
        ratio = med["gloo"] / med["ringguard"]
        print(f"# bench_fsdp: ranks={size} layers={args.layers} dim={args.dim} heads={args.heads} "
              f"seq={args.seq} batch={args.batch} vocab={args.vocab} params={params} uneven_params={uneven} "
              f"steps={timed} per backend ({args.rounds} rounds x {args.steps}, {args.warmup} warm-up) "
              f"fault_prob={args.fault} device={args.device} transport={transport}", flush=True)
        for name, v in times.items():
            print(f"  {name:10s} median {med[name] * 1e3:9.2f} ms/step  [{min(v) * 1e3:.2f} .. "
                  f"{max(v) * 1e3:.2f}]  cpu {cpu[name] * 1e3:.1f} ms/step (all ranks)  "
                  f"final loss {float(loss[0 if name == 'ringguard' else 1]):.4f}", flush=True)
        per = {k: summed[k] / timed for k in COUNTERS}
        print(f"ringguard counters, timed steps: collectives={summed['collectives']} "
              f"({per['collectives']:.1f}/step) slices_verified={summed['slices_verified']} "
              f"({per['slices_verified']:.1f}/step) control_frames={summed['control_frames']} "
              f"({per['control_frames']:.1f}/step) control_bytes={summed['control_bytes']} "
              f"bytes_sent={summed['bytes_sent']} ({per['bytes_sent'] / 1e6:.2f} MB/step) "
              f"injected={summed['injected']} detected={summed['detected']} "
              f"retransmitted={summed['retransmitted']} escaped={summed['escaped']}", flush=True)
        if args.fault > 0:
            print(f"faults, whole run (warm-up included), summed over ranks: injected={injected} "
                  f"detected={detected} escaped={escaped} {'ok' if faults_ok else 'FAILED'}", flush=True)
        why = "" if identical else (" (3+ addends: the ring's summation order and AVG's division differ "
                                    "from gloo's pre-divided SUM)" if size > 2 else " (UNEXPECTED at 2 ranks)")
        print(f"params_bit_identical={'yes' if identical else 'no'} max_abs_diff={worst:.3g}{why} "
              f"ranks_agree={'yes' if ranks_agree else 'NO'}", flush=True)
        print(f"ringguard_vs_gloo={ratio:.3f} ringguard_over_gloo={1 / ratio:.3f} "
              f"ringguard_ms={med['ringguard'] * 1e3:.2f} "
              f"gloo_ms={med['gloo'] * 1e3:.2f}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": size, "args": vars(args), "params": params, "median_s": med,
                           "ringguard_vs_gloo": ratio, "times_s": times, "counters": summed,
                           "params_bit_identical": identical, "max_abs_diff": worst,
                           "ranks_agree": ranks_agree, "transport": transport}, f, indent=1)
    for g in groups.values():
        dist.destroy_process_group(g)
    dist.destroy_process_group()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
