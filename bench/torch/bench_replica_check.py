"""Replica check cost (docs/REPLICAS.md): DDP step time with and without ``ringguard.ReplicaCheck(every=1)``
in the same run, the check alone, and the same tensors fingerprinted Megatron's way (hashlib SHA-1 on the
CPU) and by a ``sum()`` per tensor; with ``--set-gb`` also a parameter set of that size (typical transformer
shapes) fingerprinted alone, against a device copy of the same bytes (bandwidth ratio).

    torchrun --nproc-per-node=2 bench/torch/bench_replica_check.py --model gpt --device cuda
    torchrun --nproc-per-node=2 bench/torch/bench_replica_check.py --model gpt --device cuda --set-gb 1 --set-gb 8
    torchrun --nproc-per-node=2 bench/torch/bench_replica_check.py            # CPU, the small MLP
    torchrun --nproc-per-node=2 bench/torch/bench_replica_check.py --model gpt --device cuda --profile $OUT/prof

Rank 0 prints one JSON line per measurement (``listing_ms``: the host's listing of the checked tensors a
check makes; ``tensors_ms``: the public ``tensors()``, detached copies of the list; ``hook_ms``: per variant,
the host time a check's step hook took on the training thread, the host wait of sync=True included) and
``check_vs_step=<check ms / unchecked step ms>`` (goal:
<= 0.01 for the small GPT on the GPU), and the same for ``sync=False`` (``deferred_vs_step``, with its
counters: ``host_waits`` 0, ``deferred_waits`` the verdicts that were not ready when read), and on CUDA for
``gate=True`` (``gated_vs_step``: sync=True's guarantee through the gate, no host wait for the verdict);
``min_vs_step``: each variant's fastest round against the unchecked one's. With ``--profile`` on CUDA also
``device_time`` (per variant, the device time of a profiled step and of the check's own kernels in it),
``device_share_of_fastest_step`` (below 1: the host's launches set the step's pace, and a check costs its
``hook_ms``; near 1: the device does, and a check costs its kernels, ``check_device_vs_device_step``).
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ringguard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_ddp  # noqa: E402  the models and data of the DDP benchmark


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--model", choices=["mlp", "gpt"], default="mlp")
    p.add_argument("--hidden", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batch", type=int)
    p.add_argument("--steps", type=int, default=20, help="timed steps per variant and round")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--set-gb", type=float, action="append", default=[], help="parameter set size to fingerprint")
    p.add_argument("--profile", metavar="DIR",
                   help="also profile 3 steps of each variant (torch.profiler): a Chrome trace per rank and variant "
                        "in DIR, and rank 0 prints each variant's ops by self CPU and device time")
    args = p.parse_args()
    if args.model == "gpt":
        args.hidden, args.layers, args.batch = args.hidden or 512, args.layers or 6, args.batch or 8
    else:
        args.hidden, args.layers, args.batch = args.hidden or 1024, args.layers or 4, args.batch or 32
    return args


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, n):
    fn()  # a warm-up call (first-use allocations, kernel loading): the 2026-12-05 H100 run's 1 GB set had none
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / n * 1e3


def emit(rank, **rec):
    if rank == 0:
        print(json.dumps(rec), flush=True)


def device_us(trace_path, steps=3):
    """Per step, from the Chrome trace of a profile of `steps` steps: all device time (kernels, copies,
    memsets), and that of ringguard's own kernels (the check's: its CRC, merge and gate). Read from the
    trace's device events, not from key_averages(), whose CPU ops carry the device time of the kernels they
    launched as well (the forty-sixth session's figures counted the check's kernels twice)."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    total = ours = 0.0
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            total += e.get("dur", 0.0)
            if "ringguard" in e.get("name", ""):
                ours += e.get("dur", 0.0)
    return total / steps, ours / steps


