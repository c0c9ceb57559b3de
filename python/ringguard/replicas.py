"""Replica fingerprints after every optimizer step (docs/REPLICAS.md).

    ddp = DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters())
    check = ringguard.ReplicaCheck(ddp, opt, on_mismatch="repair")   # registers a step post-hook
    ...                                  # train as usual; a replica that went wrong is raised, repaired or logged
    check.counters()                     # checks, mismatches, repairs, escalations, bytes_fingerprinted, ...
    check.last_report()                  # the last check: step, odd ranks, tensors, action

After each ``optimizer.step()`` every rank computes the CRC-32 of every parameter, optimizer-state tensor and
buffer (the host CRC for CPU tensors, one multi-tensor kernel for CUDA ones), the fingerprints are
all-gathered over the group and compared. The comparison, the decision and the repair sequence are the
C++ checker's (``ringguard._C.ReplicaCheck``, src/replicas/), and so is the listing of the tensors
(``ringguard._C.ReplicaListing``); this module sets them up and supplies the group's collectives.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from . import _backend, _ext

__all__ = ["ReplicaCheck", "ReplicaMismatchError"]

_FAULT_SETTING = "RINGGUARD_REPLICA_FAULT"
_default_fault: Optional[str] = None  # set_fault(replica=...): overrides the setting for later checks


class ReplicaMismatchError(RuntimeError):
    """Raised on every rank of the group when the replicas differ and the policy (or an escalation) says
    raise: names the step, the odd rank(s) and the tensors. The extension raises this class."""


def set_default_fault(spec: Optional[str]) -> None:
    """The fault every ReplicaCheck made afterwards starts with (``ringguard.set_fault(replica=...)``);
    None: back to RINGGUARD_REPLICA_FAULT."""
    global _default_fault
    _default_fault = spec


class _NoDTensor:
    """Stands for DTensor in a torch without it: no tensor is an instance."""


def _dtensor_class() -> type:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without DTensor
        return _NoDTensor
    return DTensor


_DTENSOR = _dtensor_class()


def _is_dtensor(t: torch.Tensor) -> bool:
    return isinstance(t, _DTENSOR)


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor this rank holds: a DTensor's local shard (the storage a repair broadcasts into)."""
    return t._local_tensor if _is_dtensor(t) else t


def _per_replica_buffers(model: torch.nn.Module) -> set:
    """Names of the buffers each replica updates from its own batch: the running statistics of batch and
    instance norms (not SyncBatchNorm, whose statistics are the group's). DDP broadcasts rank 0's at the start
    of the next forward, so right after a step they differ on every rank by design."""
    from torch.nn.modules.batchnorm import _NormBase

    names = set()
    for mname, m in model.named_modules():
        if isinstance(m, _NormBase) and m.track_running_stats and not isinstance(m, torch.nn.SyncBatchNorm):
            for bname, _ in m.named_buffers(recurse=False):
                names.add(f"{mname}.{bname}" if mname else bname)
    return names


