"""torch.distributed.checkpoint over the "ringguard" backend: save a sharded FSDP2 state dict, load it after a
restart of the job.

Two torchrun launches of 2 ranks on CPU, with "ringguard" as the default group (DCP's planning runs on
its object collectives: gather_object, broadcast_object_list, all_gather_object). The first trains an
FSDP2 MLP (uneven shards: 33 and 47 rows) with Adam for 4 steps and saves model and optimizer state
(``get_state_dict``: DTensor shards) with ``dcp.save``; it also writes each rank's local shards and full
tensors with ``torch.save`` as the reference. The second launch builds the model from another seed (so
nothing matches by accident), loads with ``dcp.load`` + ``set_state_dict``, and compares every local
shard, every full tensor and every optimizer state tensor with ``torch.equal``; then both ranks take one
more step and must agree bit for bit.
"""

import os
import shutil
import tempfile
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import harness

SAVE = harness.Cases()
LOAD = harness.Cases()


def _model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(20, 33), nn.ReLU(), nn.Linear(33, 47), nn.ReLU(), nn.Linear(47, 5))


def _sharded(seed):
    from torch.distributed.fsdp import fully_shard

    model = _model(seed)
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, opt


def _step(ctx, model, opt, step):
    g = torch.Generator().manual_seed(50 * ctx.rank + step)
    x = torch.randn(6, 20, generator=g)
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()


def _flat(state, prefix=""):
    """(name, tensor) for every tensor of a nested state dict, DTensors as (local shard, full tensor)."""
    from torch.distributed.tensor import DTensor

    out = {}
    for k, v in state.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, name + "."))
        elif isinstance(v, DTensor):
            out[name + ":local"] = v.to_local().detach().clone()
            out[name + ":full"] = v.full_tensor().detach().clone()
        elif isinstance(v, torch.Tensor):
            out[name] = v.detach().clone()
    return out


def _dir():
    return os.environ["RINGGUARD_TEST_CKPT"]


@SAVE.case("train-and-save")
def _(ctx):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, opt = _sharded(11)
    for step in range(4):
        _step(ctx, model, opt, step)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(_dir(), "ckpt"))
    ref = _flat({"model": msd, "optim": osd})
    torch.save(ref, os.path.join(_dir(), f"ref{ctx.rank}.pt"))
    shard_rows = [int(t.shape[0]) for n, t in ref.items() if n.startswith("model.") and n.endswith(":local")]
    return {"tensors": len(ref), "shard_rows": shard_rows}


@LOAD.case("load-after-restart")
def _(ctx):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model, opt = _sharded(99)  # another seed: nothing equal unless loaded
    _step(ctx, model, opt, 100)  # Adam state exists (DCP loads into existing tensors)
    msd, osd = get_state_dict(model, opt)
    ref = torch.load(os.path.join(_dir(), f"ref{ctx.rank}.pt"))
    before = _flat({"model": msd, "optim": osd})
    differed = sum(1 for n, t in ref.items() if n in before and not torch.equal(before[n], t))
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=os.path.join(_dir(), "ckpt"))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    msd, osd = get_state_dict(model, opt)
    after = _flat({"model": msd, "optim": osd})
    assert set(after) == set(ref), f"names differ: {sorted(set(after) ^ set(ref))}"
    unequal = [n for n in ref if not torch.equal(after[n], ref[n])]
    assert not unequal, f"not equal after load: {unequal}"
    assert differed > len(ref) // 2, f"only {differed} of {len(ref)} tensors differed before the load"
    # Training goes on from the loaded state, identically on both ranks.
    _step(ctx, model, opt, 4)
    full = [p.full_tensor() for p in model.parameters()]
    gathered = [None] * ctx.size
    dist.all_gather_object(gathered, [t.detach().numpy().tobytes() for t in full], group=ctx.ref)
    assert all(g == gathered[0] for g in gathered), "ranks differ after a step from the loaded state"
    return {"tensors": len(ref), "differed_before": differed}


def _init():
    dist.init_process_group("ringguard", timeout=timedelta(seconds=120))


# --- pytest side ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def runs():
    ckpt = tempfile.mkdtemp(prefix="ringguard-dcp-")
    try:
        save = harness.launch(__file__, 2, env={"RINGGUARD_TEST_CKPT": ckpt, "RINGGUARD_TEST_SET": "save"})
        load = harness.launch(__file__, 2, env={"RINGGUARD_TEST_CKPT": ckpt, "RINGGUARD_TEST_SET": "load"})
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    return save, load


def test_save(runs):
    harness.check_case(SAVE, runs[0], "train-and-save")
    harness.check_launch(runs[0])


def test_load_after_restart(runs):
    harness.check_case(SAVE, runs[0], "train-and-save")  # nothing to load otherwise
    harness.check_case(LOAD, runs[1], "load-after-restart")
    harness.check_launch(runs[1])


if __name__ == "__main__":
    harness.run_worker(LOAD if os.environ.get("RINGGUARD_TEST_SET") == "load" else SAVE, _init)
