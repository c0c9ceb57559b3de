"""The creator torch.distributed calls for a "ringguard" process group (``extended_api=True``).

torch 2.11 (distributed_c10d.py ``_new_process_group_helper``) calls it once per group on every
member, collectively, with ``dist_backend_opts.store`` = ``PrefixStore("cpu/", PrefixStore("<group>/",
store))``; since "ringguard" is registered for both "cpu" and "cuda", the one object returned here is
registered for both devices (``pg._register_backend``), so it must handle CPU and CUDA tensors.
Non-members of a ``new_group`` never get here.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from . import _ext
from .options import resolve

# The Gloo helper's own timeout bounds every wait on it (a timed-out Gloo wait closes all its pairs), so
# it must be longer than ringguard's: ringguard reports the timeout, naming the peer, first.
GLOO_MARGIN = timedelta(seconds=60)
GLOO_PREFIX = "ringguard/gloo/"


def create(dist_backend_opts, pg_options):
    """Builds the Gloo helper and the ``ProcessGroupRingguard`` for one group."""
    C = _ext.load()
    store = dist_backend_opts.store
    rank = dist_backend_opts.group_rank
    size = dist_backend_opts.group_size
    timeout = dist_backend_opts.timeout
    options, rg_timeout_ms = resolve(pg_options, timeout)

    gloo = None
    if dist.is_gloo_available():
        longest = timeout
        if rg_timeout_ms is not None:
            longest = max(longest, timedelta(milliseconds=rg_timeout_ms))
        # Collective like this creator: every member builds its helper over the same prefix.
        gloo = dist.ProcessGroupGloo(dist.PrefixStore(GLOO_PREFIX, store), rank, size,
                                     longest + GLOO_MARGIN)
    # World ranks of the group's members: under mpirun its CPU tensors ride MPI over exactly these ranks.
    global_ranks = [int(r) for r in (getattr(dist_backend_opts, "global_ranks_in_group", None) or [])]
    return C.ProcessGroupRingguard(store, rank, size, timeout, options, gloo, global_ranks)


def of_group(group, device: str):
    """The backend that runs `group`'s collectives of `device` ("cpu", "cuda") tensors, unwrapped from
    TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper when it wraps a ``ProcessGroupRingguard``; None when the group
    has no backend for that device type."""
    import torch

    C = _ext.load()
    try:
        b = group._get_backend(torch.device(device))
    except (RuntimeError, AttributeError):  # no backend for the device type, or a torch without _get_backend
        return None
    wrapped = getattr(b, "wrapped_pg", None)
    if not isinstance(b, C.ProcessGroupRingguard) and wrapped is not None:
        b = wrapped
    return b
