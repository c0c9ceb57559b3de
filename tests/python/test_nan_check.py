"""RINGGUARD_NAN_CHECK through the "ringguard" backend (CPU tensors; docs/GUARD.md, "The collectives' NaN
check"): one group per mode, made with ``pg_options``, and a NaN or Inf placed on one rank.

warn runs the collective (the NaN reaches every rank), skip leaves every rank's tensor as it was and
counts the skip on every rank, error raises on every rank naming the rank that held the value and its
first element; the default group (off) is untouched by all of it. The copy collectives (broadcast, the
all-gathers, the all-to-alls, gather, scatter) are scanned as their dtype too.
"""

import math
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import harness

CASES = harness.Cases()
BAD_RANK = 1


def _group(mode):
    import ringguard

    return dist.new_group(backend="ringguard", pg_options=ringguard.Options(nan_check=mode))


def _tensor(ctx, bad=float("nan"), at=(5,)):
    t = torch.full((64,), float(ctx.rank + 1))
    if ctx.rank == BAD_RANK:
        for i in at:
            t[i] = bad
    return t


@CASES.case("warn-runs-and-counts")
def _(ctx):
    import ringguard

    g = _group("warn")
    t = _tensor(ctx, float("inf"), at=(3, 9))
    dist.all_reduce(t, group=g)
    assert t[3].item() == math.inf and t[9].item() == math.inf, t
    assert t[4].item() == ctx.size * (ctx.size + 1) / 2, t
    c = ringguard.counters(g)
    assert c["non_finite_inputs"] == (1 if ctx.rank == BAD_RANK else 0), c
    assert c["skipped"] == 0, c


@CASES.case("skip-leaves-every-rank-as-it-was")
def _(ctx):
    import ringguard

    g = _group("skip")
    t = _tensor(ctx)
    before = t.clone()
    dist.all_reduce(t, group=g)
    assert torch.equal(t.isnan(), before.isnan()) and torch.equal(t.nan_to_num(), before.nan_to_num()), t
    # reduce_scatter_tensor: the output keeps what it held.
    out = torch.full((64,), -3.0)
    dist.reduce_scatter_tensor(out, torch.cat([_tensor(ctx)] * ctx.size), group=g)
    assert torch.equal(out, torch.full((64,), -3.0)), out
    # Clean inputs run.
    clean = torch.full((64,), float(ctx.rank + 1))
    dist.all_reduce(clean, group=g)
    assert torch.equal(clean, torch.full((64,), float(ctx.size * (ctx.size + 1) / 2))), clean
    c = ringguard.counters(g)
    assert c["skipped"] == 2, c
    assert c["non_finite_inputs"] == (2 if ctx.rank == BAD_RANK else 0), c


@CASES.case("error-raises-on-every-rank")
def _(ctx):
    g = _group("error")
    t = _tensor(ctx, at=(40, 7))
    with pytest.raises(Exception) as err:
        dist.all_reduce(t, group=g)
    text = str(err.value)
    assert ("RINGGUARD_NAN_CHECK=error: the input of allreduce seq 0 on rank 1 holds 2 non-finite values "
            "(NaN or +-Inf; first at element 7)") in text, text
    # The default group (off) still works.
    x = torch.ones(4)
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((4,), float(ctx.size))), x


@CASES.case("copy-collectives-are-scanned")
def _(ctx):
    """broadcast and the all-gathers move floating tensors as their dtype, so their inputs are scanned too
    (the root's buffer of a broadcast; every rank's block of an all-gather)."""
    import ringguard

    g = _group("skip")
    # broadcast from the bad rank: skipped on every rank, every tensor as it was.
    t = _tensor(ctx)
    before = t.clone()
    dist.broadcast(t, src=BAD_RANK, group=g)
    assert torch.equal(t.nan_to_num(), before.nan_to_num()) and torch.equal(t.isnan(), before.isnan()), t
    # broadcast from a clean root runs, NaN or not elsewhere (non-roots have no input).
    t = _tensor(ctx)
    dist.broadcast(t, src=0, group=g)
    assert torch.equal(t, torch.full((64,), 1.0)), t
    # all_gather_into_tensor and all_gather: skipped; outputs keep what they held.
    out = torch.full((64 * ctx.size,), -1.0)
    dist.all_gather_into_tensor(out, _tensor(ctx), group=g)
    assert torch.equal(out, torch.full((64 * ctx.size,), -1.0)), out
    outs = [torch.full((64,), -2.0) for _ in range(ctx.size)]
    dist.all_gather(outs, _tensor(ctx), group=g)
    assert all(torch.equal(o, torch.full((64,), -2.0)) for o in outs), outs
    # Integer tensors are never scanned, and gather exactly.
    ints = [torch.zeros(5, dtype=torch.int32) for _ in range(ctx.size)]
    dist.all_gather(ints, torch.full((5,), ctx.rank + 7, dtype=torch.int32), group=g)
    assert all(torch.equal(o, torch.full((5,), r + 7, dtype=torch.int32)) for r, o in enumerate(ints)), ints
    # float8 (copy-only dtypes) is scanned too: e4m3fn's NaN (byte 0x7f) is found, its 448 (0x7e) is not.
    f8 = torch.full((8,), 448.0)
    if ctx.rank == BAD_RANK:
        f8[5] = float("nan")
    f8out = torch.zeros(8 * ctx.size, dtype=torch.float8_e4m3fn)
    dist.all_gather_into_tensor(f8out, f8.to(torch.float8_e4m3fn), group=g)
    assert torch.equal(f8out.view(torch.uint8), torch.zeros(8 * ctx.size, dtype=torch.uint8)), f8out
    dist.all_gather_into_tensor(f8out, torch.full((8,), 448.0).to(torch.float8_e4m3fn), group=g)
    assert torch.equal(f8out.view(torch.uint8), torch.full((8 * ctx.size,), 0x7e, dtype=torch.uint8)), f8out
    c = ringguard.counters(g)
    assert c["skipped"] == 4, c
    assert c["non_finite_inputs"] == (4 if ctx.rank == BAD_RANK else 0), c
    # error mode names the collective.
    e = _group("error")
    with pytest.raises(Exception) as err:
        dist.all_gather_into_tensor(torch.empty(64 * ctx.size), _tensor(ctx, at=(9,)), group=e)
    text = str(err.value)
    assert ("RINGGUARD_NAN_CHECK=error: the input of allgather seq 0 on rank 1 holds 1 non-finite value "
            "(NaN or +-Inf; first at element 9)") in text, text


