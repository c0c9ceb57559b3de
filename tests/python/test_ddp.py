"""DistributedDataParallel over the "ringguard" backend: against DDP over gloo, across ranks, with faults.

Each run trains the same small MLP (same seed, same per-rank data) for 20 steps. Against gloo the
parameters are compared with ``allclose(rtol=1e-5, atol=1e-6)``, not bit for bit: both backends sum the
same fp32 gradients in a different order (ringguard's ring vs gloo's algorithm), so the last bits of a
bucket can differ and SGD carries that along for 20 steps. Across ranks, and between a clean ringguard run
and one with injected corruptions, the parameters must be bit-identical: every rank gets the same
reduced bytes, and a detected corruption is repaired from the sender's retained bytes.
"""

import hashlib
import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import harness

STEPS = 20
RTOL, ATOL = 1e-5, 1e-6
CASES = harness.Cases()


class Net(nn.Module):
    def __init__(self, branch: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 4)
        if branch:
            self.side = nn.Linear(64, 64)   # used on some steps, by some ranks
            self.never = nn.Linear(64, 64)  # never used

    def forward(self, x, use_side: bool = False):
        h = F.relu(self.fc1(x))
        if use_side:
            h = h + F.relu(self.side(h))
        return self.fc3(F.relu(self.fc2(h)))


def train(ctx, group, branch=False):
    """20 SGD steps of DDP over `group`; returns (params, loss, hash)."""
    torch.manual_seed(1234)
    model = Net(branch).to(ctx.device)
    init = [p.detach().clone() for p in model.parameters()]
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.004,  # 4 KB buckets: several per step
              find_unused_parameters=branch)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss = None
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * ctx.rank + step)
        x = torch.randn(8, 16, generator=g).to(ctx.device)
        y = torch.randn(8, 4, generator=g).to(ctx.device)
        out = ddp(x, use_side=(step + ctx.rank) % 2 == 0) if branch else ddp(x)
        loss = F.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    params = [p.detach().cpu().clone() for p in model.parameters()]
    names = [n for n, _ in model.named_parameters()]
    del ddp
    return params, float(loss), _hash(params), init, names


def _hash(params) -> str:
    h = hashlib.sha256()
    for p in params:
        h.update(p.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:24]


def _compare(a, b):
    worst = max(float((x - y).abs().max()) for x, y in zip(a, b))
    close = all(torch.allclose(x, y, rtol=RTOL, atol=ATOL) for x, y in zip(a, b))
    return close, worst


def _same_on_all_ranks(results, nproc, key="hash"):
    hashes = [r[key] for r in results]
    assert len(set(hashes)) == 1, f"parameters differ across ranks: {hashes}"


def _check_clean(results, nproc):
    _same_on_all_ranks(results, nproc)
    _same_on_all_ranks(results, nproc, "hash_gloo")
    for rank, r in enumerate(results):
        assert r["allclose_gloo"], f"rank {rank}: ringguard vs gloo max |diff| {r['max_diff_gloo']}"


@CASES.case("ddp-vs-gloo", check=_check_clean)
def _(ctx):
    params, loss, h, _, _ = train(ctx, None)  # None: the default group, ringguard
    ctx.clean = params
    ctx.clean_hash = h
    gparams, gloss, gh, _, _ = train(ctx, ctx.ref)
    close, worst = _compare(params, gparams)
    return {"hash": h, "hash_gloo": gh, "allclose_gloo": close, "max_diff_gloo": worst, "loss": loss,
            "loss_gloo": gloss}


@CASES.case("ddp-find-unused-parameters", check=_check_clean)
def _(ctx):
    params, loss, h, init, names = train(ctx, None, branch=True)
    gparams, _, gh, _, _ = train(ctx, ctx.ref, branch=True)
    close, worst = _compare(params, gparams)
    for name, p, p0 in zip(names, params, init):
        if name.startswith("never."):
            assert torch.equal(p, p0.cpu()), f"{name} changed although it never got a gradient"
        else:
            assert not torch.equal(p, p0.cpu()), f"{name} did not train"
    return {"hash": h, "hash_gloo": gh, "allclose_gloo": close, "max_diff_gloo": worst, "loss": loss}


