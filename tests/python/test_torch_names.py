"""Both generations of torch's names for the tensor collectives reach the "ringguard" backend.

torch 2.14 renamed the c10d Backend virtuals (_allgather_base -> all_gather_single, _reduce_scatter_base ->
reduce_scatter_single, alltoall_base -> all_to_all_single, allgather_into_tensor_coalesced ->
all_gather_single_coalesced, reduce_scatter_tensor_coalesced -> reduce_scatter_single_coalesced) and added
gather_single / gather_into_tensor, with Python functions of the same names; the old names stay as
aliases. Every case computes exact values (small integers, so sums are order-independent). Cases that need
the new names skip on a torch without them (the pinned 2.11); scripts/run_torch_latest.sh runs them on the
newest torch.
"""

import pytest
import torch
import torch.distributed as dist

import harness

CASES = harness.Cases()
NEW_NAMES = hasattr(dist, "all_gather_single")


def _need_new_names():
    if not NEW_NAMES:
        raise harness.Skip(f"torch {torch.__version__} has no *_single collectives (they came with 2.14)")


def _block(rank, n, salt=0):
    """Rank `rank`'s input: n small integers, exact in float32."""
    return torch.arange(n, dtype=torch.float32) + 1000 * rank + salt


@CASES.case("old-names")
def _(ctx):
    n = 13
    out = torch.empty(n * ctx.size)
    dist.all_gather_into_tensor(out, _block(ctx.rank, n))
    assert torch.equal(out, torch.cat([_block(r, n) for r in range(ctx.size)]))
    full = torch.cat([_block(ctx.rank, n, salt=b) for b in range(ctx.size)])
    red = torch.empty(n)
    dist.reduce_scatter_tensor(red, full)
    assert torch.equal(red, sum(_block(r, n, salt=ctx.rank) for r in range(ctx.size)))
    a2a = torch.empty(n * ctx.size)
    dist.all_to_all_single(a2a, full)
    assert torch.equal(a2a, torch.cat([_block(r, n, salt=ctx.rank) for r in range(ctx.size)]))
    return {"ok": True}


@CASES.case("all-gather-single")
def _(ctx):
    _need_new_names()
    for n in (0, 1, 1001):
        out = torch.full((n * ctx.size,), -1.0)
        dist.all_gather_single(out, _block(ctx.rank, n))
        assert torch.equal(out, torch.cat([_block(r, n) for r in range(ctx.size)])), n
    return {"ok": True}


@CASES.case("reduce-scatter-single")
def _(ctx):
    _need_new_names()
    for n in (0, 1, 1001):
        full = torch.cat([_block(ctx.rank, n, salt=b) for b in range(ctx.size)])
        out = torch.full((n,), -1.0)
        dist.reduce_scatter_single(out, full)
        assert torch.equal(out, sum(_block(r, n, salt=ctx.rank) for r in range(ctx.size))), n
    return {"ok": True}


@CASES.case("gather-single")
def _(ctx):
    _need_new_names()
    n = 17
    for root in range(ctx.size):
        for fn in (dist.gather_single, dist.gather_into_tensor):
            out = torch.full((n * ctx.size,), -1.0) if ctx.rank == root else None
            fn(_block(ctx.rank, n, salt=root), out, dst=root)
            if ctx.rank == root:
                assert torch.equal(out, torch.cat([_block(r, n, salt=root) for r in range(ctx.size)])), fn
    return {"ok": True}


@CASES.case("coalesced-both-names")
def _(ctx):
    # The coalescing manager's fast path: one all_gather_single_coalesced / reduce_scatter_single_coalesced
    # call (allgather_into_tensor_coalesced / reduce_scatter_tensor_coalesced before 2.14).
    gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
    sizes = [3, 0, 8]
    outs = [torch.empty(n * ctx.size) for n in sizes]
    with dist._coalescing_manager(async_ops=True) as cm:
        for n, o in zip(sizes, outs):
            gather(o, _block(ctx.rank, n, salt=n))
    cm.wait()
    for n, o in zip(sizes, outs):
        assert torch.equal(o, torch.cat([_block(r, n, salt=n) for r in range(ctx.size)])), n
    reds = [torch.empty(n) for n in sizes]
    with dist._coalescing_manager(async_ops=True) as cm:
        for n, o in zip(sizes, reds):
            scatter(o, torch.cat([_block(ctx.rank, n, salt=b) for b in range(ctx.size)]))
    cm.wait()
    for n, o in zip(sizes, reds):
        assert torch.equal(o, sum(_block(r, n, salt=ctx.rank) for r in range(ctx.size))), n
    return {"new_names": NEW_NAMES}


def _init():
    dist.init_process_group("ringguard")


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def run(request):
    return harness.launch(__file__, request.param)


@pytest.mark.parametrize("name", CASES.names)
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


if __name__ == "__main__":
    harness.run_worker(CASES, _init)