def profile(out_dir, rank, device, step, opt, hooks):
    """Where a step's time goes with and without each check: 3 profiled steps per variant after one warm one.
    Returns, per variant, the device time a step took (ms) and the check's own kernels in it (us)."""
    os.makedirs(out_dir, exist_ok=True)
    device_time = {}
    for variant in ("plain", "checked", "deferred", "gated"):
        if variant != "plain" and variant not in hooks:
            continue
        handle = opt.register_step_post_hook(hooks[variant]) if variant in hooks else None
        step()
        sync(device)
        trace = os.path.join(out_dir, f"replica_check_{variant}_rank{rank}.json")
        bench_ddp.profile_steps(trace, variant, rank, device, step, lambda: sync(device))
        total, ours = device_us(trace)
        device_time[variant] = {"device_ms_per_step": total / 1e3, "check_device_us": ours}
        if handle is not None:
            handle.remove()
    return device_time


def main():
    args = parse_args()
    dist.init_process_group("ringguard")
    rank = dist.get_rank()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    net = bench_ddp.model(args, device)
    ddp = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    x, y = bench_ddp.batch(args, rank, device)

    def step():
        opt.zero_grad(set_to_none=True)
        out = ddp(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()

    for _ in range(3):
        step()  # optimizer state exists from here on
    check = ringguard.ReplicaCheck(ddp, opt, every=1, on_mismatch="raise")
    check.remove()  # hooked in and out per variant below
    deferred = ringguard.ReplicaCheck(ddp, opt, every=1, on_mismatch="raise", sync=False)
    deferred.remove()
    times = {"plain": [], "checked": [], "deferred": []}
    hooks = {"checked": check._after_step, "deferred": deferred._after_step}
    gated = None
    if device.type == "cuda":
        # sync=True through the gate (docs/REPLICAS.md, "The gate"): no host wait for the verdict.
        gated = ringguard.ReplicaCheck(ddp, opt, every=1, on_mismatch="raise", gate=True)
        gated.remove()
        times["gated"] = []
        hooks["gated"] = gated._after_step
    # The host time each check's hook takes on the training thread, per variant: in a step bound by its
    # launches (the small GPT at one rank) this is what the check adds to the step, measured without the
    # rounds' drift.
    hook_s = {v: [0.0, 0] for v in hooks}

    def timing(variant, hook):
        def run(*a):
            t0 = time.perf_counter()
            hook(*a)
            hook_s[variant][0] += time.perf_counter() - t0
            hook_s[variant][1] += 1
        return run

    hooks = {v: timing(v, h) for v, h in hooks.items()}
    order = list(times)
    for r in range(args.rounds):
        for variant in order[r % len(order):] + order[:r % len(order)]:
            handle = opt.register_step_post_hook(hooks[variant]) if variant in hooks else None
            times[variant].append(timed(step, device, args.steps))
            if handle is not None:
                handle.remove()
    deferred.flush()
    hook_ms = {v: 1e3 * total / max(n, 1) for v, (total, n) in hook_s.items()}
    device_time = None
    if args.profile:
        device_time = profile(args.profile, rank, device, step, opt, hooks)
        deferred.flush()
    plain, checked = times["plain"], times["checked"]
    tensors = check.tensors()
    nbytes = sum(t.numel() * t.element_size() for _, t in tensors)
    alone = timed(check.check_now, device, args.steps)

    def sha1():
        h = hashlib.sha1()
        for _, t in tensors:
            h.update(t.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())  # 0-dim: Adam step
        return h.digest()

    def sums():
        return [t.float().sum() for _, t in tensors]

    step_ms, checked_ms = statistics.median(plain), statistics.median(checked)
    emit(rank, model=args.model, device=args.device, tensors=len(tensors), bytes=nbytes, step_ms=step_ms,
         checked_step_ms=checked_ms, check_alone_ms=alone, sha1_cpu_ms=timed(sha1, device, 2),
         sum_per_tensor_ms=timed(sums, device, args.steps),
         listing_ms=timed(check._listing.read, torch.device("cpu"), 50),  # what a check lists (host only)
         hook_ms=hook_ms,
         tensors_ms=timed(check.tensors, torch.device("cpu"), 50), counters=check.counters())
    deferred_ms = statistics.median(times["deferred"])
    # Each round times the three variants back to back: the median of the rounds' own differences is less
    # exposed than the difference of the medians to the step's drift between rounds (two ranks share a GPU).
    paired = statistics.median((c - p) / p for c, p in zip(checked, plain))
    # The fastest round of each variant: the step's drift between rounds (30-60 % on one H100's host) only
    # ever adds time, so the minima compare the variants where the host was least disturbed.
    low = {v: min(t) for v, t in times.items()}
    emit(rank, min_step_ms=low, min_vs_step={v: (t - low["plain"]) / low["plain"] for v, t in low.items()
                                             if v != "plain"})
    if device_time is not None and device.type == "cuda":
        # Which side sets the step's pace: the device's share of the fastest unchecked round (below 1, the
        # host's launches do, and a check costs its hook's host time; near 1, the device does, and a check
        # costs its kernels' time, check_device_us, against device_ms_per_step).
        emit(rank, device_time=device_time,
             device_share_of_fastest_step=device_time["plain"]["device_ms_per_step"] / low["plain"],
             check_device_vs_device_step={v: d["check_device_us"] / 1e3 / device_time["plain"]["device_ms_per_step"]
                                          for v, d in device_time.items() if v != "plain"})
    emit(rank, check_vs_step=(checked_ms - step_ms) / step_ms, check_vs_step_paired=paired,
         rounds_plain_ms=plain, rounds_checked_ms=checked, check_alone_vs_step=alone / step_ms,
         deferred_step_ms=deferred_ms, deferred_vs_step=(deferred_ms - step_ms) / step_ms,
         deferred_counters=deferred.counters(), gathers_on_host=check.gathers_on_host(),
         gathers_directly=check.gathers_directly())
    if gated is not None:
        gated_ms = statistics.median(times["gated"])
        emit(rank, gated_step_ms=gated_ms, gated_vs_step=(gated_ms - step_ms) / step_ms,
             gated_vs_step_paired=statistics.median((g - p) / p for g, p in zip(times["gated"], plain)),
             rounds_gated_ms=times["gated"], gated_counters=gated.counters())

    for gb in args.set_gb:
        # Transformer-shaped tensors (d x 4d, 4d x d, d x d, d) until the set holds `gb` GiB of f32/bf16.
        d = 4096 if gb >= 4 else 2048
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        shapes, total = [], 0
        target = int(gb * (1 << 30))
        while total < target:
            for s in ((d, 4 * d), (4 * d, d), (d, d), (d, d), (d, d), (d, d), (d,), (d,)):
                shapes.append(s)
                total += torch.Size(s).numel() * torch.tensor([], dtype=dtype).element_size()
        params = [torch.randn(s, device=device).to(dtype) for s in shapes]
        mod = torch.nn.Module()
        for i, p in enumerate(params):
            mod.register_buffer(f"t{i}", p)
        dummy = torch.optim.SGD([torch.zeros(1, device=device, requires_grad=True)], lr=0.1)
        c = ringguard.ReplicaCheck(mod, dummy, include_optimizer_state=False)
        c.remove()
        ms = timed(c.check_now, device, 5)
        copy_ms = timed(lambda: [p.clone() for p in params], device, 5)
        emit(rank, set_gb=gb, tensors=len(params), bytes=total, fingerprint_ms=ms, fingerprint_gbps=total / ms / 1e6,
             copy_ms=copy_ms, copy_gbps=2 * total / copy_ms / 1e6, fingerprint_vs_copy_bandwidth=(total / ms) / (2 * total / copy_ms))
        del params, mod, c
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
