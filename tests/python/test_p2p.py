"""Point-to-point over the "ringguard" backend: batch_isend_irecv (coalescing), and receive from any source.

``batch_isend_irecv`` goes through the backend's startCoalescing / endCoalescing (the backend says
``supports_coalescing``): the ops of one batch start at once, and the batch returns one Work that completes
when all of them have. Every rank sends a message of its own size to both neighbours of the ring and
receives from both; the payloads are integer-valued (arange plus 1000 x the sender's rank, several dtypes),
so the expected bytes are known exactly. With injected corruptions (small slices, so a message has many)
the results must be the same bytes, every injection detected (detected == injected, nothing escaped).

``dist.recv(t)`` without ``src`` receives from whichever rank sends (the receiver learns the source): messages
of one sender match in order, receives match in issue order, and among the senders whose message is waiting
the lowest rank's is taken; a count that differs fails both sides at once.

The ``cuda-`` cases run on CUDA tensors with RINGGUARD_DEVICE_TRANSPORT=peer (skipped without a GPU; on the
GPU machine under MPS: scripts/gpu_peer_torch_check.sh): send/recv then run on the device's peer windows, a
batch as one grouped call (Communicator::sendRecvGroupAsync), and lone isend/irecv held until a wait (or another
call) releases them as one grouped call.
"""

import os
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import harness

CASES = harness.Cases()
# Sizes in elements: larger than a 1 KiB slice for the fault cases, odd, and one empty message.
DTYPES = (torch.float32, torch.float64, torch.int64, torch.bfloat16, torch.uint8)


def _count(src: int, to_right: bool, k: int) -> int:
    # Message k from rank `src` to its right (or left) neighbour: sizes differ per sender, direction, dtype.
    return 0 if (src, to_right, k) == (0, False, 4) else 257 + 131 * src + (64 if to_right else 0) + 37 * k


def _payload(src: int, to_right: bool, k: int, dtype, device="cpu") -> torch.Tensor:
    n = _count(src, to_right, k)
    base = torch.arange(n, dtype=torch.int64) % 251 + (7 if to_right else 3) * src + k
    return base.to(dtype).to(device)


def _ring_ops(ctx, group, device="cpu"):
    """The batch: to both neighbours, every dtype; returns (ops, [(received tensor, expected)])."""
    right, left = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size
    ops, checks = [], []
    for k, dt in enumerate(DTYPES):
        ops.append(dist.P2POp(dist.isend, _payload(ctx.rank, True, k, dt, device), right, group))
        ops.append(dist.P2POp(dist.isend, _payload(ctx.rank, False, k, dt, device), left, group))
    for k, dt in enumerate(DTYPES):
        # From the left neighbour its to-the-right message, from the right one its to-the-left one. At 2
        # ranks both neighbours are the same rank: messages per (peer, direction) match in issue order,
        # and the sender issues to-right before to-left as the receiver issues from-left before from-right.
        from_left = torch.full((_count(left, True, k),), 99, dtype=dt, device=device)
        from_right = torch.full((_count(right, False, k),), 99, dtype=dt, device=device)
        ops.append(dist.P2POp(dist.irecv, from_left, left, group))
        ops.append(dist.P2POp(dist.irecv, from_right, right, group))
        checks.append((from_left, _payload(left, True, k, dt, device)))
        checks.append((from_right, _payload(right, False, k, dt, device)))
    return ops, checks


def _run_ring(ctx, group, device="cpu"):
    ops, checks = _ring_ops(ctx, group, device)
    works = dist.batch_isend_irecv(ops)
    # Coalesced: one Work for the whole batch (without coalescing torch returns one per op).
    assert len(works) == 1, f"{len(works)} works for a batch of {len(ops)} ops"
    works[0].wait()
    assert works[0].is_completed()
    for i, (got, want) in enumerate(checks):
        assert got.dtype == want.dtype and torch.equal(got, want), f"message {i} ({want.dtype}): {got[:8]}"
    return len(ops)


@CASES.case("backend-supports-coalescing")
def _(ctx):
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    assert backend.supports_coalescing, "batch_isend_irecv would not coalesce"
    return {}


@CASES.case("batch_isend_irecv-ring")
def _(ctx):
    return {"ops": _run_ring(ctx, None)}


