"""Collectives of the "ringguard" backend against exact expected values and against gloo.

One torchrun launch per world size (2 and 3) runs every case below; the default group is ringguard with
``Options(slice_bytes=4096)`` so that the larger counts span several slices per ring chunk.

Inputs are small integers (floats too), so every sum, product and min/max is exact in every dtype and
independent of the summation order: results must be bit-identical to the expected values and to gloo.
AVG (which gloo lacks for integers) is checked against the correctly rounded quotient (floats; the
C++ reduction divides the exact sum in f32/f64) or the truncated one (integers).
"""

import os
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import harness

SLICE_BYTES = 4096
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
          "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8}
OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "prod": dist.ReduceOp.PRODUCT,
       "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}
# 0, 1, odd, and more than one slice per ring chunk at 3 ranks even for u8.
COUNTS = [0, 1, 1001, 3 * SLICE_BYTES + 77]
COUNTER_KEYS = {"collectives", "bytes_sent", "slices_sent", "slices_verified", "injected", "detected",
                "retransmitted", "escaped", "delayed", "repair_rounds", "control_frames", "control_bytes",
                "non_finite_inputs", "skipped"}

CASES = harness.Cases()


def _gen(*seed_parts):
    seed = 0
    for p in seed_parts:
        seed = (seed * 1000003 + p) % (2 ** 62)
    return torch.Generator().manual_seed(seed)


