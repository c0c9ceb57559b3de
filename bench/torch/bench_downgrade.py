"""bench_downgrade: the downgrade engine on real signals, on one GPU (issue 16; docs/DOWNGRADE.md).

    python3 bench/torch/bench_downgrade.py [--only pcie,frag,variants,gpt,oom,sampler] [--json out.json]

pcie      the engine's sampler thread reads NVML's PCIe byte counters (RINGGUARD_TELEMETRY_INTERVAL_MS); a
          thread runs pinned host -> device copies for a while: all_gather must switch to staged_chunked
          while the copies run and return to ring once they stop (default rules: pcie.util above 0.85,
          exit 0.60, dwell 50 steps).
frag      allocating 3 MiB blocks and keeping one in three fragments torch's caching allocator (the holes
          are inactive splits): with cuDNN attention enabled the default rules keep cudnn (the fastest and
          leanest kernel here); with it disabled, attention must switch from flash to mem_efficient while
          the holes are held and return once they are freed (torch.fragmentation above 0.30, exit 0.15,
          dwell 20 steps).
variants  every attention variant's output and input gradients against a float32 math reference.
gpt       a transformer training step (bench_guard.py's GPT) under the same induced fragmentation, each in
          a fresh process: cudnn (what the engine keeps), and with cuDNN attention disabled flash without
          the engine against the engine (mem_efficient): step time, peak memory, allocator retries.
oom       a deeper GPT step (--layers, default 24) whose GPU holds tens of GiB in allocator holes and less
          free memory than a plain step adds, each mode in a fresh process: without the engine the step ends
          in an out-of-memory error; with it a user family (gpt_blocks: plain, or activation checkpointing
          under fragmentation) moves to checkpointed at the first fragmented step and every step completes.
sampler   the GPT step with and without the engine (NVML sampler thread, feed_torch_stats + step per
          step), interleaved rounds: the engine's cost per step (goal < 0.5%).
A line per check says PASS or FAIL; the exit status is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_guard import Gpt  # noqa: E402  (the GPT step of the guard's benchmark)

import ringguard.policy as policy  # noqa: E402

MIB = 1 << 20
failures = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    print(f"  {'PASS' if ok else 'FAIL'}  {name}{': ' + detail if detail else ''}")
    if not ok:
        failures.append(name)
    return ok


def switches(family: str):
    return [(d["step"], d["from"], d["to"], d["signals"]) for d in policy.decisions() if d["family"] == family]


# ---- pcie ------------------------------------------------------------------------------------------------


def copy_load(stop: threading.Event, began: threading.Event, mib: int, copied: list):
    """Pinned host -> device copies back to back on a stream of its own until `stop`; `began` is set once
    the buffers exist and the first copies are enqueued."""
    src = torch.empty(mib * MIB, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        while not stop.is_set():
            for _ in range(4):
                dst.copy_(src, non_blocking=True)
            began.set()
            stream.synchronize()
            copied[0] += 4 * mib * MIB


def bench_pcie(idle_steps: int, load_steps: int, after_steps: int, step_ms: float):
    print("pcie: all_gather under real PCIe load (NVML field values 197/198)")
    policy.load(nvml_device=0)
    policy.register_variant("all_gather", "ring")
    policy.register_variant("all_gather", "staged_chunked")
    trace = []
    stop, began, copied, worker, began_step = threading.Event(), threading.Event(), [0], None, None
    t0 = time.perf_counter()
    for s in range(idle_steps + load_steps + after_steps):
        if s == idle_steps:
            worker = threading.Thread(target=copy_load, args=(stop, began, 256, copied))
            worker.start()
            load_t0 = time.perf_counter()
        if s == idle_steps + load_steps:
            stop.set()
            worker.join()
            load_s = time.perf_counter() - load_t0
        time.sleep(step_ms / 1000)
        if began_step is None and began.is_set():
            began_step = s
        policy.step()
        sig = policy.signals()
        trace.append((s, policy.current("all_gather"), sig.get("pcie.util"), sig.get("pcie.rx_bytes_per_s")))
    wall = time.perf_counter() - t0
    sw = switches("all_gather")
    for step, frm, to, sig in sw:
        print(f"    step {step}: {frm or '-'} -> {to}  pcie.util={sig.get('pcie.util')}")
    load_rate = copied[0] / load_s / 1e9
    utils = [u for s, _, u, _ in trace if idle_steps + 5 <= s < idle_steps + load_steps and u is not None]
    idle_utils = [u for s, _, u, _ in trace if s < idle_steps and u is not None]
    print(f"    {len(trace)} steps in {wall:.2f} s; copies moved {load_rate:.1f} GB/s; pcie.util idle "
          f"median {statistics.median(idle_utils) if idle_utils else None}, under load median "
          f"{statistics.median(utils) if utils else None}")
    enter = [s for s, frm, to, _ in sw if to == "staged_chunked"]
    leave = [s for s, frm, to, _ in sw if frm == "staged_chunked" and to == "ring"]
    check("all_gather starts on ring", bool(sw) and sw[0][2] == "ring" and sw[0][0] < idle_steps)
    check("switches to staged_chunked under load", len(enter) == 1 and idle_steps <= enter[0] < idle_steps + load_steps,
          f"step {enter[0] if enter else None} (copy thread started at step {idle_steps}, its first copies "
          f"enqueued by step {began_step})")
    check("returns to ring after the load", len(leave) == 1 and leave[0] >= idle_steps + load_steps,
          f"step {leave[0] if leave else None} (load stopped at step {idle_steps + load_steps})")
    return {"switches": [(s, f, t, g) for s, f, t, g in sw], "copy_gb_per_s": load_rate,
            "util_under_load_median": statistics.median(utils) if utils else None,
            "util_idle_median": statistics.median(idle_utils) if idle_utils else None,
            "enter_step": enter[0] if enter else None, "leave_step": leave[0] if leave else None,
            "steps": len(trace), "load_from": idle_steps, "copies_began_step": began_step,
            "load_until": idle_steps + load_steps}


# ---- frag ------------------------------------------------------------------------------------------------


def fragment(n_blocks: int, keep_every: int = 3, block_mib: int = 3):
    """Allocates n 3 MiB blocks and keeps one in `keep_every`: the survivors pin their segments (20 MiB
    each, or the cached segments of earlier, larger tensors), and the freed holes are inactive splits that
    a larger request cannot use."""
    blocks = [torch.empty(block_mib * MIB, dtype=torch.uint8, device="cuda") for _ in range(n_blocks)]
    return blocks[::keep_every]


def frag_measure():
    st = torch.cuda.memory_stats()
    return st["inactive_split_bytes.all.current"] / max(1, st["reserved_bytes.all.current"])


def frag_run(base_steps: int, held_steps: int, after_steps: int, n_blocks: int):
    """A fresh engine stepped through clean, fragmented (holes held) and clean-again phases; returns the
    attention family's switches and the measure while held and after."""
    torch.cuda.empty_cache()
    policy.load()
    trace, held = [], None
    for s in range(base_steps + held_steps + after_steps):
        if s == base_steps:
            held = fragment(n_blocks)
        if s == base_steps + held_steps:
            held = None
            torch.cuda.empty_cache()
        policy.feed_torch_stats()
        policy.step()
        trace.append((s, policy.current("attention"), frag_measure()))
    sw = switches("attention")
    for step, frm, to, sig in sw:
        print(f"    step {step}: {frm or '-'} -> {to}  torch.fragmentation={sig.get('torch.fragmentation')}")
    held_frag = [f for s, _, f in trace if base_steps <= s < base_steps + held_steps][0]
    print(f"    inactive_split / reserved while held: {held_frag:.3f}; after: {trace[-1][2]:.3f}")
    return sw, held_frag, trace[-1][2]


