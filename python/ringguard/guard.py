"""NaN/Inf snapshot-and-rollback for custom operators (docs/GUARD.md).

    g = ringguard.guard(policy="replay", replays=2, fallback=None)

    @g                                   # a decorated function: one guarded call per call
    def mlp(x, w): return torch.relu(x @ w)

    @ringguard.guard(mutates=["m", "w"])  # a function that changes tensors in place declares them
    def sgd(w: torch.Tensor, m: torch.Tensor, g: torch.Tensor) -> None: ...

    op = g.custom_op("fused", fn, mutates_args=())   # one opaque op under torch.compile(fullgraph=True)
    torch.compile(model)                 # decorated functions inside become such ops on their own

    with g:                              # a TorchDispatchMode: every aten op of the block is guarded
        y = model(x)

    g.step(train_step, batch)            # a step: deferred verdicts, replayed or skipped as a whole,
                                         # agreed across ranks (group=...)
    g.counters()                         # detections, rollbacks, replays, fallbacks, escalations, ...

The state machine is the C++ one (``ringguard._C.Guard``, src/guard/); this module declares the tensors
and hands it the op bodies as callables.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from . import _ext
from ._checks import I32_MAX, I64_MAX, U64_MAX, integer
from ._guard_compile_error import GuardCompileError  # noqa: F401  raised by _compiled.py, exported here

__all__ = ["Guard", "GuardCompileError", "GuardError", "guard"]


class GuardError(RuntimeError):
    """Raised when the policy ends in ``raise``: names op, call, tensor, first bad index and value, the
    count of bad values and the replays tried. The extension raises this class (guard_bindings.cc)."""


def _tensors(obj) -> List[torch.Tensor]:
    """The tensors of an aten op's argument or result: a tensor or a flat list of them."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for t in obj if isinstance(t, torch.Tensor)]
    return []