def _range(dt, op, size):
    """Input range [lo, hi) keeping every result exact (and AVG's integer sums unwrapped)."""
    is_float = dt.is_floating_point
    if op == "prod":
        return (-4, 5) if is_float else (0, 16) if dt == torch.uint8 else (-9, 10)
    if op == "avg":
        return (-40, 41) if is_float else (0, 256 // size) if dt == torch.uint8 else (-1000, 1001)
    if is_float:
        return (-40, 41)
    return {torch.int32: (-10 ** 6, 10 ** 6), torch.int64: (-2 ** 40, 2 ** 40), torch.uint8: (0, 256)}[dt]


def _input(dt, op, count, rank, size, salt):
    lo, hi = _range(dt, op, size)
    t = torch.randint(lo, hi, (count,), generator=_gen(salt, rank, count), dtype=torch.int64)
    return t.to(dt)


def _wrap(x64, dt):
    """int64 values -> dt with two's complement wrap (what the C++ reduction computes)."""
    bits = {torch.int32: 32, torch.uint8: 8}.get(dt)
    if bits is None:
        return x64.to(dt)
    m = 2 ** bits
    x = x64 % m
    if dt == torch.int32:
        x = torch.where(x >= 2 ** 31, x - m, x)
    return x.to(dt)


def _expected(dt, op, inputs, size):
    if dt.is_floating_point:
        xs = torch.stack([t.double() for t in inputs])
        if op == "sum":
            return xs.sum(0).to(dt)
        if op == "prod":
            return xs.prod(0).to(dt)
        if op == "min":
            return xs.amin(0).to(dt)
        if op == "max":
            return xs.amax(0).to(dt)
        # avg: the exact sum divided once, correctly rounded (f64 division, then one more rounding to dt,
        # which cannot differ from a direct rounding: f64 has more than 2p+2 bits for every p here).
        return torch.tensor([float(s) / size for s in xs.sum(0).tolist()], dtype=torch.float64).to(dt)
    xs = torch.stack([t.long() for t in inputs])
    if op == "sum":
        return _wrap(xs.sum(0), dt)
    if op == "prod":
        p = torch.ones(xs.shape[1], dtype=torch.int64)
        for row in xs:
            p = (p * row) % (2 ** 32) if dt != torch.int64 else p * row
        return _wrap(p, dt)
    if op == "min":
        return xs.amin(0).to(dt)
    if op == "max":
        return xs.amax(0).to(dt)
    return _wrap(torch.div(xs.sum(0), size, rounding_mode="trunc"), dt)


def _bits(t):
    """A tensor's bytes, for bit-exact comparison (distinguishes -0.0 and NaN payloads)."""
    t = t.detach().cpu().contiguous()
    return t.view(torch.uint8) if t.numel() else t.reshape(-1).to(torch.uint8)


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _diff(a, b) -> str:
    a, b = a.cpu(), b.cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
    neq = (_bits(a).view(-1, a.element_size()) != _bits(b).view(-1, b.element_size())).any(1)
    idx = neq.nonzero().flatten()[:5].tolist()
    return f"{int(neq.sum())} of {a.numel()} elements differ, first at {idx}: " \
           f"got {[a[i].item() for i in idx]} expected {[b[i].item() for i in idx]}"


def _allreduce_case(dname, oname, count):
    dt, op = DTYPES[dname], OPS[oname]
    salt = list(DTYPES).index(dname) * 10 + list(OPS).index(oname)

    def fn(ctx):
        inputs = [_input(dt, oname, count, r, ctx.size, salt) for r in range(ctx.size)]
        want = _expected(dt, oname, inputs, ctx.size)
        t = inputs[ctx.rank].clone().to(ctx.device)
        dist.all_reduce(t, op=op)
        got = t.cpu()
        assert _same_bits(got, want), f"ringguard vs expected: {_diff(got, want)}"
        out = {"checked_gloo": False}
        if oname != "avg" and ctx.device == "cpu":
            g = inputs[ctx.rank].clone()
            dist.all_reduce(g, op=op, group=ctx.ref)
            assert _same_bits(g, want), f"gloo vs expected (test bug?): {_diff(g, want)}"
            assert _same_bits(got, g), f"ringguard vs gloo: {_diff(got, g)}"
            out["checked_gloo"] = True
        return out
    return fn


for _d in DTYPES:
    for _o in OPS:
        for _n in COUNTS:
            CASES.add(f"allreduce-{_d}-{_o}-n{_n}", _allreduce_case(_d, _o, _n))


@CASES.case("allreduce-2d-and-async")
def _(ctx):
    # Several collectives in flight at once (async_op), 2-D shapes; they complete in issue order.
    works, tensors, wants = [], [], []
    for i, shape in enumerate([(33, 7), (1, 1), (64, 65), (5, 0)]):
        inputs = [_input(torch.float32, "sum", shape[0] * shape[1], r, ctx.size, 900 + i).reshape(shape)
                  for r in range(ctx.size)]
        wants.append(_expected(torch.float32, "sum", [x.reshape(-1) for x in inputs], ctx.size).reshape(shape))
        t = inputs[ctx.rank].clone().to(ctx.device)
        tensors.append(t)
        works.append(dist.all_reduce(t, async_op=True))
    for w in works:
        w.wait()
    for t, want in zip(tensors, wants):
        assert _same_bits(t.cpu(), want), _diff(t, want)
    fut = dist.all_reduce(torch.ones(3, device=ctx.device), async_op=True).get_future()
    val = fut.wait()
    assert torch.equal(val[0].cpu(), torch.full((3,), float(ctx.size))), f"future value {val}"


def _strided_views(base, device):
    """Non-contiguous tensors with base's values (4-D base): channels_last, a permuted view, a sliced view
    with gaps and a storage offset, and a column of a 2-D view."""
    n = base.numel()
    flat = torch.zeros(3 * n + 5, dtype=base.dtype, device=device)
    gapped = flat[5:].view(-1, 3)[:, 1].view(base.shape)  # stride 3, offset 6
    gapped.copy_(base)
    wide = torch.zeros(n, 2, dtype=base.dtype, device=device)
    column = wide[:, 1].view(base.shape)
    column.copy_(base)
    permuted = base.permute(3, 2, 1, 0).clone().permute(3, 2, 1, 0).to(device)
    return {"channels_last": base.to(device).contiguous(memory_format=torch.channels_last),
            "permuted": permuted, "gapped": gapped, "column": column}


@CASES.case("any-strides")
def _(ctx):
    # Tensors of any strides move by their logical elements (through a contiguous copy), as gloo and NCCL
    # take channels_last ones: every op, in place and out of place, against exact values. Ranks mix layouts.
    n, r, dev = ctx.size, ctx.rank, ctx.device
    shape = (2, 3, 4, 5)
    kinds = ["channels_last", "permuted", "gapped", "column"]

    def value(q, salt):
        return _input(torch.float32, "sum", 120, q, n, salt).reshape(shape)

    def strided(q, salt, i):
        return _strided_views(value(q, salt), dev)[kinds[(i + q) % len(kinds)]]  # a layout per rank

    for i, kind in enumerate(kinds):
        t = strided(r, 200 + i, i)
        dist.all_reduce(t)
        want = _expected(torch.float32, "sum", [value(q, 200 + i).reshape(-1) for q in range(n)], n)
        assert _same_bits(t.cpu(), want.reshape(shape)), f"all_reduce ({kind}): {_diff(t, want.reshape(shape))}"
        for root in range(n):
            t = strided(r, 210 + i, i) if r == root else _strided_views(torch.zeros(shape), dev)[kind]
            dist.broadcast(t, src=root)
            assert _same_bits(t.cpu(), value(root, 210 + i)), f"broadcast ({kind}) from {root}"
            t = strided(r, 220 + i, i)
            dist.reduce(t, dst=root)
            want = (_expected(torch.float32, "sum", [value(q, 220 + i).reshape(-1) for q in range(n)], n)
                    .reshape(shape) if r == root else value(r, 220 + i))
            assert _same_bits(t.cpu(), want), f"reduce ({kind}) to {root}: {_diff(t, want)}"
        # all_gather: a strided input, strided outputs.
        outs = [_strided_views(torch.zeros(shape), dev)[kinds[(i + q + 1) % len(kinds)]] for q in range(n)]
        dist.all_gather(outs, strided(r, 230 + i, i))
        for q in range(n):
            assert _same_bits(outs[q].cpu(), value(q, 230 + i)), f"all_gather ({kind}): block of rank {q}"
        # all_gather_into_tensor / reduce_scatter_tensor: strided output (n blocks along dim 0).
        big = torch.zeros(n * 2, 3, 4, 5, device=dev).contiguous(memory_format=torch.channels_last)
        dist.all_gather_into_tensor(big, strided(r, 240 + i, i))
        want = torch.cat([value(q, 240 + i) for q in range(n)])
        assert _same_bits(big.cpu(), want), f"all_gather_into_tensor ({kind}): {_diff(big, want)}"
        inp = torch.cat([value(r * n + q, 250 + i) for q in range(n)]).to(dev)
        out = _strided_views(torch.zeros(shape), dev)[kind]
        dist.reduce_scatter_tensor(out, inp.contiguous(memory_format=torch.channels_last))
        want = _expected(torch.float32, "sum", [value(q * n + r, 250 + i).reshape(-1) for q in range(n)], n)
        assert _same_bits(out.cpu(), want.reshape(shape)), f"reduce_scatter_tensor ({kind})"
        # all_to_all_single (rows of dim 0) and the list form, strided both ways.
        rows = torch.cat([value(r * n + q, 260 + i) for q in range(n)]).to(dev)
        out = torch.zeros(n * 2, 3, 4, 5, device=dev).contiguous(memory_format=torch.channels_last)
        dist.all_to_all_single(out, rows.contiguous(memory_format=torch.channels_last))
        want = torch.cat([value(q * n + r, 260 + i) for q in range(n)])
        assert _same_bits(out.cpu(), want), f"all_to_all_single ({kind})"
        outs = [_strided_views(torch.zeros(shape), dev)[kind] for _ in range(n)]
        dist.all_to_all(outs, [strided(r * n + q, 270 + i, i) for q in range(n)])
        for q in range(n):
            assert _same_bits(outs[q].cpu(), value(q * n + r, 270 + i)), f"all_to_all ({kind}) from {q}"
        # gather / scatter to and from rank 0.
        outs = [_strided_views(torch.zeros(shape), dev)[kind] for _ in range(n)] if r == 0 else None
        dist.gather(strided(r, 280 + i, i), outs, dst=0)
        if r == 0:
            for q in range(n):
                assert _same_bits(outs[q].cpu(), value(q, 280 + i)), f"gather ({kind}) block {q}"
        got = _strided_views(torch.zeros(shape), dev)[kind]
        dist.scatter(got, [strided(q, 290 + i, i) for q in range(n)] if r == 0 else None, src=0)
        assert _same_bits(got.cpu(), value(r, 290 + i)), f"scatter ({kind})"
        # send/recv around the ring, the receiver in another layout than the sender.
        if n > 1:
            nxt, prv = (r + 1) % n, (r - 1) % n
            got = _strided_views(torch.zeros(shape), dev)[kinds[(i + 2) % len(kinds)]]
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, strided(r, 300 + i, i), nxt),
                                           dist.P2POp(dist.irecv, got, prv)])
            for q in reqs:
                q.wait()
            assert _same_bits(got.cpu(), value(prv, 300 + i)), f"send/recv ({kind}) from {prv}"
    # allreduce_coalesced with strided members.
    ts = [strided(r, 310 + i, i) for i in range(len(kinds))]
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    dist.distributed_c10d._get_default_group()._get_backend(torch.device(dev)).allreduce_coalesced(
        ts, opts).wait()
    for i, t in enumerate(ts):
        want = _expected(torch.float32, "sum", [value(q, 310 + i).reshape(-1) for q in range(n)], n)
        assert _same_bits(t.cpu(), want.reshape(shape)), f"all_reduce_coalesced member {i}"
    # An output whose elements share memory can't receive a result: refused on every rank, naming it, and
    # the group goes on.
    for call in (lambda e: dist.all_reduce(e), lambda e: dist.all_gather([e] * n, torch.ones(4, device=dev))):
        try:
            call(torch.ones(1, device=dev).expand(4))
        except RuntimeError as err:
            assert "share memory" in str(err) and "expanded" in str(err), f"unclear error: {err}"
        else:
            raise AssertionError("an expanded output was accepted")
    t = torch.ones(3, device=dev)
    dist.all_reduce(t)
    assert torch.equal(t.cpu(), torch.full((3,), float(n))), t