def bench_frag(base_steps: int, held_steps: int, after_steps: int, n_blocks: int):
    print("frag: attention under real allocator fragmentation, cuDNN attention enabled (the default rules keep it)")
    sw, held_cudnn, _ = frag_run(base_steps, held_steps, after_steps, n_blocks)
    kept = [t for _, _, t, _ in sw]
    check("cudnn kept while fragmented", kept == ["cudnn"] and held_cudnn > 0.30,
          f"switches {[(s, t) for s, _, t, _ in sw]}, fragmentation {held_cudnn:.3f}")
    print("frag: the same with cuDNN attention disabled (flash, then the memory-efficient downgrade)")
    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        sw, held_frag, after = frag_run(base_steps, held_steps, after_steps, n_blocks)
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)
    enter = [s for s, frm, to, _ in sw if to == "mem_efficient"]
    leave = [s for s, frm, to, _ in sw if frm == "mem_efficient"]
    check("attention starts on flash", bool(sw) and sw[0][2] == "flash")
    check("switches to mem_efficient while fragmented", enter == [base_steps], f"step {enter}")
    check("returns to flash after the holes are freed", len(leave) == 1 and leave[0] >= base_steps + held_steps
          and sw[-1][2] == "flash", f"step {leave}")
    return {"cudnn_enabled_variants": kept, "cudnn_enabled_held_fragmentation": held_cudnn, "switches": [(s, f, t, g) for s, f, t, g in sw],
            "held_fragmentation": held_frag, "after_fragmentation": after,
            "enter_step": enter[0] if enter else None, "leave_step": leave[0] if leave else None}


