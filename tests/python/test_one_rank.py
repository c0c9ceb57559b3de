"""A "ringguard" group of one rank: PREMUL_SUM (torch.distributed._make_nccl_premul_sum) as NCCL runs it.

On one rank NCCL returns input x factor, the factor first rounded to the tensor's dtype. The engine
refuses premul_sum on one rank (nothing is reduced there, so nothing would scale), so the backend scales
the input itself and runs the collective as a SUM (a copy). Expected values are computed independently:
for float32, float16 and bfloat16 the product of the input and the rounded factor is exact in float64
(at most 48 significant bits), so rounding it once to the dtype is the IEEE product NCCL computes (f16 and
bf16 in float32, where it is exact too); float64 uses numpy's multiply. Factors include ones that do not
round exactly (1/3, 3.7), so a factor that was not rounded to the dtype, or not applied, fails.
"""

from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist

import harness

CASES = harness.Cases()
FACTORS = (0.5, 1.0 / 3.0, 3.7, -2.25)
REAL = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _input(dt, n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64) * 9
    return x.to(dt)


def _want(x, factor):
    if x.is_complex():
        parts = torch.view_as_real(x)
        return torch.view_as_complex(_want(parts, factor).contiguous())
    if x.dtype == torch.float64:
        return torch.from_numpy(x.numpy() * np.float64(factor))
    f = torch.tensor(factor, dtype=torch.float64).to(x.dtype).double()  # the factor rounded to the dtype
    return (x.double() * f).to(x.dtype)


def _ops(factor):
    return (("double", dist._make_nccl_premul_sum(factor)),
            ("tensor", dist._make_nccl_premul_sum(torch.tensor([factor], dtype=torch.float64))))


def _same(a, b):
    return a.dtype == b.dtype and torch.equal(a.view(torch.uint8) if a.is_complex() else a,
                                              b.view(torch.uint8) if b.is_complex() else b)


def _backend():
    return dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))


@CASES.case("premul_sum-allreduce")
def _(ctx):
    n = 0
    for factor in FACTORS:
        for how, op in _ops(factor):
            for dt in REAL:
                x = _input(dt, 1031, 1)
                t = x.clone()
                dist.all_reduce(t, op=op)
                assert _same(t, _want(x, factor)), f"{dt} x {factor} ({how}): {t[:4]} vs {_want(x, factor)[:4]}"
                n += 1
    # Complex, at the backend (dist.all_reduce views complex as real first): both parts scaled.
    for dt in (torch.complex64, torch.complex128):
        x = torch.complex(_input(torch.float64, 77, 2), _input(torch.float64, 77, 3)).to(dt)
        t = x.clone()
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist._make_nccl_premul_sum(1.0 / 3.0)
        _backend().allreduce([t], opts).wait()
        assert _same(t, _want(x, 1.0 / 3.0)), f"{dt}: {t[:3]} vs {_want(x, 1.0 / 3.0)[:3]}"
        n += 1
    return {"checked": n}


@CASES.case("premul_sum-reduce-scatter-and-reduce")
def _(ctx):
    n = 0
    for factor in FACTORS:
        for how, op in _ops(factor):
            for dt in REAL:
                x = _input(dt, 513, 4)
                keep = x.clone()
                out = torch.zeros(513, dtype=dt)
                dist.reduce_scatter_tensor(out, x, op=op)
                assert _same(out, _want(keep, factor)), f"reduce_scatter_tensor {dt} x {factor} ({how})"
                assert _same(x, keep), "reduce_scatter_tensor changed its input"
                out = torch.zeros(513, dtype=dt)
                dist.reduce_scatter(out, [x], op=op)
                assert _same(out, _want(keep, factor)), f"reduce_scatter {dt} x {factor} ({how})"
                assert _same(x, keep), "reduce_scatter changed its input"
                t = x.clone()
                dist.reduce(t, dst=0, op=op)
                assert _same(t, _want(keep, factor)), f"reduce {dt} x {factor} ({how})"
                n += 3
    return {"checked": n}


@CASES.case("premul_sum-coalesced")
def _(ctx):
    xs = [_input(dt, 100 + 7 * i, 5 + i) for i, dt in enumerate(REAL)]
    ts = [x.clone() for x in xs]
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = dist._make_nccl_premul_sum(3.7)
    _backend().allreduce_coalesced(ts, opts).wait()
    for x, t in zip(xs, ts):
        assert _same(t, _want(x, 3.7)), f"allreduce_coalesced {x.dtype}"
    outs = [torch.zeros_like(x) for x in xs]
    ins = [x.clone() for x in xs]
    with dist._coalescing_manager(async_ops=True) as cm:  # the fast path: reduce_scatter_tensor_coalesced
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i, op=dist._make_nccl_premul_sum(0.5))
    cm.wait()
    for x, i, o in zip(xs, ins, outs):
        assert _same(o, _want(x, 0.5)), f"reduce_scatter_tensor_coalesced {x.dtype}"
        assert _same(i, x), "reduce_scatter_tensor_coalesced changed its input"
    return {}


@CASES.case("premul_sum-int-still-refused")
def _(ctx):
    try:
        dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist._make_nccl_premul_sum(0.5))
    except RuntimeError as err:
        assert "PREMUL_SUM" in str(err) and "Int" in str(err), str(err)
        return {"error": str(err)[:200]}
    raise AssertionError("PREMUL_SUM on int32 did not raise")


@CASES.case("other-ops-on-one-rank")
def _(ctx):
    # SUM, AVG, MAX: a copy on one rank; the input comes back unchanged.
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX):
        x = _input(torch.float32, 99, 6)
        t = x.clone()
        dist.all_reduce(t, op=op)
        assert _same(t, x), op
    return {}


def _init():
    dist.init_process_group("ringguard", timeout=timedelta(seconds=60))


# --- pytest side ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run():
    return harness.launch(__file__, 1)


@pytest.mark.parametrize("name", CASES.names)
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


if __name__ == "__main__":
    harness.run_worker(CASES, _init)