@CASES.case("outputs-that-require-grad")
def _(ctx):
    # Parameters (leaves that require grad) as outputs under no_grad, as gloo takes them: the copy-outs (a
    # list all-gather's, a non-contiguous tensor's, a received one's) write them outside autograd, whatever
    # the completing thread's grad mode.
    n, r, dev = ctx.size, ctx.rank, ctx.device
    conv = torch.nn.Conv2d(3, 4, 3).to(dev).to(memory_format=torch.channels_last)
    want = _input(torch.float32, "sum", conv.weight.numel(), 0, n, 320).reshape(conv.weight.shape)
    with torch.no_grad():
        conv.weight.copy_(want if r == 0 else torch.zeros_like(want))
        dist.broadcast(conv.weight, src=0)
        assert _same_bits(conv.weight.detach().cpu(), want), "broadcast into a channels_last parameter"
        outs = [torch.nn.Parameter(torch.zeros(5, device=dev)) for _ in range(n)]
        dist.all_gather(outs, torch.full((5,), float(r), device=dev))
        for q in range(n):
            assert torch.equal(outs[q].detach().cpu(), torch.full((5,), float(q))), f"all_gather block {q}"
        if n > 1:
            got = torch.nn.Parameter(torch.zeros(4, 3, device=dev).t())
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((3, 4), float(r), device=dev),
                                                      (r + 1) % n),
                                           dist.P2POp(dist.irecv, got, (r - 1) % n)])
            for q in reqs:
                q.wait()
            assert torch.equal(got.detach().cpu(), torch.full((3, 4), float((r - 1) % n))), "recv"
    assert conv.weight.requires_grad and conv.weight.grad is None


def _payload(dt, count, rank, salt):
    g = _gen(salt, rank, count)
    if dt == torch.bool:
        return torch.randint(0, 2, (count,), generator=g).bool()
    if dt.is_complex:
        return torch.complex(torch.randn(count, generator=g), torch.randn(count, generator=g)).to(dt)
    if dt.is_floating_point:
        t = torch.randn(count, generator=g, dtype=torch.float64).mul(1e3).to(dt)
        specials = torch.tensor([float("nan"), float("inf"), -0.0, float("-inf")], dtype=dt)
        k = min(count, 4)
        t[:k] = specials[:k]
        return t
    info = torch.iinfo(dt)
    return torch.randint(info.min, info.max, (count,), generator=g, dtype=torch.int64).to(dt)


BCAST_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f64": torch.float64, "i64": torch.int64,
                "u8": torch.uint8, "i16": torch.int16, "bool": torch.bool, "c64": torch.complex64}


def _broadcast_case(dname, count):
    dt = BCAST_DTYPES[dname]

    def fn(ctx):
        for root in range(ctx.size):
            want = _payload(dt, count, root, 77)
            t = want.clone() if ctx.rank == root else torch.zeros(count, dtype=dt)
            t = t.to(ctx.device)
            dist.broadcast(t, src=root)
            assert _same_bits(t.cpu(), want), f"root {root}: {_diff(t, want)}"
    return fn


for _d in BCAST_DTYPES:
    for _n in (0, 1, 3 * SLICE_BYTES + 77):
        CASES.add(f"broadcast-{_d}-n{_n}", _broadcast_case(_d, _n))


def _allgather_case(dname, shape):
    dt = BCAST_DTYPES[dname]
    count = shape[0] * shape[1] if len(shape) == 2 else shape[0]

    def fn(ctx):
        mine = _payload(dt, count, ctx.rank, 55).reshape(shape).to(ctx.device)
        outs = [torch.zeros(shape, dtype=dt, device=ctx.device) for _ in range(ctx.size)]
        dist.all_gather(outs, mine)
        for r in range(ctx.size):
            want = _payload(dt, count, r, 55).reshape(shape)
            assert _same_bits(outs[r].cpu(), want), f"part of rank {r}: {_diff(outs[r], want)}"
    return fn


for _d in ("f32", "f64", "bf16", "i64", "u8", "bool", "c64"):
    for _s in ((0,), (1,), (1001,), (3 * SLICE_BYTES + 77,), (33, 7)):
        CASES.add(f"allgather-{_d}-{'x'.join(map(str, _s))}", _allgather_case(_d, _s))


def _into_tensor_case(dname, count):
    dt = BCAST_DTYPES[dname]

    def fn(ctx):
        mine = _payload(dt, count, ctx.rank, 66).to(ctx.device)
        out = torch.zeros(ctx.size * count, dtype=dt, device=ctx.device)
        dist.all_gather_into_tensor(out, mine)
        want = torch.cat([_payload(dt, count, r, 66) for r in range(ctx.size)])
        assert _same_bits(out.cpu(), want), _diff(out, want)
    return fn


for _d in ("f32", "bf16", "u8"):
    for _n in (0, 1001, 3 * SLICE_BYTES + 77):
        CASES.add(f"allgather_into_tensor-{_d}-n{_n}", _into_tensor_case(_d, _n))


@CASES.case("allgather_into_tensor-in-place")
def _(ctx):
    # The input is this rank's block of the output (the usual in-place pattern): it must survive the zeroing.
    count = 1001
    out = torch.zeros(ctx.size * count, dtype=torch.float32, device=ctx.device)
    mine = out.narrow(0, ctx.rank * count, count)
    mine.copy_(_payload(torch.float32, count, ctx.rank, 67).to(ctx.device))
    dist.all_gather_into_tensor(out, mine)
    want = torch.cat([_payload(torch.float32, count, r, 67) for r in range(ctx.size)])
    assert _same_bits(out.cpu(), want), _diff(out, want)


@CASES.case("barrier")
def _(ctx):
    # Rank 0 arrives 0.5 s late: nobody may leave the barrier before it arrives.
    delay = 0.5
    dist.barrier(group=ctx.ref)
    t0 = time.monotonic()
    if ctx.rank == 0:
        time.sleep(delay)
    dist.barrier()
    waited = time.monotonic() - t0
    assert waited >= delay * 0.8, f"left the barrier after {waited:.3f} s, before rank 0 arrived"
    assert waited < delay + 10, f"barrier took {waited:.1f} s"
    return {"waited": waited}


@CASES.case("a-waiting-rank-sleeps")
def _(ctx):
    # The c10d transport's waits block on its completions instead of spinning (docs/design/protocol.md,
    # "c10d transport"). A rank that waits 2 s for a late peer: 30-35 ms of process CPU time on the 2-core
    # machine, against 190-213 ms for the spinning wait (a 1 ms spin, then a poll every 50 us) and 83-87 ms
    # for a blocking wait woken every 500 us. The bound sits between them, 3x from either side.
    if ctx.device != "cpu":
        raise harness.Skip("CPU tensors: the c10d transport")
    late = ctx.size - 1
    dist.all_reduce(torch.ones(4))
    dist.barrier(group=ctx.ref)
    if ctx.rank == late:
        time.sleep(2)
    c0, t0 = time.process_time(), time.perf_counter()
    t = torch.ones(4)
    dist.all_reduce(t)
    waited, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert torch.equal(t, torch.full((4,), float(ctx.size)))
    if ctx.rank != late:
        assert waited > 1.5, f"waited only {waited:.2f} s for the late rank"
        assert cpu < 0.1, f"{cpu * 1e3:.1f} ms of CPU in a {waited:.2f} s wait: the wait spins"
    return {"waited_s": waited, "cpu_ms": cpu * 1e3}


@CASES.case("send-recv-ring")
def _(ctx):
    g = dist.new_group(backend="ringguard")
    right, left = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size
    for count in (0, 1, 3 * SLICE_BYTES + 77):
        mine = _payload(torch.float32, count, ctx.rank, 33).to(ctx.device)
        got = torch.zeros(count, dtype=torch.float32, device=ctx.device)
        works = [dist.irecv(got, src=left, group=g), dist.isend(mine, dst=right, group=g)]
        for w in works:
            w.wait()
        want = _payload(torch.float32, count, left, 33)
        assert _same_bits(got.cpu(), want), f"from rank {left}, count {count}: {_diff(got, want)}"
    dist.destroy_process_group(g)


