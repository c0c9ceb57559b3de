"""Gradient outliers, the replica check's second signal (docs/REPLICAS.md).

    ddp = DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters())
    outliers = ringguard.GradientOutliers(ddp, opt, factor=8.0, on_outlier="skip")   # a DDP comm hook
    ...                                  # train as usual
    outliers.counters()                  # steps, buckets, outliers, skipped_steps, injected

A wrong but finite value that only changed one step's gradient is averaged into every replica alike by the
allreduce, so the replicas stay identical and the replica check cannot see it. Its gradient norm often can:
before each bucket's allreduce the comm hook all-gathers every rank's local norm of the bucket, and right
before ``optimizer.step()`` a rank whose norm departs from the median of the other ranks' by more than
``factor`` (either way, or is not finite) is reported. Every rank decides from the same gathered norms, so
every rank decides alike: "warn" logs, "skip" drops the step on every rank (every gradient of the optimizer
set to None, so no parameter or optimizer state moves), "raise" raises GradientOutlierError everywhere.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import torch

from . import _ext

__all__ = ["GradientOutliers", "GradientOutlierError"]

_log = logging.getLogger("ringguard.replicas")
_POLICIES = ("warn", "skip", "raise")


class GradientOutlierError(RuntimeError):
    """Raised on every rank (on_outlier="raise") when a rank's gradient norm is an outlier."""


class GradientOutliers:
    """A DDP comm hook (the default allreduce-average, preceded by an all-gather of one float per bucket)
    and an optimizer step pre-hook that decides. `factor` > 1; `on_outlier`: "warn", "skip" or "raise"."""

    def __init__(self, ddp: Any, optimizer: torch.optim.Optimizer, group: Any = None, factor: float = 8.0,
                 on_outlier: str = "warn"):
        import torch.distributed as dist

        if on_outlier not in _POLICIES:
            raise ValueError(f"GradientOutliers: on_outlier={on_outlier!r}: expected one of warn, skip, raise")
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not factor > 1:
            raise ValueError(f"GradientOutliers: factor={factor!r}: expected a number > 1")
        if not hasattr(ddp, "register_comm_hook"):
            raise ValueError("GradientOutliers: expected a DistributedDataParallel module (its comm hook gathers "
                             f"the norms), got {type(ddp).__name__}")
        self.group = group if group is not None else dist.group.WORLD
        self.factor = float(factor)
        self.on_outlier = on_outlier
        self.optimizer = optimizer
        self._rank = dist.get_rank(self.group)
        self._size = dist.get_world_size(self.group)
        self._step = 0
        self._pending: List = []  # (bucket index, gathered norms) of this step
        self._fault: Optional[Dict[str, Any]] = None
        self._counters = {"steps": 0, "buckets": 0, "outliers": 0, "skipped_steps": 0, "injected": 0}
        self._last: Optional[Dict[str, Any]] = None
        ddp.register_comm_hook(self, GradientOutliers._hook)
        self._handle = optimizer.register_step_pre_hook(self._before_step)

    def inject(self, rank: int, step: int, scale: float, repeat: int = 1) -> None:
        """Multiplies every local gradient of group rank `rank` by `scale` before its norm and its allreduce,
        at step `step` and the `repeat` - 1 after it (a faulty device's wrong but finite gradients)."""
        if not 0 <= rank < self._size:
            raise ValueError(f"GradientOutliers.inject: rank={rank} is not a rank of the group ({self._size} ranks)")
        self._fault = {"rank": rank, "step": step, "scale": float(scale), "repeat": repeat}

    @staticmethod
    def _hook(self, bucket):  # unannotated: DDP refuses any annotation but dist.GradBucket's own
        import torch.distributed as dist

        buf = bucket.buffer()
        f = self._fault
        if f is not None and f["rank"] == self._rank and f["step"] <= self._step < f["step"] + f["repeat"]:
            buf.mul_(f["scale"])
            self._counters["injected"] += 1
        norm = torch.linalg.vector_norm(buf, dtype=torch.float32).reshape(1)
        gathered = torch.empty(self._size, dtype=torch.float32, device=buf.device)
        dist.all_gather_into_tensor(gathered, norm, group=self.group)
        self._pending.append((bucket.index(), gathered))
        buf.div_(self._size)
        fut = dist.all_reduce(buf, group=self.group, async_op=True).get_future()
        return fut.then(lambda done: done.value()[0])

    def _before_step(self, optimizer, args, kwargs) -> None:
        C = _ext.load()
        step, pending = self._step, sorted(self._pending, key=lambda p: p[0])
        self._step += 1
        self._pending = []
        self._counters["steps"] += 1
        found = []
        # One host read for every bucket of the step (on CUDA the norms were gathered on the stream).
        table = torch.stack([g for _, g in pending]).double().cpu().tolist() if pending else []
        for (index, _), norms in zip(pending, table):
            self._counters["buckets"] += 1
            ranks, message = C.find_gradient_outliers(norms, self.factor, step, index)
            if ranks:
                found.append({"bucket": index, "ranks": ranks, "norms": norms, "message": message})
        if not found:
            return
        self._counters["outliers"] += len(found)
        message = "; ".join(r["message"] for r in found) + f" (factor {self.factor:g}, on_outlier={self.on_outlier})"
        self._last = {"step": step, "buckets": found, "action": self.on_outlier, "message": message}
        if self.on_outlier == "raise":
            raise GradientOutlierError(message)
        if self.on_outlier == "skip":
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None  # torch's optimizers leave a parameter without a gradient untouched
            self._counters["skipped_steps"] += 1
            message += ": step skipped on every rank"
            self._last["message"] = message
        _log.warning("%s", message)

    def counters(self) -> Dict[str, int]:
        """steps, buckets (bucket verdicts made), outliers (buckets reported), skipped_steps, injected."""
        return dict(self._counters)

    def last_report(self) -> Optional[Dict[str, Any]]:
        """The last step with an outlier (None before): step, buckets (bucket, ranks, norms, message per
        bucket reported), action, message."""
        return self._last

    def remove(self) -> None:
        """Unregisters the step pre-hook (DDP keeps its comm hook: DDP allows one per module, for its life)."""
        self._handle.remove()
