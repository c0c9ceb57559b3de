"""A guarded function under torch.compile (docs/GUARD.md, "Under torch.compile").

The guard reads tensors' memory (data_ptr, snapshots, scans), which the compiler cannot trace. So under
torch.compile a decorated function becomes one opaque op: Dynamo does not trace into it
(``torch._dynamo.nonstrict_trace``), and when the compiler's tracer (AOTAutograd, on fake tensors) reaches it,
a ``torch.library.custom_op`` that describes this call is registered and called instead. The op's
implementation is the eager guarded call (``Guard._run``), so a compiled run snapshots, scans, replays and
raises exactly as an eager one; its fake implementation is the function itself, run on the fake tensors for
the outputs' metadata; its backward runs the function again (unguarded) under autograd. A backend that runs
the graph without tracing it (``backend="eager"``) calls the eager guarded path directly.

An op describes a call by the tensors found in its arguments (pytree), as two lists: the state (under
``mutates``, written in place: the op's ``mutates_args``) and the inputs; everything else in the arguments is
a constant of the op. A module argument (``self`` of a method) passes its parameters and buffers as inputs
and is reparametrised with them inside the op, so the compiler sees them as the graph inputs they are.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import re
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.utils import _pytree as pytree

from ._guard_compile_error import GuardCompileError

_BASIC = (torch.Tensor, int, float, bool, str, list, tuple, dict, torch.dtype, torch.device)
_ops = itertools.count()
_TENSOR = object()  # a tensor's place among a result's leaves


_callers: "weakref.WeakValueDictionary[int, Callable]" = weakref.WeakValueDictionary()


class Caller:
    """What the compiled path of one decorated function needs: the guard and how it calls the function. Found
    by a number from inside the compiled region (a leaf's arguments are plain data)."""

    def __init__(self, owner: Callable, guard, fn: Callable, sig, name: str, mutates: Tuple, fallback):
        self.guard, self.fn, self.sig, self.name, self.mutates, self.fallback = (guard, fn, sig, name, mutates,
                                                                                 fallback)
        self.ops: Dict[Any, "_Op"] = {}
        self.key = next(_keys)
        _callers[self.key] = owner


_keys = itertools.count()


def call(key: int, args, kwargs):
    """Traced by Dynamo: the call handed to an opaque leaf, each argument that is not plain data (a module,
    another object) replaced by its id (a module's parameters and buffers go along as tensors)."""
    refs, params = [], {}
    args = list(args)
    for where, value in itertools.chain(enumerate(args), kwargs.items()):
        if value is not None and isinstance(value, _BASIC):
            continue
        refs.append((where, 0 if value is None else id(value)))  # the leaf takes no None either
        if isinstance(value, torch.nn.Module):
            params[where] = dict(itertools.chain(value.named_parameters(), value.named_buffers()))
        if isinstance(where, int):  # a placeholder; the leaf puts the object back
            args[where] = 0
        else:
            kwargs[where] = 0
    result = torch._dynamo.nonstrict_trace(_leaf)(key, tuple(refs), params, tuple(args), kwargs)
    return None if isinstance(result, tuple) and len(result) == 0 else result


def _no_none(result):
    # A leaf may not return None (an in-place op's result): () stands for it, and call() turns it back.
    return () if result is None else result


def _leaf(key, refs, params, args, kwargs):
    """Not traced by Dynamo. On the compiler's fake tensors: the op of this call (registered on first use). On
    real tensors (a backend that runs the graph as it is): the eager guarded call."""
    c: Caller = _callers[key]._rg_caller
    tensors = [t for t in pytree.tree_leaves((params, args, kwargs)) if isinstance(t, torch.Tensor)]
    objects = {where: _object_at(address) for where, address in refs}
    if not _tracing(tensors):
        args, kwargs = _with_objects(args, kwargs, objects)
        with _reparametrised(objects, params):
            return _no_none(c.guard._run(c.fn, c.sig, args, kwargs, c.name, c.mutates, c.fallback))
    k = _key(refs, params, args, kwargs)
    op = c.ops.get(k)
    if op is None:
        op = c.ops[k] = _Op(c.guard, c.fn, c.sig, c.name, c.mutates, c.fallback, objects, params, args, kwargs)
    return _no_none(op(params, args, kwargs))


def _tracing(tensors) -> bool:
    """Whether the compiler is tracing the call (fake tensors, or a fake mode on for a call without tensors)."""
    from torch._subclasses.fake_tensor import is_fake

    if any(is_fake(t) for t in tensors):
        return True
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


def _object_at(address: int):
    if address == 0:
        return None
    # Only while the compiler traces the call: the caller's argument is alive (Dynamo holds it), and the
    # op keeps a weak reference to it from then on.
    return ctypes.cast(address, ctypes.py_object).value


def _with_objects(args, kwargs, objects):
    args = list(args)
    kwargs = dict(kwargs)
    for key, obj in objects.items():
        if isinstance(key, int):
            args[key] = obj
        else:
            kwargs[key] = obj
    return tuple(args), kwargs


@functools.lru_cache(maxsize=None)
def _reparametrise_fn():
    from torch.nn.utils.stateless import _reparametrize_module

    return _reparametrize_module


class _reparametrised:
    """Each module argument's parameters and buffers replaced by the tensors the op was given."""

    def __init__(self, objects, params):
        self.stack = [_reparametrise_fn()(objects[key], params[key]) for key in params]

    def __enter__(self):
        for s in self.stack:
            s.__enter__()

    def __exit__(self, *exc):
        for s in reversed(self.stack):
            s.__exit__(*exc)


def _key(refs, params, args, kwargs):
    """What an op is specialised on: the structure of the arguments, their non-tensor values and the objects
    passed. Tensors are the op's arguments (any shape, dtype or device)."""
    leaves, spec = pytree.tree_flatten((params, args, kwargs))
    consts = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            consts.append(None)
            continue
        try:
            hash(leaf)
            consts.append((type(leaf), leaf))
        except TypeError:
            consts.append((type(leaf), id(leaf)))
    return refs, str(spec), tuple(consts)


def _fresh(outs: List[torch.Tensor], given: List[torch.Tensor]) -> List[torch.Tensor]:
    """The outputs, each cloned where it shares memory with an argument or an earlier output: a custom op's
    results may alias nothing (an eager call returns the tensor itself). Storages are compared by identity,
    which fake tensors have too (they have no data pointer)."""
    seen = {t.untyped_storage()._cdata for t in given}
    fresh = []
    for t in outs:
        if t.untyped_storage()._cdata in seen:
            t = t.clone()
        seen.add(t.untyped_storage()._cdata)
        fresh.append(t)
    return fresh


class _Op:
    """One torch.library custom op for the calls of one structure: (inputs, state) -> outputs + new state.

    The op is functional (the compiler's functionalisation takes custom ops that mutate only when they return
    single tensors, and the outputs here are a list): its implementation runs the guarded call on a copy of
    the state and returns the copy after the outputs; the caller copies it back into the state. That costs
    one more copy of the state each way, under torch.compile only."""

    def __init__(self, guard, fn, sig, name, mutates, fallback, objects, params, args, kwargs):
        self.fn, self.name, self.sig, self.mutates = fn, name, sig, mutates
        self.objects = {key: weakref.ref(obj) if _weakrefable(obj) else (lambda obj=obj: obj)
                        for key, obj in objects.items()}
        leaves, self.spec = pytree.tree_flatten((params, args, kwargs))
        self.consts = [None if isinstance(t, torch.Tensor) else t for t in leaves]
        state_leaf = _state_leaves(sig, mutates, params, args, kwargs, name)
        self.tensor_at = [k for k, t in enumerate(leaves) if isinstance(t, torch.Tensor)]
        self.is_state = [k in state_leaf for k in self.tensor_at]
        self.out_spec = None
        self.out_consts: List[Any] = []

        def impl(inputs: List[torch.Tensor], state: List[torch.Tensor]) -> List[torch.Tensor]:
            state = [t.clone() for t in state]
            objs, params, args, kwargs = self.rebuild(inputs, state)
            with _reparametrised(objs, params):
                result = guard._run(fn, sig, args, kwargs, name, mutates, fallback)
            return self.outputs(result, inputs + state) + state

        def fake(inputs, state):
            state = [t.clone() for t in state]
            objs, params, args, kwargs = self.rebuild(inputs, state)
            try:
                with _reparametrised(objs, params):
                    result = fn(*args, **kwargs)
            except Exception as e:
                raise _cannot_compile(name, e) from e
            return self.outputs(result, inputs + state, record=True) + state

        qualname = f"ringguard_guard::{re.sub(r'[^0-9A-Za-z_]', '_', name)}_compiled_{next(_ops)}"
        self.op = torch.library.custom_op(qualname, impl, mutates_args=())
        self.op.register_fake(fake)
        self.op.register_autograd(self.backward, setup_context=self.setup_context)

    def rebuild(self, inputs, state):
        """The call's arguments with these tensors in place of the traced ones."""
        ins, sts = iter(inputs), iter(state)
        leaves = list(self.consts)
        for k, is_state in zip(self.tensor_at, self.is_state):
            leaves[k] = next(sts) if is_state else next(ins)
        params, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        objects = {}
        for key, ref in self.objects.items():
            obj = ref()
            if obj is None:
                raise RuntimeError(f"guard: op '{self.name}': the object passed as argument {key!r} when "
                                   f"the call was compiled no longer exists: compile again")
            objects[key] = obj
        args, kwargs = _with_objects(args, kwargs, objects)
        return objects, params, args, kwargs

    def outputs(self, result, given, record=False):
        leaves, spec = pytree.tree_flatten(result)
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        if record:
            self.out_spec = spec
            self.out_consts = [_TENSOR if isinstance(t, torch.Tensor) else t for t in leaves]
        return _fresh(tensors, given)

    def __call__(self, params, args, kwargs):
        leaves = pytree.tree_leaves((params, args, kwargs))
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        inputs = [t for t, s in zip(tensors, self.is_state) if not s]
        state = [t for t, s in zip(tensors, self.is_state) if s]
        results = self.op(inputs, state)
        n_out = len(results) - len(state)
        with torch.no_grad():
            for t, new in zip(state, results[n_out:]):
                t.copy_(new)
        outs = iter(results[:n_out])
        return pytree.tree_unflatten([next(outs) if c is _TENSOR else c for c in self.out_consts], self.out_spec)

    # ---- autograd: the backward runs the function again, unguarded, and differentiates it -------------------

    def setup_context(self, ctx, inputs, output):
        ins, state = inputs
        ctx.needs = [t.requires_grad for t in ins]
        ctx.save_for_backward(*ins)
        ctx.n_state = len(state)

    def backward(self, ctx, grads):
        if ctx.n_state:
            raise RuntimeError(f"guard: op '{self.name}': a guarded function that changes tensors in place "
                                    f"(mutates=...) has no backward under torch.compile: call it under "
                                    f"torch.no_grad(), as an optimizer step is")
        ins = [t.detach().requires_grad_(need) for t, need in zip(ctx.saved_tensors, ctx.needs)]
        with torch.enable_grad():
            objs, params, args, kwargs = self.rebuild(ins, [])
            with _reparametrised(objs, params):
                result = self.fn(*args, **kwargs)
        outs = [t for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
        pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad and g is not None]
        wanted = [t for t in ins if t.requires_grad]
        got = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)
                   if pairs and wanted else [None] * len(wanted))
        return [next(got) if t.requires_grad else None for t in ins], [None] * ctx.n_state