def _check_p2p_faults(results, nproc):
    for mode in ("bitflip", "trailer", "garbage"):
        assert sum(r[mode]["injected"] for r in results) > 0, f"{mode}: nothing injected: {results}"
        for rank, r in enumerate(results):
            c = r[mode]
            assert c["detected"] == c["injected"] and c["escaped"] == 0, f"rank {rank} {mode}: {c}"
        # Every detected corruption was repaired by a resend from the other side (on the peer windows, by a
        # re-read: nothing is resent there).
        if not all(r.get("one_sided_device") for r in results):
            assert (sum(r[mode]["retransmitted"] for r in results)
                    == sum(r[mode]["detected"] for r in results)), results


@CASES.case("send-recv-faults", check=_check_p2p_faults)
def _(ctx):
    import ringguard

    # Damaged payloads and damaged headers (the "trailer" mode) are detected on receive and resent from the
    # sender's bytes; the data arrives exact.
    g = dist.new_group(backend="ringguard")
    right, left = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size
    out = {}
    for mode in ("bitflip", "trailer", "garbage"):
        ringguard.set_fault(g, mode=mode, prob=0.5, seed=11)
        before = ringguard.counters(g)
        for i in range(8):
            mine = _payload(torch.float32, 1000 + i, ctx.rank, 40 + i).to(ctx.device)
            got = torch.zeros(1000 + i, dtype=torch.float32, device=ctx.device)
            for w in (dist.irecv(got, src=left, group=g), dist.isend(mine, dst=right, group=g)):
                w.wait()
            want = _payload(torch.float32, 1000 + i, left, 40 + i)
            assert _same_bits(got.cpu(), want), f"{mode}, message {i}: {_diff(got, want)}"
        after = ringguard.counters(g)
        out[mode] = {k: after[k] - before[k] for k in ("injected", "detected", "escaped", "retransmitted")}
    ringguard.set_fault(g, prob=0)
    dist.destroy_process_group(g)
    out["one_sided_device"] = _one_sided_device(ctx)
    return out


# --- unsupported operations: a fresh group each, so one failure cannot affect the next ---------------

def _expect_unsupported(ctx, call, op_aliases, dtype_key):
    g = dist.new_group(backend="ringguard")
    try:
        with pytest.raises(RuntimeError) as info:
            call(g)
    finally:
        dist.destroy_process_group(g)
    msg = str(info.value)
    dtype_aliases = dtype_key if isinstance(dtype_key, tuple) else harness.DTYPE_ALIASES[dtype_key]
    assert harness.names_word(msg, op_aliases), f"message does not name the op {op_aliases[0]}: {msg}"
    assert harness.names_word(msg, dtype_aliases), f"message does not name the dtype {dtype_aliases[0]}: {msg}"
    assert harness.names_word(msg, ("cpu",)), f"message does not name the device: {msg}"
    return {"message": msg[:300]}


def _reduce_scatter_case(dname, opname, count, list_form):
    dt = DTYPES[dname]

    def fn(ctx):
        inputs = [_input(dt, opname, count * ctx.size, r, ctx.size, 71) for r in range(ctx.size)]
        want = _expected(dt, opname, inputs, ctx.size).narrow(0, ctx.rank * count, count)
        mine = inputs[ctx.rank].to(ctx.device)
        out = torch.zeros(count, dtype=dt, device=ctx.device)
        if list_form:
            dist.reduce_scatter(out, list(mine.chunk(ctx.size)) if count else
                                [mine.narrow(0, 0, 0)] * ctx.size, op=OPS[opname])
        else:
            dist.reduce_scatter_tensor(out, mine, op=OPS[opname])
        assert _same_bits(out.cpu(), want), f"{dname} {opname} count {count}: {_diff(out, want)}"
    return fn


for _d in ("f32", "bf16", "i64", "u8"):
    for _o in ("sum", "avg", "max"):
        for _n in (0, 1, 3 * SLICE_BYTES + 77):
            CASES.add(f"reduce_scatter_tensor-{_d}-{_o}-n{_n}", _reduce_scatter_case(_d, _o, _n, False))
CASES.add("reduce_scatter-list-f32-sum", _reduce_scatter_case("f32", "sum", 1001, True))


@CASES.case("all_to_all_single-equal-and-unequal")
def _(ctx):
    n, r = ctx.size, ctx.rank
    # Equal splits: rows of 3 columns, 5 rows per rank.
    mine = torch.stack([_payload(torch.float32, 3, r * n + p, 80) for p in range(n) for _ in range(5)])
    out = torch.zeros(5 * n, 3, device=ctx.device)
    dist.all_to_all_single(out, mine.to(ctx.device))
    want = torch.stack([_payload(torch.float32, 3, p * n + r, 80) for p in range(n) for _ in range(5)])
    assert _same_bits(out.cpu(), want), _diff(out, want)
    # Unequal splits (some empty), int64: rank a sends (a + b) % 3 rows to rank b.
    send_rows = [(r + p) % 3 for p in range(n)]
    recv_rows = [(p + r) % 3 for p in range(n)]
    mine = torch.cat([_payload(torch.int64, 2 * k, r * n + p, 81).view(k, 2) for p, k in enumerate(send_rows)])
    out = torch.zeros(sum(recv_rows), 2, dtype=torch.int64, device=ctx.device)
    dist.all_to_all_single(out, mine.to(ctx.device), recv_rows, send_rows)
    want = torch.cat([_payload(torch.int64, 2 * k, p * n + r, 81).view(k, 2) for p, k in enumerate(recv_rows)])
    assert _same_bits(out.cpu(), want), _diff(out, want)


@CASES.case("all_to_all-list-bool")
def _(ctx):
    n, r = ctx.size, ctx.rank
    ins = [_payload(torch.bool, 7 + p, r * n + p, 82).to(ctx.device) for p in range(n)]
    outs = [torch.zeros(7 + r, dtype=torch.bool, device=ctx.device) for _ in range(n)]
    dist.all_to_all(outs, ins)
    for p in range(n):
        want = _payload(torch.bool, 7 + r, p * n + r, 82)
        assert _same_bits(outs[p].cpu(), want), f"block from {p}: {_diff(outs[p], want)}"


@CASES.case("all_to_all-list-mixed-dtypes")
def _(ctx):
    # The backend's list all_to_all with blocks of several dtypes (dist.all_to_all refuses them in Python;
    # the backend moves them as bytes): a float32 block after a 3-byte uint8 one lands at an odd byte
    # offset, into a contiguous tensor and into a strided one.
    n, r, dev = ctx.size, ctx.rank, ctx.device

    def block(src, dst):  # what rank src sends rank dst: its dtype is the sender's index in dst's list
        if src == 0:
            return torch.arange(3, dtype=torch.uint8, device=dev) + 10 * dst + src
        return torch.arange(2, dtype=torch.float32, device=dev) + 0.5 * dst + src

    for strided in (False, True):
        ins = [block(r, q) for q in range(n)]
        outs = [torch.zeros(3, dtype=torch.uint8, device=dev) if p == 0 else
                (torch.zeros(2, 2, device=dev)[:, 1] if strided else torch.zeros(2, device=dev)) for p in range(n)]
        g = dist.distributed_c10d._get_default_group()._get_backend(torch.device(dev))
        g.alltoall(outs, ins, dist.AllToAllOptions()).wait()
        for p in range(n):
            assert torch.equal(outs[p].cpu(), block(p, r).cpu()), f"block from {p} (strided {strided}): {outs[p]}"