@CASES.case("batch_isend_irecv-ring-twice-on-a-new-group")
def _(ctx):
    g = dist.new_group(backend="ringguard")
    n = _run_ring(ctx, g) + _run_ring(ctx, g)
    dist.destroy_process_group(g)
    return {"ops": n}


def _check_faults(results, nproc):
    assert sum(r["injected"] for r in results) > 0, f"nothing injected: {results}"
    for rank, r in enumerate(results):
        assert r["detected"] == r["injected"] and r["escaped"] == 0, f"rank {rank}: {r}"


@CASES.case("batch_isend_irecv-ring-with-faults", check=_check_faults)
def _(ctx):
    import ringguard

    g = dist.new_group(backend="ringguard", pg_options=ringguard.Options(
        slice_bytes=1024, fault_mode="bitflip", fault_prob=0.2, fault_seed=9))
    before = ringguard.counters(g)
    for _ in range(3):
        _run_ring(ctx, g)
    after = ringguard.counters(g)
    dist.destroy_process_group(g)
    return {k: after[k] - before[k] for k in ("injected", "detected", "escaped", "retransmitted")}


@CASES.case("coalescing-manager-with-device")
def _(ctx):
    # _coalescing_manager(device=...) calls startCoalescing/endCoalescing itself; what is issued inside
    # (a broadcast, the fast path's allreduce_coalesced) completes with the one Work it returns.
    t = torch.full((33,), float(ctx.rank + 1))
    u = torch.full((5,), 2.0 * (ctx.rank + 1))
    b = torch.arange(17, dtype=torch.int32) * (ctx.rank + 1)
    with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        dist.broadcast(b, src=ctx.size - 1)
    assert len(cm.works) == 1
    cm.wait()
    assert torch.equal(b, torch.arange(17, dtype=torch.int32) * ctx.size), b
    with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        dist.all_reduce(t)
        dist.all_reduce(u)
    assert len(cm.works) == 1
    cm.wait()
    total = ctx.size * (ctx.size + 1) / 2
    assert torch.equal(t, torch.full((33,), total)) and torch.equal(u, torch.full((5,), 2 * total)), (t, u)
    # Synchronous: the manager waits itself.
    v = torch.full((9,), float(ctx.rank))
    with dist._coalescing_manager(device=torch.device("cpu")):
        dist.all_reduce(v)
    assert torch.equal(v, torch.full((9,), total - ctx.size)), v
    return {}


@CASES.case("batch_isend_irecv-size-mismatch-fails-the-batch")
def _(ctx):
    # Rank 0 receives one element fewer than rank size-1 sends it: the batch's Work raises on both (the
    # lanes compare counts and name both). One message only; the ring case below has other receives in
    # flight when the mismatch fails the lanes.
    g = dist.new_group(backend="ringguard", timeout=timedelta(seconds=60))
    last = ctx.size - 1
    t0 = time.monotonic()
    error = ""
    if ctx.rank in (0, last):
        op = dist.P2POp(dist.irecv, torch.zeros(9), last, g) if ctx.rank == 0 else \
            dist.P2POp(dist.isend, torch.ones(10), 0, g)
        try:
            dist.batch_isend_irecv([op])[0].wait()
        except RuntimeError as err:
            error = str(err)
    seconds = time.monotonic() - t0
    dist.destroy_process_group(g)
    if ctx.rank in (0, last):
        assert error, "the mismatched batch completed"
        assert "dtype=f32 count=9 " in error and "dtype=f32 count=10 " in error, error
        assert seconds < 30, f"failed after {seconds:.1f} s: {error}"
    return {"error": error[:300], "seconds": round(seconds, 3)}


@CASES.case("ring-size-mismatch-with-a-receive-in-flight")
def _(ctx):
    # Every rank receives from its left and sends to its right at once; rank 0 expects one element fewer
    # than its left sends. The mismatch fails rank 0's lanes while its neighbours' receives are in flight;
    # those receives are abandoned (Gloo cannot withdraw one) and must not write into freed memory: before
    # the lanes kept their slots for their whole life this corrupted the heap (the process aborted at exit
    # in tcache_thread_shutdown, 3 runs of 3 at np 2).
    g = dist.new_group(backend="ringguard", timeout=timedelta(seconds=60))
    left, right = (ctx.rank - 1) % ctx.size, (ctx.rank + 1) % ctx.size
    inbox = torch.zeros(9 if ctx.rank == 0 else 10)
    ops = [dist.P2POp(dist.irecv, inbox, left, g), dist.P2POp(dist.isend, torch.ones(10), right, g)]
    error = ""
    try:
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    except RuntimeError as err:
        error = str(err)
    # Churn the allocator: a late write into freed memory shows up as a crash here or at exit.
    junk = [torch.empty(n) for n in range(1, 2000, 7)]
    del junk
    dist.destroy_process_group(g)
    if ctx.rank == 0:
        assert "dtype=f32 count=9 " in error and "dtype=f32 count=10 " in error, error
    return {"error": error[:300]}


