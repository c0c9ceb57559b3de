"""The replica check's repair under HSDP (docs/REPLICAS.md): fully_shard on a 3 x 2 mesh (replicate x shard),
six ranks. A bit flipped in the shard of one replica (replica-group rank 2, in both shard groups) is named by
the majority of its replica group and repaired from it, and the run ends bit-identical to a fault-free run on
every rank. A separate module because repair needs three replicas of each shard, six ranks, where the rest of
the replica check runs at 2, 3 and 4 (test_replicas.py, which has the 2 x 2 raise case).
"""

import pytest
import torch

import harness
from test_replicas import FAULT_STEP, STEPS, _init, hsdp_train

CASES = harness.Cases()


@CASES.case("hsdp-repair-bit-identical")
def _(ctx):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(torch.device(ctx.device).type, (3, 2), mesh_dim_names=("replicate", "shard"))
    reference = hsdp_train(ctx, mesh, "repair")
    assert reference["counters"]["mismatches"] == 0, reference["counters"]
    assert reference["ranks"] == [ctx.rank % 2, ctx.rank % 2 + 2, ctx.rank % 2 + 4], reference["ranks"]
    r = hsdp_train(ctx, mesh, "repair", dict(rank=2, step=FAULT_STEP, tensor="param:fc1.weight", element=3, bit=22))
    c = r["counters"]
    assert c["mismatches"] == 1 and c["repairs"] == 1 and c["repaired_tensors"] == 1, c
    assert c["checks"] == STEPS + 1, c  # the check after the repair
    rep = r["report"]
    assert rep["mismatch"] and rep["repaired"] and rep["odd_ranks"] == [2], rep
    assert rep["tensors"] == ["param:fc1.weight"] and rep["first_elements"] == [3], rep
    # Each rank holds its own shard: its state equals its own fault-free run's, bit for bit.
    assert r["hash"] == reference["hash"], (r["hash"], reference["hash"])
    return {}


@pytest.fixture(scope="module")
def run():
    return harness.launch(__file__, 6)


@pytest.mark.parametrize("name", CASES.names)
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


if __name__ == "__main__":
    harness.run_worker(CASES, _init)