@CASES.case("reduce-gather-scatter")
def _(ctx):
    n, r = ctx.size, ctx.rank
    for root in range(n):
        # reduce: the root gets the sum; every other rank's tensor keeps its values.
        inputs = [_input(torch.float32, "sum", 1001, q, n, 90 + root) for q in range(n)]
        t = inputs[r].clone().to(ctx.device)
        dist.reduce(t, dst=root)
        want = _expected(torch.float32, "sum", inputs, n) if r == root else inputs[r]
        assert _same_bits(t.cpu(), want), f"reduce to {root}: {_diff(t, want)}"
        # gather / scatter of int32 blocks (empty blocks too).
        for count in (0, 777):
            mine = _payload(torch.int32, count, r * n + root, 91).to(ctx.device)
            outs = [torch.zeros(count, dtype=torch.int32, device=ctx.device) for _ in range(n)] if r == root else None
            dist.gather(mine, outs, dst=root)
            if r == root:
                for q in range(n):
                    want = _payload(torch.int32, count, q * n + root, 91)
                    assert _same_bits(outs[q].cpu(), want), f"gather to {root}, block {q}: {_diff(outs[q], want)}"
            got = torch.zeros(count, dtype=torch.int32, device=ctx.device)
            blocks = [_payload(torch.int32, count, q * n + root, 92).to(ctx.device) for q in range(n)] if r == root else None
            dist.scatter(got, blocks, src=root)
            want = _payload(torch.int32, count, r * n + root, 92)
            assert _same_bits(got.cpu(), want), f"scatter from {root}: {_diff(got, want)}"


@CASES.case("object-collectives")
def _(ctx):
    # What torch.distributed.checkpoint relies on: all over the ringguard default group.
    n, r = ctx.size, ctx.rank
    mine = {"rank": r, "payload": list(range(r * 3)), "text": "x" * (10 + r)}
    got = [None] * n
    dist.all_gather_object(got, mine)
    assert got == [{"rank": q, "payload": list(range(q * 3)), "text": "x" * (10 + q)} for q in range(n)], got
    gathered = [None] * n if r == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if r == 0:
        assert gathered == got, gathered
    objs = [{"from": "root", "n": n}, [1, 2, 3]] if r == 1 % n else [None, None]
    dist.broadcast_object_list(objs, src=1 % n)
    assert objs == [{"from": "root", "n": n}, [1, 2, 3]], objs
    out = [None]
    dist.scatter_object_list(out, [f"for {q}" for q in range(n)] if r == 0 else None, src=0)
    assert out == [f"for {r}"], out


@CASES.case("allreduce-coalesced")
def _(ctx):
    # Mixed dtypes and sizes in one call, as torch's coalescing manager issues them.
    specs = [(torch.float32, 1001), (torch.int64, 0), (torch.bfloat16, 3 * SLICE_BYTES + 77), (torch.uint8, 5)]
    inputs = [[_input(dt, "sum", n, r, ctx.size, 95 + i) for r in range(ctx.size)] for i, (dt, n) in enumerate(specs)]
    ts = [inp[ctx.rank].clone().to(ctx.device) for inp in inputs]
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    dist.distributed_c10d._get_default_group()._get_backend(torch.device(ctx.device)).allreduce_coalesced(
        ts, opts).wait()
    for i, (t, inp) in enumerate(zip(ts, inputs)):
        want = _expected(specs[i][0], "sum", inp, ctx.size)
        assert _same_bits(t.cpu(), want), f"tensor {i}: {_diff(t, want)}"


AG_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
             torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128, torch.float8_e5m2,
             torch.float8_e4m3fn]
AG_SHAPES = [(1001,), (0,), (3, 5), (1,), (2 * SLICE_BYTES + 3,)]


def _ag_input(dt, shape, rank, i):
    """Rank `rank`'s input i: small integers (exact in every dtype, float8 included), by rank and index."""
    n = 1
    for d in shape:
        n *= d
    base = (torch.arange(n, dtype=torch.int64) * (i + 1) + 3 * rank + i) % (2 if dt == torch.bool else 8)
    if dt.is_complex:
        return torch.complex(base.float(), (base + rank + 1).float()).to(dt).reshape(shape)
    return base.to(torch.float32).to(dt).reshape(shape) if dt.is_floating_point else base.to(dt).reshape(shape)


def _bytes_of(t):
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


@CASES.case("all_gather_coalesced-every-dtype")
def _(ctx):
    # dist.all_gather_coalesced, the list form: output_tensor_lists[r][i] gets rank r's input i. One call
    # per dtype (torch wants one dtype per call; complex goes through its view_as_real), with an empty, a
    # 2-D and a multi-slice tensor; then the group's own call with mixed dtypes (moved as bytes).
    for k, dt in enumerate(AG_DTYPES):
        ins = [_ag_input(dt, shape, ctx.rank, i).to(ctx.device) for i, shape in enumerate(AG_SHAPES)]
        outs = [[torch.zeros(shape, dtype=dt, device=ctx.device) for shape in AG_SHAPES] for _ in range(ctx.size)]
        dist.all_gather_coalesced(outs, ins)
        for r in range(ctx.size):
            for i, shape in enumerate(AG_SHAPES):
                want = _ag_input(dt, shape, r, i)
                assert outs[r][i].shape == want.shape and torch.equal(_bytes_of(outs[r][i]), _bytes_of(want)), \
                    f"{dt} rank {r} input {i}: {outs[r][i].reshape(-1)[:6]} != {want.reshape(-1)[:6]}"
    mixed = [torch.int64, torch.float16, torch.bool, torch.complex64]
    ins = [_ag_input(dt, (7 + i,), ctx.rank, i).to(ctx.device) for i, dt in enumerate(mixed)]
    outs = [[torch.zeros(7 + i, dtype=dt, device=ctx.device) for i, dt in enumerate(mixed)] for _ in range(ctx.size)]
    group = dist.distributed_c10d._get_default_group()
    group.allgather_coalesced(outs, ins, dist.distributed_c10d.AllgatherOptions()).wait()
    for r in range(ctx.size):
        for i, dt in enumerate(mixed):
            assert torch.equal(_bytes_of(outs[r][i]), _bytes_of(_ag_input(dt, (7 + i,), r, i))), (r, i, dt)


@CASES.case("all_gather_coalesced-sizes-that-differ-fail-on-every-rank")
def _(ctx):
    # Each rank's outputs match its own inputs, but rank 0 gives one element more: the all-gather's
    # fingerprint differs, and every rank raises naming both counts (on a group of its own: it fails).
    g = dist.new_group(backend="ringguard", timeout=timedelta(seconds=60))
    n = 6 if ctx.rank == 0 else 5
    ins = [torch.ones(n, device=ctx.device)]
    outs = [[torch.zeros(n, device=ctx.device)] for _ in range(ctx.size)]
    error = ""
    try:
        dist.all_gather_coalesced(outs, ins, group=g)
        if _one_sided_device(ctx):
            # The kernel's error reaches the host asynchronously: once it has ended, the next call raises it.
            torch.cuda.synchronize()
            dist.all_reduce(torch.zeros(1, device=ctx.device), group=g)
    except RuntimeError as err:
        error = str(err)
    dist.destroy_process_group(g)
    assert "count=6" in error and "count=5" in error, error
    return {"error": error[:300]}


