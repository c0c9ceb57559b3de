"""DistributedDataParallel's options over the "ringguard" backend, each against the same DDP over gloo.

``static_graph=True``, ``gradient_as_bucket_view=True``, ``find_unused_parameters=True`` (with a branch
some ranks skip on some steps and a layer no rank uses), ``no_sync`` (gradients accumulated over two
micro-batches, then one synchronised step), the fp16 compression hook
(``default_hooks.fp16_compress_hook``: every bucket cast to float16 and divided by the world size, an
all_reduce of float16, cast back), and ZeroRedundancyOptimizer over a channels_last CNN (its parameter
broadcasts are of channels_last tensors). Same model, seed and per-rank data, 12 steps, 4 KB buckets
(several per step), at 2 ranks on CPU.

Tolerance: none, the parameters must be bit-identical to DDP over gloo. At 2 ranks each element of a
reduced bucket is the sum of exactly two values, and a + b is the same IEEE result in either order, so no
summation order can differ between the backends; DDP divides by the world size (2, exact) before the
all_reduce in both. The fp16 hook's all_reduce is of float16: both ringguard and gloo add two float16
values in float32 and round once to float16 (gloo's float16 operator+ converts to float and back), so it
is exact as well. Every case also checks that the parameters agree across ranks and that training moved
them (and, with unused parameters, that the never-used layer did not move).
"""

import hashlib
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import harness

STEPS = 12
CASES = harness.Cases()


class Net(nn.Module):
    def __init__(self, branch=False):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 48)
        self.fc3 = nn.Linear(48, 4)
        if branch:
            self.side = nn.Linear(64, 64)  # used on some steps, by some ranks
            self.never = nn.Linear(8, 8)   # never used

    def forward(self, x, use_side=False):
        h = F.relu(self.fc1(x))
        if use_side:
            h = h + F.relu(self.side(h))
        return self.fc3(F.relu(self.fc2(h)))


def _batch(ctx, step, micro=0):
    g = torch.Generator().manual_seed(1000 * ctx.rank + 10 * step + micro)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def train(ctx, group, branch=False, accumulate=1, hook=None, no_sync_from=0, **ddp_kwargs):
    """STEPS SGD steps of DDP over `group`; returns (params, init, names, hash)."""
    torch.manual_seed(4321)
    model = Net(branch)
    init = [p.detach().clone() for p in model.parameters()]
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.004, **ddp_kwargs)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        opt.zero_grad()
        micros = accumulate if step >= no_sync_from else 1
        for micro in range(micros - 1):  # no_sync: gradients accumulate locally
            with ddp.no_sync():
                x, y = _batch(ctx, step, micro)
                F.mse_loss(ddp(x), y).backward()
        x, y = _batch(ctx, step, micros - 1)
        out = ddp(x, use_side=(step + ctx.rank) % 2 == 0) if branch else ddp(x)
        F.mse_loss(out, y).backward()
        opt.step()
    params = [p.detach().clone() for p in model.parameters()]
    names = [n for n, _ in model.named_parameters()]
    h = hashlib.sha256(b"".join(p.numpy().tobytes() for p in params)).hexdigest()[:24]
    del ddp
    return params, init, names, h


def _check(results, nproc):
    assert len({r["hash"] for r in results}) == 1, f"parameters differ across ranks: {results}"
    for rank, r in enumerate(results):
        assert r["identical_to_gloo"], f"rank {rank}: not bit-identical to DDP over gloo: {r}"


def _versus_gloo(ctx, **kwargs):
    params, init, names, h = train(ctx, None, **kwargs)  # None: the default group, "ringguard"
    gparams, _, _, gh = train(ctx, ctx.ref, **kwargs)
    worst = max(float((a - b).abs().max()) for a, b in zip(params, gparams))
    for name, p, p0 in zip(names, params, init):
        if name.startswith("never."):
            assert torch.equal(p, p0), f"{name} changed although it never got a gradient"
        else:
            assert not torch.equal(p, p0), f"{name} did not train"
    same = all(torch.equal(a, b) for a, b in zip(params, gparams))
    return {"hash": h, "hash_gloo": gh, "identical_to_gloo": same, "max_diff_gloo": worst}


