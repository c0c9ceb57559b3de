"""ringguard: CRC32-verified collectives as the torch.distributed backend "ringguard".

    import ringguard, torch.distributed as dist
    dist.init_process_group("ringguard")                 # under torchrun (or after init_from_mpi())
    dist.all_reduce(t)
    ringguard.counters()                                 # {"slices_verified": ..., "detected": ...}

The backend is also registered without ``import ringguard``, by torch's ``torch.backends`` entry point
(see ``_autoload``). ``import ringguard`` loads the extension and raises ``ImportError`` naming both
versions if it was built against another torch. When torch itself imports this package (the entry
point, during ``import torch``) the extension is not loaded: that happens, with the same check, on the
first use.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, Optional, Tuple

import torch

from . import _autoload, _backend, _ext
from .options import Options
from .guard import Guard, GuardCompileError, GuardError, guard  # noqa: E402,F401  NaN/Inf rollback (docs/GUARD.md)
from .graph_guard import graph_guard  # noqa: E402,F401  the guard as one CUDA graph (docs/GUARD.md)
from . import policy  # noqa: E402,F401  operator downgrade engine (docs/DOWNGRADE.md)
from .memory import empty_cache, memory_reserved, memory_stats  # noqa: E402,F401  beside torch's allocator
from . import memory  # noqa: E402

# torch.cuda.empty_cache() trims ringguard's pools too, from the extension's first load on.
_ext.when_loaded(memory.install_empty_cache_hook)
from .issue_lane import current_issue_lane, issue_lane  # noqa: E402,F401  threads' order (docs/TORCH.md)
from .replicas import ReplicaCheck, ReplicaMismatchError  # noqa: E402,F401  replica fingerprints (docs/REPLICAS.md)
from .replica_outliers import GradientOutliers, GradientOutlierError  # noqa: E402,F401  (docs/REPLICAS.md)

__version__ = "0.1.0"
__all__ = ["Options", "backend", "counters", "set_fault", "fault", "transport", "init_from_mpi",
           "summary", "timeline", "write_files", "memory_stats", "memory_reserved", "empty_cache",
           "issue_lane", "current_issue_lane", "ReplicaCheck", "ReplicaMismatchError", "GradientOutliers",
           "GradientOutlierError", "__version__"]


def _torch_initializing() -> bool:
    """True while ``torch/__init__.py`` runs, i.e. when torch's entry point imported this package."""
    spec = getattr(sys.modules.get("torch"), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


if not _torch_initializing():
    _ext.load()
    _autoload.register()


def backend(group=None):
    """The ``ProcessGroupRingguard`` of `group` (default: the default group)."""
    import torch.distributed as dist

    C = _ext.load()
    if group is None:
        group = dist.group.WORLD
        if group is None:
            raise RuntimeError("ringguard: no default process group; call "
                               "torch.distributed.init_process_group('ringguard') first")
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"ringguard: expected a torch.distributed ProcessGroup (None: the default group), "
                        f"got {type(group).__name__}")
    found = []
    for device in ("cpu", "cuda"):  # "cpu:gloo,cuda:ringguard" has ringguard for CUDA tensors only
        b = _backend.of_group(group, device)
        if b is None:
            continue  # no backend for this device type
        if isinstance(b, C.ProcessGroupRingguard):
            return b
        found.append(f"{device}: {type(b).__name__}")
    raise TypeError(f"ringguard: this process group has no ringguard backend ({', '.join(found) or 'none'}), "
                    "so no ringguard counters, faults or transport")


def counters(group=None) -> Dict[str, int]:
    """This rank's counters of `group`: collectives, bytes_sent, slices_sent, slices_verified,
    injected, detected, retransmitted, escaped, delayed, repair_rounds, control_frames, control_bytes,
    non_finite_inputs and skipped (RINGGUARD_NAN_CHECK) (they only grow)."""
    return dict(backend(group).counters())


def summary() -> dict:
    """This process's run summary: every communicator ringguard made here (live or destroyed) with its
    collectives by kind (calls, failed, bytes, ns), its counters and time in verification; the guard's
    and the downgrade engine's event counts; the timeline's fill. ``RINGGUARD_SUMMARY=<prefix>`` writes
    the same as ``<prefix>.<rank>.json`` when a communicator is destroyed and at exit (docs/GUIDE.md)."""
    return json.loads(_ext.load().summary_json())


def timeline() -> dict:
    """The events recorded so far, as the Chrome trace that ``RINGGUARD_TIMELINE=<prefix>`` writes to
    ``<prefix>.<rank>.json`` (empty unless RINGGUARD_TIMELINE was set before the import)."""
    return json.loads(_ext.load().timeline_json())