@CASES.case("send-recv-between-ranks-whose-settings-differ-fails-both")
def _(ctx):
    # The last rank's group has other slice bytes. Before the lanes compared settings with a peer, its
    # receive was posted for 1 KiB slices while rank 0 sent larger ones, and Gloo aborted the process
    # (SIGABRT); now both ends raise the handshake's error, at once.
    import ringguard

    last = ctx.size - 1
    options = ringguard.Options(slice_bytes=1024) if ctx.rank == last else None
    g = dist.new_group(backend="ringguard", timeout=timedelta(seconds=60), pg_options=options)
    t = torch.arange(50000, dtype=torch.float32)
    t0 = time.monotonic()
    error = ""
    try:
        if ctx.rank == 0:
            dist.send(t, dst=last, group=g)
        elif ctx.rank == last:
            dist.recv(t, src=0, group=g)
    except RuntimeError as err:
        error = str(err)
    seconds = time.monotonic() - t0
    t1 = time.monotonic()
    dist.destroy_process_group(g)
    # Every rank's end is prompt, the one outside the failed pair too: the broken transports say goodbye,
    # so no healthy one waits out its 10 s for them (before, that rank took 10 s here at np 3).
    ending = time.monotonic() - t1
    assert ending < 5, f"destroy_process_group took {ending:.1f} s"
    if ctx.rank in (0, last):
        assert "point-to-point settings disagree: RINGGUARD_SLICE_BYTES differs: rank 0 has " in error, error
        assert f"rank {last} has 1024" in error, error
        assert seconds < 30, f"failed after {seconds:.1f} s: {error}"
    return {"error": error[:300], "seconds": round(seconds, 3), "ending": round(ending, 3)}


def _from(src: int, k: int, n: int, dtype) -> torch.Tensor:
    """Message k of rank `src` to rank 0: integers by sender and message, so the content names its sender."""
    return ((torch.arange(n, dtype=torch.int64) * (k + 1) + 100 * src + k) % 251).to(dtype)


# (elements, dtype) of the messages each rank sends to rank 0: an empty one, a small one (in its fingerprint
# frame) and one of several 1 KiB slices (the pipeline).
ANY_MESSAGES = [(5, torch.float32), (0, torch.int64), (3001, torch.bfloat16), (17, torch.complex64)]


@CASES.case("recv-any-source-learns-the-sender")
def _(ctx):
    # Every other rank sends rank 0 the messages above, one per round; rank 0 receives each without a source
    # and gets the sender's rank back (dist.recv's return value, irecv's Work), and every byte is the
    # sender's.
    import ringguard

    g = dist.new_group(backend="ringguard", pg_options=ringguard.Options(slice_bytes=1024))
    seen = []
    if ctx.rank == 0:
        got = {}
        for k, (n, dt) in enumerate(ANY_MESSAGES):
            for _ in range(ctx.size - 1):
                t = torch.full((n,), 99, dtype=dt)
                if k % 2:
                    work = dist.irecv(t, group=g)
                    work.wait()
                    src = work._source_rank()
                else:
                    src = dist.recv(t, group=g)
                seen.append(src)
                assert torch.equal(t, _from(src, k, n, dt)), f"message {k} from {src}: {t[:6]}"
                got.setdefault(k, []).append(src)
            dist.barrier(group=g)  # a round per size: a sender's next message would not fit this one
        assert all(sorted(v) == list(range(1, ctx.size)) for v in got.values()), got
    else:
        for k, (n, dt) in enumerate(ANY_MESSAGES):
            dist.send(_from(ctx.rank, k, n, dt), dst=0, group=g)
            dist.barrier(group=g)
    dist.destroy_process_group(g)
    return {"sources": seen}


