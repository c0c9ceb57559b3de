"""The replica check (docs/REPLICAS.md) in DistributedDataParallel over the "ringguard" backend: one bit
flipped on one rank after step k (in a parameter, in Adam's exp_avg, in a buffer) is found at step k on
every rank; raise names the rank on every rank, repair (>= 3 replicas) ends bit-identical to a fault-free
run on every rank, warn continues, a persistent fault escalates, every=4 finds it at the next check, and a
clean run never reports. One torchrun launch per world size runs every case. With
RINGGUARD_TEST_DEVICE=cuda the model is on the one GPU every rank shares: the fingerprints are the
multi-tensor CRC kernel's (one host wait per check), the repairs CUDA broadcasts.
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
FAULT_STEP = 3
CASES = harness.Cases()


class Net(nn.Module):
    """A constant buffer, not BatchNorm: BatchNorm's running statistics are updated by each rank's own batch
    in the forward, so DDP's replicas differ in them after every step by design (docs/REPLICAS.md)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 16))
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)) * self.scale)


class NetBN(nn.Module):
    """BatchNorm's running statistics: updated from each rank's own batch, so they differ across replicas."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def _hash(tensors) -> str:
    h = hashlib.sha256()
    for _, t in tensors:
        h.update(t.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:24]


def train(ctx, steps=STEPS, fault=None, fault_spec=None, net=Net, **check):
    """`steps` Adam steps of DDP with a ReplicaCheck of `check` (none when `check` is empty); returns the
    hash of everything checked, the step a ReplicaMismatchError stopped at (or None) and its message."""
    torch.manual_seed(1234)
    ddp = DDP(net().to(ctx.device))
    opt = torch.optim.Adam(ddp.parameters(), lr=0.01)
    if fault_spec is not None:
        ringguard.set_fault(replica=fault_spec)  # RINGGUARD_REPLICA_FAULT's spelling, for checks made from now
    rc = ringguard.ReplicaCheck(ddp, opt, **check) if check or fault else None
    if fault_spec is not None:
        ringguard.set_fault(replica=None)  # back to the environment for the next case
    if fault:
        rc.inject(**fault)
    failed, message = None, ""
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 * ctx.rank + step)
        x, y = torch.randn(6, 12, generator=g).to(ctx.device), torch.randn(6, 3, generator=g).to(ctx.device)
        opt.zero_grad(set_to_none=True)
        F.mse_loss(ddp(x), y).backward()
        try:
            opt.step()
        except ringguard.ReplicaMismatchError as e:
            failed, message = step, str(e)
            break
    if rc is None:
        rc = ringguard.ReplicaCheck(ddp, opt)  # only to list the same tensors
    h = _hash(rc.tensors())
    out = {"hash": h, "failed": failed, "message": message, "counters": rc.counters(),
           "report": rc.last_report()}
    rc.remove()
    return out


def _same_everywhere(results, nproc):
    hashes = {r["hash"] for r in results} | {r["reference"] for r in results}
    assert len(hashes) == 1, f"state differs (across ranks or from the fault-free run): {results}"


def _odd(ctx):
    return ctx.size - 1


def _expected_names(ctx):
    if ctx.size >= 3:
        return f"rank {_odd(ctx)} of {ctx.size} replicas differs from the majority"
    return f"ranks 0, 1 of 2 replicas disagree and no majority names the odd one"


@CASES.case("clean-run-never-reports")
def _(ctx):
    r = train(ctx, steps=40, on_mismatch="raise")
    c = r["counters"]
    assert r["failed"] is None, r
    assert c["checks"] == 40 and c["mismatches"] == 0 and c["raised"] == 0, c
    assert c["bytes_fingerprinted"] > 0, c
    # CPU: the host CRC, no device wait; CUDA: one event wait per check (Adam's `step` stays on the CPU).
    assert c["host_waits"] == (0 if ctx.device == "cpu" else 40), c
    assert r["report"]["mismatch"] is False and r["report"]["step"] == 39, r["report"]
    return {}


@CASES.case("batchnorm-statistics-left-out-by-default")
def _(ctx):
    r = train(ctx, steps=6, net=NetBN, on_mismatch="raise")
    assert r["failed"] is None, r  # the default leaves the per-replica statistics out: no false alarm
    assert r["counters"]["checks"] == 6 and r["counters"]["mismatches"] == 0, r["counters"]
    r = train(ctx, steps=6, net=NetBN, on_mismatch="raise", include_buffers=True)
    assert r["failed"] == 0 and "running_mean" in r["message"], r  # every buffer: they differ at once
    return {}


@CASES.case("raise-names-the-rank-on-every-rank")
def _(ctx):
    r = train(ctx, on_mismatch="raise",
              fault=dict(rank=_odd(ctx), step=FAULT_STEP, tensor="param:module.fc1.weight", element=5, bit=22))
    assert r["failed"] == FAULT_STEP, r
    expected = f"replica check: step {FAULT_STEP}: {_expected_names(ctx)} in 1 tensor: 'param:module.fc1.weight'"
    assert r["message"].startswith(expected), r["message"]
    assert r["counters"]["injected"] == (1 if ctx.rank == _odd(ctx) else 0), r["counters"]
    assert r["report"]["odd_ranks"] == ([_odd(ctx)] if ctx.size >= 3 else [0, 1]), r["report"]
    return {}


@CASES.case("warn-continues")
def _(ctx):
    r = train(ctx, on_mismatch="warn",
              fault=dict(rank=0, step=FAULT_STEP, tensor="param:module.fc2.bias", element=1, bit=20))
    c = r["counters"]
    assert r["failed"] is None, r
    # DDP keeps averaging the same gradients into diverged replicas: every later check warns too.
    assert c["warnings"] == STEPS - FAULT_STEP and c["raised"] == 0, c
    assert r["report"]["tensors"] == ["param:module.fc2.bias"] and r["report"]["action"] == "warn", r["report"]
    return {}


def _repair_case(tensor, bit):
    def case(ctx):
        fault = dict(rank=_odd(ctx), step=FAULT_STEP, tensor=tensor, element=2, bit=bit)
        if ctx.size < 3:
            # Two replicas: found, both named, no majority to repair from: raise on both.
            r = train(ctx, on_mismatch="repair", fault=fault)
            assert r["failed"] == FAULT_STEP, r
            assert f"in 1 tensor: '{tensor}'" in r["message"], r["message"]
            assert "no majority to repair from (2 replicas" in r["message"], r["message"]
            return {"hash": "", "reference": ""}
        reference = train(ctx)["hash"]
        r = train(ctx, on_mismatch="repair", fault=fault)
        c = r["counters"]
        assert r["failed"] is None, r
        assert c["mismatches"] == 1 and c["repairs"] == 1 and c["repaired_tensors"] == 1, c
        assert c["checks"] == STEPS + 1, c  # the check after the repair
        return {"hash": r["hash"], "reference": reference}
    return case


CASES.add("repair-parameter-bit-identical", _repair_case("param:module.fc1.weight", 30), _same_everywhere)
CASES.add("repair-adam-exp-avg", _repair_case("optim:module.fc1.weight.exp_avg", 12), _same_everywhere)
CASES.add("repair-buffer", _repair_case("buffer:module.scale", 25), _same_everywhere)


@CASES.case("persistent-fault-escalates")
def _(ctx):
    fault = dict(rank=_odd(ctx), step=FAULT_STEP, tensor="param:module.fc2.weight", element=0, bit=7, repeat=1000)
    r = train(ctx, on_mismatch="repair", fault=fault)
    c = r["counters"]
    if ctx.size < 3:
        assert r["failed"] == FAULT_STEP, r
        return {}
    assert r["failed"] == FAULT_STEP + 1, r
    assert c["repairs"] == 1 and c["escalations"] == 1, c
    assert (f"rank {_odd(ctx)} mismatches again after its repair at step {FAULT_STEP}: a persistently faulty "
            "device (on_mismatch=repair, escalated to raise)") in r["message"], r["message"]
    return {}


@CASES.case("every-4-catches-at-the-next-check")
def _(ctx):
    r = train(ctx, every=4, on_mismatch="raise",
              fault_spec="rank=0,step=5,tensor=param:module.fc1.bias,element=0,bit=22")
    assert r["failed"] == 7, r
    assert r["counters"]["checks"] == 2, r["counters"]  # after steps 3 and 7
    assert r["message"].startswith("replica check: step 7: "), r["message"]
    return {}


@CASES.case("bad-arguments")
def _(ctx):
    ddp = DDP(Net().to(ctx.device))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="on_mismatch='fix': expected one of raise, repair, warn"):
        ringguard.ReplicaCheck(ddp, opt, on_mismatch="fix")
    with pytest.raises(ValueError, match="every=0"):
        ringguard.ReplicaCheck(ddp, opt, every=0)
    with pytest.raises(ValueError, match="include_buffers='some'"):
        ringguard.ReplicaCheck(ddp, opt, include_buffers="some")
    with pytest.raises(NotImplementedError, match="sync=False"):
        ringguard.ReplicaCheck(ddp, opt, sync=False)
    rc = ringguard.ReplicaCheck(ddp, opt)
    with pytest.raises(ValueError, match="is not a rank of the replica group"):
        rc.inject(rank=ctx.size, step=0, tensor="#0")
    rc.inject(rank=0, step=0, tensor="param:nope")
    opt.zero_grad()
    F.mse_loss(ddp(torch.ones(4, 12, device=ctx.device)), torch.zeros(4, 3, device=ctx.device)).backward()
    # Looked up on every rank: the same error everywhere, nobody left waiting in the all-gather.
    with pytest.raises(ValueError, match="no tensor named 'param:nope'"):
        opt.step()
    rc.remove()
    return {}


@CASES.case("pure-fsdp-is-refused")
def _(ctx):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    model = Net().to(ctx.device)
    fully_shard(model, mesh=DeviceMesh.from_group(dist.group.WORLD, torch.device(ctx.device).type))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="parameter 'fc1.weight' is a DTensor .*pure FSDP keeps one copy of each "
                                         "shard, so there is no replica"):
        ringguard.ReplicaCheck(model, opt)
    return {}


def _init():
    if os.environ.get("RINGGUARD_TEST_DEVICE") == "cuda":
        torch.cuda.set_device(0)  # every rank on the one GPU: the staged transport
    dist.init_process_group("ringguard", timeout=timedelta(seconds=120))


@pytest.fixture(scope="module", params=[2, 3, 4], ids=lambda n: f"np{n}")
def run(request):
    return harness.launch(__file__, request.param)


@pytest.mark.parametrize("name", CASES.names)
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


if __name__ == "__main__":
    harness.run_worker(CASES, _init)
