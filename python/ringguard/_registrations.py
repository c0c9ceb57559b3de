"""Where a model's parameters and buffers are registered, read every check without walking the module tree
(ReplicaCheck's listing, docs/REPLICAS.md): ``named_parameters()`` and ``named_buffers()`` walk every module
through generators and a memo set, most of the listing's time for a small GPT. Here the walk is done once
and redone only when the model's structure changed since: a child module replaced, added or removed, a
parameter or buffer registered or deleted (each module's counts and children, and every recorded key still
present, are checked on each read). The tensors are read from their slots every time, so a replaced
parameter, a reassigned buffer or a shard FSDP2 put back is what is listed, as with the walk.
"""

from __future__ import annotations

from typing import Any, Callable, List, Set, Tuple

import torch

_MISSING = object()


class Registrations:
    """named_parameters() and named_buffers() of `model` (same names, same order, a tensor registered twice
    listed once under its first name, None entries left out), each buffer marked when its name is in
    `marked(model)` (ReplicaCheck: the per-replica running statistics, which include_buffers="auto" leaves
    out after the deduplication, as its filter of named_buffers() did)."""

    def __init__(self, model: torch.nn.Module, marked: Callable[[torch.nn.Module], Set[str]]):
        self._model = model
        self._marked = marked
        self._build()

    def _build(self) -> None:
        marked = self._marked(self._model)
        self._modules: List[Tuple[Any, int, int, Tuple[Tuple[str, Any], ...]]] = []
        self._params: List[Tuple[str, Any, str]] = []
        self._buffers: List[Tuple[str, Any, str, bool]] = []
        for mname, m in self._model.named_modules():
            self._modules.append((m, len(m._parameters), len(m._buffers), tuple(m._modules.items())))
            prefix = mname + "." if mname else ""
            self._params.extend((prefix + k, m, k) for k in m._parameters)
            self._buffers.extend((prefix + k, m, k, prefix + k in marked) for k in m._buffers)

    def _unchanged(self) -> bool:
        for m, n_params, n_buffers, children in self._modules:
            if len(m._parameters) != n_params or len(m._buffers) != n_buffers or len(m._modules) != len(children):
                return False
            for name, child in children:
                if m._modules.get(name, _MISSING) is not child:
                    return False
        return True

    def _read(self) -> Tuple[List[Tuple[str, torch.Tensor]], List[Tuple[str, torch.Tensor, bool]]]:
        """The listing, or a KeyError when a recorded key is gone (with the counts equal: a key replaced)."""
        params, seen = [], set()
        for name, m, key in self._params:
            t = m._parameters.get(key, _MISSING)
            if t is _MISSING:
                raise KeyError(name)
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                params.append((name, t))
        buffers, seen = [], set()
        for name, m, key, mark in self._buffers:
            t = m._buffers.get(key, _MISSING)
            if t is _MISSING:
                raise KeyError(name)
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                buffers.append((name, t, mark))
        return params, buffers

    def read(self) -> Tuple[List[Tuple[str, torch.Tensor]], List[Tuple[str, torch.Tensor, bool]]]:
        """(parameters as (name, tensor), buffers as (name, tensor, marked)), as registered now."""
        if not self._unchanged():
            self._build()
        try:
            return self._read()
        except KeyError:
            self._build()
            return self._read()