def _cannot_compile(name: str, e: BaseException) -> BaseException:
    """What a call the fake tensors cannot run raises. With fullgraph (or error_on_graph_break) Dynamo turns any
    Exception raised while it traces into its own "Unsupported output type for nonstrict_trace-ed function",
    dropping the text, so the user gets GuardCompileError, which it lets through (a BaseException). Otherwise a
    plain error makes Dynamo break the graph there and run the call eagerly, guarded as always."""
    text = (f"guard: op '{name}' cannot run under torch.compile: running it on the compiler's fake tensors (for "
            f"its outputs' shapes) raised {type(e).__name__}: {e}. Register it as g.custom_op('{name}', fn, "
            f"fake=...) with a fake that gives the outputs' shapes, or call it outside the compiled region")
    return GuardCompileError(text) if _graph_must_not_break() else RuntimeError(text)


def _graph_must_not_break() -> bool:
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
    except Exception:
        return True
    if tx is None:
        return True
    return bool(getattr(tx, "one_graph", True) or getattr(tx, "error_on_graph_break", False))


def _weakrefable(obj) -> bool:
    try:
        weakref.ref(obj)
        return True
    except TypeError:
        return False


def _state_leaves(sig, mutates, params, args, kwargs, name) -> set:
    """The indices, among the leaves of (params, args, kwargs), of the tensors under a parameter named in
    `mutates`."""
    if not mutates:
        return set()
    n_params = len(pytree.tree_leaves(params))
    out, base = set(), n_params
    # the leaves of args, then of kwargs, as tree_leaves visits them: each argument's leaves in turn
    for value, pname in zip(list(args) + list(kwargs.values()), _argument_names(sig, args, kwargs)):
        count = len(pytree.tree_leaves(value))
        if pname in mutates:
            out.update(range(base, base + count))
        base += count
    return out


def _argument_names(sig, args, kwargs) -> List[Optional[str]]:
    """The parameter each positional argument and keyword binds to (a *args parameter's own name for the
    extra positionals)."""
    if sig is None:
        return [f"arg{i}" for i in range(len(args))] + list(kwargs)
    import inspect

    params = list(sig.parameters.values())
    leading = []  # the parameters a positional argument binds to, in order, up to a *args one
    for p in params:
        if p.kind == inspect.Parameter.VAR_POSITIONAL:
            break
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            leading.append(p.name)
    var = [q.name for q in params if q.kind == inspect.Parameter.VAR_POSITIONAL]
    names: List[Optional[str]] = [leading[i] if i < len(leading) else (var[0] if var else None)
                                  for i in range(len(args))]
    var_kw = [q.name for q in params if q.kind == inspect.Parameter.VAR_KEYWORD]
    for k in kwargs:
        names.append(k if k in sig.parameters else (var_kw[0] if var_kw else k))
    return names
