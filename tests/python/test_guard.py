"""ringguard.guard from Python: the C++ state machine (ringguard._C.Guard) over torch tensors, eager, under
torch.compile(fullgraph=True), as a TorchDispatchMode and under autocast. CPU cases run everywhere (CI);
CUDA cases are skipped without a GPU."""

import re

import pytest
import torch

import ringguard

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as integers: equality is bit identity (NaN payloads and -0 included)."""
    return t.detach().contiguous().view(torch.uint8).clone()


def train(g, steps=12, device="cpu", faults=()):
    """A tiny regression trained with a guarded forward (autograd through it) and a guarded in-place
    momentum SGD update. Returns the final weights and momentum."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(16, 8, generator=gen).to(device).requires_grad_(True)
    m = torch.zeros(16, 8, device=device)
    xs = [torch.randn(32, 16, generator=gen).to(device) for _ in range(steps)]
    ts = [torch.randn(32, 8, generator=gen).to(device) for _ in range(steps)]

    def forward(x, w):
        return torch.tanh(x @ w)

    def sgd(w, m, grad):
        m.mul_(0.9).add_(grad)
        w.sub_(0.05 * m)

    if g is not None:
        for f in faults:
            g.inject(**f)
        forward = g(forward)
        sgd = g(sgd, mutates=["w", "m"])
    for x, t in zip(xs, ts):
        loss = ((forward(x, w) - t) ** 2).mean()
        (grad,) = torch.autograd.grad(loss, [w])
        with torch.no_grad():
            sgd(w, m, grad)
    return w.detach(), m


FAULTS = [dict(op="forward", call=3, value="nan", element=5),
          dict(op="sgd", call=7, value="+inf", element=100),  # sgd has no outputs: target 0 is w
          dict(op="sgd", call=9, output=1, value="-inf")]      # target 1: m


def test_replay_after_injected_faults_is_bit_identical_to_a_fault_free_run():
    w_ref, m_ref = train(None)
    g = ringguard.guard(policy="replay", replays=2)
    w, m = train(g, faults=FAULTS)
    assert torch.equal(bits(w), bits(w_ref))
    assert torch.equal(bits(m), bits(m_ref))
    c = g.counters()
    assert (c["injected"], c["detections"], c["rollbacks"], c["replays"]) == (3, 3, 3, 3)
    assert c["escalations"] == 0 and c["calls"] == 24
    assert c["bytes_snapshotted"] == 12 * 2 * 16 * 8 * 4  # w and m, every sgd call


def test_fault_during_replay_and_escalation_after_k_replays():
    g = ringguard.guard(policy="replay", replays=3)
    g.inject(op="forward", call=2, attempts=3)  # the first run and two replays
    w_ref, _ = train(None)
    w, _ = train(g)
    assert torch.equal(bits(w), bits(w_ref))
    assert g.counters()["replays"] == 3

    g = ringguard.guard(policy="replay", replays=2)
    g.inject(op="sgd", call=4, attempts=1000, element=3, value="nan")
    with pytest.raises(ringguard.GuardError) as err:
        train(g)
    assert str(err.value) == ("guard: op 'sgd' call 4: state 'w' has 1 non-finite value (first at index 3: "
                              "nan); after 2 replays and 0 fallbacks; raised; state restored")
    c = g.counters()
    assert (c["detections"], c["replays"], c["escalations"], c["raised"]) == (3, 2, 1, 1)


def test_fallback_is_taken_and_within_tolerance():
    calls = {"fast": 0, "ref": 0}

    def fast(x):
        calls["fast"] += 1
        return (x.half() * x.half()).float()  # overflows f16 above 256

    def reference(x):
        calls["ref"] += 1
        return x * x

    g = ringguard.guard(policy="replay", replays=1, escalation="fallback")
    f = g(fast, fallback=reference)
    x = torch.tensor([300.0, 2.0, -1000.0, 0.5])
    y = f(x)
    assert calls == {"fast": 2, "ref": 1}
    torch.testing.assert_close(y, x * x, rtol=0, atol=0)  # the f32 reference, exactly
    c = g.counters()
    assert (c["fallbacks"], c["escalations"], c["detections"]) == (1, 1, 2)