# --- issue 14's ops and dtypes: bitwise ops, i8 / i16 / bool, complex, float8 (copy-only), PREMUL_SUM ----

def _backend_allreduce(t, op):
    """The backend's own allreduce: dist.all_reduce would view a complex tensor as real first."""
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    g = dist.distributed_c10d._get_default_group()
    g._get_backend(torch.device("cpu")).allreduce([t], opts).wait()


def _bitwise_case(dname):
    dt = {"i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8,
          "bool": torch.bool}[dname]

    def fn(ctx):
        lo, hi = (0, 2) if dt == torch.bool else (0, 256) if dt == torch.uint8 else (-128, 128)
        inputs = [torch.randint(lo, hi, (1001,), generator=_gen(91, r), dtype=torch.int64).to(dt)
                  for r in range(ctx.size)]
        for name, op, fold in (("band", dist.ReduceOp.BAND, torch.bitwise_and),
                               ("bor", dist.ReduceOp.BOR, torch.bitwise_or),
                               ("bxor", dist.ReduceOp.BXOR, torch.bitwise_xor)):
            want = inputs[0].clone()
            for t in inputs[1:]:
                want = fold(want, t)
            t = inputs[ctx.rank].clone()
            dist.all_reduce(t, op=op)
            assert _same_bits(t, want), f"{dname} {name}: {_diff(t, want)}"
    return fn


for _d in ("i8", "i16", "i32", "i64", "u8", "bool"):
    CASES.add(f"allreduce-bitwise-{_d}", _bitwise_case(_d))


@CASES.case("allreduce-int8-int16-bool-arithmetic")
def _(ctx):
    for dt, lo, hi in ((torch.int8, -40, 40), (torch.int16, -10000, 10000)):
        inputs = [torch.randint(lo, hi, (777,), generator=_gen(92, r), dtype=torch.int64) for r in range(ctx.size)]
        xs = torch.stack(inputs)
        for name, op, want in (("sum", dist.ReduceOp.SUM, xs.sum(0)), ("max", dist.ReduceOp.MAX, xs.amax(0)),
                               ("min", dist.ReduceOp.MIN, xs.amin(0)),
                               ("avg", dist.ReduceOp.AVG, torch.div(xs.sum(0), ctx.size, rounding_mode="trunc"))):
            t = inputs[ctx.rank].to(dt)
            dist.all_reduce(t, op=op)
            assert _same_bits(t, want.to(dt)), f"{dt} {name}: {_diff(t, want.to(dt))}"
    bools = [torch.randint(0, 2, (513,), generator=_gen(93, r)).bool() for r in range(ctx.size)]
    bs = torch.stack(bools)
    # As ProcessGroupNCCL: SUM is a logical or, PRODUCT a logical and.
    for name, op, want in (("sum", dist.ReduceOp.SUM, bs.any(0)), ("prod", dist.ReduceOp.PRODUCT, bs.all(0)),
                           ("min", dist.ReduceOp.MIN, bs.all(0)), ("max", dist.ReduceOp.MAX, bs.any(0))):
        t = bools[ctx.rank].clone()
        dist.all_reduce(t, op=op)
        assert _same_bits(t, want), f"bool {name}: {_diff(t, want)}"


@CASES.case("allreduce-complex-at-the-backend")
def _(ctx):
    for dt in (torch.complex64, torch.complex128):
        parts = [torch.randint(-40, 41, (2, 301), generator=_gen(94, r)).double() for r in range(ctx.size)]
        inputs = [torch.complex(p[0], p[1]).to(dt) for p in parts]
        total = sum(torch.complex(p[0], p[1]) for p in parts)
        for name, op, want in (("sum", dist.ReduceOp.SUM, total.to(dt)),
                               # Each part divided by the rank count (complex / complex rounds otherwise).
                               ("avg", dist.ReduceOp.AVG,
                                torch.complex(total.real / ctx.size, total.imag / ctx.size).to(dt))):
            t = inputs[ctx.rank].clone()
            _backend_allreduce(t, op)
            assert _same_bits(t, want), f"{dt} {name}: {_diff(t, want)}"


def _premul_want(inputs, factor, dt):
    # Every rank's input times the factor, then summed: power-of-two factors and small integers, so exact.
    return sum(t.double() * factor for t in inputs).to(dt)


@CASES.case("premul_sum-allreduce-and-reduce_scatter")
def _(ctx):
    for factor in (0.5, 0.125, 4.0):
        for make in (lambda f: dist._make_nccl_premul_sum(f),
                     lambda f: dist._make_nccl_premul_sum(torch.tensor([f], dtype=torch.float64))):
            op = make(factor)
            for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
                n = 3 * SLICE_BYTES // 4 + 5
                inputs = [_input(dt, "sum", n * ctx.size, r, ctx.size, 95) for r in range(ctx.size)]
                want = _premul_want(inputs, factor, dt)
                t = inputs[ctx.rank].clone()
                dist.all_reduce(t, op=op)
                assert _same_bits(t, want), f"allreduce premul {factor} {dt}: {_diff(t, want)}"
                out = torch.zeros(n, dtype=dt)
                dist.reduce_scatter_tensor(out, inputs[ctx.rank], op=op)
                mine = want.narrow(0, ctx.rank * n, n)
                assert _same_bits(out, mine), f"reduce_scatter premul {factor} {dt}: {_diff(out, mine)}"
    # Complex, at the backend: both parts scaled.
    z = [torch.complex(torch.full((5,), float(r + 1)), torch.full((5,), -2.0 * r)) for r in range(ctx.size)]
    t = z[ctx.rank].clone()
    _backend_allreduce(t, dist._make_nccl_premul_sum(0.5))
    want = sum(x * 0.5 for x in z)
    assert _same_bits(t, want), f"complex premul: {_diff(t, want)}"


@CASES.case("premul_sum-different-factors-fail-on-every-rank")
def _(ctx):
    g = dist.new_group(backend="ringguard")
    try:
        with pytest.raises(RuntimeError) as info:
            dist.all_reduce(torch.ones(8), op=dist._make_nccl_premul_sum(0.5 if ctx.rank == 0 else 0.25), group=g)
    finally:
        dist.destroy_process_group(g)
    msg = str(info.value)
    assert "premul_sum(0.5)" in msg and "premul_sum(0.25)" in msg, msg
    return {"message": msg[:300]}


def _copy_dtypes_case(dname):
    dt = {"f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2, "bool": torch.bool, "i8": torch.int8,
          "i16": torch.int16, "c64": torch.complex64, "c128": torch.complex128}[dname]

    def payload(rank, n):
        raw = torch.randint(0, 256, (n * torch.empty(0, dtype=dt).element_size(),), generator=_gen(96, rank, n),
                            dtype=torch.int64).to(torch.uint8)
        if dt == torch.bool:
            raw = raw % 2
        return raw.view(dt)

    def fn(ctx):
        for n in (0, 1, 1001):
            t = payload(ctx.rank, n) if ctx.rank == 1 else torch.zeros(n, dtype=dt)
            dist.broadcast(t, src=1)
            assert _same_bits(t, payload(1, n)), f"broadcast {dname} n={n}"
            out = torch.zeros(n * ctx.size, dtype=dt)
            dist.all_gather_into_tensor(out, payload(ctx.rank, n))
            want = torch.cat([payload(r, n) for r in range(ctx.size)])
            assert _same_bits(out, want), f"all_gather_into_tensor {dname} n={n}"
            outs = [torch.zeros(n, dtype=dt) for _ in range(ctx.size)]
            dist.all_to_all(outs, [payload(ctx.rank * 7 + p, n) for p in range(ctx.size)])
            for p in range(ctx.size):
                assert _same_bits(outs[p], payload(p * 7 + ctx.rank, n)), f"all_to_all {dname} n={n} from {p}"
    return fn


