"""The guard decorator under torch.compile (issue 41): a function decorated with ringguard.guard, called from
compiled code, with fullgraph=True and without, backends aot_eager and inductor, as a plain function, a
method and inside a module's forward. The compiled run must match the eager one bit for bit: a transient
fault replayed, a persistent one raising GuardError naming the op, gradients through the guarded calls.
CPU cases run everywhere (CI); the CUDA case is skipped without a GPU."""

import pytest
import torch

import ringguard

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).clone()


class Net(torch.nn.Module):
    """The three forms at once: a guarded method (act), a guarded plain function (affine, built per guard)
    called in forward with the module's parameters, and the module's forward compiled around them."""

    def __init__(self, g, seed=0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.w1 = torch.nn.Parameter(torch.randn(8, 16, generator=gen) / 4)
        self.w2 = torch.nn.Parameter(torch.randn(16, 4, generator=gen) / 4)
        self.register_buffer("shift", torch.full((16,), 0.25))

        @g
        def affine(x, w):
            return x @ w + 1.0

        self.affine = affine

    def forward(self, x):
        return self.affine(self.act(x), self.w2).sum(1)


def _method(g):
    """Net with its act method guarded by `g` (the decorator applied to the class's function)."""

    class GuardedNet(Net):
        @g
        def act(self, x):
            return torch.tanh(x @ self.w1 + self.shift)

    return GuardedNet


def _run(compile_kw, faults=(), seed=0, steps=1, grad=False):
    g = ringguard.guard(policy="replay", replays=2)
    for f in faults:
        g.inject(**f)
    net = _method(g)(g, seed)
    fn = torch.compile(net, **compile_kw) if compile_kw is not None else net
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(seed + 1))
    outs, grads = [], []
    for _ in range(steps):
        if grad:
            y = fn(x)
            y.square().mean().backward()
            grads.append([bits(p.grad) for p in (net.w1, net.w2)])
            net.zero_grad()
        else:
            with torch.no_grad():
                y = fn(x)
        outs.append(bits(y))
    return outs, grads, g.counters()


FAULTS = [dict(op="act", call=1, element=7, value="nan"), dict(op="affine", call=2, element=3, value="+inf")]


@pytest.mark.parametrize("compile_kw", [
    dict(fullgraph=True, backend="aot_eager"),
    dict(fullgraph=False, backend="aot_eager"),
    dict(fullgraph=True, backend="inductor"),
], ids=["aot_eager-fullgraph", "aot_eager", "inductor-fullgraph"])
def test_compiled_matches_eager_with_replays(compile_kw):
    torch._dynamo.reset()
    ref, _, _ = _run(None, steps=3)
    eager, _, ce = _run(None, faults=FAULTS, steps=3)
    compiled, _, cc = _run(compile_kw, faults=FAULTS, steps=3)
    for k in range(3):
        assert torch.equal(eager[k], ref[k]) and torch.equal(compiled[k], ref[k]), k
    keys = ("calls", "injected", "detections", "replays", "escalations")
    assert [ce[k] for k in keys] == [6, 2, 2, 2, 0]
    assert [cc[k] for k in keys] == [ce[k] for k in keys], (cc, ce)


def test_gradients_through_compiled_guarded_calls_match_eager():
    torch._dynamo.reset()
    ref_out, ref_grads, _ = _run(None, steps=3, grad=True)
    out, grads, c = _run(dict(fullgraph=True, backend="aot_eager"), faults=FAULTS, steps=3, grad=True)
    assert all(torch.equal(a, b) for a, b in zip(out, ref_out))
    for step in range(3):
        assert all(torch.equal(a, b) for a, b in zip(grads[step], ref_grads[step])), step
    assert (c["calls"], c["replays"]) == (6, 2)


def test_persistent_fault_raises_naming_the_op_when_compiled():
    torch._dynamo.reset()
    with pytest.raises(ringguard.GuardError) as err:
        _run(dict(fullgraph=True, backend="aot_eager"),
             faults=[dict(op="affine", call=0, attempts=1000, element=2, value="-inf")])
    assert str(err.value).startswith("guard: op 'affine' call 0: output 'out' has 1 non-finite value "
                                     "(first at index 2: -inf); after 2 replays"), str(err.value)