@CASES.case("recv-any-source-takes-the-lowest-rank-waiting")
def _(ctx):
    # The matching rule: among the peers whose message is there, the lowest rank's first. The pairs' settings
    # check is made first (one named message each), then every sender issues its message before a barrier,
    # so both are waiting when rank 0 receives; receives match in issue order, so a receive named for the last
    # rank, issued first, still takes that rank's message.
    g = dist.new_group(backend="ringguard")
    last = ctx.size - 1
    order = []
    if ctx.rank == 0:
        for p in range(1, ctx.size):
            dist.recv(torch.zeros(1), src=p, group=g)
        dist.barrier(group=g)
        named = dist.irecv(torch.zeros(3), src=last, group=g)
        for _ in range(1, ctx.size):
            t = torch.zeros(3)
            order.append(dist.recv(t, group=g))
            assert torch.equal(t, torch.full((3,), float(order[-1]))), t
        named.wait()
        assert order == list(range(1, ctx.size)), order
    else:
        dist.send(torch.zeros(1), dst=0, group=g)
        works = [dist.isend(torch.full((3,), float(ctx.rank)), dst=0, group=g)]
        if ctx.rank == last:
            works.append(dist.isend(torch.full((3,), float(ctx.rank)), dst=0, group=g))
        dist.barrier(group=g)
        for w in works:
            w.wait()
    dist.destroy_process_group(g)
    return {"order": order}


def _mismatched_any_source_recv(ctx, want, sent):
    """Rank 0 receives `want` without a source, the last rank sends `sent`: (error, seconds, group)."""
    g = dist.new_group(backend="ringguard", timeout=timedelta(seconds=60))
    t0 = time.monotonic()
    error = ""
    try:
        if ctx.rank == 0:
            dist.recv(want, group=g)
        elif ctx.rank == ctx.size - 1:
            dist.send(sent, dst=0, group=g)
    except RuntimeError as err:
        error = str(err)
    return error, time.monotonic() - t0, g


@CASES.case("recv-any-source-size-mismatch-fails-both-sides")
def _(ctx):
    # Rank 0 receives 9 floats without a source; the last rank sends 10. Both raise at once naming both
    # counts (not after the 60 s timeout).
    error, seconds, g = _mismatched_any_source_recv(ctx, torch.zeros(9), torch.ones(10))
    # Collectives of the group are not affected (their own transport).
    s = torch.ones(4)
    dist.all_reduce(s, group=g)
    assert torch.equal(s, torch.full((4,), float(ctx.size))), s
    dist.destroy_process_group(g)
    if ctx.rank in (0, ctx.size - 1):
        assert "dtype=f32 count=9 " in error and "dtype=f32 count=10 " in error, error
        assert seconds < 30, f"failed after {seconds:.1f} s: {error}"
    return {"error": error[:300], "seconds": round(seconds, 3)}


@CASES.case("recv-any-source-dtype-mismatch-fails-both-sides")
def _(ctx):
    # The same 16 bytes as int32 on the receiver and float32 on the sender: both raise naming both dtypes.
    error, seconds, g = _mismatched_any_source_recv(ctx, torch.zeros(4, dtype=torch.int32), torch.ones(4))
    dist.destroy_process_group(g)
    if ctx.rank in (0, ctx.size - 1):
        assert "dtype=f32 count=4 " in error and "dtype=i32 count=4 " in error, error
        assert seconds < 30, f"failed after {seconds:.1f} s: {error}"
    return {"error": error[:300], "seconds": round(seconds, 3)}


# --- CUDA tensors on the peer windows (RINGGUARD_DEVICE_TRANSPORT=peer) ------------------------------

def _device_sendrecvs() -> int:
    """send/recv calls of this process's device communicators so far (the lanes count on none of them)."""
    import ringguard

    return sum(c["collectives"].get("sendrecv", {}).get("calls", 0)
               for c in ringguard.summary()["communicators"] if c["transport"] in ("peer", "staged", "nccl"))


@CASES.case("cuda-batch_isend_irecv-ring-on-the-windows")
def _(ctx):
    # The ring batch above on CUDA tensors, in every dtype: one grouped call on the device communicator (a
    # round per (shift, occurrence): 2 x len(DTYPES) at np2, whose neighbours are one rank; len(DTYPES) x 2
    # at np3, sends right and receives left, then the reverse).
    import ringguard

    dev = torch.device("cuda", torch.cuda.current_device())
    before = _device_sendrecvs()
    n = _run_ring(ctx, None, dev) + _run_ring(ctx, None, dev)
    rounds = _device_sendrecvs() - before
    assert rounds == 2 * 2 * len(DTYPES), f"{rounds} device send/recv rounds for two batches of {n // 2} ops"
    assert ringguard.transport("cuda") == "peer", ringguard.transport("cuda")
    return {"ops": n, "rounds": rounds}


