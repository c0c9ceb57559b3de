"""The replica check (docs/REPLICAS.md) in DistributedDataParallel over the "ringguard" backend: one bit
flipped on one rank after step k (in a parameter, in Adam's exp_avg, in a buffer) is found at step k on
every rank; raise names the rank on every rank, repair (>= 3 replicas) ends bit-identical to a fault-free
run on every rank, warn continues, a persistent fault escalates, every=4 finds it at the next check, and a
clean run never reports. One torchrun launch per world size runs every case. With
RINGGUARD_TEST_DEVICE=cuda the model is on the one GPU every rank shares: the fingerprints are the
multi-tensor CRC kernel's (one host wait per check), the repairs CUDA broadcasts.
"""

import collections
import copy
import hashlib
import os
import tempfile
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
    expected = (f"replica check: step {FAULT_STEP}: {_expected_names(ctx)} in 1 tensor: 'param:module.fc1.weight'; "
                "first differing element: 'param:module.fc1.weight'[5] (on_mismatch=raise)")
    assert r["message"] == expected, r["message"]
    assert r["report"]["first_elements"] == [5], r["report"]
    assert r["counters"]["injected"] == (1 if ctx.rank == _odd(ctx) else 0), r["counters"]
    assert r["report"]["odd_ranks"] == ([_odd(ctx)] if ctx.size >= 3 else [0, 1]), r["report"]
    return {}


@CASES.case("a-module-replaced-after-the-check-was-made-is-checked")
def _(ctx):
    """The check reads the parameters where they are registered now (ringguard._C.ReplicaListing): a layer
    swapped in after the check was made, different on one rank, is found and named."""
    torch.manual_seed(1)
    model = Net().to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rc = ringguard.ReplicaCheck(model, opt, on_mismatch="raise")
    rc.check_now()
    torch.manual_seed(2 + int(ctx.rank == _odd(ctx)))
    model.fc2 = nn.Linear(16, 3).to(ctx.device)
    with pytest.raises(ringguard.ReplicaMismatchError) as e:
        rc.check_now()
    assert _expected_names(ctx) in str(e.value) and "'param:fc2.weight'" in str(e.value), str(e.value)
    assert [n for n, _ in rc.tensors()][:4] == ["param:fc1.weight", "param:fc1.bias", "param:fc2.weight",
                                                "param:fc2.bias"]
    rc.remove()
    return {}


