"""Threads and collective order over the "ringguard" backend (2 ranks; docs/RELIABILITY.md, defect 8).

Two Python threads per rank issue same-shape all_reduces, thread 0's first on rank 0 and thread 1's first
on rank 1 (the second thread issues only after the first one's call returned). Without issue lanes they
get each other's results (the documented limit, as with NCCL and gloo); with ``ringguard.issue_lane`` per
thread every rank fails with a fingerprint mismatch naming both lanes, and the group is poisoned. Every
case that breaks a group works on a fresh ``new_group(backend="ringguard")``.
"""

import threading
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import harness
import ringguard

NPROC = 2
COUNT = 5
LANES = ("py-prefetch", "py-compute")
CASES = harness.Cases()


def _input(thread, rank):
    # Distinct for every (thread, rank) and integer-valued: a sum says exactly which inputs met.
    return torch.arange(COUNT, dtype=torch.float32) + float((thread + 1) * 100 + rank * 10)


def _sum(thread_on_rank0, thread_on_rank1):
    return _input(thread_on_rank0, 0) + _input(thread_on_rank1, 1)


def _opposite_orders(ctx, group, lanes):
    """Each thread's (tensor, error) after thread `rank` issued first on this rank."""
    first = ctx.rank
    issued = threading.Event()
    out = {}

    def body(t):
        t_in = _input(t, ctx.rank)
        try:
            if t != first:
                assert issued.wait(60), "the first thread never issued"
            work = dist.all_reduce(t_in, group=group, async_op=True)
            if t == first:
                issued.set()
            work.wait()
            out[t] = (t_in, None)
        except Exception as err:  # noqa: BLE001 - reported per thread
            issued.set()
            out[t] = (t_in, str(err))

    def run(t):
        if lanes:
            with ringguard.issue_lane(lanes[t]):
                body(t)
        else:
            body(t)

    # Both names known to this process before either thread issues: a mismatch message names a lane this
    # process never entered by its id, and the second thread may not have entered its own yet when the first
    # thread's collective fails (a loaded machine).
    for name in lanes or ():
        with ringguard.issue_lane(name):
            pass
    threads = [threading.Thread(target=run, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
        assert not th.is_alive(), "a thread never finished"
    return out


@CASES.case("without-lanes-threads-swap-results")
def _(ctx):
    g = dist.new_group(backend="ringguard")
    out = _opposite_orders(ctx, g, None)
    for t in range(2):
        t_out, err = out[t]
        assert err is None, f"thread {t}: {err}"
        # Collective 0 pairs rank 0's thread 0 with rank 1's thread 1: the partner is the other thread.
        want = _sum(t, 1 - t) if ctx.rank == 0 else _sum(1 - t, t)
        assert torch.equal(t_out, want), f"thread {t}: {t_out.tolist()} != {want.tolist()}"
        assert not torch.equal(t_out, _sum(t, t)), "the result the thread meant: no swap to document"
    return {"thread0": out[0][0].tolist(), "thread1": out[1][0].tolist()}


@CASES.case("lanes-turn-the-swap-into-a-fingerprint-mismatch")
def _(ctx):
    g = dist.new_group(backend="ringguard")
    out = _opposite_orders(ctx, g, LANES)
    # Rank 0's first collective is thread 0's (py-prefetch), rank 1's thread 1's (py-compute).
    mismatch = ("collective fingerprint mismatch: rank 0 has {allreduce op=sum dtype=f32 count=5 seq=0 lane "
                "'py-prefetch' #0}, rank 1 has {allreduce op=sum dtype=f32 count=5 seq=0 lane 'py-compute' #0} "
                "(the same collective from different issue lanes: threads issued same-shape collectives in a "
                "different order on these ranks)")
    for t in range(2):
        t_in, err = out[t]
        assert err is not None, f"thread {t} succeeded with {t_in.tolist()}"
        assert mismatch in err, f"thread {t}: {err}"
        assert torch.equal(t_in, _input(t, ctx.rank)), f"thread {t}: the tensor changed: {t_in.tolist()}"
    # The group is poisoned with that error: the next call, from any thread, fails with it.
    with pytest.raises(RuntimeError) as info:
        dist.all_reduce(torch.ones(COUNT), group=g)
    assert mismatch in str(info.value), str(info.value)
    return {"message": out[0][1][:600]}


@CASES.case("lanes-in-one-order-give-exact-results")
def _(ctx):
    g = dist.new_group(backend="ringguard")
    for _ in range(3):
        for t in range(2):
            with ringguard.issue_lane(LANES[t]):
                assert ringguard.current_issue_lane() != 0
                x = _input(t, ctx.rank)
                dist.all_reduce(x, group=g)
                assert torch.equal(x, _sum(t, t)), x.tolist()
    assert ringguard.current_issue_lane() == 0
    x = _input(0, ctx.rank)
    dist.all_reduce(x, group=g)  # outside every lane: matched by order alone
    assert torch.equal(x, _sum(0, 0)), x.tolist()
    return {}


@CASES.case("send-recv-across-lanes-fails-on-both-ends")
def _(ctx):
    g = dist.new_group(backend="ringguard")
    x = torch.arange(4, dtype=torch.uint8)
    with ringguard.issue_lane(LANES[ctx.rank]):
        with pytest.raises(RuntimeError) as info:
            if ctx.rank == 0:
                dist.send(x, 1, group=g)
            else:
                dist.recv(x, 0, group=g)
    msg = str(info.value)
    assert ("sendrecv mismatch: rank 0 sends {sendrecv dtype=u8 count=4 tag=0 seq=0 lane 'py-prefetch'}, "
            "rank 1 expects {sendrecv dtype=u8 count=4 tag=0 seq=0 lane 'py-compute'}") in msg, msg
    return {"message": msg[:400]}


@CASES.case("a-name-that-cannot-name-a-lane")
def _(ctx):
    with pytest.raises(ValueError) as info:
        ringguard.issue_lane("")
    assert "ringguard.issue_lane: an issue lane's name must not be empty" in str(info.value), str(info.value)
    # "plumless" and "buckeroo" share a CRC-32, the lane id: the second name is refused once the first is in.
    with ringguard.issue_lane("plumless"):
        pass
    with pytest.raises(ValueError) as info:
        ringguard.issue_lane("buckeroo")
    assert "issue lanes 'buckeroo' and 'plumless' have the same id 0x4ddb0c25" in str(info.value), str(info.value)
    return {}


def _init():
    dist.init_process_group("ringguard", timeout=timedelta(seconds=120))


# --- pytest side ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run():
    return harness.launch(__file__, NPROC)


@pytest.mark.parametrize("name", CASES.names)
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


if __name__ == "__main__":
    harness.run_worker(CASES, _init)