def test_in_place_state_under_compile():
    # A guarded in-place update (mutates=...) compiled: the state is the op's mutated argument, restored on
    # a detection and replayed; the result equals the eager run's.
    def run(compiled):
        torch._dynamo.reset()
        g = ringguard.guard()
        g.inject(op="sgd", call=1, output=1, element=5, value="nan")  # target 1: m

        @g(mutates=["w", "m"])
        def sgd(w, m, grad, lr: float):
            m.mul_(0.9).add_(grad)
            w.sub_(lr * m)

        def step(w, m, grad):
            sgd(w, m, grad, 0.5)
            return w.sum()

        fn = torch.compile(step, fullgraph=True, backend="aot_eager") if compiled else step
        w, m = torch.arange(12.0), torch.zeros(12)
        sums = [fn(w, m, torch.full((12,), float(k))) for k in range(3)]
        return w, m, sums, g.counters()

    w0, m0, s0, c0 = run(False)
    w1, m1, s1, c1 = run(True)
    assert torch.equal(bits(w0), bits(w1)) and torch.equal(bits(m0), bits(m1))
    assert [bits(s) for s in s0] and all(torch.equal(bits(a), bits(b)) for a, b in zip(s0, s1))
    assert (c1["calls"], c1["replays"]) == (c0["calls"], c0["replays"]) == (3, 1)


def test_a_function_the_compiler_cannot_run_gets_ringguards_error():
    # The body reads a value on the host: the compiler's fake tensors have none. The user gets ringguard's
    # error naming the op and the way out, not a Dynamo internal.
    torch._dynamo.reset()
    g = ringguard.guard()

    @g
    def scaled(x):
        return x * float(x.abs().max().item())

    fn = torch.compile(lambda x: scaled(x) + 1, fullgraph=True, backend="aot_eager")
    with pytest.raises(ringguard.GuardCompileError) as err:
        fn(torch.ones(4))
    text = str(err.value)
    assert text.startswith("guard: op 'scaled' cannot run under torch.compile: running it on the compiler's "
                           "fake tensors (for its outputs' shapes) raised "), text
    assert text.endswith("Register it as g.custom_op('scaled', fn, fake=...) with a fake that gives the outputs' "
                         "shapes, or call it outside the compiled region"), text
    # Without fullgraph the graph breaks there and the call runs eagerly, guarded.
    torch._dynamo.reset()
    g.inject(op="scaled", call=0)
    y = torch.compile(lambda x: scaled(x) + 1, backend="aot_eager")(torch.full((4,), 2.0))
    assert torch.equal(y, torch.full((4,), 5.0)) and g.counters()["replays"] == 1


@CUDA
def test_cuda_compiled_matches_eager_with_replays():
    torch._dynamo.reset()
    g = ringguard.guard()
    g.inject(op="act", call=0, element=11)

    @g(name="act")
    def act(x, w):
        return torch.tanh(x @ w + 1.0)

    x = torch.randn(64, 32, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    w = torch.randn(32, 16, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    ref = torch.tanh(x @ w + 1.0) * 2
    for backend in ("aot_eager", "inductor"):
        y = torch.compile(lambda x, w: act(x, w) * 2, fullgraph=True, backend=backend)(x, w)
        assert torch.equal(bits(y), bits(ref)), backend
    assert g.counters()["replays"] == 1


def test_a_call_without_tensor_arguments_is_one_op_too():
    # Nothing to find the fake tensors by: the compiler's fake mode says it is tracing.
    torch._dynamo.reset()
    g = ringguard.guard()
    g.inject(op="make", call=0, element=1)

    @g
    def make(n: int):
        return torch.arange(float(n)) * 2

    y = torch.compile(lambda x: make(4) + x, fullgraph=True, backend="aot_eager")(torch.ones(4))
    assert torch.equal(y, torch.tensor([1.0, 3.0, 5.0, 7.0]))
    assert (g.counters()["calls"], g.counters()["replays"]) == (1, 1)