# ---- variants --------------------------------------------------------------------------------------------


def bench_variants(shape=(8, 16, 2048, 128), tol=2e-2):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    print(f"variants: attention variants vs a float32 math reference, {'x'.join(map(str, shape))} bf16 causal")
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    go = torch.randn(shape, device="cuda", dtype=torch.bfloat16)

    def run(backend, dtype):
        qq, kk, vv = (x.detach().to(dtype).requires_grad_() for x in (q, k, v))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
            out.backward(go.to(dtype))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        return [t.detach().float() for t in (out, qq.grad, kk.grad, vv.grad)], peak

    ref, _ = run(SDPBackend.MATH, torch.float32)
    rows = {}
    for name, backend in policy.SDPA_BACKENDS.items():
        got, peak = run(getattr(SDPBackend, backend), torch.bfloat16)
        errs = [float((g - r).abs().max() / r.abs().max()) for g, r in zip((t.detach() for t in got), ref)]
        rows[name] = {"max_err_over_max_ref": errs, "peak_extra_mib": peak / MIB}
        check(f"{name} within {tol} of the reference (out, dq, dk, dv: max|err| / max|ref|)",
              max(errs) <= tol, ", ".join(f"{e:.2e}" for e in errs) + f"; peak extra {peak / MIB:.0f} MiB")
    return rows


# ---- gpt under fragmentation (child processes) ----------------------------------------------------------


def gpt_child(mode: str, steps: int, batch: int) -> dict:
    """One fresh process: warm up (past the attention family's dwell), fragment, then `steps` training
    steps, with (mode 'engine') or without the downgrade engine choosing the attention backend; 'cudnn'
    and 'flash' are the kernel run without it ('engine' runs with cuDNN attention disabled, so that the
    rule acts: flash -> mem_efficient)."""
    if mode != "cudnn":
        torch.backends.cuda.enable_cudnn_sdp(False)
    torch.manual_seed(0)
    model = Gpt().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, 50304, (batch, 1024), device="cuda")
    tgt = torch.randint(0, 50304, (batch, 1024), device="cuda")
    engine = mode == "engine"
    if engine:
        policy.load()

    def train_step():
        if engine:
            policy.feed_torch_stats()
            policy.step()
        opt.zero_grad(set_to_none=True)
        ctx = policy.attention() if engine else torch.nn.attention.sdpa_kernel(
            getattr(torch.nn.attention.SDPBackend, policy.SDPA_BACKENDS[mode]))
        with ctx, torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(idx).flatten(0, 1), tgt.flatten())
        loss.backward()
        opt.step()

    for _ in range(25):
        train_step()
    torch.cuda.synchronize()
    warm_peak = torch.cuda.max_memory_reserved()
    held = fragment(6000)  # 18 GB allocated, two thirds of it freed again
    torch.cuda.synchronize()
    frag0 = frag_measure()
    torch.cuda.reset_peak_memory_stats()
    retries0 = torch.cuda.memory_stats().get("num_alloc_retries", 0)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        train_step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    st = torch.cuda.memory_stats()
    out = {"mode": mode, "fragmentation_at_start": frag0, "step_ms_median": statistics.median(times[2:]),
           "peak_reserved_mib": torch.cuda.max_memory_reserved() / MIB,
           "peak_allocated_mib": torch.cuda.max_memory_allocated() / MIB, "warm_peak_reserved_mib": warm_peak / MIB,
           "alloc_retries": st.get("num_alloc_retries", 0) - retries0,
           "attention": policy.current("attention") if engine else mode}
    del held
    return out