def test_zero_clamp_and_skip():
    for policy, expect in [("zero", [0.0, 0.0, 0.0]), ("clamp", [0.0, 3.4028234663852886e38,
                                                                 -3.4028234663852886e38])]:
        g = ringguard.guard(policy=policy)
        g.inject(op="ident", call=0, element=0, value="nan")
        g.inject(op="ident", call=0, element=1, value="+inf")
        g.inject(op="ident", call=0, element=2, value="-inf")
        y = g(lambda x: x * 1.0, name="ident")(torch.ones(4))
        assert y.tolist() == expect + [1.0], policy
        assert g.counters()["sanitized"] == 1

    g = ringguard.guard(policy="skip_step", mode="deferred")
    w = torch.ones(5)
    step = g(lambda w: w.add_(1.0), name="inc", mutates=["w"])
    g.inject(op="inc", call=1, output=0)
    results = [g.step(step, w)[1]["resolution"] for _ in range(3)]
    assert results == ["clean", "skipped", "clean"]
    assert w.tolist() == [3.0] * 5  # the skipped step's increment was rolled back


def test_large_finite_values_are_not_caught():
    g = ringguard.guard()
    g.inject(op="ident", call=0, element=2, value="large")
    y = g(lambda x: x + 0.0, name="ident")(torch.zeros(4))
    assert y[2].item() == torch.finfo(torch.float32).max
    assert g.counters()["detections"] == 0


def test_deferred_step_replay_is_bit_identical():
    w_ref, m_ref = train(None)
    g = ringguard.guard(policy="replay", replays=2, mode="deferred")
    for f in FAULTS:
        g.inject(**f)
    forward = g(lambda x, w: torch.tanh(x @ w), name="forward")

    def sgd_(w, m, grad):
        m.mul_(0.9).add_(grad)
        w.sub_(0.05 * m)

    sgd = g(sgd_, name="sgd", mutates=["w", "m"])
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(16, 8, generator=gen).requires_grad_(True)
    m = torch.zeros(16, 8)
    xs = [torch.randn(32, 16, generator=gen) for _ in range(12)]
    ts = [torch.randn(32, 8, generator=gen) for _ in range(12)]

    def step(x, t):
        loss = ((forward(x, w) - t) ** 2).mean()
        (grad,) = torch.autograd.grad(loss, [w])
        with torch.no_grad():
            sgd(w, m, grad)

    reports = [g.step(step, x, t)[1] for x, t in zip(xs, ts)]
    assert torch.equal(bits(w), bits(w_ref))
    assert torch.equal(bits(m), bits(m_ref))
    assert [i for i, r in enumerate(reports) if r["resolution"] == "replayed"] == [3, 7, 9]
    c = g.counters()
    assert (c["steps"], c["replays"], c["rollbacks"]) == (12, 3, 3)


def test_deferred_mode_needs_a_step_and_with_blocks_need_immediate_mode():
    g = ringguard.guard(mode="deferred")
    with pytest.raises(ValueError, match="deferred mode reads verdicts at a step's end"):
        g(lambda x: x * 2, name="double")(torch.ones(2))
    with pytest.raises(ValueError, match="cannot be replayed as a whole"):
        with g:
            pass


def test_bad_use_gets_a_clear_error():
    g = ringguard.guard()
    w = torch.ones(4, 4).t()
    with pytest.raises(ValueError, match=r"tensor 'w' is not contiguous \(sizes \[4, 4\], strides \[1, 4\]\)"):
        g(lambda w: w.mul_(2), name="scale", mutates=["w"])(w)
    g = ringguard.guard(snapshot_budget_bytes=100)
    with pytest.raises(ValueError, match="its state needs a snapshot of 128 bytes, 0 are held already, and "
                                         "the snapshot budget is 100 bytes"):
        g(lambda w: w.mul_(2), name="scale", mutates=["w"])(torch.ones(32))
    g = ringguard.guard(check_inputs=True)
    x = torch.ones(8)
    with pytest.raises(ValueError, match="changed its input 'x': declare a tensor the op writes as state"):
        g(lambda x: x.add_(1), name="sneaky")(x)
    assert x.tolist() == [2.0] * 8  # undeclared, so not restored: the error says how to fix it
    with pytest.raises(ValueError, match="unknown policy 'retry'"):
        ringguard.guard(policy="retry")
    with pytest.raises(ValueError, match=r"replays must be an integer in \[0, 1000\], got 1000000000000"):
        ringguard.Guard(replays=10**12)
    g = ringguard.Guard()
    with pytest.raises(ValueError, match=r"probability must be in \[0, 1\], got 2"):
        g.inject(op="scale", probability=2.0)
    with pytest.raises(ValueError, match=r"attempts must be an integer in \[1, 2147483647\], got 0"):
        g.inject(op="scale", attempts=0)
    assert g.counters()["injected"] == 0
    with pytest.raises(ValueError, match="tensor 'w' has layout torch.sparse_coo: the guard takes dense"):
        g(lambda w: w * 2, name="scale")(torch.ones(3).to_sparse())


