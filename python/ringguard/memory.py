"""ringguard's own memory beside PyTorch's (docs/DOWNGRADE.md, "ringguard's pools beside PyTorch's").

ringguard allocates device memory from cudaMemPool_t's of its own (communication slots, gradient buckets,
the guard's snapshots) and staging buffers from pinned host pools: memory PyTorch's caching allocator
neither reports nor releases. This module makes it visible and releasable the same way:

    ringguard.memory_reserved()        # beside torch.cuda.memory_reserved()
    ringguard.memory_stats()           # {"device": {...}, "pinned": {...}}
    torch.cuda.empty_cache()           # also trims ringguard's pools once ringguard is imported
    ringguard.empty_cache()            # the same, explicitly

The downgrade engine reads the same statistics (``ringguard.policy.feed_torch_stats`` feeds them as the
``pool.device.*`` and ``pool.pinned.*`` signals).
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Optional

import torch

from . import _ext
from ._checks import I32_MAX, integer

__all__ = ["memory_stats", "memory_reserved", "empty_cache"]


def _index(device) -> int:
    if isinstance(device, int):
        integer("ringguard.memory", "device", device, 0, I32_MAX)
    if device is None:
        return torch.cuda.current_device() if torch.cuda.is_available() else -1
    d = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if d.type != "cuda":
        raise ValueError(f"ringguard.memory: {d} is not a CUDA device")
    return d.index if d.index is not None else torch.cuda.current_device()


def memory_stats(device=None) -> Dict[str, Dict[str, Any]]:
    """The pools' bytes: "device" (the pools on `device`, default the current CUDA device) and "pinned"
    (every pinned pool of the process), each with reserved_bytes, used_bytes, high_water_bytes (the sum of
    each pool's own peak), allocations (live), allocation_failures (refused by the driver) and pools."""
    return _ext.load().pool_stats(_index(device))


def memory_reserved(device=None) -> int:
    """Device bytes ringguard's pools hold on `device` (in use or cached): the counterpart of
    ``torch.cuda.memory_reserved(device)``, which does not include them."""
    return int(memory_stats(device)["device"]["reserved_bytes"])


def empty_cache(device: Optional[int] = None, torch_too: bool = True) -> None:
    """Releases what ringguard's pools cache and nobody uses (device pools trimmed to zero cached bytes, cached
    pinned blocks freed), after torch's own ``torch.cuda.empty_cache()`` unless `torch_too` is False. Safe
    while collectives run: memory in use is kept. `device` None trims the pools of every device."""
    if torch_too and torch.cuda.is_available():
        _torch_empty_cache()
    _ext.load().trim_pools(-1 if device is None else _index(device))


def _torch_empty_cache() -> None:
    f = torch.cuda.empty_cache
    (f.__wrapped__ if getattr(f, "__ringguard__", False) else f)()


def install_empty_cache_hook() -> None:
    """PyTorch offers no hook on its empty_cache(): ringguard wraps torch.cuda.empty_cache (when the extension
    is first loaded: at ``import ringguard``, or at the first process group when torch's entry point loaded
    the package) so that one call releases both allocators' caches. Code that took a reference to
    the original before ringguard was imported keeps the original (then call ringguard.empty_cache())."""
    original = torch.cuda.empty_cache
    if getattr(original, "__ringguard__", False):
        return

    @functools.wraps(original)
    def empty_cache_with_ringguard() -> None:
        original()
        _ext.load().trim_pools(-1)

    empty_cache_with_ringguard.__ringguard__ = True
    torch.cuda.empty_cache = empty_cache_with_ringguard
    import torch.cuda.memory as torch_memory

    if torch_memory.empty_cache is original:
        torch_memory.empty_cache = empty_cache_with_ringguard
