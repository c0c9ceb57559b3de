"""The guard's CUDA graph path from Python (docs/GUARD.md, "The CUDA graph path").

    acc, y = torch.zeros(n, device="cuda"), torch.empty(n, device="cuda")

    def step():                       # kernels only: captured once
        torch.clamp(2 * x + acc, min=0, out=y)
        acc.add_(1)

    op = ringguard.graph_guard(step, state=[acc], outputs=[y], max_replays=2)
    op()              # one launch on the current stream: snapshot, op, scan, on-device replay; no host wait
    op.report()       # {"replays": 0, "clean": True, ...}: one host wait
    op.restore()      # the host's escalation after max_replays: the state rolled back

``fn`` is captured once into a CUDA graph whose WHILE conditional node restores the state and replays the op
while its outputs hold NaN or Inf (at most ``max_replays`` times); every call afterwards is one graph launch.
The capture is torch-aware: ``fn`` runs with the capture stream as torch's current stream, and tensors it
allocates come from a private pool of torch's caching allocator (what ``torch.cuda.graph`` does), held for the
op's life. ``fn`` must be capturable: kernels and asynchronous copies only (no ``.item()``, no host
synchronisation, no data-dependent shapes). When it is not, the op falls back to the host-driven guard (one
host wait per call), warns once naming the reason, and ``op.captured`` is False.
"""

from __future__ import annotations

import warnings
from typing import Callable, Dict, List, Optional, Sequence

import torch

from . import _ext
from ._checks import integer

__all__ = ["GraphGuardedOp", "graph_guard"]


def _named(prefix: str, tensors: Sequence[torch.Tensor]):
    return [(f"{prefix}[{i}]", t) for i, t in enumerate(tensors)]


class GraphGuardedOp:
    """A guarded op as one CUDA graph (see the module's docstring). Call it to launch."""

    def __init__(self, fn: Callable[[], object], *, state: Sequence[torch.Tensor] = (),
                 outputs: Sequence[torch.Tensor] = (), name: Optional[str] = None, max_replays: int = 2,
                 faults: Sequence[Dict] = (), fallback: bool = True):
        integer("graph_guard", "max_replays", max_replays, 0, 31)  # GraphGuardOptions::maxReplays
        tensors = list(state) + list(outputs)
        if not tensors or any(not t.is_cuda for t in tensors):
            raise ValueError("graph_guard: state and outputs must be CUDA tensors (at least one)")
        self.device = tensors[0].device
        self.name = name or getattr(fn, "__name__", "op")
        self._fn = fn
        self._state = _named("state", state)
        self._outputs = _named("output", outputs)
        self._pool = torch.cuda.graph_pool_handle()
        self._host = None
        C = _ext.load()
        try:
            self._graph = C.GraphGuard(self.device.index, self.name, self._state, self._outputs, self._capture,
                                       max_replays, [dict(f) for f in faults])
            self.captured = True
        except ValueError as err:
            if not fallback or "not capturable" not in str(err):
                raise
            self._graph = None
            self.captured = False
            warnings.warn(f"ringguard.graph_guard: '{self.name}' runs through the host-driven guard (one host "
                          f"wait per call): {err}", RuntimeWarning, stacklevel=2)
            from .guard import Guard
            self._host = Guard(replays=max_replays, device=self.device.index)

    def _capture(self, stream: int) -> None:
        """Called by the C++ capture, once per graph it records (the main graph, the loop body)."""
        device = self.device.index
        with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=self.device)):
            torch._C._cuda_beginAllocateCurrentThreadToPool(device, self._pool)
            try:
                self._fn()
            finally:
                torch._C._cuda_endAllocateToPool(device, self._pool)

    def __call__(self) -> None:
        stream = torch.cuda.current_stream(self.device).cuda_stream
        if self._graph is not None:
            self._graph.launch(stream)
            return
        self._host._impl.run(self.name, [], self._state, self._outputs, lambda: self._fn(), None, stream)

    def report(self) -> Dict:
        """The last launch's outcome (waits for it): replays, clean, first_bad_output, bad_elements, launches,
        total_replays. Host-driven fallback: the guard's counters instead."""
        if self._graph is None:
            return dict(self._host.counters(), captured=False)
        return self._graph.report()

    def restore(self) -> None:
        """Copies the last launch's snapshots back over the state, on the current stream."""
        if self._graph is None:
            raise RuntimeError("graph_guard: restore() is the graph path's escalation; the host-driven "
                               "fallback restores by itself")
        self._graph.restore(torch.cuda.current_stream(self.device).cuda_stream)

    def __del__(self):
        graph, self._graph = getattr(self, "_graph", None), None
        del graph  # the graph (and its references to the pool's blocks) goes first
        pool = getattr(self, "_pool", None)
        if pool is not None and torch is not None and torch.cuda.is_initialized():
            try:
                torch.cuda.synchronize(self.device)
                torch._C._cuda_releasePool(self.device.index, pool)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


def graph_guard(fn: Callable[[], object], **kwargs) -> GraphGuardedOp:
    """``ringguard.graph_guard(fn, state=[...], outputs=[...], max_replays=2, faults=[...])``: see the module."""
    return GraphGuardedOp(fn, **kwargs)
