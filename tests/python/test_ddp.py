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


def train(ctx, group, branch=False, hook=None, bucket_cap_mb=0.004):
    """20 SGD steps of DDP over `group`; returns (params, loss, hash). `hook(ddp, group)` may register a
    communication hook. Default: 4 KB buckets, several per step."""
    torch.manual_seed(1234)
    model = Net(branch).to(ctx.device)
    init = [p.detach().clone() for p in model.parameters()]
    ddp = DDP(model, process_group=group, bucket_cap_mb=bucket_cap_mb, find_unused_parameters=branch)
    if hook is not None:
        hook(ddp, group)
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
    # CPU tensors travel through shared memory (the ranks share a host; RINGGUARD_CPU_TRANSPORT=auto); CUDA
    # ones (RINGGUARD_DEVICE_TRANSPORT=auto) through the peer windows of the ranks of one host (the staged or
    # NCCL pipeline beneath them), NCCL for one rank.
    want = "shm"
    if kind == "cuda":
        want = harness.device_transport(ctx.size)
    want = os.environ.get("RINGGUARD_TEST_EXPECT_TRANSPORT", want)
    got = ringguard.transport(kind)
    assert got == want, f"transport({kind!r}) = {got!r}, want {want!r}"
    return {"transport": got}


# --- Future callbacks that wait on collectives -----------------------------------------------------
# A then() callback that issues a collective and waits for it used to deadlock for good: the callback ran
# on the one thread that would complete the inner collective. These cases run in a launch of their own
# under a short wall-clock limit (HOOK_LAUNCH_TIMEOUT), so a hang fails the tests instead of blocking CI.

HOOK_CASES = harness.Cases()
HOOK_LAUNCH_TIMEOUT = 150
# PowerSGD against gloo: both compress the same gradients with the same seeded random Q, but sum P and Q in
# a different order; the orthogonalisation and the error feedback carry those last-bit differences along,
# so the bound is looser than plain DDP's (observed max |diff| is recorded in the result).
PSGD_RTOL, PSGD_ATOL = 1e-4, 1e-5


def _powersgd(ddp, group):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD

    # start_powerSGD_iter=2: steps 0-1 all-reduce plainly, every later step runs the compressed path (its
    # P and Q all-reduces are issued and waited inside Future callbacks).
    state = powerSGD.PowerSGDState(process_group=group, matrix_approximation_rank=1, start_powerSGD_iter=2,
                                   min_compression_rate=0.5, random_seed=7)
    ddp.register_comm_hook(state, powerSGD.powerSGD_hook)


def _check_powersgd(results, nproc):
    _same_on_all_ranks(results, nproc)
    _same_on_all_ranks(results, nproc, "hash_gloo")
    for rank, r in enumerate(results):
        assert r["allclose_gloo"], f"rank {rank}: ringguard vs gloo max |diff| {r['max_diff_gloo']}"


# One bucket (DDP's first bucket holds 1 MB; the model has 22 KB): with several, the hook of bucket k+1
# (issued on the autograd thread) races with the P/Q all-reduces that bucket k's callbacks issue on a
# completion thread, so ranks can issue them in different orders (seen here with 4 KB buckets: a
# fingerprint mismatch naming both ranks' collectives). With NCCL the callbacks run inline at issue.
@HOOK_CASES.case("ddp-powersgd-hook", check=_check_powersgd)
def _(ctx):
    if ctx.device == "cpu" and torch.cuda.is_available():
        # torch's own hook calls torch.cuda.synchronize(<the tensors' device>) whenever CUDA is available, so on
        # a GPU machine it fails on CPU tensors over any backend (gloo too): "Expected a cuda device, but got:
        # cpu" (torch 2.11, powerSGD_hook.py; seen on the GPU machine). The CPU-only machines (CI) run it.
        raise harness.Skip("torch's PowerSGD hook cannot run on CPU tensors where CUDA is available")
    params, loss, h, init, _ = train(ctx, None, hook=_powersgd, bucket_cap_mb=25)
    gparams, gloss, gh, _, _ = train(ctx, ctx.ref, hook=_powersgd, bucket_cap_mb=25)
    worst = max(float((x - y).abs().max()) for x, y in zip(params, gparams))
    close = all(torch.allclose(x, y, rtol=PSGD_RTOL, atol=PSGD_ATOL) for x, y in zip(params, gparams))
    assert all(not torch.equal(p, p0.cpu()) for p, p0 in zip(params, init)), "a parameter did not train"
    return {"hash": h, "hash_gloo": gh, "allclose_gloo": close, "max_diff_gloo": worst, "loss": loss,
            "loss_gloo": gloss}