@CASES.case("cuda-pipeline-one-sided-ends")
def _(ctx):
    # Forward activations 0 -> 1 -> ... -> last (the first stage only sends, the last only receives), then the
    # gradients back, each stage's batch listing its receive first (as a stage does).
    dev = torch.device("cuda", torch.cuda.current_device())
    act = lambda r: (torch.arange(1000, dtype=torch.float32) + 1000 * r).to(dev)  # noqa: E731
    grad = lambda r: (torch.arange(77, dtype=torch.float64) - 10 * r).to(dev)  # noqa: E731
    inbox = torch.zeros(1000, device=dev)
    ops = []
    if ctx.rank > 0:
        ops.append(dist.P2POp(dist.irecv, inbox, ctx.rank - 1))
    if ctx.rank + 1 < ctx.size:
        ops.append(dist.P2POp(dist.isend, act(ctx.rank), ctx.rank + 1))
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    if ctx.rank > 0:
        assert torch.equal(inbox, act(ctx.rank - 1)), inbox[:4]
    back = torch.zeros(77, dtype=torch.float64, device=dev)
    ops = []
    if ctx.rank + 1 < ctx.size:
        ops.append(dist.P2POp(dist.irecv, back, ctx.rank + 1))
    if ctx.rank > 0:
        ops.append(dist.P2POp(dist.isend, grad(ctx.rank), ctx.rank - 1))
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    if ctx.rank + 1 < ctx.size:
        assert torch.equal(back, grad(ctx.rank + 1)), back[:4]
    return {}


@CASES.case("cuda-lone-isend-irecv-pairs")
def _(ctx):
    # Outside a batch, ops waited on at once (each its own group): even ranks send to the odd rank above, then
    # receive its answer; a non-contiguous tensor each way.
    dev = torch.device("cuda", torch.cuda.current_device())
    peer = ctx.rank + 1 if ctx.rank % 2 == 0 else ctx.rank - 1
    if peer >= ctx.size:
        return {"idle": True}
    mine = (torch.arange(24, dtype=torch.int32) + 100 * ctx.rank).to(dev).view(4, 6)
    theirs = (torch.arange(24, dtype=torch.int32) + 100 * peer).to(dev).view(4, 6)
    got = torch.zeros(6, 4, dtype=torch.int32, device=dev).t()  # non-contiguous (a transposed view)
    if ctx.rank % 2 == 0:
        dist.isend(mine.t().contiguous().t(), peer).wait()
        dist.irecv(got, peer).wait()
        dist.send(mine[:, ::2], peer)
        half = torch.zeros(4, 3, dtype=torch.int32, device=dev)
        dist.recv(half, peer)
    else:
        work = dist.irecv(got, peer)
        work.wait()
        dist.isend(mine, peer).wait()
        half = torch.zeros(4, 3, dtype=torch.int32, device=dev)
        dist.recv(half, peer)
        dist.send(mine[:, ::2], peer)
    assert torch.equal(got, theirs), got
    assert torch.equal(half, theirs[:, ::2]), half
    return {}