for _d in ("f8e4m3", "f8e5m2", "bool", "i8", "i16", "c64", "c128"):
    CASES.add(f"copy-collectives-{_d}", _copy_dtypes_case(_d))


@CASES.case("error-band-on-float")
def _(ctx):
    return _expect_unsupported(ctx, lambda g: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND, group=g),
                               ("band",), "float32")


@CASES.case("error-avg-on-bool")
def _(ctx):
    return _expect_unsupported(ctx, lambda g: dist.all_reduce(torch.ones(4, dtype=torch.bool), op=dist.ReduceOp.AVG,
                                                              group=g), ("avg",), "bool")


@CASES.case("error-premul_sum-on-int")
def _(ctx):
    return _expect_unsupported(
        ctx, lambda g: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist._make_nccl_premul_sum(0.5), group=g),
        ("premul_sum",), "int32")


@CASES.case("error-sum-on-float8")
def _(ctx):
    return _expect_unsupported(
        ctx, lambda g: dist.reduce_scatter_tensor(torch.zeros(4, dtype=torch.float8_e4m3fn),
                                                  torch.zeros(4 * ctx.size, dtype=torch.float8_e4m3fn), group=g),
        ("sum",), ("float8_e4m3fn",))


@CASES.case("error-max-on-complex")
def _(ctx):
    def call(g):
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        g._get_backend(torch.device("cpu")).allreduce([torch.ones(4, dtype=torch.complex64)], opts).wait()
    return _expect_unsupported(ctx, call, ("max",), "complex64")


# --- fault injection and counters -----------------------------------------------------------------

def _check_faults(results, nproc):
    injected = sum(r["injected"] for r in results)
    assert injected > 0, f"no fault was injected: {results}"
    assert sum(r["first_injected"] for r in results) > 0, f"Options(fault_prob=...) injected nothing: {results}"
    assert sum(r["multibit_injected"] for r in results) > 0, f"set_fault(prob=0.5) injected nothing: {results}"
    for rank, r in enumerate(results):
        assert r["detected"] == r["injected"], f"rank {rank}: detected != injected: {r}"
        assert r["escaped"] == 0, f"rank {rank}: escaped corruption: {r}"
    # The one-sided device path recovers by re-reading the peer's window (each re-read counted as a detection),
    # never by a retransmission: only the other paths must have retransmitted.
    if not all(r.get("one_sided_device") for r in results):
        assert sum(r["retransmitted"] for r in results) > 0, f"nothing retransmitted: {results}"


def _one_sided_device(ctx) -> bool:
    # CUDA tensors on the peer windows (docs/GPU.md, "The one-sided path"): errors surface asynchronously
    # there, as NCCL's do, at the next call once the kernel has ended, and faults are re-read, not resent.
    return ctx.device == "cuda" and harness.device_transport(ctx.size) == "peer"


@CASES.case("faults-options-and-set_fault", check=_check_faults)
def _(ctx):
    import ringguard

    g = dist.new_group(backend="ringguard", pg_options=ringguard.Options(
        slice_bytes=SLICE_BYTES, fault_mode="bitflip", fault_prob=0.3, fault_seed=7))
    f = ringguard.fault(g)
    assert f.get("RINGGUARD_FAULT_MODE") == "bitflip", f
    assert float(f["RINGGUARD_FAULT_PROB"]) == 0.3 and int(f["RINGGUARD_FAULT_SEED"]) == 7, f
    before = ringguard.counters(g)
    for i in range(6):
        inputs = [_input(torch.float32, "sum", 3 * SLICE_BYTES + 77, r, ctx.size, 500 + i)
                  for r in range(ctx.size)]
        want = _expected(torch.float32, "sum", inputs, ctx.size)
        t = inputs[ctx.rank].clone().to(ctx.device)
        dist.all_reduce(t, group=g)
        assert _same_bits(t.cpu(), want), f"with faults, allreduce {i}: {_diff(t, want)}"
    after = ringguard.counters(g)
    delta = {k: after[k] - before[k] for k in after}
    # Turn injection off: later collectives see no new injections.
    ringguard.set_fault(g, prob=0)
    assert float(ringguard.fault(g)["RINGGUARD_FAULT_PROB"]) == 0.0
    dist.all_reduce(torch.ones(3 * SLICE_BYTES, device=ctx.device), group=g)
    assert ringguard.counters(g)["injected"] == after["injected"], "injection continued after prob=0"
    # ... and on again through set_fault, another mode.
    ringguard.set_fault(g, mode="multibit", prob=0.5, seed=3, bits=5)
    assert ringguard.fault(g)["RINGGUARD_FAULT_MODE"] == "multibit"
    t = torch.ones(3 * SLICE_BYTES, device=ctx.device)
    dist.all_reduce(t, group=g)
    assert torch.equal(t.cpu(), torch.full_like(t.cpu(), float(ctx.size)))
    final = ringguard.counters(g)
    dist.destroy_process_group(g)
    result = {k: final[k] - before[k] for k in ("injected", "detected", "escaped", "retransmitted")}
    result.update(first_injected=delta["injected"], multibit_injected=final["injected"] - after["injected"],
                  one_sided_device=_one_sided_device(ctx))
    return result


@CASES.case("counters-and-transport")
def _(ctx):
    import ringguard

    c = ringguard.counters()
    assert set(c) == COUNTER_KEYS, f"counter keys: {sorted(c)}"
    assert c["collectives"] > 0 and c["slices_verified"] > 0 and c["slices_sent"] > 0, c
    assert c["injected"] == c["detected"] == c["escaped"] == 0, f"faults on a group without injection: {c}"
    # No transfer carried more than a slice (Options(slice_bytes=4096)) or a shared-memory window's chunk (16 KiB:
    # the one-sided protocol verifies in chunks of its own, docs/design/protocol.md).
    assert c["bytes_sent"] <= max(SLICE_BYTES, 16384) * c["slices_sent"], c
    # Fingerprint and verdict exchanges went over the sealed control channel.
    assert c["control_frames"] > 0 and c["control_bytes"] >= 32 * c["control_frames"], c
    # The ranks share a host: slices and control frames through shared memory (RINGGUARD_CPU_TRANSPORT=auto).
    assert ringguard.transport("cpu") == "shm", ringguard.transport("cpu")
    if ctx.device == "cpu":
        assert ringguard.transport("cuda") == "", ringguard.transport("cuda")
    with pytest.raises(TypeError):
        ringguard.counters(ctx.ref)  # a gloo group is not ours
    return c