def write_files(timeline_prefix: str = "", summary_prefix: str = "") -> None:
    """Writes the timeline and the summary now, to the given prefixes or else to RINGGUARD_TIMELINE and
    RINGGUARD_SUMMARY's (``<prefix>.<rank>.json``); ``RuntimeError`` naming the path on failure."""
    _ext.load().write_observability_files(timeline_prefix, summary_prefix)


def set_fault(group=None, **settings) -> None:
    """Sets fault injection for collectives issued afterwards on this rank (call it on every rank).

    Keywords are the ``RINGGUARD_FAULT_*`` settings: ``mode``, ``prob``, ``schedule``, ``seed``,
    ``bits``, ``burst_bits``, ``delay_ms``, ``repeat`` (``fault_prob=`` and ``RINGGUARD_FAULT_PROB=``
    work too; two spellings of one setting raise ValueError). ``set_fault(prob=0)`` turns random injection
    off. It replaces the whole fault configuration: a setting left out, or given as None, takes its default.
    A value with a NUL byte raises ValueError naming the setting.

    ``replica="rank=R,step=S,tensor=NAME,element=E,bit=B,repeat=N"`` (``RINGGUARD_REPLICA_FAULT``) is the
    replica check's: it flips one bit after an optimizer step in every ``ReplicaCheck`` made afterwards
    (``replica=""`` turns it off; docs/REPLICAS.md); it needs no process group. Given alone, it leaves the
    group's collective fault configuration as it is.
    """
    from .options import fault_dict
    from .replicas import set_default_fault

    replica_only = bool(settings) and all(k in ("replica", "RINGGUARD_REPLICA_FAULT") for k in settings)
    for key in ("replica", "RINGGUARD_REPLICA_FAULT"):
        if key in settings:
            set_default_fault(settings.pop(key))
    if not replica_only:
        backend(group).set_fault(fault_dict(settings))


def fault(group=None) -> Dict[str, str]:
    """The current ``RINGGUARD_FAULT_*`` settings of `group` on this rank."""
    return dict(backend(group).fault())


def transport(device="cpu", group=None) -> str:
    """The transport of `group` for a device type: "shm", "gloo", "mpi", "staged", "nccl", "peer" (CUDA tensors on
    the one-sided path over peer windows, with the staged pipeline beneath it for what the windows do not take),
    or "" while that device type has no communicator (the CPU one is made with the group, the CUDA one at its
    first collective)."""
    device_type = device.type if isinstance(device, torch.device) else torch.device(device).type
    return backend(group).transport(device_type)


def init_from_mpi(master_addr: str = "127.0.0.1", master_port: Optional[int] = None) -> Tuple[int, int]:
    """Fills RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE from Open MPI's (or PMI's) variables so that
    ``init_process_group("ringguard")`` works under mpirun, and MASTER_ADDR / MASTER_PORT unless set:
    MASTER_ADDR defaults to `master_addr` (on several nodes set it to rank 0's host); MASTER_PORT to
    `master_port`, or, when None, to a port rank 0 finds free and broadcasts over MPI, so two jobs on one
    host do not collide (a build without MPI falls back to 29500). Collective over MPI_COMM_WORLD when it
    picks the port: every rank must call it. Returns (rank, size)."""
    from ._checks import integer

    integer("ringguard.init_from_mpi", "master_port", master_port, 1, 65535, none_ok=True)
    env = os.environ
    pairs = [("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
              "OMPI_COMM_WORLD_LOCAL_SIZE"),
             ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")]
    for rank_var, size_var, local_var, local_size_var in pairs:
        if rank_var in env and size_var in env:
            rank, size = int(env[rank_var]), int(env[size_var])
            env["RANK"] = str(rank)
            env["WORLD_SIZE"] = str(size)
            env["LOCAL_RANK"] = env.get(local_var, str(rank))
            env["LOCAL_WORLD_SIZE"] = env.get(local_size_var, str(size))
            env.setdefault("MASTER_ADDR", master_addr)
            if "MASTER_PORT" not in env:
                env["MASTER_PORT"] = str(master_port if master_port is not None else _agreed_port(rank))
            return rank, size
    raise RuntimeError("ringguard.init_from_mpi: no OMPI_COMM_WORLD_RANK/SIZE (or PMI_RANK/SIZE) in the "
                       "environment; start the job with mpirun")


def _agreed_port(rank: int) -> int:
    """A TCP port free on rank 0's host, the same on every rank (MPI broadcast); 29500 without MPI."""
    C = _ext.load()
    if not hasattr(C, "mpi_broadcast"):
        return 29500
    port = 0
    if rank == 0:
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    return int.from_bytes(C.mpi_broadcast(port.to_bytes(4, "little")), "little")