def run_child(kind: str, mode: str, *args: str):
    """This script in a fresh process (`--<kind>-child mode args...`); its last stdout line, parsed, or None
    (a FAIL line) when it failed."""
    r = subprocess.run([sys.executable, os.path.abspath(__file__), f"--{kind}-child", mode, *args],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-4000:])
        check(f"{kind} child '{mode}' ran", False, f"exit {r.returncode}")
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_gpt(steps: int, batch: int):
    print(f"gpt: a training step under induced fragmentation (batch {batch}), without and with the engine")
    rows = {}
    for mode in ("cudnn", "flash", "engine"):
        row = run_child("gpt", mode, "--steps", str(steps), "--batch", str(batch))
        if row is None:
            continue
        rows[mode] = row
        print(f"    {mode:6s}: attention {row['attention']:13s} step {row['step_ms_median']:.2f} ms, peak reserved "
              f"{row['peak_reserved_mib']:.0f} MiB (allocated {row['peak_allocated_mib']:.0f}), retries "
              f"{row['alloc_retries']}, fragmentation at start {row['fragmentation_at_start']:.3f}")
    if "engine" in rows:
        check("the engine chose mem_efficient for the fragmented run", rows["engine"]["attention"] == "mem_efficient")
    return rows


# ---- oom: a memory variant of the step's large allocations (child processes) ----------------------------

# A user family (docs/DOWNGRADE.md, "A family of your own"): the transformer blocks run plainly or under
# activation checkpointing, which keeps one tensor per block instead of every activation and recomputes
# the rest in backward. Fragmentation moves the family to `checkpointed`; the dwell keeps it there.
OOM_RULES = json.dumps({
    "version": 1,
    "families": {
        "gpt_blocks": {
            "scope": "local",
            "min_dwell_steps": 20,
            "variants": [
                {"name": "plain", "description": "every activation kept for backward"},
                {"name": "checkpointed", "priority": 10, "description": "torch.utils.checkpoint per block",
                 "when": [{"signal": "torch.fragmentation", "above": {"enter": 0.30, "exit": 0.15}}]},
            ],
        }
    },
})