def test_mutates_that_names_no_parameter_is_refused_before_anything_runs():
    """A typo in `mutates` used to leave the state undeclared: not snapshotted, not scanned, a NaN kept and
    no detection. It is a ValueError naming the op, the entry and the parameters: at decoration when the
    function has a signature, else at the call (before the body runs)."""
    nan = float("nan")

    def sgd(w, grad):
        w.sub_(grad)

    g = ringguard.Guard(policy="raise")
    for bad, shown in ((["weights"], "'weights'"), ([5], "5"), (["w", -1], "-1"), ("weights", "'weights'")):
        with pytest.raises(ValueError, match=rf"guard: op 'sgd': mutates holds {shown}, which names no "
                                             r"parameter of sgd\(w, grad\)"):
            g(mutates=bad)(sgd)  # at decoration: no call needed
    with pytest.raises(ValueError, match="mutates holds 'weights'"):
        ringguard.guard(policy="raise", mutates=["weights"])(sgd)  # a guard-wide default is checked too
    w = torch.ones(4)
    with pytest.raises(ValueError, match=r"mutates holds 'weights', which names no parameter of sgd\(w, grad\)"):
        g.call(sgd, w, torch.tensor([0.1, nan, 0.1, 0.1]), mutates=["weights"])
    assert w.tolist() == [1.0] * 4  # refused before the body ran

    def cop(x: torch.Tensor, w: torch.Tensor) -> None:
        w.add_(x)

    with pytest.raises(ValueError, match=r"op 'cop_typo': mutates holds 'weights', which names no parameter of "
                                         r"cop_typo\(x, w\)"):
        g.custom_op("cop_typo", cop, mutates_args=["weights"])

    def va(*args, **kwargs):  # *args / **kwargs are named by their own names: all their tensors are state
        kwargs["w"].add_(args[0])

    with pytest.raises(ValueError, match=r"mutates holds 'w', which names no parameter of va\(\*args, \*\*kwargs\)"):
        g(va, mutates=["w"])
    w = torch.ones(2)
    with pytest.raises(ringguard.GuardError, match=r"state 'kwargs\['w'\]' has 2 non-finite values"):
        g(va, mutates=["kwargs"])(torch.full((2,), nan), w=w)
    assert w.tolist() == [1.0, 1.0]
    # Without a signature (a builtin) the arguments are arg0, arg1, ... and keywords: checked at the call.
    with pytest.raises(ValueError, match=r"mutates holds 'self', which names no parameter of add_\(arg0, arg1\)"):
        g.call(torch.Tensor.add_, w, torch.full((2,), nan), mutates=["self"])
    with pytest.raises(ringguard.GuardError, match="state 'arg0' has 2 non-finite values"):
        g.call(torch.Tensor.add_, w, torch.full((2,), nan), mutates=[0])
    assert w.tolist() == [1.0, 1.0]
    # Arguments that do not fit the signature cannot be matched to the state: refused before the body runs.
    with pytest.raises(TypeError, match="guard: op 'sgd': missing a required argument: 'grad'"):
        g(sgd, mutates=["w"])(w)


def test_mutates_positions_are_parameter_positions():
    """A position in `mutates` is the parameter's position, whether or not earlier parameters with defaults
    were passed (it used to count the bound arguments: position 2 below protected nothing)."""
    def axpy(x, alpha=1.0, out=None):
        out.add_(alpha * x)

    g = ringguard.Guard(policy="raise")
    w = torch.ones(3)
    with pytest.raises(ringguard.GuardError, match="state 'out' has 3 non-finite values"):
        g(axpy, mutates=[2])(torch.full((3,), float("nan")), out=w)
    assert w.tolist() == [1.0] * 3 and g.counters()["bytes_snapshotted"] == 12

    def cop(x: torch.Tensor, w: torch.Tensor) -> None:
        w.add_(x)

    op = g.custom_op("cop_by_position", cop, mutates_args=[1])  # torch gets the name: mutates_args=("w",)
    with pytest.raises(ringguard.GuardError, match="state 'w' has 3 non-finite values"):
        op(torch.full((3,), float("nan")), w)
    assert w.tolist() == [1.0] * 3