def _flatten(obj, label: str, strict: bool = True) -> List[Tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor in `obj`, at any depth of lists, tuples, dicts, namedtuples and the
    types registered with torch.utils._pytree, named `label` plus the path (``out[0]['x']``). With
    `strict`, an object that holds tensors where the guard cannot see them raises: its tensors would go
    unscanned (outputs) or unrestored (state); inputs are not strict (a module passed to the op is fine).
    Also called by the extension for an op's result (guard_bindings.cc)."""
    if isinstance(obj, torch.Tensor):
        return [(label, obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return []
    from torch.utils import _pytree as pytree

    out = []
    for path, leaf in pytree.tree_flatten_with_path(obj)[0]:
        name = label + pytree.keystr(path)
        if isinstance(leaf, torch.Tensor):
            out.append((name, leaf))
            continue
        if not strict:
            continue
        hidden = [k for k, v in getattr(leaf, "__dict__", {}).items()
                  if any(isinstance(t, torch.Tensor) for t in pytree.tree_leaves(v))]
        if hidden:
            raise ValueError(f"guard: '{name}' is a {type(leaf).__qualname__} holding tensors the guard cannot "
                             f"see (attribute '{hidden[0]}'): pass or return tensors, or lists, tuples or "
                             f"dicts of them, or register the type with torch.utils._pytree")
    return out


def _stream_of(tensors: Iterable[torch.Tensor]) -> int:
    """The raw cudaStream_t of the current stream of the first CUDA tensor's device (0: none)."""
    for t in tensors:
        if t.is_cuda:
            return torch._C._cuda_getCurrentRawStream(t.device.index)
    return 0


def _max_allreduce(group):
    """The step agreement over torch.distributed: MAX of one int64 over `group` (any backend)."""
    import torch.distributed as dist

    def agree(severity: int) -> int:
        t = torch.tensor([severity], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return int(t.item())

    return agree


class Guard:
    """A guard with one policy, its own counters and fault injection.

    policy: first response to a non-finite result: "replay", "fallback", "zero", "clamp", "skip_step",
    "raise". replays: K. escalation: after K failed replays ("raise", "fallback", "zero", "clamp",
    "skip_step"). after_fallback: when a fallback escalation failed too. mode: "immediate" (verdict read
    after each call) or "deferred" (read once per ``step``). fallback: the default alternative for
    decorated functions. group: a torch.distributed group whose ranks agree on every step's outcome.
    """

    def __init__(self, policy: str = "replay", replays: int = 2, escalation: str = "raise",
                 after_fallback: str = "raise", mode: str = "immediate",
                 fallback: Optional[Callable] = None, mutates: Sequence[str] = (),
                 snapshot_budget_bytes: int = 1 << 30, scan_state: bool = True, scan_inputs: bool = False,
                 check_inputs: bool = False, device: Optional[int] = None, group: Any = None):
        C = _ext.load()
        integer("ringguard.guard", "replays", replays, 0, 1000)  # GuardPolicy::kMaxReplays
        integer("ringguard.guard", "snapshot_budget_bytes", snapshot_budget_bytes, 0, U64_MAX)
        integer("ringguard.guard", "device", device, -1, I32_MAX, none_ok=True)
        if device is None:
            device = torch.cuda.current_device() if torch.cuda.is_available() else -1
        self.mode = mode
        self.fallback = fallback
        self.mutates = mutates if isinstance(mutates, str) else tuple(mutates)  # checked by each decoration
        self._impl = C.Guard(dict(policy=policy, replays=replays, escalation=escalation,
                                  after_fallback=after_fallback, mode=mode,
                                  snapshot_budget_bytes=snapshot_budget_bytes, scan_state=scan_state,
                                  scan_inputs=scan_inputs, check_inputs=check_inputs), device)
        if group is not None:
            self.set_group(group)
        self._mode_stack: List[Any] = []

    # ---- calls ------------------------------------------------------------------------------------

    def call(self, fn: Callable, *args, name: Optional[str] = None, mutates: Sequence = (),
             fallback: Optional[Callable] = None, **kwargs):
        """Runs ``fn(*args, **kwargs)`` as one guarded call and returns its result. Tensors among the
        arguments named (or indexed) in `mutates` are the state (snapshotted, restored); the other tensor
        arguments are inputs; the returned tensors are the outputs (scanned). A name or position that is
        not a parameter of `fn` raises ValueError."""
        sig = _signature(fn)
        name = name or getattr(fn, "__name__", "op")
        return self._run(fn, sig, args, kwargs, name, _state_names(sig, mutates, name), fallback)

    def _run(self, fn, sig, args, kwargs, name, mutates, fallback):
        state, inputs = _split(sig, args, kwargs, mutates, name)
        fb = fallback or self.fallback
        body = functools.partial(fn, *args, **kwargs)
        fb_body = functools.partial(fb, *args, **kwargs) if fb is not None else None
        stream = _stream_of([t for _, t in state + inputs])
        result, _ = self._impl.run(name, inputs, state, [], body, fb_body, stream)
        return result

    def __call__(self, fn: Optional[Callable] = None, *, name: Optional[str] = None,
                 mutates: Optional[Sequence] = None, fallback: Optional[Callable] = None):
        """Decorator: ``@g`` or ``@g(name=..., mutates=[...], fallback=...)``."""
        if fn is None:
            return lambda f: self(f, name=name, mutates=mutates, fallback=fallback)
        sig = _signature(fn)  # once: inspect.signature costs tens of microseconds per call
        op_name = name or getattr(fn, "__name__", "op")
        muts = _state_names(sig, self.mutates if mutates is None else mutates, op_name)  # raises now on a typo

        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            if torch.compiler.is_compiling():
                # Dynamo cannot trace the guard (it reads tensors' memory): the call becomes one opaque op
                # whose implementation is this same guarded call (_compiled.py, docs/GUARD.md).
                from . import _compiled

                return _compiled.call(guarded._rg_caller.key, args, kwargs)
            return self._run(fn, sig, args, kwargs, op_name, muts, fallback)

        guarded.guard = self
        guarded._rg_caller = _Caller(guarded, self, fn, sig, op_name, muts, fallback)
        return guarded

    def step(self, fn: Callable, *args, guard_ops: bool = False, **kwargs):
        """Runs ``fn(*args, **kwargs)`` as one step: every snapshot of the step is kept to its end, the
        verdicts (deferred mode) are read once, the outcome is agreed across the group's ranks, and on
        a detection every snapshot is restored and the step replayed, run with the flagged ops'
        fallbacks, skipped or raised. guard_ops=True guards every aten op of the step (TorchDispatchMode;
        the step is the replay unit). Returns (result of the last run, report); a skipped step returns
        (None, report) with report["resolution"] == "skipped"."""
        box: Dict[str, Any] = {}

        def region():
            if guard_ops:
                with _GuardMode(self):
                    box["result"] = fn(*args, **kwargs)
            else:
                box["result"] = fn(*args, **kwargs)

        report = self._impl.run_step(region)
        result = None if report["resolution"] == "skipped" else box.get("result")
        return result, report

    def step_flag(self, fn: Callable, *args, flag: Optional[torch.Tensor] = None, **kwargs):
        """A step whose verdict stays on the device (deferred mode): ``fn(*args, **kwargs)`` runs with
        its guarded calls scanned, nothing is snapshotted and nothing waits; `flag` (one float32 element (0-dim for found_inf),
        created on the current CUDA device or the CPU when None) becomes 1.0 when the step saw a
        non-finite value, else 0.0. Gate the step's update on it on the device, e.g.
        ``opt.found_inf = flag`` for a fused torch optimizer (the update is skipped where flag == 1):
        skip_step with zero host waits. Across ranks, ``all_reduce(flag, MAX)`` first. Returns
        (result, flag)."""
        if flag is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
            flag = torch.zeros((), dtype=torch.float32, device=device)  # 0-dim, as found_inf must be
        box: Dict[str, Any] = {}

        def region():
            box["result"] = fn(*args, **kwargs)

        self._impl.run_step_to_flag(region, flag, _stream_of([flag]))
        return box.get("result"), flag

    # ---- torch.library ------------------------------------------------------------------------------

    def custom_op(self, name: str, fn: Callable, *, mutates_args: Sequence[str] = (),
                  fallback: Optional[Callable] = None, fake: Optional[Callable] = None,
                  namespace: str = "ringguard_guard"):
        """Registers ``namespace::name``, a ``torch.library.custom_op`` whose implementation is `fn`
        under this guard: one opaque op to ``torch.compile(fullgraph=True)``, guarded in eager and
        compiled runs alike. `fn` needs type annotations (the schema is inferred from them); `fake`
        (default: `fn` itself, fine for ops written in torch) gives output metadata to the compiler.
        Returns the op (``op.register_autograd`` adds a backward)."""
        sig = _signature(fn)
        muts = _state_names(sig, mutates_args, name)

        @functools.wraps(fn)
        def impl(*args, **kwargs):
            return self._run(fn, sig, args, kwargs, name, muts, fallback)

        op = torch.library.custom_op(f"{namespace}::{name}", impl, mutates_args=muts)
        # The compiler traces `fake` on FakeTensors for output metadata; an op written in torch can be
        # its own fake (in-place writes on fakes are harmless).
        op.register_fake(fake if fake is not None else fn)
        return op

    # ---- context manager: every op of the block ------------------------------------------------------

    def __enter__(self):
        if self.mode != "immediate":
            raise ValueError("ringguard.guard: a `with` block cannot be replayed as a whole; in deferred "
                             "mode run the region as g.step(fn, guard_ops=True)")
        mode = _GuardMode(self)
        mode.__enter__()
        self._mode_stack.append(mode)
        return self

    def __exit__(self, *exc):
        return self._mode_stack.pop().__exit__(*exc)

    # ---- counters, faults, agreement ----------------------------------------------------------------

    def counters(self) -> Dict[str, int]:
        """calls, steps, detections, rollbacks, replays, fallbacks, escalations, sanitized,
        skipped_steps, raised, injected, bytes_snapshotted, host_waits (they only grow)."""
        return dict(self._impl.counters())

    def inject(self, op: str = "", call: int = -1, attempts: int = 1, output: int = 0, element: int = 0,
               value: str = "nan", probability: float = 1.0) -> None:
        """Fault injection: writes `value` ("nan", "+inf", "-inf", or "large": the largest finite value,
        which the guard does not catch) into element `element` of target `output` (the op's outputs,
        then its state tensors; -1: all) of call `call` of `op` ("" and -1: every op / call), for the
        first `attempts` attempts (1: transient; large: persistent), with `probability` (seeded)."""
        integer("Guard.inject", "call", call, -1, I64_MAX)
        integer("Guard.inject", "attempts", attempts, 1, I32_MAX)
        integer("Guard.inject", "output", output, -1, I32_MAX)
        integer("Guard.inject", "element", element, 0, U64_MAX)
        self._impl.add_fault(op, call, attempts, output, element, value, probability)

    def seed(self, seed: int) -> None:
        self._impl.set_fault_seed(integer("Guard.seed", "seed", seed, 0, U64_MAX))

    def clear_faults(self) -> None:
        self._impl.clear_faults()

    def set_group(self, group) -> None:
        """Agree every step's outcome with the ranks of `group` (one MAX allreduce of an int64 per step
        attempt); None turns agreement off."""
        self._impl.set_agreement(None if group is None else _max_allreduce(group))

    def set_agreement(self, fn: Optional[Callable[[int], int]]) -> None:
        """A custom agreement: fn(local severity) -> the MAX over every rank."""
        self._impl.set_agreement(fn)


def guard(fn: Optional[Callable] = None, **policy):
    """``ringguard.guard(policy=..., replays=..., fallback=...)``: a :class:`Guard`, usable as a
    decorator and as a context manager; ``ringguard.guard(fn)`` decorates `fn` with the defaults."""
    if fn is not None:
        return Guard(**policy)(fn)
    return Guard(**policy)


# ---- helpers ------------------------------------------------------------------------------------------


def _Caller(owner, guard, fn, sig, name, mutates, fallback):
    from ._compiled import Caller  # no torch._dynamo import: the module only names it inside functions

    return Caller(owner, guard, fn, sig, name, mutates, fallback)


def _signature(fn) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _state_names(sig, mutates, op: str) -> Tuple:
    """The names of the parameters `mutates` declares as state (their names or positions in `sig`; a *args
    or **kwargs parameter by its own name), in parameter order. An entry that names no parameter raises
    ValueError: its tensors would silently go unsnapshotted and unscanned. Without a signature `mutates` is
    returned as it is and _split resolves it against each call's arguments."""
    mutates = (mutates,) if isinstance(mutates, str) else tuple(mutates)
    if sig is None:
        return mutates
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    shown = ", ".join(stars.get(p.kind, "") + p.name for p in sig.parameters.values())
    return _resolve(mutates, list(sig.parameters), f"{op}({shown})", op)


def _resolve(mutates, names: List[str], shown: str, op: str) -> Tuple[str, ...]:
    """`mutates` (names or positions of `names`) as names, in the order of `names`; `shown` names them in
    the error an unknown entry raises."""
    for m in mutates:
        if isinstance(m, str):
            known = m in names
        else:
            known = isinstance(m, int) and not isinstance(m, bool) and 0 <= m < len(names)
        if not known:
            raise ValueError(f"guard: op '{op}': mutates holds {m!r}, which names no parameter of {shown}: "
                             f"give the names or positions of the parameters the op changes in place")
    picked = {m if isinstance(m, str) else names[m] for m in mutates}
    return tuple(n for n in names if n in picked)


def _extent(t: torch.Tensor) -> Tuple[int, int]:
    """[first byte, end) of the memory `t`'s elements span."""
    lo = t.data_ptr()
    if t.numel() == 0:
        return lo, lo
    return lo, lo + t.element_size() * (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())))


def _covered(found: List[Tuple[str, torch.Tensor, bool]]) -> set:
    """The indices in `found` ((label, tensor, is state)) of the tensors that are not declared on their own.
    A tensor is declared once: one whose elements lie within a state tensor of the same dtype (the same
    tensor passed again, as an input or as state, or a view of it) is covered by that state, which is
    snapshotted, scanned and restored whole; a tensor passed twice as an input is one input. Any other
    overlap with a state tensor stays declared, and the C++ guard refuses it (ValueError naming both)."""
    by_storage: Dict[int, List[int]] = {}
    for k, (_, t, _) in enumerate(found):
        by_storage.setdefault(t.untyped_storage().data_ptr(), []).append(k)
    covered = set()
    for ks in by_storage.values():
        if len(ks) < 2:
            continue  # the common case: nothing else in its storage
        groups: Dict[Any, List[Tuple[int, int, bool, int]]] = {}
        for k in ks:
            _, t, mutated = found[k]
            lo, hi = _extent(t)
            groups.setdefault((t.device, t.dtype), []).append((lo, -hi, not mutated, k))  # one grid of elements
        for group in groups.values():
            group.sort()  # by start, the longest first, state before input, then in argument order
            reach, last = -1, None  # the furthest end of a state so far; the last declared extent
            for lo, neg_hi, is_input, k in group:
                hi = -neg_hi
                if hi <= reach or (lo, hi) == last:
                    covered.add(k)  # within a state that starts no later, or the input just declared
                    continue
                last = (lo, hi)
                if not is_input:
                    reach = max(reach, hi)
    return covered


def _split(sig, args, kwargs, mutates,
           op: str) -> Tuple[List[Tuple[str, torch.Tensor]], List[Tuple[str, torch.Tensor]]]:
    """(state, inputs): the tensor arguments, named by parameter, split by `mutates` (the state's parameter
    names from _state_names; without a signature, names or positions of this call's arguments, named
    arg0, arg1, ... and by keyword)."""
    named = None
    if sig is not None:
        try:
            named = list(sig.bind(*args, **kwargs).arguments.items())
        except TypeError as e:
            if mutates:  # the state's parameters cannot be found among arguments that do not fit
                raise TypeError(f"guard: op '{op}': {e}") from None
    if named is None:
        named = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
        shown = f"{op}({', '.join(n for n, _ in named)}) (no signature: its arguments are named by position)"
        mutates = _resolve(mutates, [n for n, _ in named], shown, op)
    found = []  # (label, tensor, is state), in argument order
    for pname, value in named:
        mutated = pname in mutates
        for label, t in _flatten(value, pname, strict=mutated):
            if t.layout != torch.strided:
                raise ValueError(f"guard: tensor '{label}' has layout {t.layout}: the guard takes dense "
                                 f"(strided) tensors")
            found.append((label, t, mutated))
    covered = _covered(found)
    state = [(label, t) for k, (label, t, mutated) in enumerate(found) if mutated and k not in covered]
    inputs = [(label, t) for k, (label, t, mutated) in enumerate(found) if not mutated and k not in covered]
    return state, inputs


_UNINITIALISED = "empty"  # aten::empty, empty_like, empty_strided, new_empty, ...


@functools.lru_cache(maxsize=None)
def _guard_mode_class():
    # Imported on first use: this module is imported while torch itself initialises (the backend's entry
    # point), when torch.utils._python_dispatch may not be importable yet.
    from torch.utils._python_dispatch import TorchDispatchMode

    class _GuardMode(TorchDispatchMode):
        """Guards every aten op: in-place arguments are the state, fresh results the outputs. Views and ops
        whose results alias an argument run unguarded (nothing new to scan), as do ops on non-contiguous
        state or results (the snapshot is one byte range)."""

        def __init__(self, guard: Guard):
            super().__init__()
            self.guard = guard

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            schema = func._schema
            if _UNINITIALISED in schema.name or "resize" in schema.name:
                return func(*args, **kwargs)  # uninitialised memory is no verdict on anything
            if any(r.alias_info is not None for r in schema.returns):
                if not any(r.alias_info is not None and r.alias_info.is_write for r in schema.returns):
                    return func(*args, **kwargs)  # a view: nothing computed
            state = []
            flat = list(zip(schema.arguments, args)) + [(a, kwargs[a.name]) for a in schema.arguments
                                                        if a.name in kwargs]
            for arg, value in flat:
                if arg.alias_info is not None and arg.alias_info.is_write:
                    for t in _tensors(value):
                        if not t.is_contiguous():
                            return func(*args, **kwargs)
                        state.append((arg.name, t))
            impl = self.guard._impl

            def body():
                out = func(*args, **kwargs)
                fresh = [t for t in _tensors(out) if t.is_contiguous()
                         and all(t.untyped_storage().data_ptr() != s.untyped_storage().data_ptr()
                                 for _, s in state)]
                return fresh, out

            box = {}

            def run():
                fresh, out = body()
                box["out"] = out
                return fresh

            stream = _stream_of([t for _, t in state] + [t for a in args for t in _tensors(a)])
            impl.run(str(func), [], state, [], run, None, stream)
            return box["out"]

    return _GuardMode


def _GuardMode(guard):
    return _guard_mode_class()(guard)