def _check_faults(results, nproc):
    _same_on_all_ranks(results, nproc)
    for rank, r in enumerate(results):
        assert r["identical_to_clean"], f"rank {rank}: parameters differ from the clean run"
        assert r["detected"] == r["injected"], f"rank {rank}: {r}"
        assert r["escaped"] == 0, f"rank {rank}: {r}"
    if nproc > 1:  # one rank may move no slice at all
        assert sum(r["injected"] for r in results) > 0, f"no fault injected: {results}"


def _fault_run(ctx, group):
    import ringguard

    if not hasattr(ctx, "clean"):
        raise AssertionError("the clean run (ddp-vs-gloo) did not complete")
    before = ringguard.counters(group)
    params, _, h, _, _ = train(ctx, group)
    after = ringguard.counters(group)
    delta = {k: after[k] - before[k] for k in ("injected", "detected", "escaped", "retransmitted",
                                                "repair_rounds")}
    same = all(torch.equal(a, b) for a, b in zip(params, ctx.clean))
    return dict(delta, hash=h, identical_to_clean=same)


@CASES.case("ddp-faults-bitflip-set_fault", check=_check_faults)
def _(ctx):
    import ringguard

    ringguard.set_fault(mode="bitflip", prob=0.05, seed=11)
    try:
        return _fault_run(ctx, None)
    finally:
        ringguard.set_fault(prob=0)


@CASES.case("ddp-faults-retransmit-options", check=_check_faults)
def _(ctx):
    import ringguard

    g = dist.new_group(backend="ringguard", pg_options=ringguard.Options(
        fault_mode="retransmit", fault_prob=0.05, fault_seed=5))
    result = _fault_run(ctx, g)
    dist.destroy_process_group(g)
    return result


@CASES.case("transport")
def _(ctx):
    import ringguard

    kind = ctx.device
    want = os.environ.get("RINGGUARD_TEST_EXPECT_TRANSPORT", "gloo")
    got = ringguard.transport(kind)
    assert got == want, f"transport({kind!r}) = {got!r}, want {want!r}"
    return {"transport": got}


def _init():
    if os.environ.get("RINGGUARD_TEST_DEVICE") == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    dist.init_process_group("ringguard", timeout=timedelta(seconds=120))


# --- pytest side ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def run(request):
    return harness.launch(__file__, request.param)


@pytest.mark.parametrize("name", CASES.names)
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


# GPU: world size 1 over NCCL (send/recv to itself through the verify path); 2 and 4 ranks sharing
# GPU 0 over the staged transport (NCCL refuses two ranks on one GPU). All compare against DDP over
# gloo with CUDA tensors.
GPU_SETUPS = {"cuda-np1-nccl": (1, "nccl"), "cuda-np2-staged": (2, "staged"),
              "cuda-np4-staged": (4, "staged")}


@pytest.fixture(scope="module", params=list(GPU_SETUPS))
def cuda_run(request):
    if not torch.cuda.is_available():
        pytest.skip(f"needs a GPU ({request.param})")
    nproc, transport = GPU_SETUPS[request.param]
    env = {"RINGGUARD_TEST_DEVICE": "cuda", "RINGGUARD_TEST_EXPECT_TRANSPORT": transport}
    if transport == "staged":
        env["RINGGUARD_DEVICE_TRANSPORT"] = "staged"
        env["CUDA_VISIBLE_DEVICES"] = "0"
    return harness.launch(__file__, nproc, env=env)


@pytest.mark.parametrize("name", CASES.names)
def test_cuda_case(cuda_run, name):
    harness.check_case(CASES, cuda_run, name)


def test_cuda_launch(cuda_run):
    harness.check_launch(cuda_run)


if __name__ == "__main__":
    harness.run_worker(CASES, _init)