def test_a_tensor_passed_as_input_and_as_state_is_state():
    """The same tensor under an input's name and a state's name is declared once, as state: snapshotted,
    scanned, restored (it used to become the input, so nothing was snapshotted or scanned)."""
    def f(x, out):
        out.mul_(x * float("nan"))

    g = ringguard.Guard(policy="raise")
    t = torch.ones(4)
    with pytest.raises(ringguard.GuardError, match=r"state 'out' has 4 non-finite values .* state restored"):
        g(f, mutates=["out"])(t, t)
    assert t.tolist() == [1.0] * 4
    c = g.counters()
    assert (c["detections"], c["bytes_snapshotted"]) == (1, 16)
    # A transient fault in it is rolled back and replayed bit-identically; its input role raises no
    # check_inputs complaint (the bytes are state, declared as changing).
    def sq(x, out):
        out.mul_(x + 1.0)

    t = torch.arange(4.0)
    ref = bits(t * (t + 1.0))
    g = ringguard.Guard(replays=2, check_inputs=True)
    g.inject(op="sq", call=0, element=2, value="+inf")
    g(sq, mutates=["out"])(t, t)
    assert torch.equal(bits(t), ref)
    assert (g.counters()["injected"], g.counters()["replays"]) == (1, 1)
    # Inside containers too: a list holding the state's tensor among the inputs.
    g = ringguard.Guard(policy="raise")
    t = torch.ones(4)
    with pytest.raises(ringguard.GuardError, match=r"state 'st\[0\]' has 4 non-finite values"):
        g.call(lambda xs, st: st[0].mul_(xs[0] * float("nan")), [t], [t], mutates=["st"])
    assert t.tolist() == [1.0] * 4


def test_views_of_the_state_are_covered_by_it_and_other_overlaps_are_refused():
    """A tensor whose elements lie within a state tensor of the same dtype (a slice of it, a strided view, a
    second state name for part of it) is covered by that state, snapshotted and restored whole. Any other
    overlap with the state (reaching beyond it, another dtype over its bytes) is a ValueError naming both:
    never less snapshotted or scanned than declared."""
    nan = float("nan")

    def f(x, out):
        out.mul_(x.sum() * nan)

    def two(a, b):
        a.add_(1.0)
        b.mul_(nan)

    g = ringguard.Guard(policy="raise")
    for view in (lambda t: t[1:3], lambda t: t[::2], lambda t: t.view(2, 2)):
        t = torch.ones(4)
        with pytest.raises(ringguard.GuardError, match="state 'out' has 4 non-finite values"):
            g(f, mutates=["out"])(view(t), t)
        assert t.tolist() == [1.0] * 4
    assert g.counters()["bytes_snapshotted"] == 3 * 16  # the state alone, whole
    t = torch.ones(4)
    with pytest.raises(ringguard.GuardError, match=r"state 'b' has 4 non-finite values"):
        g(two, mutates=["a", "b"])(t[1:3], t)  # a is part of b
    assert t.tolist() == [1.0] * 4
    with pytest.raises(ringguard.GuardError, match=r"state 'a' has 4 non-finite values"):
        g(two, mutates=["a", "b"])(t, t)  # the same tensor twice: declared once, as 'a'
    assert t.tolist() == [1.0] * 4
    assert g.counters()["bytes_snapshotted"] == 5 * 16
    overlap = "overlaps {} (declare a tensor the op changes in place once, as state)"
    for args, mutates, first, second in (
            ((t[:3], t[1:]), ["a", "b"], "state 'a'", "state 'b'"),           # partial overlap
            ((t, t[1:3]), ["b"], "input 'a'", "state 'b'"),                   # the input reaches beyond
            ((t.view(torch.int32), t), ["b"], "input 'a'", "state 'b'"),      # another dtype, same bytes
            ((t[1:3], t.view(torch.float64)[1:3]), ["a", "b"], "state 'a'", "state 'b'")):  # offset 1, numel 2
        with pytest.raises(ValueError, match=re.escape(f"guard: op 'two': {first} " + overlap.format(second))):
            g(two, mutates=mutates)(*args)
        assert t.tolist() == [1.0] * 4
    assert g.counters()["calls"] == 5