def oom_child(mode: str, steps: int, batch: int, layers: int) -> dict:
    """One fresh process. Warm-up steps measure what a plain step and a checkpointed step add to torch's
    reserved memory (P and C); then 3 MiB blocks fill the GPU until (P + C) / 2 is left free, and two in
    three are freed again: tens of GiB sit in holes that the step's large tensors cannot use. Then `steps`
    training steps, plainly (mode 'plain', no engine) or with the engine choosing the blocks' variant
    (mode 'engine'). Reports the step at which an out-of-memory error ended the run, if one did."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    model = Gpt(layers=layers).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, 50304, (batch, 1024), device="cuda")
    tgt = torch.randint(0, 50304, (batch, 1024), device="cuda")

    def run_blocks(x, ckpt: bool):
        for b in model.blocks:
            x = checkpoint(b, x, use_reentrant=False) if ckpt else b(x)
        return x

    engine = mode == "engine"
    if engine:
        policy.load(rules_json=OOM_RULES)
        blocks = policy.variant_op("gpt_blocks", {"plain": lambda x: run_blocks(x, False),
                                                  "checkpointed": lambda x: run_blocks(x, True)})
    else:
        blocks = lambda x: run_blocks(x, False)  # noqa: E731

    def forward(fn):
        x = model.tok(idx) + model.pos(torch.arange(idx.shape[1], device=idx.device))
        return model.head(model.ln(fn(x)))

    def train_step(fn):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(forward(fn).flatten(0, 1), tgt.flatten())
        loss.backward()
        opt.step()

    def step_with_engine():
        if engine:
            policy.feed_torch_stats()
            policy.step()
        train_step(blocks)

    def growth(fn) -> int:
        """What one step adds to reserved memory from rest (grads freed, cache emptied)."""
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        r0 = torch.cuda.memory_reserved()
        torch.cuda.reset_peak_memory_stats()
        train_step(fn)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_reserved() - r0

    for _ in range(25):  # past the family's dwell; plain while memory is clean
        step_with_engine()
    plain_growth = growth(lambda x: run_blocks(x, False))
    ckpt_growth = growth(lambda x: run_blocks(x, True))
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    target_free = (plain_growth + ckpt_growth) // 2
    blocks_held, allocated = [], 0
    while True:  # fill in 3 MiB blocks until (P + C) / 2 is left free on the device
        free, _ = torch.cuda.mem_get_info()
        if free <= target_free + 64 * MIB:
            break
        n = max(1, min(256, (free - target_free) // (3 * MIB) // 4))
        blocks_held.extend(torch.empty(3 * MIB, dtype=torch.uint8, device="cuda") for _ in range(n))
        allocated += n * 3 * MIB
    blocks_held = blocks_held[::3]  # keep one in three: the rest become holes
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    holes = st["inactive_split_bytes.all.current"]
    frag0 = frag_measure()
    free_after, _ = torch.cuda.mem_get_info()
    torch.cuda.reset_peak_memory_stats()
    retries0 = st.get("num_alloc_retries", 0)
    times, oom_step, oom_text = [], None, ""
    for s in range(steps):
        t = time.perf_counter()
        try:
            step_with_engine()
            torch.cuda.synchronize()
        except torch.OutOfMemoryError as e:
            oom_step, oom_text = s, " ".join(str(e).split())[:600]
            break
        times.append((time.perf_counter() - t) * 1e3)
    st = torch.cuda.memory_stats()
    out = {"mode": mode, "layers": layers, "batch": batch,
           "plain_step_growth_mib": plain_growth / MIB, "checkpointed_step_growth_mib": ckpt_growth / MIB,
           "ballast_mib": allocated / MIB, "holes_mib": holes / MIB, "free_device_mib": free_after / MIB,
           "fragmentation_at_start": frag0, "steps_done": len(times), "oom_step": oom_step, "oom": oom_text,
           "step_ms_median": statistics.median(times[1:]) if len(times) > 1 else None,
           "peak_reserved_mib": torch.cuda.max_memory_reserved() / MIB,
           "peak_allocated_mib": torch.cuda.max_memory_allocated() / MIB,
           "alloc_retries": st.get("num_alloc_retries", 0) - retries0,
           "variant": blocks.variant() if engine else "plain",
           "switches": [(d["step"], d["from"], d["to"]) for d in policy.decisions()] if engine else []}
    del blocks_held
    return out


def bench_oom(steps: int, batch: int, layers: int):
    print(f"oom: a {layers}-layer GPT step (batch {batch}) with tens of GiB in allocator holes and less free than "
          "a plain step needs, without and with the engine (gpt_blocks: plain -> checkpointed)")
    rows = {}
    for mode in ("plain", "engine"):
        row = run_child("oom", mode, "--steps", str(steps), "--batch", str(batch), "--layers", str(layers))
        if row is None:
            continue
        rows[mode] = row
        print(f"    {mode:6s}: P {row['plain_step_growth_mib']:.0f} MiB, C {row['checkpointed_step_growth_mib']:.0f} MiB, "
              f"free {row['free_device_mib']:.0f} MiB, holes {row['holes_mib']:.0f} MiB (fragmentation "
              f"{row['fragmentation_at_start']:.3f}); steps done {row['steps_done']}/{steps}, OOM at step "
              f"{row['oom_step']}, step {row['step_ms_median'] or 0:.2f} ms, peak reserved "
              f"{row['peak_reserved_mib']:.0f} MiB, retries {row['alloc_retries']}, variant {row['variant']}, "
              f"switches {row['switches']}")
        if row["oom"]:
            print(f"      {row['oom']}")
    if "plain" in rows:
        check("without the engine the fragmented run ends in an out-of-memory error", rows["plain"]["oom_step"] == 0)
    if "engine" in rows:
        e = rows["engine"]
        check("with the engine every step completes, checkpointed", e["steps_done"] == steps and
              e["variant"] == "checkpointed" and e["switches"][-1][0] == 25, f"switches {e['switches']}")
    return rows


# ---- sampler ---------------------------------------------------------------------------------------------


def bench_sampler(steps: int, batch: int, rounds: int):
    print(f"sampler: GPT step with and without the engine (NVML sampler, feed_torch_stats + step), {rounds} rounds")
    torch.manual_seed(0)
    model = Gpt().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, 50304, (batch, 1024), device="cuda")
    tgt = torch.randint(0, 50304, (batch, 1024), device="cuda")
    policy.load(nvml_device=0)
    backend = torch.nn.attention.SDPBackend.CUDNN_ATTENTION

    def run(with_engine: bool) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            if with_engine:
                policy.feed_torch_stats()
                policy.step()
            opt.zero_grad(set_to_none=True)
            with torch.nn.attention.sdpa_kernel(backend), torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(idx).flatten(0, 1), tgt.flatten())
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3 / steps

    run(False)
    plain, eng = [], []
    for _ in range(rounds):
        plain.append(run(False))
        eng.append(run(True))
    p, e = statistics.median(plain), statistics.median(eng)
    ratio = e / p
    c = policy.counters()
    print(f"    plain {p:.3f} ms, with the engine {e:.3f} ms: {100 * (ratio - 1):+.2f}% "
          f"(rounds plain {[round(x, 2) for x in plain]}, engine {[round(x, 2) for x in eng]}); steps {c['steps']}")
    check("engine cost per step < 0.5%", ratio < 1.005, f"{100 * (ratio - 1):+.2f}%")
    return {"plain_ms": p, "engine_ms": e, "ratio": ratio, "plain_rounds": plain, "engine_rounds": eng}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="pcie,frag,variants,gpt,oom,sampler")
    p.add_argument("--json", default=None)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--gpt-child", choices=["cudnn", "flash", "engine"], default=None)
    p.add_argument("--oom-child", choices=["plain", "engine"], default=None)
    p.add_argument("--layers", type=int, default=24)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_downgrade: needs a CUDA device", file=sys.stderr)
        return 2
    if a.gpt_child:
        print(json.dumps(gpt_child(a.gpt_child, a.steps, a.batch)))
        return 0
    if a.oom_child:
        print(json.dumps(oom_child(a.oom_child, a.steps, a.batch, a.layers)))
        return 0
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, allocator "
          f"{torch.cuda.get_allocator_backend()}, RINGGUARD_TELEMETRY_INTERVAL_MS="
          f"{os.environ.get('RINGGUARD_TELEMETRY_INTERVAL_MS', '(default 20)')}")
    parts = a.only.split(",")
    out = {}
    if "pcie" in parts:
        out["pcie"] = bench_pcie(idle_steps=60, load_steps=200, after_steps=120, step_ms=5)
    if "frag" in parts:
        out["frag"] = bench_frag(base_steps=30, held_steps=40, after_steps=40, n_blocks=2000)
    if "variants" in parts:
        out["variants"] = bench_variants()
    if "gpt" in parts:
        out["gpt"] = bench_gpt(a.steps, a.batch)
    if "oom" in parts:
        out["oom"] = bench_oom(a.steps, a.batch, a.layers)
    if "sampler" in parts:
        out["sampler"] = bench_sampler(a.steps, a.batch, a.rounds)
    out["failed"] = failures
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    print(f"bench_downgrade: {'all checks passed' if not failures else 'FAILED: ' + ', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