@CASES.case("static_graph", check=_check)
def _(ctx):
    return _versus_gloo(ctx, static_graph=True)


@CASES.case("gradient_as_bucket_view", check=_check)
def _(ctx):
    return _versus_gloo(ctx, gradient_as_bucket_view=True)


@CASES.case("find_unused_parameters", check=_check)
def _(ctx):
    return _versus_gloo(ctx, branch=True, find_unused_parameters=True)


@CASES.case("no_sync-accumulate-3", check=_check)
def _(ctx):
    return _versus_gloo(ctx, accumulate=3)


@CASES.case("static_graph-gradient_as_bucket_view", check=_check)
def _(ctx):
    return _versus_gloo(ctx, static_graph=True, gradient_as_bucket_view=True)


# static_graph with no_sync: the first step synchronises (torch 2.11's reducer refuses a no_sync step before
# the graph was recorded, over gloo too: "expect_autograd_hooks_ INTERNAL ASSERT FAILED", reducer.cpp:1705),
# every later one accumulates two micro-batches first.
@CASES.case("static_graph-no_sync-after-the-first-step", check=_check)
def _(ctx):
    return _versus_gloo(ctx, accumulate=3, no_sync_from=1, static_graph=True)


@CASES.case("fp16_compress_hook", check=_check)
def _(ctx):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    result = _versus_gloo(ctx, hook=default_hooks.fp16_compress_hook)
    # The hook really compressed: without it the parameters differ (float16 rounding of the gradients).
    plain, _, _, _ = train(ctx, None)
    mine, _, _, _ = train(ctx, None, hook=default_hooks.fp16_compress_hook)
    assert not all(torch.equal(a, b) for a, b in zip(plain, mine)), "the fp16 hook changed nothing"
    return result


def _zero_channels_last(ctx, group):
    """A channels_last CNN under DDP with ZeroRedundancyOptimizer (Adam): each rank steps its shard and
    broadcasts its parameters, channels_last conv weights included (refused as "not contiguous" before the
    backend took tensors of any strides)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    torch.manual_seed(4321)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.Flatten(),
                          nn.Linear(4 * 4 * 4, 3)).to(memory_format=torch.channels_last)
    init = [p.detach().clone() for p in model.parameters()]
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.004)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, process_group=group,
                                  lr=0.01)
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * ctx.rank + step)
        x = torch.randn(4, 3, 8, 8, generator=g).contiguous(memory_format=torch.channels_last)
        opt.zero_grad()
        F.mse_loss(ddp(x), torch.randn(4, 3, generator=g)).backward()
        opt.step()
    params = [p.detach().contiguous() for p in model.parameters()]
    assert all(not torch.equal(p, p0) for p, p0 in zip(params, init)), "a parameter did not train"
    h = hashlib.sha256(b"".join(p.numpy().tobytes() for p in params)).hexdigest()[:24]
    del ddp
    return params, h


@CASES.case("zero_redundancy_optimizer-channels_last", check=_check)
def _(ctx):
    params, h = _zero_channels_last(ctx, None)
    gparams, gh = _zero_channels_last(ctx, ctx.ref)
    same = all(torch.equal(a, b) for a, b in zip(params, gparams))
    worst = max(float((a - b).abs().max()) for a, b in zip(params, gparams))
    return {"hash": h, "hash_gloo": gh, "identical_to_gloo": same, "max_diff_gloo": worst}


def _init():
    dist.init_process_group("ringguard", timeout=timedelta(seconds=120))


# --- pytest side ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=[2], ids=lambda n: f"np{n}")
def run(request):
    return harness.launch(__file__, request.param)


@pytest.mark.parametrize("name", CASES.names)
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


if __name__ == "__main__":
    harness.run_worker(CASES, _init)