def test_nested_results_and_state_are_scanned_and_restored_at_any_depth():
    """Tensors inside dicts, nested lists, namedtuples and torch's structseqs are outputs (scanned) or
    state (snapshotted, restored), named by their path; an object hiding tensors is refused."""
    import collections

    g = ringguard.Guard(policy="raise")
    one = torch.ones(3)
    with pytest.raises(ringguard.GuardError, match=r"output 'out\['x'\]\[1\]\[0\]' has 3 non-finite values"):
        g.call(lambda a: {"x": [a * 2, (a * float("nan"),)]}, one)
    Out = collections.namedtuple("Out", "loss logits")
    with pytest.raises(ringguard.GuardError, match=r"output 'out.logits' has 3 non-finite values .*\+inf"):
        g.call(lambda a: Out(a.sum(), a * float("inf")), one)
    with pytest.raises(ringguard.GuardError, match=r"output 'out\[2\]' has 3 non-finite values"):
        g.call(lambda a: (a * 2, 3, a * float("nan")), one)
    with pytest.raises(ringguard.GuardError, match=r"output 'out\[0\]' has 1 non-finite value"):
        g.call(lambda a: torch.max(a.view(1, 3) * float("nan"), dim=1), one)

    class Box:
        def __init__(self, t):
            self.t = t

    with pytest.raises(ValueError, match="'out' is a .*Box holding tensors the guard cannot see "
                                         r"\(attribute 't'\)"):
        g.call(lambda a: Box(a * float("nan")), one)
    with pytest.raises(ValueError, match="'st' is a .*Box holding tensors"):
        g.call(lambda st: st.t.add_(1), Box(torch.zeros(3)), mutates=["st"])
    # A module among the inputs is not state: its tensors need no snapshot, and the call runs.
    assert g.call(lambda m, x: m(x), torch.nn.Identity(), one).tolist() == [1.0] * 3

    state = {"m": torch.zeros(3), "v": [torch.zeros(2), {"w": torch.zeros(1)}]}

    def update(st, x):
        st["m"].add_(x)
        st["v"][1]["w"].add_(float("inf"))

    with pytest.raises(ringguard.GuardError, match=r"state 'st\['v'\]\[1\]\['w'\]' has 1 non-finite value"):
        g.call(update, state, one, mutates=["st"])
    assert state["m"].tolist() == [0.0] * 3 and state["v"][1]["w"].tolist() == [0.0]  # restored
    g = ringguard.Guard()  # replay: a transient fault in a nested output is repaired
    g.inject(op="pair", output=1)
    out = g.call(lambda a: {"a": a + 1, "b": [a * 3]}, one, name="pair")
    assert out["b"][0].tolist() == [3.0] * 3 and g.counters()["replays"] == 1


def test_complex_and_every_integer_dtype_are_guarded():
    g = ringguard.Guard(policy="raise")
    with pytest.raises(ringguard.GuardError, match="output 'out' has 6 non-finite values"):
        g.call(lambda a: a * float("nan"), torch.ones(3, dtype=torch.complex64))
    for dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                  torch.complex128):
        w = torch.ones(3, dtype=dtype)
        with pytest.raises(ringguard.GuardError, match="output 'out' has 1 non-finite value"):
            g.call(lambda w: (w.zero_(), torch.tensor([float("nan")]))[1], w, mutates=["w"])
        assert w.tolist() == torch.ones(3, dtype=dtype).tolist(), dtype  # snapshotted, restored
        g.call(lambda w: w.zero_(), w, mutates=["w"])  # integers hold no non-finite value
        assert w.tolist() == torch.zeros(3, dtype=dtype).tolist(), dtype


