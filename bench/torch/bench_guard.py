"""What the NaN/Inf guard costs on a GPU (docs/GUARD.md), in one run:

  op     a guarded in-place op (w += lr * g over --mib MiB of f32 state) against the same op unguarded,
         against a D2D copy of the state plus the guard's scan alone, immediate and deferred, with the host
         waits counted (deferred: 0 inside the step).
  gpt    a small GPT training step (8 layers, d 768, seq 1024, batch 8, bf16 autocast, fused AdamW):
         plain; every attention and MLP forward guarded (deferred, one verdict per step, gradients
         scanned too); torch.autograd.detect_anomaly(check_nan=True); torch.isfinite(out).all().item()
         after each module.

    python3 bench/torch/bench_guard.py [--mib 256] [--iters 50] [--steps 20] [--json out.json]

Prints one row per variant with the ratio to its baseline from the same run. Never gates anything.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import ringguard


def timed(fn, iters: int, warmup: int = 3) -> float:
    """Milliseconds per call, by CUDA events around `iters` calls after `warmup`."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


# ---- op ---------------------------------------------------------------------------------------------------


def bench_op(mib: int, iters: int):
    n = mib * (1 << 20) // 4
    w = torch.randn(n, device="cuda")
    g = torch.randn(n, device="cuda")
    snap = torch.empty_like(w)

    def op(w, g):
        w.add_(g, alpha=1e-3)

    rows = {}
    rows["op unguarded"] = timed(lambda: op(w, g), iters)
    rows["D2D copy of the state"] = timed(lambda: snap.copy_(w), iters)
    scan_guard = ringguard.guard(scan_state=False)
    scan_only = scan_guard(lambda w: w, name="scan")  # returns w: an output, scanned, nothing snapshotted
    rows["guard scan + verdict alone"] = timed(lambda: scan_only(w), iters)
    rows["torch.isfinite(w).all().item()"] = timed(lambda: torch.isfinite(w).all().item(), iters)

    imm = ringguard.guard()
    guarded = imm(op, mutates=["w"])
    rows["op guarded, immediate"] = timed(lambda: guarded(w, g), iters)
    waits_imm = imm.counters()["host_waits"] / max(1, imm.counters()["calls"])

    dfr = ringguard.guard(mode="deferred", snapshot_budget_bytes=16 << 30)  # 10 snapshots held per step
    gdef = dfr(op, mutates=["w"])
    inside = []

    def step():
        def region():
            before = dfr.counters()["host_waits"]
            for _ in range(10):
                gdef(w, g)
            inside.append(dfr.counters()["host_waits"] - before)

        dfr.step(region)

    rows["op guarded, deferred (per op, 10 per step)"] = timed(step, max(1, iters // 10)) / 10
    unguarded10 = timed(lambda: [op(w, g) for _ in range(10)], max(1, iters // 10)) / 10

    tiny = torch.ones(256, device="cuda")
    tiny_op = lambda t: t * 2.0  # noqa: E731
    tiny_guarded = ringguard.guard()(tiny_op, name="tiny")
    rows["tiny op unguarded (host-bound launch)"] = timed(lambda: tiny_op(tiny), iters * 20)
    rows["tiny op guarded, immediate (host-bound)"] = timed(lambda: tiny_guarded(tiny), iters * 20)

    base = rows["op unguarded"]
    need = rows["D2D copy of the state"] + rows["guard scan + verdict alone"]
    print(f"\n== guarded op: in-place add over {mib} MiB of f32 state ==")
    for k, v in rows.items():
        print(f"  {k:46s} {v:8.3f} ms   {v / base:5.2f}x op")
    over_imm = rows["op guarded, immediate"] - base
    over_def = rows["op guarded, deferred (per op, 10 per step)"] - unguarded10
    print(f"  guard overhead / (copy + scan), immediate      {over_imm / need:5.2f}  (goal <= 1.1)")
    print(f"  guard overhead / (copy + scan), deferred       {over_def / need:5.2f}  (goal <= 1.1)")
    print(f"  host waits per call, immediate                 {waits_imm:5.2f}")
    print(f"  host waits inside a deferred step              {max(inside) if inside else 0}  (goal 0)")
    rows["overhead_over_copy_scan_immediate"] = over_imm / need
    rows["overhead_over_copy_scan_deferred"] = over_def / need
    rows["host_waits_inside_deferred_step"] = max(inside) if inside else 0
    return rows


# ---- gpt --------------------------------------------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.mlp = Attention(d, heads), Mlp(d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, layers=8, d=768, heads=12, vocab=50304, seq=1024):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def wrap_forwards(model, wrapper):
    """Replaces every attention and MLP module's forward by wrapper(name, forward)."""
    for i, b in enumerate(model.blocks):
        b.attn.forward = wrapper(f"attn{i}", b.attn.forward)
        b.mlp.forward = wrapper(f"mlp{i}", b.mlp.forward)


def bench_gpt(steps: int, batch: int, rounds: int = 3, profile: bool = False):
    """Every variant `rounds` times, interleaved, so a neighbour on the GPU or a clock change hits all of
    them alike; the median of the rounds is reported."""
    torch.manual_seed(0)
    model = Gpt().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, 50304, (batch, 1024), device="cuda")
    tgt = torch.randint(0, 50304, (batch, 1024), device="cuda")
    originals = [(b.attn, b.attn.forward, b.mlp, b.mlp.forward) for b in model.blocks]

    def restore():
        for attn, af, mlp, mf in originals:
            attn.forward, mlp.forward = af, mf

    def fwd_bwd():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(idx).flatten(0, 1), tgt.flatten())
        loss.backward()

    def plain():
        fwd_bwd()
        opt.step()

    def anomaly():
        with torch.autograd.detect_anomaly(check_nan=True):
            fwd_bwd()
        opt.step()

    def isfinite_wrapper(name, f):
        def checked(*a, **k):
            out = f(*a, **k)
            if not torch.isfinite(out).all().item():
                raise RuntimeError(f"{name}: non-finite")
            return out

        return checked

    def params_with_grad():
        return [p.grad for p in model.parameters() if p.grad is not None]

    guards = {}

    def guarded_step(g, scan_grads):
        grads = g(lambda grads: grads, name="grads")

        def step():
            def region():
                fwd_bwd()
                if scan_grads:
                    grads(params_with_grad())

            _, report = g.step(region)
            if report["resolution"] != "skipped":
                opt.step()

        return step

    def setup_guarded(key, wrap, scan_grads):
        def setup():
            g = ringguard.guard(mode="deferred", policy="replay", replays=2, escalation="skip_step")
            guards[key] = g
            if wrap:
                wrap_forwards(model, lambda name, f: g(f, name=name))
            return guarded_step(g, scan_grads)

        return setup

    def setup_flag():
        # skip_step decided on the device: the verdict is the fused AdamW's found_inf, no host wait at all.
        g = ringguard.guard(mode="deferred", policy="skip_step")
        guards["flag"] = g
        wrap_forwards(model, lambda name, f: g(f, name=name))
        grads = g(lambda grads: grads, name="grads")
        flag = torch.zeros((), device="cuda")

        def region():
            fwd_bwd()
            grads(params_with_grad())

        def step():
            g.step_flag(region, flag=flag)
            opt.found_inf = flag
            opt.step()

        return step

    variants = {
        "plain": lambda: plain,
        "isfinite(out).all().item() per module": lambda: (wrap_forwards(model, isfinite_wrapper), plain)[1],
        "guarded (deferred, attn + MLP)": setup_guarded("fwd", True, False),
        "guarded (deferred, attn + MLP + grads)": setup_guarded("all", True, True),
        "guarded (deferred, grads only)": setup_guarded("grads", False, True),
        "guarded, device verdict -> found_inf (attn+MLP+grads)": setup_flag,
    }
    times = {k: [] for k in variants}
    for _ in range(rounds):
        for k, setup in variants.items():
            fn = setup()
            times[k].append(timed(fn, steps))
            restore()
            opt.found_inf = None
    rows = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    rows["detect_anomaly(check_nan=True)"] = timed(anomaly, max(2, steps // 4), warmup=1)

    if profile:
        import cProfile
        import pstats

        step = setup_guarded("profile", True, True)()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        prof.disable()
        restore()
        print(f"\n-- cProfile of {steps} guarded steps (tottime) --")
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)

    base = rows["plain"]
    print(f"\n== small GPT step (8 x d768, seq 1024, batch {batch}, bf16 autocast, fused AdamW), "
          f"median of {rounds} interleaved rounds of {steps} steps ==")
    for k, v in rows.items():
        spread = f"  [{min(times[k]):.2f} .. {max(times[k]):.2f}]" if k in times else ""
        print(f"  {k:54s} {v:8.2f} ms   {v / base:5.2f}x plain{spread}")
    g = guards["all"]
    c = g.counters()
    print(f"  host waits per guarded step                    {c['host_waits'] / max(1, c['steps']):.2f}"
          "  (the verdict; goal 1)")
    print(f"  guarded calls per step                         {c['calls'] // max(1, c['steps'])}")
    rows["guarded_over_plain"] = rows["guarded (deferred, attn + MLP + grads)"] / base
    rows["guarded_fwd_over_plain"] = rows["guarded (deferred, attn + MLP)"] / base
    rows["host_waits_per_step"] = c["host_waits"] / max(1, c["steps"])
    flag_waits = guards["flag"].counters()["host_waits"]
    print(f"  host waits in device-verdict steps (all)       {flag_waits}  (goal 0)")
    rows["guarded_flag_over_plain"] = rows["guarded, device verdict -> found_inf (attn+MLP+grads)"] / base
    rows["host_waits_device_verdict"] = flag_waits
    rows["rounds"] = {k: v for k, v in times.items()}
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", choices=["op", "gpt"], default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--profile", action="store_true", help="cProfile the guarded GPT steps")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_guard: needs a CUDA device", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    out = {}
    if a.only in (None, "op"):
        out["op"] = bench_op(a.mib, a.iters)
    if a.only in (None, "gpt"):
        out["gpt"] = bench_gpt(a.steps, a.batch, a.rounds, a.profile)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