@CASES.case("cuda-lone-ring-exchange-is-held-until-a-wait")
def _(ctx):
    # Every rank receives from the left, then sends to the right, each a lone op, then waits: issued one at a
    # time each rank's receive would hold its stream until the left rank's send, queued behind that rank's own
    # receive (a deadlock). Both are held and go at the first wait as one grouped call, one round (the same
    # shift both ways). Then released by is_completed() polling, by a collective between the calls and the
    # waits (which issues the held pair before itself), and by a batch that takes the held receive in.
    import time

    dev = torch.device("cuda", torch.cuda.current_device())
    right, left = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size
    msg = lambda r, k: ((torch.arange(1000, dtype=torch.float32) + 1000 * r) * k).to(dev)  # noqa: E731
    before = _device_sendrecvs()
    got = torch.zeros(1000, device=dev)
    works = [dist.irecv(got, left), dist.isend(msg(ctx.rank, 1), right)]
    assert _device_sendrecvs() == before, "a lone op went out before any wait"
    works[1].wait()
    works[0].wait()
    assert torch.equal(got, msg(left, 1)), got[:4]
    assert _device_sendrecvs() - before == 1, f"{_device_sendrecvs() - before} rounds for the held pair"
    got = torch.zeros(1000, device=dev)
    works = [dist.irecv(got, left), dist.isend(msg(ctx.rank, 2), right)]
    deadline = time.monotonic() + 60
    while not all(w.is_completed() for w in works):
        assert time.monotonic() < deadline, "is_completed() never saw the held pair done"
        time.sleep(0.001)
    assert torch.equal(got, msg(left, 2)), got[:4]
    got = torch.zeros(1000, device=dev)
    works = [dist.irecv(got, left), dist.isend(msg(ctx.rank, 3), right)]
    total = torch.ones(4, device=dev)
    dist.all_reduce(total)
    for w in works:
        w.wait()
    assert torch.equal(got, msg(left, 3)), got[:4]
    assert torch.equal(total, torch.full((4,), float(ctx.size), device=dev)), total
    got = torch.zeros(1000, device=dev)
    held = dist.irecv(got, left)
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, msg(ctx.rank, 4), right)]):
        w.wait()
    held.wait()
    assert torch.equal(got, msg(left, 4)), got[:4]
    assert _device_sendrecvs() - before == 4, f"{_device_sendrecvs() - before} rounds for four held pairs"
    return {}


@CASES.case("cuda-lone-send-first-exchange")
def _(ctx):
    # PyTorch's tutorial ring, send first: isend to the right, a blocking recv from the left, then wait on the
    # send. A send's kernel ends only once its receive is posted, so issued at once every rank's send would
    # hold its stream until the right rank's receive, queued behind that rank's own send; held, the send goes
    # with the receive at the recv's wait, one round.
    dev = torch.device("cuda", torch.cuda.current_device())
    right, left = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size
    mine = (torch.arange(513, dtype=torch.float64) - 7 * ctx.rank).to(dev)
    got = torch.zeros(513, dtype=torch.float64, device=dev)
    before = _device_sendrecvs()
    req = dist.isend(mine, right)
    assert _device_sendrecvs() == before, "a lone send went out before any wait"
    dist.recv(got, left)
    req.wait()
    assert torch.equal(got, (torch.arange(513, dtype=torch.float64) - 7 * left).to(dev)), got[:4]
    assert _device_sendrecvs() - before == 1, f"{_device_sendrecvs() - before} rounds for the exchange"
    return {}


@CASES.case("device-send-recv-under-auto-keeps-the-lanes")
def _(ctx):
    # The default RINGGUARD_DEVICE_TRANSPORT=auto (docs/TORCH.md, "Point-to-point"): its CUDA collectives take
    # the peer windows, its send/recv keeps the lanes, before and after a collective made the device
    # communicator: no device send/recv round, and a receive from any source works.
    import ringguard

    if ctx.device != "cuda" or os.environ.get("RINGGUARD_DEVICE_TRANSPORT", "auto") != "auto":
        raise harness.Skip("CUDA tensors under RINGGUARD_DEVICE_TRANSPORT=auto only")
    dev = torch.device("cuda", torch.cuda.current_device())
    g = dist.new_group(backend="ringguard", timeout=timedelta(seconds=60))
    right, left = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size

    def exchange(k):
        got = torch.zeros(300 + k, dtype=torch.int32, device=dev)
        mine = (torch.arange(300 + k, dtype=torch.int32) * (k + 1) + ctx.rank).to(dev)
        for w in (dist.irecv(got, left, group=g), dist.isend(mine, right, group=g)):
            w.wait()
        want = torch.arange(300 + k, dtype=torch.int32) * (k + 1) + left
        assert torch.equal(got.cpu(), want), (k, got[:4])

    before = _device_sendrecvs()
    exchange(0)
    s = torch.ones(4, device=dev)
    dist.all_reduce(s, group=g)
    assert torch.equal(s.cpu(), torch.full((4,), float(ctx.size))), s
    transport = ringguard.transport("cuda", g)
    assert transport == harness.device_transport(ctx.size), transport
    exchange(1)
    source = -1
    if ctx.rank == 0:
        got = torch.zeros(5, device=dev)
        source = dist.recv(got, group=g)  # from any source: rank size - 1
        assert source == ctx.size - 1 and torch.equal(got.cpu(), torch.full((5,), 7.0)), (source, got)
    elif ctx.rank == ctx.size - 1:
        dist.send(torch.full((5,), 7.0, device=dev), 0, group=g)
    rounds = _device_sendrecvs() - before
    assert rounds == 0, f"{rounds} device send/recv rounds under auto"
    dist.destroy_process_group(g)
    return {"transport": transport, "source": source}


