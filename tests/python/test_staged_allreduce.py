"""The all_reduce family's ``staged_chunked`` variant in the "ringguard" backend (docs/DOWNGRADE.md).

CPU runs (CI) cover the selection and the plumbing: the variant is registered by ``policy.load()`` and enabled
only for an engine on a CUDA device, the backend reads the engine's selection when it issues an allreduce (a
new selection takes effect at the next ``policy.step()``), and CPU tensors never take it, even while it is
selected: their results stay exact and the staged counter stays 0. The CUDA run
(``RINGGUARD_TEST_DEVICE=cuda``: 2 ranks sharing the GPU through the staged device transport) allreduces the
same tensors through the ring and through the staged variant, for several dtypes and ops (premul_sum
included) and through allreduce_coalesced, checks both bit for bit against the closed form and each other,
and that the staged path ran exactly as often as it was selected.

RINGGUARD_STAGED_CHUNK_BYTES is 4096 here, so the larger counts take several chunks.
"""

import pytest
import torch
import torch.distributed as dist

import harness
import staged
from staged import CHUNK_BYTES, same_bits as _same_bits

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f64": torch.float64, "i64": torch.int64,
          "u8": torch.uint8}
OPS = ("sum", "avg", "max", "premul_sum")
COUNTS = [0, 1, 1001, 5 * CHUNK_BYTES + 77]
PREMUL_FACTOR = 0.5  # a power of two: the scaled sums stay exact

CASES = harness.Cases()


def _payload(dt, count, rank, salt):
    """Small non-negative integers: every sum over a few ranks is exact in every dtype (bf16 included) and
    independent of the reduction order; different per rank and position."""
    return ((torch.arange(count, dtype=torch.int64) * 7 + rank * 3 + salt) % 11).to(dt)


def _op(name):
    if name == "premul_sum":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX}[name]


def _applies(dt, op):
    return op != "premul_sum" or dt.is_floating_point


def _want(dt, op, count, salt, size):
    """The closed form: the exact sum (max) of every rank's payload, then avg's one division (floats: f64
    then rounded to the dtype, as test_collectives.py checks; integers: truncated) or premul's scaling."""
    xs = torch.stack([_payload(torch.int64, count, r, salt) for r in range(size)])
    if op == "max":
        return xs.amax(0).to(dt)
    s = xs.sum(0)
    if op == "sum":
        return s.to(dt)
    if op == "premul_sum":
        return (s.double() * PREMUL_FACTOR).to(dt)
    if dt.is_floating_point:
        return (s.double() / size).to(dt)
    return torch.div(s, size, rounding_mode="trunc").to(dt)


def _all_reduce_checked(ctx, dt, op, count, salt, device=None):
    """One dist.all_reduce of this rank's payload on `device` (default ctx.device), checked against the
    closed form."""
    t = _payload(dt, count, ctx.rank, salt).to(device or ctx.device)
    dist.all_reduce(t, op=_op(op))
    got = t.cpu()
    assert _same_bits(got, _want(dt, op, count, salt, ctx.size)), f"all_reduce {op} {dt} n={count}"
    return got


COALESCED = [(torch.float32, 1001), (torch.int64, 0), (torch.bfloat16, 3 * CHUNK_BYTES + 77), (torch.uint8, 5)]


def _coalesced_checked(ctx, salt, device=None):
    """The backend's allreduce_coalesced (mixed dtypes and sizes, as torch's coalescing manager issues them)
    on `device` (default ctx.device), checked against the closed form; returns the results and how many
    tensors it reduced."""
    device = device or ctx.device
    ts = [_payload(dt, n, ctx.rank, salt + i).to(device) for i, (dt, n) in enumerate(COALESCED)]
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    dist.distributed_c10d._get_default_group()._get_backend(torch.device(device)).allreduce_coalesced(
        ts, opts).wait()
    got = [t.cpu() for t in ts]
    for i, ((dt, n), g) in enumerate(zip(COALESCED, got)):
        assert _same_bits(g, _want(dt, "sum", n, salt + i, ctx.size)), f"allreduce_coalesced tensor {i}"
    return got, len(ts)