def test_float8_results_are_scanned_and_float8_state_restored():
    """float8 tensors (torchao-style float8 weights) are scanned byte by byte: a NaN in either format and an
    Inf in e5m2 are found; e4m3fn's bytes 0x78-0x7e are finite (256 to 448), not mistaken for Inf."""
    g = ringguard.Guard(policy="raise")
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        w = torch.ones(5).to(dtype)
        nan_at_3 = torch.tensor([1.0, 2.0, 4.0, float("nan"), 0.5]).to(dtype)
        with pytest.raises(ringguard.GuardError, match=r"output 'out' has 1 non-finite value \(first at index 3"):
            g.call(lambda w: (w.zero_(), nan_at_3)[1], w, mutates=["w"])
        assert w.float().tolist() == [1.0] * 5, dtype  # snapshotted, restored
    big = torch.tensor([448.0, 256.0, 320.0]).to(torch.float8_e4m3fn)  # bytes 0x7e, 0x78, 0x7a
    assert torch.equal(g.call(lambda x: x.clone(), big).view(torch.uint8), big.view(torch.uint8))
    with pytest.raises(ringguard.GuardError, match=r"first at index 1: \+inf"):
        g.call(lambda x: x.clone(), torch.tensor([1.0, float("inf")]).to(torch.float8_e5m2))
    rg = ringguard.Guard(policy="replay")
    rg.inject(op="cast", call=0, element=2, value="nan")
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    y = rg.call(lambda x: x.to(torch.float8_e4m3fn), x, name="cast")
    assert y.float().tolist() == [1.0, 2.0, 3.0, 4.0] and rg.counters()["replays"] == 1


def test_op_exceptions_pass_through_with_state_restored():
    g = ringguard.guard()
    w = torch.zeros(3)

    def bad(w):
        w.add_(5)
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        g(bad, mutates=["w"])(w)
    assert w.tolist() == [0.0, 0.0, 0.0]


def test_dispatch_mode_guards_every_op_and_works_under_autocast():
    a = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    b = torch.randn(4, 6, generator=torch.Generator().manual_seed(2))
    ref = torch.relu(a @ b).sum(0)
    g = ringguard.guard()
    g.inject(op="aten.mm.default", call=0, element=7)
    g.inject(op="aten.relu.default", call=0, element=0, value="-inf")
    with g:
        y = torch.relu(a @ b).sum(0)
    assert torch.equal(bits(y), bits(ref))
    c = g.counters()
    assert c["replays"] == 2 and c["calls"] >= 3

    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = a @ b
        g = ringguard.guard()
        g.inject(op="aten.mm.default", call=0, element=3)
        with g:
            y = a @ b
    assert y.dtype == torch.bfloat16 and ref.dtype == torch.bfloat16
    assert torch.equal(bits(y), bits(ref))
    assert g.counters()["replays"] == 1


def test_step_with_guard_ops_replays_the_region():
    w = torch.arange(6, dtype=torch.float32)
    g = ringguard.guard(mode="deferred")
    g.inject(op="aten.mul_.Tensor", call=1, output=0)  # in place: target 0 is the state, w

    def region():
        w.mul_(torch.tensor(2.0))
        return w.sum()

    outs = [g.step(region, guard_ops=True) for _ in range(3)]
    assert [r["resolution"] for _, r in outs] == ["clean", "replayed", "clean"]
    assert torch.equal(w, torch.arange(6, dtype=torch.float32) * 8)
    assert [o.item() for o, _ in outs] == [30.0, 60.0, 120.0]


def _affine_tanh(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w + 1.0)


def test_custom_op_is_one_opaque_op_under_torch_compile_fullgraph():
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(3))
    w = torch.randn(8, 4, generator=torch.Generator().manual_seed(4))
    results = {}
    for compiled in (False, True):
        g = ringguard.guard(replays=2)
        op = g.custom_op(f"affine_tanh_{int(compiled)}", _affine_tanh)  # one qualname per registration
        g.inject(op=f"affine_tanh_{int(compiled)}", call=1, element=9)  # faults name the guarded op

        def model(x, w):
            return op(op(x, w) @ w.t(), w).sum(1)

        fn = torch.compile(model, fullgraph=True, backend="aot_eager") if compiled else model
        results[compiled] = fn(x, w)
        c = g.counters()
        assert (c["calls"], c["replays"]) == (2, 1), compiled
    assert torch.equal(bits(results[False]), bits(results[True]))
    assert torch.equal(bits(results[False]), bits(_affine_tanh(_affine_tanh(x, w) @ w.t(), w).sum(1)))