def _ranks_sum(ctx, scale=1.0):
    return scale * ctx.size * (ctx.size + 1) / 2  # sum over ranks of scale * (rank + 1)


@HOOK_CASES.case("then-callback-waits-a-work")
def _(ctx):
    t = torch.full((5,), float(ctx.rank + 1), device=ctx.device)
    u = torch.full((5,), 10.0 * (ctx.rank + 1), device=ctx.device)

    def callback(fut):
        dist.all_reduce(u)  # issued and waited (Work.wait) inside the callback
        return fut.value()[0] + u
    out = dist.all_reduce(t, async_op=True).get_future().then(callback).wait()
    assert torch.equal(out.cpu(), torch.full((5,), _ranks_sum(ctx, 11.0))), out
    return {"sum": float(out[0])}


@HOOK_CASES.case("then-callback-waits-a-future")
def _(ctx):
    t = torch.full((7,), float(ctx.rank + 1), device=ctx.device)
    u = torch.full((7,), 100.0 * (ctx.rank + 1), device=ctx.device)

    def callback(fut):
        # As PowerSGD does: the inner collective's Future, waited inside the outer one's callback.
        return fut.value()[0] + dist.all_reduce(u, async_op=True).get_future().wait()[0]
    out = dist.all_reduce(t, async_op=True).get_future().then(callback).wait()
    assert torch.equal(out.cpu(), torch.full((7,), _ranks_sum(ctx, 101.0))), out
    return {"sum": float(out[0])}


@HOOK_CASES.case("then-callbacks-nested-three-deep")
def _(ctx):
    # Each level's callback issues the next level's collective and waits for its Future, whose own callback
    # does the same: three threads of one lane are blocked in callbacks at once, and the fourth completes.
    ts = [torch.full((3,), float(10 ** k) * (ctx.rank + 1), device=ctx.device) for k in range(4)]

    def level(k):
        def callback(fut):
            mine = fut.value()[0]
            if k + 1 == len(ts):
                return mine
            inner = dist.all_reduce(ts[k + 1], async_op=True).get_future().then(level(k + 1))
            return mine + inner.wait()
        return callback
    out = dist.all_reduce(ts[0], async_op=True).get_future().then(level(0)).wait()
    assert torch.equal(out.cpu(), torch.full((3,), _ranks_sum(ctx, 1111.0))), out
    # Eight in flight, each one's callback waiting on a collective queued behind all eight: every callback
    # blocks a thread of the lane, and the lane must still complete the rest. (The main thread issues every
    # collective, so the ranks issue them in the same order.)
    firsts = [dist.all_reduce(torch.full((2,), float(i), device=ctx.device), async_op=True) for i in range(8)]
    seconds = [dist.all_reduce(torch.full((2,), float(ctx.rank + 1), device=ctx.device), async_op=True)
               for _ in range(8)]
    futs = [w.get_future().then(lambda f, s=s: f.value()[0] + s.get_future().wait()[0])
            for w, s in zip(firsts, seconds)]
    for i, f in enumerate(futs):
        assert torch.equal(f.wait().cpu(), torch.full((2,), ctx.size * i + _ranks_sum(ctx))), (i, f.wait())
    return {"sum": float(out[0])}


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


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def hook_run(request):
    return harness.launch(__file__, request.param, env={"RINGGUARD_TEST_SET": "hooks"},
                          timeout=HOOK_LAUNCH_TIMEOUT)


@pytest.mark.parametrize("name", HOOK_CASES.names)
def test_hook_case(hook_run, name):
    harness.check_case(HOOK_CASES, hook_run, name)


def test_hook_launch(hook_run):
    harness.check_launch(hook_run)


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
    harness.run_worker(HOOK_CASES if os.environ.get("RINGGUARD_TEST_SET") == "hooks" else CASES, _init)