@CASES.case("registered-and-enabled-only-on-cuda")
def _(ctx):
    import ringguard.policy as policy

    # load() registers both variants of the default rules' all_reduce family.
    policy.load(device=torch.device("cpu"))
    assert "all_reduce" in policy.engine().families(), policy.engine().families()
    assert set(policy.engine().families()["all_reduce"]["variants"]) == set(policy.ALL_REDUCE_VARIANTS)
    # RINGGUARD_POLICY_FORCE=all_reduce=staged_chunked (the launch's environment) pins the variant, but a
    # forced variant still has to be enabled: on a CPU engine it is not, and all_reduce stays on the ring.
    policy.step()
    assert policy.current("all_reduce") == "ring", policy.current("all_reduce")
    policy.load(device=torch.device("cuda", 0))  # only the engine's device type matters here
    policy.step()
    assert policy.current("all_reduce") == "staged_chunked", policy.current("all_reduce")
    return {"current": policy.current("all_reduce")}


@CASES.case("cpu-tensors-never-staged")
def _(ctx):
    import ringguard.policy as policy

    policy.load(device=torch.device("cuda", 0))  # staged_chunked enabled and forced
    policy.step()
    assert policy.current("all_reduce") == "staged_chunked"
    for dt in DTYPES.values():
        for op in OPS:
            if _applies(dt, op):
                for count in COUNTS:
                    _all_reduce_checked(ctx, dt, op, count, 5, device="cpu")
    _coalesced_checked(ctx, 40, device="cpu")
    assert policy.staged_all_reduces() == 0, policy.staged_all_reduces()
    return {"staged": policy.staged_all_reduces()}


@CASES.case("cuda-staged-equals-ring")
def _(ctx):
    import ringguard.policy as policy

    if ctx.device != "cuda":
        raise harness.Skip("CUDA runs only")
    policy.load()  # the current CUDA device
    staged.select("all_reduce", "ring")
    assert policy.current("all_reduce") == "ring"
    ring = {}
    for dname, dt in DTYPES.items():
        for op in OPS:
            if _applies(dt, op):
                for count in COUNTS:
                    ring[dname, op, count] = _all_reduce_checked(ctx, dt, op, count, 9)
    ring_coalesced, _ = _coalesced_checked(ctx, 60)
    assert policy.staged_all_reduces() == 0, "the ring variant took the staged path"

    policy.engine().force("all_reduce", "staged_chunked")
    # Selected but not yet in effect: decisions take effect at a step boundary.
    assert policy.current("all_reduce") == "ring"
    policy.step()
    assert policy.current("all_reduce") == "staged_chunked"
    calls = 0
    for dname, dt in DTYPES.items():
        for op in OPS:
            if _applies(dt, op):
                for count in COUNTS:
                    got = _all_reduce_checked(ctx, dt, op, count, 9)
                    calls += 1
                    assert _same_bits(got, ring[dname, op, count]), f"all_reduce {op} {dname} n={count}: staged != ring"
    got_coalesced, n = _coalesced_checked(ctx, 60)
    calls += n
    for i, (g, r) in enumerate(zip(got_coalesced, ring_coalesced)):
        assert _same_bits(g, r), f"allreduce_coalesced tensor {i}: staged != ring"
    assert policy.staged_all_reduces() == calls, (policy.staged_all_reduces(), calls)
    assert policy.staged_all_gathers() == 0  # the other family was not touched

    staged.select("all_reduce", "ring")  # and back
    _all_reduce_checked(ctx, torch.float32, "sum", 1001, 3)
    assert policy.staged_all_reduces() == calls
    return {"staged": calls}


# --- pytest side ------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def run(request):
    return staged.launch_cpu(__file__, request.param, "all_reduce")


@pytest.mark.parametrize("name", staged.cpu_case_names(CASES))
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


def test_cuda_staged_equals_ring():
    harness.check_case(CASES, staged.launch_cuda(__file__), staged.CUDA_CASE)


if __name__ == "__main__":
    staged.worker_main(CASES)
