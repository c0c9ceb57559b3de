"""ringguard.policy from Python: the C++ downgrade engine (ringguard._C.PolicyEngine) driven by recorded
traces (the same files and expected decisions as the C++ tests), torch allocator statistics fed in, the
attention variant through SDPA's backend controls (on CPU: which sdpa_kernel backend is entered, and that
outputs agree), and rule-file errors. CPU only."""

import json
import os

import pytest
import torch
import torch.nn.functional as F

import ringguard
import ringguard.policy as policy

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit", "data", "policy")


def read_trace(name):
    with open(os.path.join(DATA, name)) as f:
        return [json.loads(line) for line in f if line.strip() and not line.startswith("#")]


def expected(name):
    with open(os.path.join(DATA, name)) as f:
        return [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#")]


def small_engine():
    policy.load(rules_path=os.path.join(DATA, "rules_small.json"), edits="", builtin_variants=False)
    for family, names in (("attention", ("fast", "lean", "emergency")), ("gather", ("ring", "staged"))):
        for n in names:
            policy.register_variant(family, n)


@pytest.mark.parametrize("trace", ["fragmentation", "pcie"])
def test_trace_replay_gives_the_expected_decisions(trace):
    small_engine()
    for rec in read_trace(trace + ".jsonl"):
        policy.step(rec["signals"], t_ms=rec["t_ms"])
    got = [f"{d['step']} {d['family']}: {d['from'] or '(none)'} -> {d['to']}" for d in policy.decisions()]
    assert got == expected(trace + ".expected")


def test_decisions_carry_reason_and_signals():
    small_engine()
    for rec in read_trace("fragmentation.jsonl")[:4]:
        policy.step(rec["signals"], t_ms=rec["t_ms"])
    d = policy.decisions()[-1]
    assert (d["step"], d["family"], d["from"], d["to"]) == (3, "attention", "fast", "lean")
    assert d["reason"] == "entered: frag above 0.5 (exit 0.3)"
    assert d["signals"] == {"frag": 0.55}
    assert d["agreed"] is False
    assert d["time_ns"] == 30_000_000
    c = policy.counters()
    assert c["steps"] == 4 and c["decisions"] == 3 and c["switches"] == {"attention": 1}


def test_unregistered_variants_are_never_chosen():
    policy.load(rules_path=os.path.join(DATA, "rules_small.json"), edits="", builtin_variants=False)
    policy.register_variant("attention", "fast")
    policy.step({"frag": 0.99, "ooms": 3}, t_ms=0)
    assert policy.current("attention") == "fast"
    assert policy.current("gather") == ""


FLASH_OR_MATH = json.dumps({
    "version": 1,
    "families": {"attention": {"min_dwell_steps": 2, "variants": [
        {"name": "flash"},
        {"name": "math", "priority": 10,
         "when": [{"signal": "torch.fragmentation", "above": {"enter": 0.3, "exit": 0.1}}]}]}}})


def stats(reserved, allocated, inactive_split, retries=0, ooms=0):
    return {"reserved_bytes.all.current": reserved, "allocated_bytes.all.current": allocated,
            "inactive_split_bytes.all.current": inactive_split, "num_alloc_retries": retries, "num_ooms": ooms}


def test_torch_allocator_stats_drive_the_attention_variant(monkeypatch):
    policy.load(rules_json=FLASH_OR_MATH, edits="", device=torch.device("cpu"))
    entered = []
    real = torch.nn.attention.sdpa_kernel

    def recording(backends, *a, **k):
        entered.append(backends)
        return real(backends, *a, **k)

    monkeypatch.setattr(torch.nn.attention, "sdpa_kernel", recording)
    q, k, v = (torch.randn(2, 4, 64, 32, generator=torch.Generator().manual_seed(i)) for i in range(3))
    SDPBackend = torch.nn.attention.SDPBackend

    policy.feed_torch_stats(stats(1 << 30, 1 << 29, 1 << 26), async_backend=False)  # 1/16 fragmented
    policy.step(t_ms=0)
    assert policy.current("attention") == "flash"
    with policy.attention():
        flash = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    policy.feed_torch_stats(stats(1 << 30, 1 << 29, 1 << 29), async_backend=False)  # half of reserved
    assert policy.signals()["torch.fragmentation"] == 0.5
    policy.step(t_ms=1)
    assert policy.current("attention") == "flash"  # dwell: 2 steps
    policy.step(t_ms=2)
    assert policy.current("attention") == "math"
    with policy.attention():
        math = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert entered == [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]
    # Same attention, two kernels: equal within float32 rounding of different summation orders.
    torch.testing.assert_close(flash, math, rtol=1e-5, atol=1e-5)
    d = policy.decisions()[-1]
    assert d["signals"] == {"torch.fragmentation": 0.5}


def test_cpu_has_no_cuda_only_backends():
    policy.load(edits="", device=torch.device("cpu"))  # the default rules
    policy.step(t_ms=0)
    assert policy.current("attention") == "flash"  # cuDNN needs CUDA; flash runs on CPU
    assert policy.attention_backend() == torch.nn.attention.SDPBackend.FLASH_ATTENTION
    sig = policy.signals()
    assert sig["torch.fragmentation"] is None  # never fed: missing, not zero
    assert "pcie.util" not in sig  # no NVML source asked for (nvml_device=-1)


def test_pcie_sampler_thread_reports_missing_without_nvml():
    import time

    policy.load(edits="", device=torch.device("cpu"), nvml_device=0)
    deadline = time.monotonic() + 10
    while "pcie.util" not in policy.signals() and time.monotonic() < deadline:
        time.sleep(0.01)  # the sampler thread's first sample
    sig = policy.signals()
    assert "pcie.util" in sig
    if sig["pcie.link_gen"] is not None:
        pytest.skip("this machine has NVML and a device 0")
    assert sig["pcie.util"] is None and sig["pcie.tx_bytes_per_s"] is None  # missing, not zero


def test_async_allocator_statistics():
    policy.load(rules_json=FLASH_OR_MATH, edits="", device=torch.device("cpu"))
    policy.feed_torch_stats(stats(100, 60, 0), async_backend=True)
    policy.feed_torch_stats(stats(120, 80, 0), async_backend=True)  # grew although 40 bytes were idle
    s = policy.signals()
    assert s["torch.async_backend"] == 1.0
    assert s["torch.inactive_split_bytes"] is None and s["torch.num_alloc_retries"] is None
    assert s["torch.fragmentation"] == 40 / 120
    C = ringguard._ext.load()
    assert C.alloc_conf_selects_async("expandable_segments:True,backend:cudaMallocAsync")
    assert not C.alloc_conf_selects_async("backend:native")


def test_bad_rules_name_the_key():
    bad = json.dumps({"version": 1, "families": {"attention": {"variants": [
        {"name": "flash"}, {"name": "math", "when": [{"signal": "x", "above": {"enter": 0.2, "exit": 0.5}}]}]}}})
    with pytest.raises(ValueError, match=r"key '/families/attention/variants/1/when/0/above/exit': value 0.5: "
                                         r"is above enter 0.2"):
        policy.load(rules_json=bad, edits="")
    with pytest.raises(ValueError, match=r"RINGGUARD_POLICY_SET entry '/nope/x=1': key '/nope' does not exist"):
        policy.load(rules_json=FLASH_OR_MATH, edits="/nope/x=1")



def test_bad_telemetry_and_family_names_get_a_clear_error_and_leave_the_engine_usable():
    small_engine()
    with pytest.raises(ValueError, match=r"signal 'frag' must be a finite number \(None marks it missing\), "
                                         r"got 'high'"):
        policy.feed_signals({"frag": "high"})
    with pytest.raises(ValueError, match="signal 'frag' must be a finite number .*, got nan"):
        policy.feed_signals({"frag": float("nan")})
    with pytest.raises(ValueError, match="signal 'pcie' must be a finite number .*, got inf"):
        policy.step({"pcie": float("inf")})
    with pytest.raises(ValueError, match="t_ms must be a finite number, got nan"):
        policy.step(t_ms=float("nan"))
    with pytest.raises(ValueError, match="torch stat 'num_ooms' must be a non-negative integer, got -1"):
        policy.feed_torch_stats({"num_ooms": -1}, async_backend=False)
    with pytest.raises(ValueError, match="torch stat 'reserved_bytes.all.current' must be a non-negative "
                                         "integer, got '5'"):
        policy.feed_torch_stats({"reserved_bytes.all.current": "5"}, async_backend=False)
    with pytest.raises(ValueError, match=r"the rules have no family 'atention' \(they have: attention, gather\)"):
        policy.current("atention")
    # Nothing bad was kept: the engine still steps and switches on good signals.
    policy.feed_signals({"frag": 0.95, "ooms": 2.0})
    policy.step(t_ms=0.0)
    assert policy.current("attention") == "emergency"

def test_agreement_callback_sees_the_vector():
    policy.load(rules_path=os.path.join(DATA, "rules_small.json"), edits="", builtin_variants=False)
    for n in ("ring", "staged"):
        policy.register_variant("gather", n)
    seen = []

    def other_rank_saturated(values):
        seen.append(list(values))
        out = list(values)
        out[-1] = max(out[-1], 0.95)  # the last entry: gather's "pcie"
        return out

    policy.engine().set_agreement(other_rank_saturated)
    for t in range(3):
        policy.step({"pcie": 0.1}, t_ms=t)
    assert policy.current("gather") == "staged"
    assert len(seen) == 3 and len(seen[0]) == 8
    assert policy.decisions()[-1]["agreed"] is True


# A user family whose variants are guarded ops: the guard's detections, fed as a per-step signal, move the
# family to the fp64 variant, and the dwell brings it back once the op is clean again.
MLP_RULES = json.dumps({
    "version": 1,
    "families": {"mlp": {"scope": "local", "min_dwell_steps": 2, "variants": [
        {"name": "fast"},
        {"name": "safe", "priority": 10,
         "when": [{"signal": "guard.detections", "above": {"enter": 0.5, "exit": 0.25}}]}]}}})


def test_guarded_ops_as_variants_switch_on_the_guards_own_signal():
    import ringguard

    policy.load(rules_json=MLP_RULES, edits="", builtin_variants=False, device=torch.device("cpu"))
    g = ringguard.guard(policy="replay", replays=1)
    ran = []

    @g(name="fast")
    def fast(x):
        ran.append("fast")
        return torch.tanh(x)

    @g(name="safe")
    def safe(x):
        ran.append("safe")
        return torch.tanh(x.double()).float()

    op = policy.variant_op("mlp", {"fast": fast, "safe": safe})
    x = torch.linspace(-2, 2, 64)
    got = []
    for step in range(8):
        if step == 3:
            g.inject(op="fast", call=3, value="nan")  # the fourth call of "fast": detected, replayed
        y = op(x)
        assert torch.isfinite(y).all()
        got.append(op.variant())
        policy.feed_guard_stats(g)
        policy.step(t_ms=10.0 * step)
    # Step 3's detection switches to "safe" at that step's boundary (the initial choice's dwell of 2 steps
    # has passed); two steps later the dwell is over and the clean signal brings "fast" back.
    assert got == ["fast", "fast", "fast", "fast", "safe", "safe", "fast", "fast"], got
    assert ran.count("fast") == 7 and ran.count("safe") == 2, ran  # the replay ran "fast" once more
    d = [(e["step"], e["from"], e["to"]) for e in policy.decisions()]
    assert d[-2:] == [(3, "fast", "safe"), (5, "safe", "fast")], d
    assert policy.decisions()[-2]["signals"] == {"guard.detections": 1.0}
    with pytest.raises(ValueError, match="lists no variant 'other'"):
        policy.variant_op("mlp", {"other": fast})
    with pytest.raises(ValueError, match="the rules have no family 'nope'"):
        policy.variant_op("nope", {"fast": fast})