@CASES.case("cuda-batch-mixing-cpu-and-cuda-tensors")
def _(ctx):
    # One batch around the ring with a CPU and a CUDA message each way: the CPU ones take the lanes, the CUDA
    # ones the grouped call at endCoalescing; the batch's one Work covers both.
    dev = torch.device("cuda", torch.cuda.current_device())
    right, left = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size
    msg = lambda r, d: (torch.arange(300, dtype=torch.int64) * 3 + r).to(d)  # noqa: E731
    got_cpu, got_cuda = torch.zeros(300, dtype=torch.int64), torch.zeros(300, dtype=torch.int64, device=dev)
    ops = [dist.P2POp(dist.isend, msg(ctx.rank, dev), right), dist.P2POp(dist.isend, msg(ctx.rank, "cpu"), right),
           dist.P2POp(dist.irecv, got_cpu, left), dist.P2POp(dist.irecv, got_cuda, left)]
    works = dist.batch_isend_irecv(ops)
    assert len(works) == 1, len(works)
    works[0].wait()
    assert torch.equal(got_cpu, msg(left, "cpu")), got_cpu[:4]
    assert torch.equal(got_cuda, msg(left, dev)), got_cuda[:4]
    return {}


@CASES.case("cuda-recv-any-source-is-refused")
def _(ctx):
    # A receive without a source cannot run on the windows: refused at once, naming why and the fixes; the
    # group stays usable.
    dev = torch.device("cuda", torch.cuda.current_device())
    error = ""
    if ctx.rank == 0:
        try:
            dist.recv(torch.zeros(3, device=dev))
        except RuntimeError as err:
            error = str(err)
        assert "recv without a source of a CUDA tensor on rank 0" in error, error
        assert "RINGGUARD_DEVICE_TRANSPORT" in error and "CPU tensor" in error, error
    s = torch.ones(4, device=dev)
    dist.all_reduce(s)
    assert torch.equal(s.cpu(), torch.full((4,), float(ctx.size))), s
    return {"error": error[:300]}


@CASES.case("cuda-batch_isend_irecv-ring-with-faults", check=_check_faults)
def _(ctx):
    # Corrupted chunk reads on the windows (every message several chunks): re-read, exact, every injection
    # detected.
    import ringguard

    dev = torch.device("cuda", torch.cuda.current_device())
    g = dist.new_group(backend="ringguard", pg_options=ringguard.Options(
        fault_mode="bitflip", fault_prob=0.2, fault_seed=9))
    before = ringguard.counters(g)
    for _ in range(3):
        _run_ring(ctx, g, dev)
    after = ringguard.counters(g)
    dist.destroy_process_group(g)
    return {k: after[k] - before[k] for k in ("injected", "detected", "escaped", "retransmitted")}


def _init():
    dist.init_process_group("ringguard", timeout=timedelta(seconds=120))


# --- pytest side ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def run(request):
    # The cuda- cases run in launches of their own (below), with the transport they test.
    return harness.launch(__file__, request.param,
                          env={"RINGGUARD_TEST_ONLY": ",".join(n for n in CASES.names if not n.startswith("cuda-"))})


@pytest.mark.parametrize("name", [n for n in CASES.names if not n.startswith("cuda-")])
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


CUDA_CASES = [n for n in CASES.names if n.startswith("cuda-")]


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def cuda_run(request):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: ranks on one GPU under MPS with RINGGUARD_DEVICE_TRANSPORT=peer "
                    "(scripts/gpu_peer_torch_check.sh)")
    return harness.launch(__file__, request.param, env={"RINGGUARD_TEST_DEVICE": "cuda",
                                                        "RINGGUARD_DEVICE_TRANSPORT": "peer",
                                                        "RINGGUARD_TEST_ONLY": ",".join(CUDA_CASES)})


@pytest.mark.parametrize("name", CUDA_CASES)
def test_cuda_peer(cuda_run, name):
    harness.check_case(CASES, cuda_run, name)


if __name__ == "__main__":
    if os.environ.get("RINGGUARD_TEST_DEVICE") == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    harness.run_worker(CASES, _init)