@CASES.case("each-check-is-a-named-range-in-a-profile")
def _(ctx):
    """The step hook's check is the range "ringguard::replica_check" (recorded in C++), once per step."""
    model = DDP(Net().to(ctx.device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    check = ringguard.ReplicaCheck(model, opt, on_mismatch="raise")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _steps(ctx, model, opt, range(3))
    check.remove()
    ranges = [e for e in prof.key_averages() if e.key == "ringguard::replica_check"]
    assert len(ranges) == 1 and ranges[0].count == 3, [(e.key, e.count) for e in prof.key_averages()][:40]
    return {}


@CASES.case("sync-true-gathers-host-words-on-the-host-where-the-group-can")
def _(ctx):
    # The message is host words: a group with a CPU backend gathers it as CPU tensors (on CUDA no copy to the
    # device and back, no device collective); a group of a CUDA backend alone gathers on the device.
    model = DDP(Net().to(ctx.device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    check = ringguard.ReplicaCheck(model, opt)
    assert check.gathers_on_host(), "the default group of 'ringguard' has a CPU backend"
    assert check.gathers_directly(), "the default group's ringguard CPU communicator gathers the words itself"
    check.remove()
    gloo = ringguard.ReplicaCheck(model, opt, group=ctx.ref)
    assert gloo.gathers_on_host(), "a gloo group gathers on the host"
    assert not gloo.gathers_directly(), "a gloo group gathers through dist.all_gather_into_tensor"
    words = torch.arange(5, dtype=torch.int32) + 100 * ctx.rank
    got = gloo._all_gather(words)
    assert got.device.type == "cpu" and got.tolist() == [100 * r + i for r in range(ctx.size) for i in range(5)], got
    gloo.remove()
    if ctx.device == "cuda":
        cuda_only = dist.new_group(backend="cuda:ringguard")
        dev = ringguard.ReplicaCheck(model, opt, group=cuda_only)
        assert not dev.gathers_on_host(), "a group of a CUDA backend alone gathers on the device"
        got = dev._all_gather(words)
        assert got.tolist() == [100 * r + i for r in range(ctx.size) for i in range(5)], got
        dev.remove()
    return {}


@CASES.case("a-check-on-a-destroyed-group-raises-naming-it")
def _(ctx):
    # The words are gathered by the group's communicator directly: once the group is destroyed (its backend
    # shut down, though the check still holds it) a check raises on every rank, never waits or crashes.
    group = dist.new_group(backend="ringguard")
    model = DDP(Net().to(ctx.device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    check = ringguard.ReplicaCheck(model, opt, group=group)
    assert check.gathers_directly()
    check.check_now()
    assert check.counters()["checks"] == 1 and check.last_report()["mismatch"] is False
    dist.destroy_process_group(group)
    with pytest.raises(RuntimeError) as e:
        check.check_now()
    assert "replica check: the all-gather failed" in str(e.value) and "after shutdown()" in str(e.value), str(e.value)
    check.remove()
    if ctx.device == "cuda":
        # sync=False gathers the device message with the group's CUDA communicator directly: the same error.
        group = dist.new_group(backend="ringguard")
        deferred = ringguard.ReplicaCheck(model, opt, group=group, sync=False)
        _steps(ctx, model, opt, range(2))
        deferred.flush()
        assert deferred.counters()["checks"] == 2 and deferred.last_report()["mismatch"] is False
        dist.destroy_process_group(group)
        with pytest.raises(RuntimeError) as e:
            _steps(ctx, model, opt, range(1))
        assert "the device all-gather failed" in str(e.value) and "after shutdown()" in str(e.value), str(e.value)
        deferred.remove()
    return {}


@CASES.case("a-module-of-buffers-alone-is-checked-on-its-device")
def _(ctx):
    # No parameter says where the state lives: the buffers do (on the GPU, the device backend; a check that
    # took its device from the parameters alone refused them as device memory it had no backend for).
    mod = torch.nn.Module()
    mod.register_buffer("t0", torch.arange(4096, dtype=torch.float32, device=ctx.device))
    if ctx.rank == _odd(ctx):
        mod.t0[7] += 1  # this rank's replica differs at element 7
    opt = torch.optim.SGD([torch.zeros(1, device=ctx.device, requires_grad=True)], lr=0.1)
    check = ringguard.ReplicaCheck(mod, opt, include_optimizer_state=False, include_buffers=True)
    check.remove()
    with pytest.raises(ringguard.ReplicaMismatchError, match=r"replica check: step 0: .* in 1 tensor: 'buffer:t0'; "
                                           r"first differing element: 'buffer:t0'\[7\]"):
        check.check_now()
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


def _batch(ctx, step):
    g = torch.Generator().manual_seed(1000 * ctx.rank + step)
    return torch.randn(6, 12, generator=g).to(ctx.device), torch.randn(6, 3, generator=g).to(ctx.device)


def _steps(ctx, ddp, opt, steps):
    for step in steps:
        x, y = _batch(ctx, step)
        opt.zero_grad(set_to_none=True)
        F.mse_loss(ddp(x), y).backward()
        opt.step()


@CASES.case("sync-false-reports-one-check-late")
def _(ctx):
    clean = train(ctx, steps=12, on_mismatch="raise", sync=False)
    assert clean["failed"] is None and clean["counters"]["checks"] == 11, clean  # the 12th is still pending
    # No host wait of the checker: on CPU the words are host memory; on CUDA the fingerprints, the message and
    # its all-gather stay on the stream, and the next check queries an event (deferred_waits counts the
    # times it was not yet done and had to wait: reported, not asserted, on CUDA).
    assert clean["counters"]["host_waits"] == 0, clean
    if ctx.device == "cpu":
        assert clean["counters"]["deferred_waits"] == 0, clean
    r = train(ctx, on_mismatch="raise", sync=False,
              fault=dict(rank=_odd(ctx), step=FAULT_STEP, tensor="param:module.fc1.weight", element=5, bit=22))
    assert r["failed"] == FAULT_STEP + 1, r  # found at the check after the next step
    assert r["message"].startswith(
        f"replica check: step {FAULT_STEP}: {_expected_names(ctx)} in 1 tensor: 'param:module.fc1.weight' "
        f"(sync=False: read at the check after step {FAULT_STEP + 1}); first differing element: "
        "'param:module.fc1.weight'[5]"), r["message"]
    assert r["report"]["step"] == FAULT_STEP and r["report"]["read_at_step"] == FAULT_STEP + 1, r["report"]
    return {"deferred_waits": clean["counters"]["deferred_waits"]}


def _same_on_every_rank(results, nproc):
    assert len({r.get("hash") for r in results}) == 1, results


@CASES.case("sync-false-repair-continues-as-a-fault-free-run-from-the-repaired-state", _same_on_every_rank)
def _(ctx):
    """A flip after step 3 on the odd rank; sync=False reads the verdict at the check after step 4, so step
    4's allreduce already averaged the odd replica's gradient (computed with the flipped weight) into every
    replica. Asserted: (a) the repair is made at the check after step 4 and leaves every rank with the same
    state; (b) from there on the run is bit-identical to a fault-free run started from that repaired state
    (a fresh model and Adam loaded with it, trained steps 5..7 without a check); (c) the final state differs
    from the fault-free run from step 0: the polluted gradient of step 4 cannot be undone."""
    if ctx.size < 3:
        raise harness.Skip("a repair needs a majority (>= 3 replicas)")
    reference = train(ctx)["hash"]
    torch.manual_seed(1234)
    ddp = DDP(Net().to(ctx.device))
    opt = torch.optim.Adam(ddp.parameters(), lr=0.01)
    rc = ringguard.ReplicaCheck(ddp, opt, on_mismatch="repair", sync=False)
    rc.inject(rank=_odd(ctx), step=FAULT_STEP, tensor="param:module.fc1.weight", element=2, bit=30)
    _steps(ctx, ddp, opt, range(FAULT_STEP + 2))
    c = rc.counters()
    assert c["repairs"] == 1 and rc.last_report()["read_at_step"] == FAULT_STEP + 1, (c, rc.last_report())
    repaired_model = copy.deepcopy(ddp.module.state_dict())
    repaired_opt = copy.deepcopy(opt.state_dict())
    _steps(ctx, ddp, opt, range(FAULT_STEP + 2, STEPS))
    rc.flush()
    assert rc.counters()["repairs"] == 1 and rc.counters()["raised"] == 0, rc.counters()
    final = _hash(rc.tensors())
    rc.remove()

    model = Net().to(ctx.device)
    model.load_state_dict(repaired_model)
    ddp2 = DDP(model)
    opt2 = torch.optim.Adam(ddp2.parameters(), lr=0.01)
    opt2.load_state_dict(repaired_opt)
    _steps(ctx, ddp2, opt2, range(FAULT_STEP + 2, STEPS))
    lister = ringguard.ReplicaCheck(ddp2, opt2)
    continued = _hash(lister.tensors())
    lister.remove()
    assert final == continued, (final, continued)
    assert final != reference, "the odd replica's gradient of the step before the repair should remain"
    return {"hash": final}


def _gated_only(ctx):
    if ctx.device != "cuda":
        raise harness.Skip("the gate holds a CUDA stream (RINGGUARD_TEST_DEVICE=cuda)")


@CASES.case("gate-is-refused-where-it-cannot-hold")
def _(ctx):
    model = DDP(Net().to(ctx.device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="gate=True is sync=True's way to the verdict"):
        ringguard.ReplicaCheck(model, opt, gate=True, sync=False)
    with pytest.raises(ValueError, match=r"gate=1: expected True or False"):
        ringguard.ReplicaCheck(model, opt, gate=1)
    if ctx.device == "cpu":
        with pytest.raises(ValueError, match="gate=True needs the model's tensors on a GPU"):
            ringguard.ReplicaCheck(model, opt, gate=True)
    plain = ringguard.ReplicaCheck(model, opt)
    assert not plain.gated()
    plain.remove()
    return {}


@CASES.case("gate-clean-run-waits-for-nothing-and-repair-leaves-no-trace", _same_everywhere)
def _(ctx):
    """gate=True (docs/REPLICAS.md, "The gate"): a clean run's checks are all gated and none waits on the host
    (host_waits 0: the fingerprints are gathered on the device and the gate passes at once); a flipped bit is
    repaired by the verdict thread while the gate holds the stream, before the next step's forward, so the run
    ends bit-identical to the fault-free run, as with the host's wait."""
    _gated_only(ctx)
    clean = train(ctx, steps=20, on_mismatch="raise", gate=True)
    c = clean["counters"]
    assert clean["failed"] is None, clean
    assert c["checks"] == 20 and c["gated_checks"] == 20 and c["mismatches"] == 0 and c["host_waits"] == 0, c
    assert clean["report"]["step"] == 19 and clean["report"]["mismatch"] is False, clean["report"]
    if ctx.size < 3:
        return {"hash": "", "reference": ""}
    reference = train(ctx)["hash"]
    r = train(ctx, on_mismatch="repair", gate=True,
              fault=dict(rank=_odd(ctx), step=FAULT_STEP, tensor="optim:module.fc1.weight.exp_avg", element=2,
                         bit=12))
    c = r["counters"]
    assert r["failed"] is None, r
    assert c["mismatches"] == 1 and c["repairs"] == 1 and c["repaired_tensors"] == 1, c
    assert c["checks"] == STEPS + 1 and c["gated_checks"] == STEPS, c
    return {"hash": r["hash"], "reference": reference}


@CASES.case("gate-raise-aborts-the-group-on-every-rank-naming-the-rank")
def _(ctx):
    """gate=True, on_mismatch=raise: the verdict thread aborts the training group before it opens the gate,
    so the collectives queued behind it fail (their message is the verdict) and no gradient of the odd
    replica leaves it; the next check or flush() raises ReplicaMismatchError on every rank. A group of its
    own: the abort ends it."""
    _gated_only(ctx)
    group = dist.new_group(backend="ringguard")
    torch.manual_seed(1234)
    ddp = DDP(Net().to(ctx.device), process_group=group)
    opt = torch.optim.Adam(ddp.parameters(), lr=0.01)
    rc = ringguard.ReplicaCheck(ddp, opt, group=group, on_mismatch="raise", gate=True)
    assert rc.gated()
    rc.inject(rank=_odd(ctx), step=FAULT_STEP, tensor="param:module.fc1.weight", element=5, bit=22)
    expected = (f"replica check: step {FAULT_STEP}: {_expected_names(ctx)} in 1 tensor: 'param:module.fc1.weight'; "
                "first differing element: 'param:module.fc1.weight'[5] (on_mismatch=raise)")
    failed, message = None, ""
    for step in range(STEPS):
        try:
            x, y = _batch(ctx, step)
            opt.zero_grad(set_to_none=True)
            F.mse_loss(ddp(x), y).backward()
            opt.step()
            torch.cuda.synchronize()  # a host wait on the gated stream: waits for the verdict, not a deadline
        except Exception as e:  # noqa: BLE001 - an aborted collective or the next check's ReplicaMismatchError
            failed, message = step, str(e)
            break
    assert failed is not None and FAULT_STEP < failed <= FAULT_STEP + 2, (failed, message)
    assert expected in message, message
    with pytest.raises(ringguard.ReplicaMismatchError) as e:
        rc.flush()
    assert str(e.value) == expected, str(e.value)
    report = rc.last_report()
    assert report["step"] == FAULT_STEP and report["action"] == "raise", report
    assert rc.counters()["raised"] == 1, rc.counters()
    rc.remove()
    return {}


@CASES.case("timeline-and-run-summary")
def _(ctx):
    """Every check is a "replica check" span on the "replicas" track and is counted in the run summary;
    a mismatch and what was done about it are instants and counts too (RINGGUARD_TIMELINE is set for this
    module's launches)."""
    before = ringguard.summary()["events"]
    seen = len(ringguard.timeline()["traceEvents"])
    policy = "repair" if ctx.size >= 3 else "raise"
    r = train(ctx, steps=5, on_mismatch=policy,
              fault=dict(rank=_odd(ctx), step=2, tensor="param:module.fc2.bias", element=0, bit=25))
    after = ringguard.summary()["events"]
    delta = {k: after[k] - before.get(k, 0) for k in after if k.startswith("replica_")}
    events = [e for e in ringguard.timeline()["traceEvents"][seen:] if e.get("cat") == "replica"]
    names = [e["name"] for e in events]
    if ctx.size >= 3:
        assert delta == {"replica_checks": 6, "replica_mismatches": 1, "replica_repairs": 1,
                         "replica_warnings": 0, "replica_raised": 0, "replica_escalations": 0}, delta
        assert names.count("replica check") == 6 and names.count("replica repair") == 1, names
    else:
        assert r["failed"] == 2, r
        assert delta == {"replica_checks": 3, "replica_mismatches": 1, "replica_repairs": 0,
                         "replica_warnings": 0, "replica_raised": 1, "replica_escalations": 0}, delta
        assert names.count("replica check") == 3 and names.count("replica raise") == 1, names
    mismatch = next(e for e in events if e["name"] == "replica mismatch")
    assert mismatch["args"]["step"] == 2 and "'param:module.fc2.bias'[0]" in mismatch["args"]["detail"], mismatch
    checks = [e for e in events if e["name"] == "replica check"]
    assert checks[0]["ph"] == "X" and checks[0]["args"]["bytes"] > 0, checks[0]
    return {}


def _outlier_run(ctx, steps, fault=None, **kw):
    """`steps` Adam steps of DDP with GradientOutliers(**kw) and a ReplicaCheck (raise) beside it; the hash of
    the state before and after every step."""
    torch.manual_seed(1234)
    ddp = DDP(Net().to(ctx.device))
    opt = torch.optim.Adam(ddp.parameters(), lr=0.01)
    go = ringguard.GradientOutliers(ddp, opt, **kw)
    rc = ringguard.ReplicaCheck(ddp, opt, on_mismatch="raise")
    if fault:
        go.inject(**fault)
    hashes = [_hash(rc.tensors())]
    for step in range(steps):
        _steps(ctx, ddp, opt, [step])
        hashes.append(_hash(rc.tensors()))
    out = {"counters": go.counters(), "report": go.last_report(), "hashes": hashes,
           "replica": rc.counters()}
    go.remove()
    rc.remove()
    return out


@CASES.case("gradient-outliers-clean-run-never-reports")
def _(ctx):
    r = _outlier_run(ctx, 40, factor=8.0)
    assert r["counters"] == {"steps": 40, "buckets": 40, "outliers": 0, "skipped_steps": 0, "injected": 0}, r
    assert r["report"] is None, r
    return {}


@CASES.case("gradient-outliers-scaled-rank-is-reported-and-the-step-skipped")
def _(ctx):
    before = ringguard.summary()["events"]["gradient_outliers"]
    fault = dict(rank=_odd(ctx), step=FAULT_STEP, scale=1000.0)
    r = _outlier_run(ctx, STEPS, fault=fault, factor=8.0, on_outlier="warn")
    odd = [_odd(ctx)] if ctx.size >= 3 else [0, 1]
    assert r["counters"]["outliers"] == 1 and r["counters"]["skipped_steps"] == 0, r["counters"]
    assert r["report"]["step"] == FAULT_STEP and r["report"]["buckets"][0]["ranks"] == odd, r["report"]
    assert r["report"]["message"].startswith(f"gradient outliers: step {FAULT_STEP}, bucket 0: rank {odd[0]} at "), r
    assert ringguard.summary()["events"]["gradient_outliers"] == before + 1
    # warn lets the polluted step through (averaged into every replica alike: the replica check stays clean).
    assert r["replica"]["mismatches"] == 0, r["replica"]
    s = _outlier_run(ctx, STEPS, fault=fault, factor=8.0, on_outlier="skip")
    assert s["counters"]["skipped_steps"] == 1, s["counters"]
    h = s["hashes"]
    assert h[FAULT_STEP + 1] == h[FAULT_STEP], "the skipped step moved the state"
    assert len(set(h)) == STEPS, "every other step moves the state"
    assert s["replica"]["mismatches"] == 0, s["replica"]  # skipped alike on every rank
    with pytest.raises(ringguard.GradientOutlierError, match=f"step {FAULT_STEP}, bucket 0"):
        _outlier_run(ctx, STEPS, fault=fault, factor=8.0, on_outlier="raise")
    return {"final": h[-1]}


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
    with pytest.raises(ValueError, match="sync='no': expected True or False"):
        ringguard.ReplicaCheck(ddp, opt, sync="no")
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


def hsdp_train(ctx, mesh, on_mismatch, fault=None):
    """`STEPS` Adam steps of Net under fully_shard on `mesh` (replicate x shard) with a ReplicaCheck of
    `on_mismatch` (and `fault`): the step a ReplicaMismatchError stopped at (or None) and its message, the
    hash of the rank's checked state, the counters, the report of the check at FAULT_STEP, the replica
    group's ranks and the size of fc1.weight's local shard (test_replicas_hsdp.py repairs with it)."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(1234)
    model = Net().to(ctx.device)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    rc = ringguard.ReplicaCheck(model, opt, on_mismatch=on_mismatch)
    if fault:
        rc.inject(**fault)
    failed, message, report = None, "", None
    for step in range(STEPS):
        x, y = _batch(ctx, step)
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        try:
            opt.step()
        except ringguard.ReplicaMismatchError as e:
            failed, message = step, str(e)
            break
        if step == FAULT_STEP:
            report = rc.last_report()
    out = {"failed": failed, "message": message, "hash": _hash(rc.tensors()), "counters": rc.counters(),
           "report": report, "ranks": rc._ranks, "shard_elements": dict(rc.tensors())["param:fc1.weight"].numel()}
    rc.remove()
    return out


@CASES.case("hsdp-compares-each-shard-across-the-replicate-dimension")
def _(ctx):
    """HSDP on 2 x 2 ranks (fully_shard on a 2-D mesh: replicate x shard): each rank's shard is compared with
    its copy on the other replica; a flip on replica-group rank 1 (in both replica groups) is raised on every
    rank naming both replicas of its group."""
    if ctx.size != 4:
        raise harness.Skip("HSDP 2 x 2 needs 4 ranks")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(torch.device(ctx.device).type, (2, 2), mesh_dim_names=("replicate", "shard"))
    r = hsdp_train(ctx, mesh, "raise")
    assert r["failed"] is None and r["counters"]["checks"] == STEPS, r["counters"]
    assert r["ranks"] == [ctx.rank % 2, ctx.rank % 2 + 2], r["ranks"]  # the replicate group
    assert r["shard_elements"] == 16 * 12 // 2, r["shard_elements"]  # fc1.weight's local shard
    r = hsdp_train(ctx, mesh, "raise", dict(rank=1, step=FAULT_STEP, tensor="param:fc1.weight", element=3, bit=22))
    failed, message = r["failed"], r["message"]
    assert failed == FAULT_STEP, (failed, message)
    assert message.startswith(f"replica check: step {FAULT_STEP}: ranks 0, 1 of 2 replicas disagree and no majority "
                              "names the odd one in 1 tensor: 'param:fc1.weight'; first differing element: "
                              "'param:fc1.weight'[3]"), message
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
        torch.cuda.set_device(0)  # every rank on the one GPU: the peer windows (staged beneath them)
    dist.init_process_group("ringguard", timeout=timedelta(seconds=120))


_TIMELINE = os.path.join(tempfile.mkdtemp(prefix="ringguard-replicas-"), "timeline")


@pytest.fixture(scope="module", params=[2, 3, 4], ids=lambda n: f"np{n}")
def run(request):
    return harness.launch(__file__, request.param, env={"RINGGUARD_TIMELINE": _TIMELINE,
                                                        "RINGGUARD_TIMELINE_EVENTS": "65536"})


@pytest.mark.parametrize("name", CASES.names)
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


def test_registrations_follow_the_model():
    """What the check lists (ringguard._C.ReplicaListing's registrations) equals named_parameters() and
    named_buffers(), the same tensors, after every kind of change to the model: tied and shared, replaced,
    reassigned, added, deleted, untied, a key replaced by another with the counts unchanged. In this process,
    no group."""
    from ringguard import _ext

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight
            self.lin = nn.Linear(4, 4)
            self.shared = self.lin
            self.bn = nn.BatchNorm1d(4)
            self.register_buffer("buf", torch.zeros(2))
            self.register_parameter("nothing", None)

    m = M()
    reg = _ext.load().ReplicaListing(m, None, False, "auto", {}, lambda model: {"bn.running_mean"}, type(None))

    def expect_walk(what):
        params, buffers = reg.registrations()
        assert [(n, id(t)) for n, t in params] == [(n, id(t)) for n, t in m.named_parameters()], what
        assert [(n, id(t)) for n, t, _ in buffers] == [(n, id(t)) for n, t in m.named_buffers()], what
        assert [n for n, _, marked in buffers if marked] == (["bn.running_mean"] if hasattr(m, "bn") else []), what

    expect_walk("as made")
    changes = [
        ("a parameter replaced", lambda: setattr(m.lin, "weight", nn.Parameter(torch.zeros(4, 4)))),
        ("a buffer reassigned", lambda: setattr(m, "buf", torch.ones(2))),
        ("a submodule replaced", lambda: setattr(m, "lin", nn.Linear(4, 4))),
        ("a submodule added", lambda: setattr(m, "extra", nn.Linear(2, 2))),
        ("a buffer registered later", lambda: m.lin.register_buffer("cache", torch.zeros(1))),
        ("a None parameter set", lambda: setattr(m, "nothing", nn.Parameter(torch.ones(1)))),
        ("untied", lambda: setattr(m.head, "weight", nn.Parameter(m.emb.weight.detach().clone()))),
        ("tied again", lambda: setattr(m.head, "weight", m.emb.weight)),
        ("a key replaced, same count", lambda: (delattr(m.lin, "bias"),
                                                m.lin.register_parameter("bias2", nn.Parameter(torch.ones(4))))),
        ("a submodule deleted", lambda: delattr(m, "bn")),
        ("a parameter set to None", lambda: setattr(m.lin, "weight", None)),
    ]
    for what, change in changes:
        change()
        expect_walk(what)



def test_listing_names_the_optimizer_state():
    """The listing's optimizer state (ringguard._C.ReplicaListing): each parameter's tensors in the order of
    their keys as str, labelled "optim:<parameter>.<key>", non-tensor values left out, a parameter without
    state left out, one the names do not know as "#<id>"; keys added later, a value replaced and a state
    replaced are what the next listing reads. In this process, no group."""
    from ringguard import _ext

    lin, extra = nn.Linear(2, 2), nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD(list(lin.parameters()) + [extra], lr=0.1)
    names = {id(lin.weight): "weight", id(lin.bias): "bias"}
    listing = _ext.load().ReplicaListing(lin, opt, True, False, names, lambda model: set(), type(None))

    def labels():
        return [(n, id(t)) for n, t in listing.named()]

    params = [("param:weight", id(lin.weight)), ("param:bias", id(lin.bias))]
    assert labels() == params
    w = opt.state[lin.weight]
    w.update({"b": torch.zeros(1), "a": torch.zeros(2), 10: torch.zeros(1), "note": "not a tensor"})
    opt.state[extra] = {"m": torch.zeros(3)}
    assert labels() == params + [("optim:weight.10", id(w[10])), ("optim:weight.a", id(w["a"])),
                                 ("optim:weight.b", id(w["b"])), (f"optim:#{id(extra)}.m", id(opt.state[extra]["m"]))]
    w["a"] = torch.ones(2)  # a value replaced
    del w[10]
    w["c"] = torch.zeros(1)  # a key removed and one added: the same count
    opt.state[extra] = {}  # a state emptied
    assert labels() == params + [("optim:weight.a", id(w["a"])), ("optim:weight.b", id(w["b"])),
                                 ("optim:weight.c", id(w["c"]))]
    assert listing.read() == 5
    assert listing.tensor("optim:weight.c") is w["c"]
    with pytest.raises(KeyError, match="no checked tensor is named 'optim:weight.z'"):
        listing.tensor("optim:weight.z")
    opt.state[lin.bias] = "not a dict"
    with pytest.raises(ValueError, match="the optimizer's state of 'bias' is not a dict but a str"):
        listing.read()
    opt.load_state_dict(torch.optim.SGD(list(lin.parameters()) + [extra], lr=0.1).state_dict())  # a new state
    assert labels() == params


def test_listing_revalidates_and_follows_every_change_between_reads():
    """read() lists in full once, then, while no dict it read from changed (their versions) nor any list it
    iterated, reads only the kept tensors again (`reads()`: revalidated, in full). After every kind of change
    it must still equal a full listing (named()), names, data addresses and sizes: the optimizer's first step
    (its state made), steps after it, `.data =`, an attribute of no interest, a parameter replaced, a
    registration dict replaced, a param group added, a group's list grown, a state value replaced, a state
    loaded. In this process, no group."""
    from ringguard import _ext

    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    names = {id(p): n for n, p in m.named_parameters()}
    listing = _ext.load().ReplicaListing(m, opt, True, True, names, lambda model: set(), type(None))

    def expect(what, revalidated):
        before = listing.reads()
        n = listing.read()
        want = [(name, t.data_ptr(), t.numel() * t.element_size()) for name, t in listing.named()]
        assert listing.checked() == want and n == len(want), what
        fast, full = listing.reads()
        assert (fast - before[0], full - before[1]) == ((1, 0) if revalidated else (0, 1)), what

    def step():
        opt.zero_grad()
        m(torch.randn(8, 4)).sum().backward()
        opt.step()

    expect("the first read", False)
    expect("nothing changed", True)
    step()
    expect("the first step made the optimizer's state", False)
    step()
    expect("a step: tensors changed in place", True)
    m[0].weight.data = torch.zeros(4, 4)
    expect("`.data =`: a new storage under the same tensor", True)
    m.note = 3
    expect("an attribute the listing does not read", True)
    expect("again", True)
    m[2].weight = nn.Parameter(torch.ones(2, 4))
    expect("a parameter replaced", False)
    m[1]._buffers = dict(m[1]._buffers)
    expect("a registration dict replaced by an equal one", False)
    extra = nn.Parameter(torch.ones(3))
    opt.add_param_group({"params": [extra]})
    expect("a param group added", False)
    more = nn.Parameter(torch.ones(2))
    opt.param_groups[1]["params"].append(more)
    expect("a group's list grown in place", False)
    step()
    expect("a step (the new parameters have no gradient, so no state)", True)
    extra.grad, more.grad = torch.ones(3), torch.ones(2)
    opt.step()
    expect("a step that makes their state", False)
    opt.state[m[0].weight]["exp_avg"] = torch.zeros(4, 4)
    expect("a state value replaced", False)
    opt.load_state_dict(opt.state_dict())
    expect("a state loaded", False)
    expect("nothing changed", True)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    expect("a scheduler made (it adds `initial_lr` to each group, wraps the optimizer's step)", True)
    step()
    sched.step()
    expect("a scheduler's step sets every group's lr: not read", True)
    m[0].weight.data = torch.zeros(4, 4).t()  # under the same tensor, a view the check cannot read
    with pytest.raises(ValueError, match="'param:0.weight' is not contiguous"):
        listing.read()
    m[0].weight.data = torch.zeros(4, 4)
    expect("readable again", True)

    class Forwarding:  # an optimizer wrapper whose state and groups are another's (accelerate's, say)
        def __init__(self, inner):
            self.inner = inner

        @property
        def state(self):
            return self.inner.state

        @property
        def param_groups(self):
            return self.inner.param_groups

    wrapped = _ext.load().ReplicaListing(m, Forwarding(opt), True, True, names, lambda model: set(), type(None))
    wrapped.read()
    wrapped.read()
    assert wrapped.reads() == (0, 2), "attributes that are not the wrapper's own: listed in full every time"
    opt.state = collections.defaultdict(dict)  # the inner optimizer's state replaced (as a load does)
    wrapped.read()
    assert [n for n, _, _ in wrapped.checked()] == [n for n, _ in wrapped.named()]
    assert not any(n.startswith("optim:") for n, _, _ in wrapped.checked())


def test_listing_refuses_to_list_inside_its_own_listing():
    """Python code a listing runs (here its `marked` callback, called by a walk) that asks the same listing
    for a list gets a clear error instead of a walk, labels or records changed under the listing that runs;
    the listing works again afterwards. In this process, no group."""
    from ringguard import _ext

    m = nn.Sequential(nn.Linear(2, 2))
    inner = {}

    def marked(model):
        if "listing" in inner:
            inner["listing"].named()
        return set()

    listing = _ext.load().ReplicaListing(m, None, False, True, {}, marked, type(None))
    inner["listing"] = listing
    m.append(nn.Linear(2, 2))  # the next read walks again, and so calls `marked`
    with pytest.raises(ValueError, match="asked for while it was listing"):
        listing.read()
    inner.clear()
    assert listing.read() == 4
    assert listing.checked() == [(n, t.data_ptr(), t.numel() * t.element_size()) for n, t in listing.named()]


def test_listing_leaves_out_per_replica_statistics_only_in_auto():
    """include_buffers "auto" leaves out the running statistics of batch norms (each replica updates its
    own) and keeps the other buffers; True keeps them all; False none. In this process, no group."""
    from ringguard import _ext
    from ringguard.replicas import _per_replica_buffers

    m = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    m.register_buffer("kept", torch.zeros(1))

    def names(include):
        listing = _ext.load().ReplicaListing(m, None, False, include, {}, _per_replica_buffers, type(None))
        return [n for n, _ in listing.named()]

    params = ["param:0.weight", "param:0.bias", "param:1.weight", "param:1.bias"]
    assert names("auto") == params + ["buffer:kept"]
    assert names(True) == params + ["buffer:kept", "buffer:1.running_mean", "buffer:1.running_var",
                                    "buffer:1.num_batches_tracked"]
    assert names(False) == params


if __name__ == "__main__":
    harness.run_worker(CASES, _init)
