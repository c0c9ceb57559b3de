"""barrier (with device_ids) and monitored_barrier on the "ringguard" backend.

A barrier must hold every rank until the last one enters: the last rank sleeps LATE seconds first and the
others must spend at least most of that inside the barrier. monitored_barrier runs over the c10d Store:
when ranks stay away, every rank that entered raises naming them (rank 0 names the missing ranks, the
others get rank 0's verdict), and a missing rank 0 is named by the others. The failing cases each use a
group of their own, since the ranks that stayed away never advance that group's barrier count.
"""

import inspect
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import harness

CASES = harness.Cases()
LATE = 0.6  # seconds the last rank arrives late
SHORT = timedelta(seconds=1)


def _late_last(ctx):
    if ctx.rank == ctx.size - 1:
        time.sleep(LATE)


def _timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def _check_waited(results, nproc):
    for rank, r in enumerate(results[:-1]):
        assert r["waited"] >= 0.8 * LATE, f"rank {rank} left the barrier after {r['waited']:.3f} s"


@CASES.case("barrier-waits-for-the-last-rank", check=_check_waited)
def _(ctx):
    _late_last(ctx)
    return {"waited": _timed(dist.barrier)}


@CASES.case("barrier-device-ids", check=_check_waited)
def _(ctx):
    # On a machine without an accelerator torch makes opts.device cpu:<id>; the barrier runs on the CPU.
    _late_last(ctx)
    return {"waited": _timed(lambda: dist.barrier(device_ids=[0]))}


@CASES.case("barrier-async", check=_check_waited)
def _(ctx):
    _late_last(ctx)
    work = dist.barrier(async_op=True)
    return {"waited": _timed(work.wait)}


@CASES.case("monitored-barrier-all-arrive", check=_check_waited)
def _(ctx):
    pg = dist.distributed_c10d._get_default_group()
    for _ in range(3):  # each one has keys of its own
        pg.monitored_barrier(timedelta(seconds=30), wait_all_ranks=True)
    _late_last(ctx)
    return {"waited": _timed(lambda: pg.monitored_barrier(timedelta(seconds=30)))}


def _raises(fn):
    try:
        fn()
    except RuntimeError as err:  # torch.distributed.DistBackendError is one
        return str(err)
    raise AssertionError("did not raise")


def _missing(ranks, size):
    return ("ranks " if len(ranks) > 1 else "rank ") + ", ".join(map(str, ranks)) + f" of {size} did not arrive"


@CASES.case("monitored-barrier-names-every-missing-rank")
def _(ctx):
    g = dist.new_group(backend="ringguard")
    if ctx.rank == 0:
        t0 = time.monotonic()
        msg = _raises(lambda: g.monitored_barrier(SHORT, wait_all_ranks=True))
        elapsed = time.monotonic() - t0
        assert _missing(list(range(1, ctx.size)), ctx.size) in msg, msg
        assert "within 1000 ms" in msg, msg
        assert 0.9 <= elapsed < 10, elapsed
    dist.barrier(group=ctx.ref)
    dist.destroy_process_group(g)
    return {"ok": True}


@CASES.case("monitored-barrier-names-the-first-missing-rank")
def _(ctx):
    g = dist.new_group(backend="ringguard")
    if ctx.rank != ctx.size - 1:  # the last rank stays away: every other rank raises naming it
        msg = _raises(lambda: g.monitored_barrier(SHORT))
        assert _missing([ctx.size - 1], ctx.size) in msg, msg
    dist.barrier(group=ctx.ref)
    dist.destroy_process_group(g)
    return {"ok": True}


@CASES.case("monitored-barrier-names-a-missing-rank-0")
def _(ctx):
    g = dist.new_group(backend="ringguard")
    if ctx.rank != 0:
        t0 = time.monotonic()
        msg = _raises(lambda: g.monitored_barrier(SHORT))
        elapsed = time.monotonic() - t0
        assert f"monitored_barrier on rank {ctx.rank}: no verdict from rank 0" in msg, msg
        assert 1.8 <= elapsed < 20, elapsed
    dist.barrier(group=ctx.ref)
    dist.destroy_process_group(g)
    return {"ok": True}


@CASES.case("monitored-barrier-public-api")
def _(ctx):
    # torch.distributed.monitored_barrier reaches a non-gloo backend only on a torch whose Python does not
    # check the backend's name (2.15 checks for a CPU backend instead; 2.11 demands GLOO).
    gloo_only = "is only implemented for GLOO backend" in inspect.getsource(dist.monitored_barrier)
    if gloo_only:
        try:
            dist.monitored_barrier(timeout=timedelta(seconds=30))
        except ValueError as err:
            assert "GLOO" in str(err), err
            return {"torch": torch.__version__, "public_api": False}
        raise AssertionError("torch's GLOO-only check did not raise")
    _late_last(ctx)
    waited = _timed(lambda: dist.monitored_barrier(timeout=timedelta(seconds=30), wait_all_ranks=True))
    return {"torch": torch.__version__, "public_api": True, "waited": waited}


def _init():
    dist.init_process_group("ringguard", timeout=timedelta(seconds=60))


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