@CASES.case("cpu-transport-choices")
def _(ctx):
    """RINGGUARD_CPU_TRANSPORT per group: gloo keeps the Gloo helper for everything, shm insists on shared
    memory; both give the exact results (small integers: sums independent of order), small and pipelined."""
    import ringguard

    seen = {}
    for choice in ("gloo", "shm"):
        g = dist.new_group(backend="ringguard", pg_options=ringguard.Options(cpu_transport=choice))
        seen[choice] = ringguard.transport("cpu", g)
        for n in (5, 300000):  # a 4-byte-element eager collective, and slices through the rings
            t = (torch.arange(n, dtype=torch.float32) % 97) + ctx.rank
            dist.all_reduce(t, group=g)
            want = ctx.size * (torch.arange(n, dtype=torch.float32) % 97) + sum(range(ctx.size))
            assert torch.equal(t, want), (choice, n)
            out = [torch.zeros(n, dtype=torch.int32) for _ in range(ctx.size)]
            dist.all_gather(out, torch.full((n,), ctx.rank + 1, dtype=torch.int32), group=g)
            assert all(torch.equal(o, torch.full((n,), r + 1, dtype=torch.int32)) for r, o in enumerate(out))
        dist.destroy_process_group(g)
    assert seen == {"gloo": "gloo", "shm": "shm"}, seen
    return seen


@CASES.case("cuda-device-transport")
def _(ctx):
    import ringguard

    if ctx.device != "cuda":
        raise harness.Skip("CUDA runs only")
    t = torch.ones(1001, device="cuda")
    dist.all_reduce(t)
    assert torch.equal(t.cpu(), torch.full((1001,), float(ctx.size)))
    want = harness.device_transport(ctx.size)
    assert ringguard.transport("cuda") == want, f"transport {ringguard.transport('cuda')!r}, want {want!r}"
    return {"transport": ringguard.transport("cuda")}


# One completion thread per device type (src/torch/process_group.cc: cpuLane_, cudaLane_): a CPU collective
# must not wait behind an earlier CUDA one whose completion is still pending. The CUDA all_reduce is queued
# behind ~1.5 s of GPU sleep on the current stream (more with both ranks on the GPU); the CPU all_reduce
# issued after it must complete, exactly, while the CUDA one has not.
@CASES.case("cuda-cpu-collective-not-behind-cuda")
def _(ctx):
    if ctx.device != "cuda":
        raise harness.Skip("CUDA runs only")
    if _one_sided_device(ctx):
        raise harness.Skip("peer windows: a CUDA collective's Work completes at its launch (errors come at the "
                           "next call), so nothing of it is pending behind the CPU one")
    t = torch.ones(1 << 16, device="cuda")
    dist.all_reduce(t)  # the CUDA communicator exists before the timed part
    torch.cuda.synchronize()
    torch.cuda._sleep(int(3e9))
    w = dist.all_reduce(t, async_op=True)
    c = torch.full((4,), float(ctx.rank + 1))
    dist.all_reduce(c)
    cuda_pending = not w.is_completed()
    w.wait()
    torch.cuda.synchronize()
    assert torch.equal(c, torch.full((4,), float(ctx.size * (ctx.size + 1) // 2))), c
    assert torch.equal(t.cpu(), torch.full((1 << 16,), float(ctx.size * ctx.size))), t[:4]
    assert cuda_pending, "the CPU all_reduce completed only after the CUDA one"
    return {"cuda_pending_when_cpu_done": cuda_pending}


# A call rejected on one rank (rank 1's output one element too long) with CUDA tensors: it is entered on the
# CUDA communicator, on the caller's stream (declined on the peer windows, where the others' kernels took
# it), so rank 0 fails at once naming it rather than at its timeout.
# On a group of its own: the mismatch poisons it.
@CASES.case("cuda-arguments-rejected-on-one-rank")
def _(ctx):
    import ringguard

    if ctx.device != "cuda":
        raise harness.Skip("CUDA runs only")
    g = dist.new_group(backend="ringguard", timeout=timedelta(seconds=60))
    warm = torch.ones(8, device="cuda")
    dist.all_reduce(warm, group=g)  # the group's CUDA communicator exists
    out = torch.zeros(11 if ctx.rank == 1 else 10, device="cuda")  # rank 1 alone rejects the call
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        dist.reduce_scatter_tensor(out, torch.ones(10 * ctx.size, device="cuda"), group=g)
        torch.cuda.synchronize()
        # On the peer windows the call returns once its kernel is launched (NCCL's contract): the kernel's
        # failure raises at the group's next call.
        dist.all_reduce(warm, group=g)
    took = time.monotonic() - t0
    msg = str(info.value)
    if ctx.rank == 1:
        assert "must hold" in msg, msg
    else:
        assert "invalid-arguments" in msg and "rank 1 rejected the arguments" in msg, msg
    assert took < 20, f"raised only after {took:.1f} s: {msg}"
    one_sided = _one_sided_device(ctx) and ringguard.transport("cuda", g) == "peer"
    dist.destroy_process_group(g)
    return {"message": msg[:300], "seconds": round(took, 3), "one_sided": one_sided}


def _init():
    import ringguard

    dist.init_process_group("ringguard", pg_options=ringguard.Options(slice_bytes=SLICE_BYTES),
                            timeout=timedelta(seconds=120))


# --- pytest side ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def run(request):
    return harness.launch(__file__, request.param)


@pytest.mark.parametrize("name", [n for n in CASES.names if not n.startswith("cuda-")])
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


@pytest.fixture(scope="module")
def cuda_run():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: 2 ranks on one GPU with RINGGUARD_DEVICE_TRANSPORT=staged")
    return harness.launch(__file__, 2, env={"RINGGUARD_TEST_DEVICE": "cuda",
                                            "RINGGUARD_DEVICE_TRANSPORT": "staged",
                                            "RINGGUARD_TEST_ONLY": ",".join(CUDA_CASES)})


CUDA_CASES = [n for n in CASES.names
              if n.startswith(("allreduce-f32", "allreduce-bf16", "allreduce-i64", "allreduce-2d",
                               "broadcast-f32", "allgather-f32", "allgather_into_tensor-f32", "faults-",
                               "send-recv", "any-strides", "outputs-that-require-grad", "cuda-"))]


@pytest.mark.parametrize("name", CUDA_CASES)
def test_cuda_staged(cuda_run, name):
    harness.check_case(CASES, cuda_run, name)


# The cases whose CUDA tensors must also be run on the peer windows (RINGGUARD_DEVICE_TRANSPORT=auto, the
# default for ranks of one host), where errors take another way (docs/GPU.md, "The one-sided path").
PEER_CUDA_CASES = ["cuda-arguments-rejected-on-one-rank"]


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def cuda_peer_run(request):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: ranks on one GPU with RINGGUARD_DEVICE_TRANSPORT=auto (the peer windows)")
    return harness.launch(__file__, request.param, env={"RINGGUARD_TEST_DEVICE": "cuda",
                                                        "RINGGUARD_DEVICE_TRANSPORT": "auto",
                                                        "RINGGUARD_TEST_ONLY": ",".join(PEER_CUDA_CASES)})


@pytest.mark.parametrize("name", PEER_CUDA_CASES)
def test_cuda_peer(cuda_peer_run, name):
    results = harness.results(cuda_peer_run, name)
    assert all(r["one_sided"] for r in results), f"the group's CUDA collectives did not take the windows: {results}"


if __name__ == "__main__":
    if os.environ.get("RINGGUARD_TEST_DEVICE") == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    harness.run_worker(CASES, _init)