def test_custom_op_under_inductor():
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(5))
    w = torch.randn(8, 4, generator=torch.Generator().manual_seed(6))
    g = ringguard.guard()
    op = g.custom_op("affine_tanh_inductor", _affine_tanh)
    g.inject(op="affine_tanh_inductor", call=0, element=2, value="+inf")
    fn = torch.compile(lambda x, w: op(x, w) * 2.0, fullgraph=True)
    y = fn(x, w)
    assert torch.equal(bits(y), bits(_affine_tanh(x, w) * 2.0))
    assert g.counters()["replays"] == 1


def test_agreement_callback_makes_a_clean_rank_replay():
    seen = []

    def other_rank_detected(severity):
        seen.append(severity)
        return max(severity, 1 if len(seen) == 1 else 0)  # the other rank rolls back the first attempt

    g = ringguard.guard(mode="deferred")
    g.set_agreement(other_rank_detected)
    w = torch.zeros(3)
    inc = g(lambda w: w.add_(1.0), name="inc", mutates=["w"])
    _, report = g.step(inc, w)
    assert seen == [0, 0] and report["resolution"] == "replayed"
    assert w.tolist() == [1.0, 1.0, 1.0]  # restored, then run once more
    assert g.counters()["detections"] == 0 and g.counters()["replays"] == 1


@CUDA
def test_cuda_replay_is_bit_identical():
    w_ref, m_ref = train(None, device="cuda")
    g = ringguard.guard()
    w, m = train(g, device="cuda", faults=FAULTS)
    assert torch.equal(bits(w), bits(w_ref)) and torch.equal(bits(m), bits(m_ref))
    c = g.counters()
    assert (c["detections"], c["replays"]) == (3, 3)
    assert c["host_waits"] >= c["calls"]  # immediate: one verdict wait per call (+ rare-path reads)


@CUDA
def test_cuda_deferred_step_waits_once_per_step():
    g = ringguard.guard(mode="deferred")
    w = torch.zeros(1 << 20, device="cuda")
    inc = g(lambda w: w.add_(1.0), name="inc", mutates=["w"])
    ops = g(lambda x: torch.sin(x), name="sin")
    waits_inside = []

    def step():
        before = g.counters()["host_waits"]
        for _ in range(10):
            inc(w)
            ops(w)
        waits_inside.append(g.counters()["host_waits"] - before)

    for _ in range(5):
        g.step(step)
    torch.cuda.synchronize()
    assert waits_inside == [0] * 5
    assert g.counters()["host_waits"] == 5
    assert torch.equal(w, torch.full_like(w, 50.0))


@CUDA
def test_cuda_step_flag_has_no_host_wait():
    g = ringguard.guard(mode="deferred", policy="skip_step")
    sin = g(lambda x: torch.sin(x), name="sin")
    x = torch.ones(1 << 16, device="cuda")
    g.inject(op="sin", call=1)
    flags = [g.step_flag(sin, x)[1].item() for _ in range(3)]
    assert flags == [0.0, 1.0, 0.0]
    assert g.counters()["host_waits"] == 0


@CUDA
def test_cuda_custom_op_compiled_matches_eager():
    x = torch.randn(64, 32, device="cuda")
    w = torch.randn(32, 16, device="cuda")
    outs = []
    for compiled in (False, True):
        g = ringguard.guard()
        op = g.custom_op(f"cuda_affine_tanh_{int(compiled)}", _affine_tanh)
        g.inject(op=f"cuda_affine_tanh_{int(compiled)}", call=0, element=11)
        fn = torch.compile(lambda x, w: op(x, w), fullgraph=True) if compiled else (lambda x, w: op(x, w))
        outs.append(fn(x, w))
        assert g.counters()["replays"] == 1
    assert torch.equal(bits(outs[0]), bits(outs[1]))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_step_flag_gates_a_fused_optimizer_without_rollback(device):
    """skip_step on the device: the flag is the fused AdamW's found_inf; a faulty step leaves the
    parameters and the optimizer's step count exactly as a run without that step. The flag lives where
    the parameters do (a CPU flag with CUDA tensors, or the reverse, is refused: host and device verdicts
    do not mix)."""
    def run(skip_at=None, guard=None):
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(8, 4).to(device))
        opt = torch.optim.AdamW([w], lr=0.01, fused=True)
        fwd = (lambda x: x @ w) if guard is None else guard(lambda x: x @ w, name="fwd")
        grad_scan = None if guard is None else guard(lambda grads: grads, name="grads")
        for s in range(5):
            x = torch.randn(3, 8, generator=torch.Generator().manual_seed(s)).to(device)
            if guard is None:
                if s == skip_at:
                    continue
                opt.zero_grad()
                fwd(x).square().sum().backward()
                opt.step()
                continue

            def region():
                opt.zero_grad()
                fwd(x).square().sum().backward()
                grad_scan([w.grad])

            _, flag = guard.step_flag(region, flag=torch.zeros((), device=device))
            opt.found_inf = flag
            opt.step()
            flags.append(flag.item())
        return w.detach(), opt.state[w]["step"]

    flags = []
    g = ringguard.guard(mode="deferred", policy="skip_step")
    g.inject(op="fwd", call=2, element=1, value="nan")
    w, steps = run(guard=g)
    w_ref, steps_ref = run(skip_at=2)
    assert flags == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert torch.equal(bits(w), bits(w_ref))
    assert steps.item() == steps_ref.item() == 4
    assert g.counters()["bytes_snapshotted"] == 0