@CASES.case("exchanges-are-scanned")
def _(ctx):
    """The all-to-alls, gather, scatter and the coalesced all-gather move floating tensors as their dtype
    too: a NaN in what a rank sends skips the collective on every rank (outputs as they were), clean ones
    run exactly."""
    import ringguard

    g = _group("skip")
    n = ctx.size
    # all_to_all_single: skipped; the output keeps what it held.
    out = torch.full((64 * n,), -1.0)
    dist.all_to_all_single(out, torch.cat([_tensor(ctx)] * n), group=g)
    assert torch.equal(out, torch.full((64 * n,), -1.0)), out
    # all_to_all (lists): skipped, every output as it was.
    outs = [torch.full((64,), -2.0) for _ in range(n)]
    dist.all_to_all(outs, [_tensor(ctx) for _ in range(n)], group=g)
    assert all(torch.equal(o, torch.full((64,), -2.0)) for o in outs), outs
    # gather to rank 0: skipped; the root's list as it was.
    gl = [torch.full((64,), -3.0) for _ in range(n)] if ctx.rank == 0 else None
    dist.gather(_tensor(ctx), gather_list=gl, dst=0, group=g)
    if ctx.rank == 0:
        assert all(torch.equal(o, torch.full((64,), -3.0)) for o in gl), gl
    # scatter from the bad rank: its blocks hold the NaN; skipped, every output as it was.
    so = torch.full((64,), -4.0)
    dist.scatter(so, scatter_list=[_tensor(ctx) for _ in range(n)] if ctx.rank == BAD_RANK else None,
                 src=BAD_RANK, group=g)
    assert torch.equal(so, torch.full((64,), -4.0)), so
    # the coalesced all-gather (FSDP2's): skipped.
    co = [torch.full((64 * n,), -5.0)]
    with dist._coalescing_manager(group=g):
        dist.all_gather_into_tensor(co[0], _tensor(ctx), group=g)
    assert torch.equal(co[0], torch.full((64 * n,), -5.0)), co
    c = ringguard.counters(g)
    assert c["skipped"] == 5, c
    assert c["non_finite_inputs"] == (5 if ctx.rank == BAD_RANK else 0), c
    # Clean inputs run exactly: all_to_all_single of integer-valued floats, and an int64 gather.
    src = torch.arange(4.0 * n) + 100 * ctx.rank
    got = torch.empty(4 * n)
    dist.all_to_all_single(got, src, group=g)
    want = torch.cat([torch.arange(4.0 * ctx.rank, 4.0 * ctx.rank + 4) + 100 * r for r in range(n)])
    assert torch.equal(got, want), (got, want)
    gi = [torch.zeros(3, dtype=torch.int64) for _ in range(n)] if ctx.rank == 0 else None
    dist.gather(torch.full((3,), ctx.rank + 9, dtype=torch.int64), gather_list=gi, dst=0, group=g)
    if ctx.rank == 0:
        assert all(torch.equal(o, torch.full((3,), r + 9, dtype=torch.int64)) for r, o in enumerate(gi)), gi
    assert ringguard.counters(g)["skipped"] == 5
    # error mode names the collective the exchange runs as.
    e = _group("error")
    with pytest.raises(Exception) as err:
        dist.all_to_all_single(torch.empty(64 * n), torch.cat([_tensor(ctx, at=(9,))] * n), group=e)
    text = str(err.value)
    assert "RINGGUARD_NAN_CHECK=error: the input of alltoall seq 0 on rank 1 holds" in text, text


@CASES.case("bad-mode-is-named")
def _(ctx):
    with pytest.raises(Exception) as err:
        _group("sometimes")
    assert "RINGGUARD_NAN_CHECK" in str(err.value) and "sometimes" in str(err.value), str(err.value)


def _init():
    dist.init_process_group("ringguard", timeout=timedelta(seconds=60))


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