class ReplicaCheck:
    """Checks after every `every`-th step of `optimizer` that the replicas of `group` (default: the default
    group, every rank of it a data-parallel replica of `model`; for FSDP2 under HSDP the replicate dimension
    of the mesh, each rank's local shards compared; pure FSDP is refused) hold bit-identical parameters, buffers and
    (with `include_optimizer_state`) optimizer state.

    on_mismatch: "raise" (every rank raises ReplicaMismatchError naming the rank(s), tensors and step),
    "repair" (the differing tensors are broadcast from a rank of the majority, then checked again; needs
    >= 3 replicas; a rank that mismatches again after a repair escalates to raise), "warn" (logged, training
    continues). sync: True, the verdict is read right after the step, before the next forward; False, it is
    read at the next check (no wait inside the step; found one check late, and a repair cannot take back the
    gradients the odd replica contributed in between; ``flush()`` reads the last one).
    include_buffers: "auto" (default) every buffer but the running statistics of batch and instance norms
    (each replica updates them from its own batch; SyncBatchNorm's are checked), True every buffer, False none.
    gate: sync=True without the host's wait for the verdict (docs/REPLICAS.md, "The gate"; CUDA tensors on a
    group whose CUDA backend is ringguard's): the fingerprints are gathered on the device and a kernel holds
    the stream while they differ, until a verdict thread of the check has decided (and repaired, over a group
    of its own made here: every rank must make the check) and released it; a clean check waits for nothing.
    A mismatch raised this way aborts the group first (the collectives queued behind the gate end without
    moving data, the group's next collective fails with the verdict in its message) and the next check,
    ``flush()`` or ``check_now()`` raises ReplicaMismatchError.
    ``counters()`` and ``last_report()`` wait for the verdicts of the checks made so far.

    Steps are counted from 0 (the first ``optimizer.step()`` is step 0); with every=k the checks follow
    steps k-1, 2k-1, ...
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, group: Any = None,
                 every: int = 1, on_mismatch: str = "raise", include_optimizer_state: bool = True,
                 include_buffers: Union[bool, str] = "auto", sync: bool = True, gate: bool = False):
        import torch.distributed as dist

        if not isinstance(sync, bool):
            raise ValueError(f"ReplicaCheck: sync={sync!r}: expected True or False")
        if not isinstance(gate, bool):
            raise ValueError(f"ReplicaCheck: gate={gate!r}: expected True or False")
        if gate and not sync:
            raise ValueError("ReplicaCheck: gate=True is sync=True's way to the verdict; sync=False reads it at the "
                             "next check")
        if include_buffers not in (True, False, "auto"):
            raise ValueError(f"ReplicaCheck: include_buffers={include_buffers!r}: expected True, False or 'auto'")
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ValueError(f"ReplicaCheck: every={every!r}: expected an int >= 1")
        if not dist.is_initialized():
            raise RuntimeError("ReplicaCheck: torch.distributed is not initialized; call init_process_group first")
        # Fixed for the check's life (read-only properties below): the C++ listing is made with them.
        self._model, self._optimizer = model, optimizer
        self._include_optimizer_state, self._include_buffers = bool(include_optimizer_state), include_buffers
        params = list(model.named_parameters())
        self.group = group if group is not None else self._replica_group(params)
        self._ranks = dist.get_process_group_ranks(self.group)
        self._rank = dist.get_rank(self.group)
        self._size = dist.get_world_size(self.group)
        # The device of the check: the first CUDA tensor among the parameters, then the buffers it checks (a
        # module whose state is all buffers, as a frozen model's, still gets the device backend).
        buffers = [b for _, b in model.named_buffers()] if include_buffers is not False else []
        cuda = next((_local(t).device for t in [p for _, p in params] + buffers if _local(t).is_cuda), None)
        self.sync = sync
        self._device = cuda if cuda is not None else torch.device("cpu")
        # Where the sync=True all-gather runs: the message is host words (the device CRCs were already read
        # back), so on the host whenever the group has a CPU backend ("ringguard" and gloo have one): the
        # group's host collective, not a copy to the device, a device collective and a copy back.
        host = _backend.of_group(self.group, "cpu")
        self._gather_device = torch.device("cpu") if host is not None else self._device
        C = _ext.load()
        # A ringguard CPU backend gathers the words itself, on this thread, in the group's order of collectives
        # (ProcessGroupRingguard::allgatherHostWords): no c10d Work, Future or hand-off between threads.
        self._host_group = host if isinstance(host, C.ProcessGroupRingguard) else None
        # What each check fingerprints, listed in C++ (src/torch/python/replica_listing.h): the parameters
        # and buffers read where they are registered, without a walk of the module tree unless the model's
        # structure changed, and the optimizer's state.
        self._listing = C.ReplicaListing(model, optimizer, self._include_optimizer_state, include_buffers,
                                         {id(p): name for name, p in params}, _per_replica_buffers, _DTENSOR)
        self._step = 0
        # sync=False and the gate gather the message on the device (built in C++): through the group's
        # ringguard CUDA backend directly when it has one, else through _device_all_gather.
        on_device = cuda is not None and (gate or not sync)
        device_group = _backend.of_group(self.group, "cuda") if on_device else None
        self._impl = C.ReplicaCheck(on_mismatch, every, self._rank, self._size, self._all_gather,
                                    self._broadcast, cuda.index if cuda is not None else -1, sync,
                                    self._device_all_gather if on_device else None, self._host_group,
                                    device_group if isinstance(device_group, C.ProcessGroupRingguard) else None)
        self._verdict_group = None
        if gate:
            self._use_gate(C, cuda)
        fault = _default_fault if _default_fault is not None else os.environ.get(_FAULT_SETTING, "")
        if fault:
            self._impl.set_fault(fault)
        self._handle = optimizer.register_step_post_hook(self._after_step)

    def _use_gate(self, C, cuda) -> None:
        """The gate's parts: the replica group's ringguard CUDA backend (aborted on a raised verdict), a group
        of the check's own over the same ranks (the verdict thread's collectives, outside the training group's
        order), and the verdict thread's stream."""
        import torch.distributed as dist

        if cuda is None:
            raise ValueError("ReplicaCheck: gate=True needs the model's tensors on a GPU (the gate holds a CUDA "
                             "stream); the model's are on the CPU")
        training = _backend.of_group(self.group, "cuda")
        if not isinstance(training, C.ProcessGroupRingguard):
            raise ValueError(f"ReplicaCheck: gate=True needs a group whose CUDA backend is ringguard's; this "
                             f"group's is {type(training).__name__ if training is not None else 'missing'}")
        # Only this replica group's ranks take part: under HSDP each rank's replica group is another.
        self._verdict_group = dist.new_group(self._ranks, backend=dist.get_backend(self.group),
                                             use_local_synchronization=True)
        verdict = _backend.of_group(self._verdict_group, "cuda")
        if (not isinstance(verdict, C.ProcessGroupRingguard) or verdict is not _backend.of_group(
                self._verdict_group, "cpu") or dist.get_process_group_ranks(self._verdict_group) != self._ranks):
            raise ValueError("ReplicaCheck: gate=True: the check's own group is not one ringguard backend for CPU "
                             "and CUDA over the replica group's ranks in their order; pass backend='ringguard' "
                             "to init_process_group")
        self._verdict_stream = torch.cuda.Stream(cuda)
        # The verdict group's communicators made now, not in the first repair: while a gate holds the training
        # stream (the legacy default stream, in most programs) a synchronous CUDA call of their setup (a
        # memset, a free) would wait for that stream, and so for the repair it is part of.
        with torch.cuda.stream(self._verdict_stream):
            dist.broadcast(torch.zeros(1, device=cuda), src=self._ranks[0], group=self._verdict_group)
        dist.broadcast(torch.zeros(1), src=self._ranks[0], group=self._verdict_group)
        self._verdict_stream.synchronize()
        self._impl.use_gate(training, verdict, self._verdict_stream.cuda_stream)

    @property
    def model(self) -> torch.nn.Module:
        return self._model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self._optimizer

    @property
    def include_optimizer_state(self) -> bool:
        return self._include_optimizer_state

    @property
    def include_buffers(self) -> Union[bool, str]:
        return self._include_buffers

    def gated(self) -> bool:
        """Whether the checks go through the gate (gate=True)."""
        return self._impl.gated()

    @staticmethod
    def _replica_group(params):
        """The default group: the world, or for DTensor parameters (FSDP2's fully_shard) the replicate
        dimension of their mesh (HSDP: each shard is compared with its copies on the other replicas)."""
        import torch.distributed as dist

        dtensors = [(n, p) for n, p in params if _is_dtensor(p)]
        if not dtensors:
            return dist.group.WORLD
        name, first = dtensors[0]
        replicate = [d for d, pl in enumerate(first.placements) if pl.is_replicate()]
        if not replicate:
            raise ValueError(
                f"ReplicaCheck: parameter '{name}' is a DTensor (FSDP2 / fully_shard) sharded on every dimension "
                f"of its mesh ({first.placements}): pure FSDP keeps one copy of each shard, so there is no replica "
                "to compare it with (HSDP, fully_shard on a 2-D mesh, has one: docs/REPLICAS.md)")
        for n, p in dtensors:
            if p.device_mesh != first.device_mesh or tuple(p.placements) != tuple(first.placements):
                raise ValueError(f"ReplicaCheck: parameters '{name}' and '{n}' are DTensors on different meshes or "
                                 "placements: pass group= (the replica group) explicitly")
        return first.device_mesh.get_group(replicate[0])

    # ---- the tensors ----------------------------------------------------------------------------

    def tensors(self) -> List[Tuple[str, torch.Tensor]]:
        """(name, tensor) of everything checked, in the order compared: "param:<name>",
        "optim:<param name>.<state key>" (keys sorted as str), "buffer:<name>"."""
        return [(name, t.detach()) for name, t in self._listing.named()]

    def _stream(self) -> int:
        if self._device.type == "cuda":
            return torch._C._cuda_getCurrentRawStream(self._device.index)
        return 0

    # ---- the group's collectives (called by the C++ checker) -------------------------------------

    def gathers_on_host(self) -> bool:
        """Whether the fingerprints of a sync=True check are all-gathered as CPU tensors (the group has a CPU
        backend), rather than copied to the device and gathered there (a group of "nccl" alone)."""
        return self._gather_device.type == "cpu"

    def gathers_directly(self) -> bool:
        """Whether those host words are gathered by the group's ringguard CPU communicator itself, on the
        calling thread (a group whose CPU backend is ringguard's), rather than through
        ``dist.all_gather_into_tensor`` (gloo, or a CUDA backend alone)."""
        return self._host_group is not None

    def _all_gather(self, mine: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        t = mine.to(self._gather_device)
        out = torch.empty(self._size * t.numel(), dtype=t.dtype, device=self._gather_device)
        dist.all_gather_into_tensor(out, t, group=self.group)
        return out.cpu()

    def _device_all_gather(self, msg: torch.Tensor) -> torch.Tensor:
        """sync=False and the gate on CUDA, when the group's CUDA backend is not ringguard's: every rank's
        device message, all-gathered on the current stream (the C++ checker built the message and reads the
        result on that stream; nothing here waits on the host)."""
        import torch.distributed as dist

        gathered = torch.empty(self._size * msg.numel(), dtype=msg.dtype, device=msg.device)
        dist.all_gather_into_tensor(gathered, msg, group=self.group)
        return gathered

    def _broadcast(self, name: str, root: int) -> None:
        import torch.distributed as dist

        dist.broadcast(self._listing.tensor(name).detach(), src=self._ranks[root], group=self.group)

    # ---- the hook and the API ---------------------------------------------------------------------

    def _after_step(self, optimizer, args, kwargs) -> None:
        step = self._step
        self._step += 1
        # Inside, the range "ringguard::replica_check" for torch.profiler (bench_replica_check.py --profile).
        self._impl.after_step(step, self._listing, self._stream())

    def check_now(self) -> None:
        """Checks now, outside the step hook (every rank of the group must call it)."""
        self._impl.check_now(max(self._step - 1, 0), self._listing, self._stream())

    def flush(self) -> None:
        """sync=False: reads the last check's pending verdict now and acts on it (call it on every rank after
        the last step, or the last check's verdict is never read). No-op with sync=True."""
        self._impl.flush(max(self._step - 1, 0), self._listing, self._stream())

    def inject(self, rank: int, step: int, tensor: str, element: int = 0, bit: int = 0, repeat: int = 1) -> None:
        """Flips bit `bit` of element `element` of the checked tensor `tensor` (a name from ``tensors()``
        or "#<index>") on group rank `rank` after optimizer step `step`, and the `repeat` - 1 steps after
        it. Call it on every rank alike (the tensor is looked up on every rank at that step)."""
        self._impl.set_fault(f"rank={rank},step={step},tensor={tensor},element={element},bit={bit},"
                             f"repeat={repeat}")

    def clear_fault(self) -> None:
        self._impl.set_fault("")

    def counters(self) -> Dict[str, int]:
        """steps, checks, mismatches, repairs, repaired_tensors, escalations, warnings, raised, injected,
        bytes_fingerprinted, host_waits, deferred_waits (sync=False verdicts not ready when read),
        locate_rounds (all-gathers spent finding first differing elements), gated_checks (checks whose
        verdict a gate waited for, gate=True). Gated: waits for the verdicts of the checks made so far."""
        return dict(self._impl.counters())

    def last_report(self) -> Optional[Dict[str, Any]]:
        """The last check (None before the first): step, read_at_step (sync=False: the next check's step),
        mismatch, odd_ranks, majority, source, tensors, first_elements (per differing tensor, up to 4: the
        first element index whose bytes differ on some rank, -1 if not located), action ("none", "warn",
        "repair", "raise"), escalated, repaired, message."""
        return self._impl.last_report()

    def remove(self) -> None:
        """Unregisters the step hook (gated: after the verdicts of the checks made so far)."""
        self._handle.remove()
        self._impl.await_verdicts()