# ---- the CUDA graph path (ringguard.graph_guard) ------------------------------------------------------


def _graph_step(x, acc, y):
    """y = relu(2 x + acc) (a temporary from torch's allocator: the graph's private pool), acc += 1."""
    def step():
        torch.clamp(2 * x + acc, min=0, out=y)
        acc.add_(1)
    return step


def test_graph_guard_needs_cuda_tensors():
    with pytest.raises(ValueError, match="state and outputs must be CUDA tensors"):
        ringguard.graph_guard(lambda: None, state=[torch.zeros(4)], outputs=[torch.zeros(4)])


@CUDA
def test_cuda_graph_guard_replays_on_the_device_bit_identically():
    x = (torch.arange(4096, device="cuda", dtype=torch.float32) % 37 - 18) / 8
    acc0 = (torch.arange(4096, device="cuda", dtype=torch.float32) % 11 - 5) / 4
    # Reference: the step run plainly, 5 times.
    acc, y = acc0.clone(), torch.zeros(4096, device="cuda")
    for _ in range(5):
        _graph_step(x, acc, y)()
    # Graph path with a NaN in the first run of every call: each call replays once on the device.
    acc_g, y_g = acc0.clone(), torch.zeros(4096, device="cuda")
    op = ringguard.graph_guard(_graph_step(x, acc_g, y_g), state=[acc_g], outputs=[y_g], max_replays=2,
                               faults=[dict(output=0, element=17, value="nan", attempts=1)])
    assert op.captured
    for _ in range(5):
        op()
    r = op.report()
    assert r["replays"] == 1 and r["clean"] and r["launches"] == 5, r
    assert torch.equal(bits(acc_g), bits(acc)) and torch.equal(bits(y_g), bits(y))


@CUDA
def test_cuda_graph_guard_persistent_fault_escalates_to_the_host_which_restores():
    x = torch.ones(1024, device="cuda")
    acc, y = torch.zeros(1024, device="cuda"), torch.zeros(1024, device="cuda")
    op = ringguard.graph_guard(_graph_step(x, acc, y), state=[acc], outputs=[y], max_replays=3,
                               faults=[dict(output=0, element=5, value="+inf", attempts=0xFFFFFFFF)])
    op()
    r = op.report()
    assert r["replays"] == 3 and not r["clean"] and r["first_bad_output"] == 0 and r["bad_elements"] == 1, r
    op.restore()
    torch.cuda.synchronize()
    assert torch.equal(acc, torch.zeros(1024, device="cuda"))


@CUDA
def test_cuda_graph_guard_falls_back_to_the_host_driven_guard_when_not_capturable():
    x = torch.ones(256, device="cuda")
    acc, y = torch.zeros(256, device="cuda"), torch.zeros(256, device="cuda")

    def syncs():
        torch.clamp(x + acc, min=0, out=y)
        if float(y.sum()) < 0:  # a host read: not capturable
            y.zero_()

    with pytest.warns(RuntimeWarning, match="runs through the host-driven guard"):
        op = ringguard.graph_guard(syncs, state=[acc], outputs=[y], name="syncs")
    assert not op.captured
    op()
    torch.cuda.synchronize()
    assert torch.equal(y, torch.ones(256, device="cuda"))
    assert op.report()["calls"] == 1
