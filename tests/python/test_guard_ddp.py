"""The guard inside DistributedDataParallel over the "ringguard" backend: one rank's non-finite forward makes
every rank replay (or skip) the same step, through the guard's step agreement (one MAX allreduce of an
int64 per step attempt over the default ringguard group), so the parameters stay bit-identical across
ranks and equal a fault-free run. With RINGGUARD_TEST_DEVICE=cuda the model, data and gradients are CUDA
tensors on the one GPU every rank shares (DDP's allreduces over the peer windows by default, the guard's snapshots
and scans on the device).
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
import ringguard

STEPS = 8
CASES = harness.Cases()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _hash(params) -> str:
    h = hashlib.sha256()
    for p in params:
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:24]


def train(ctx, guard=None, skip=()):
    """STEPS SGD steps of DDP; with a guard, each step's forward + backward is one guarded step and the
    optimizer runs only when the step was not skipped. `skip`: steps a fault-free reference leaves out."""
    torch.manual_seed(1234)
    model = Net().to(ctx.device)
    if guard is not None:
        model.fc1.forward = guard(model.fc1.forward, name="fc1")
        model.fc2.forward = guard(model.fc2.forward, name="fc2")
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    resolutions = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * ctx.rank + step)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        x, y = x.to(ctx.device), y.to(ctx.device)

        def region():
            opt.zero_grad(set_to_none=True)  # a replayed step recomputes the gradients from scratch
            F.mse_loss(ddp(x), y).backward()

        if guard is None:
            if step in skip:
                continue
            region()
            opt.step()
            continue
        _, report = guard.step(region)
        resolutions.append(report["resolution"])
        if report["resolution"] != "skipped":
            opt.step()
    return _hash(model.parameters()), resolutions


def _same_everywhere(results, nproc):
    hashes = {r["hash"] for r in results} | {r["reference"] for r in results}
    assert len(hashes) == 1, f"parameters differ (across ranks or from the fault-free run): {results}"


@CASES.case("one-rank-fault-every-rank-replays", check=_same_everywhere)
def _(ctx):
    reference, _ = train(ctx)
    g = ringguard.guard(mode="deferred", group=dist.group.WORLD)
    if ctx.rank == 0:
        g.inject(op="fc2", call=3, value="nan", element=5)
    h, resolutions = train(ctx, g)
    c = g.counters()
    assert resolutions == ["clean"] * 3 + ["replayed"] + ["clean"] * (STEPS - 4), resolutions
    assert c["replays"] == 1 and c["rollbacks"] == 1, c
    assert c["detections"] == (1 if ctx.rank == 0 else 0), c
    return {"hash": h, "reference": reference}


@CASES.case("one-rank-fault-every-rank-skips", check=_same_everywhere)
def _(ctx):
    reference, _ = train(ctx, skip=(5,))
    g = ringguard.guard(mode="deferred", policy="skip_step", group=dist.group.WORLD)
    if ctx.rank == ctx.size - 1:
        g.inject(op="fc1", call=5, value="+inf")
    h, resolutions = train(ctx, g)
    assert resolutions[5] == "skipped" and resolutions.count("skipped") == 1, resolutions
    assert g.counters()["skipped_steps"] == 1
    return {"hash": h, "reference": reference}


def _init():
    if os.environ.get("RINGGUARD_TEST_DEVICE") == "cuda":
        torch.cuda.set_device(0)  # every rank on the one GPU: the peer windows (staged beneath them)
    dist.init_process_group("ringguard", timeout=timedelta(seconds=120))


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
