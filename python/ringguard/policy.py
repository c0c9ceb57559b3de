"""Dynamic operator downgrade driven by memory-fragmentation and PCIe telemetry (docs/DOWNGRADE.md).

    import ringguard.policy as policy
    policy.load()                                    # RINGGUARD_POLICY_RULES, or the built-in default rules
    for batch in data:
        policy.feed_torch_stats()                    # torch.cuda.memory_stats() of the current device
        policy.step()                                # a step boundary: rules evaluated, variants switched
        with policy.attention():                     # SDPA restricted to the selected backend
            loss = model(batch)
    policy.decisions()                               # every switch, with the signals that caused it

The engine is the C++ one (``ringguard._C.PolicyEngine``, src/policy/): rules, hysteresis, dwell and the
decision log live there. Attention is local to each rank (it decides per rank); collective families
(``all_gather``, ``all_reduce``) decide from signals reduced (MAX) across ranks when ``set_group`` gave a
process group. ``load()`` makes its engine the process's: the "ringguard" backend runs all-gathers and
allreduces of CUDA tensors as the ``staged_chunked`` variant (through pinned host memory,
RINGGUARD_STAGED_CHUNK_BYTES a chunk, over the group's host communicator) while it is the current variant of
``all_gather`` or ``all_reduce`` (``staged_all_gathers()`` and ``staged_all_reduces()`` count them).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch

from . import _ext, memory
from ._checks import I32_MAX, integer

__all__ = ["load", "engine", "register_variant", "feed_torch_stats", "feed_signals", "step", "current",
           "decisions", "counters", "signals", "attention", "attention_backend", "set_group",
           "async_allocator", "SDPA_BACKENDS", "ALL_GATHER_VARIANTS", "ALL_REDUCE_VARIANTS",
           "COLLECTIVE_VARIANTS", "staged_all_gathers", "staged_all_reduces", "variant_op", "VariantOp",
           "feed_guard_stats"]

# The attention family's variants and the SDPA backend each one selects. The ladder's order (cuDNN,
# flash, memory-efficient, math) is the rules file's, taken from the measurement in issue 16.
SDPA_BACKENDS = {
    "cudnn": "CUDNN_ATTENTION",
    "flash": "FLASH_ATTENTION",
    "mem_efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
}

def _staged_enabled() -> bool:
    """The staged collectives run on CUDA tensors (copied through pinned host memory to the group's host
    communicator): the engine's device must be a CUDA device. CPU tensors always take the ring."""
    return _device is not None and _device.type == "cuda"


# The all_gather family's variants (docs/DOWNGRADE.md) and when each can run. The c10d backend runs
# all_gather / all_gather_into_tensor of CUDA tensors as `staged_chunked` while it is the current variant.
ALL_GATHER_VARIANTS: Dict[str, Optional[Callable[[], bool]]] = {
    "ring": None,  # always
    "staged_chunked": _staged_enabled,
}

# The all_reduce family's variants: the c10d backend runs all_reduce (and allreduce_coalesced) of CUDA
# tensors as `staged_chunked` while it is the current variant.
ALL_REDUCE_VARIANTS: Dict[str, Optional[Callable[[], bool]]] = {
    "ring": None,  # always
    "staged_chunked": _staged_enabled,
}

# The collective families whose variants the "ringguard" backend implements, registered by load().
COLLECTIVE_VARIANTS = {"all_gather": ALL_GATHER_VARIANTS, "all_reduce": ALL_REDUCE_VARIANTS}

_engine = None
_device: Optional[torch.device] = None
_signals: Dict[str, Optional[float]] = {}


def _sdpa_enabled(variant: str) -> Callable[[], bool]:
    """Whether SDPA's `variant` backend can run on the engine's device: CUDA-only kernels need a CUDA device,
    and each backend must be enabled in torch.backends.cuda (flash and math also run on CPU)."""
    def enabled() -> bool:
        cuda = _device is not None and _device.type == "cuda"
        b = torch.backends.cuda
        if variant == "cudnn":
            return cuda and b.cudnn_sdp_enabled()
        if variant == "mem_efficient":
            return cuda and b.mem_efficient_sdp_enabled()
        if variant == "flash":
            return b.flash_sdp_enabled()
        return b.math_sdp_enabled()
    return enabled


def async_allocator() -> bool:
    """True when torch's CUDA allocator is the cudaMallocAsync backend (its split statistics read zero)."""
    try:
        if torch.cuda.is_available():
            return torch.cuda.get_allocator_backend() == "cudaMallocAsync"
    except (AttributeError, RuntimeError):
        pass
    C = _ext.load()
    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        if name in os.environ:
            return C.alloc_conf_selects_async(os.environ[name])
    return False


def load(rules_path: Optional[str] = None, rules_json: Optional[str] = None, edits: Optional[str] = None,
         device: Optional[torch.device] = None, nvml_device: int = -1, builtin_variants: bool = True):
    """Creates the process's engine from a rules file (or JSON text, or the environment: RINGGUARD_POLICY_RULES,
    RINGGUARD_POLICY_SET), applies RINGGUARD_POLICY / RINGGUARD_POLICY_FORCE, and registers the built-in
    attention variants for `device` (default: the current CUDA device, or CPU). `nvml_device` >= 0 starts a
    sampler thread reading that NVML device's PCIe counters every RINGGUARD_TELEMETRY_INTERVAL_MS (NVML
    numbers devices in PCI bus order, not CUDA_VISIBLE_DEVICES order). A bad rules file raises ValueError
    naming the key, the value and the problem."""
    global _engine, _device, _signals
    integer("ringguard.policy.load", "nvml_device", nvml_device, -1, I32_MAX)
    C = _ext.load()
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    _device = torch.device(device)
    _signals = {}
    _guard_seen.clear()
    e = C.PolicyEngine(rules_path=rules_path, rules_json=rules_json, edits=edits, nvml_device=nvml_device)
    e.configure_from_env()
    if builtin_variants and "attention" in e.families():
        for name in e.families()["attention"]["variants"]:
            if name in SDPA_BACKENDS:
                e.register_variant("attention", name, _sdpa_enabled(name))
    for family, builtin in COLLECTIVE_VARIANTS.items():
        if builtin_variants and family in e.families():
            variants = e.families()[family]["variants"]
            for name, enabled in builtin.items():
                if name in variants:
                    e.register_variant(family, name, enabled)
    # The c10d backend reads this engine's all_gather and all_reduce variants when it issues those.
    e.make_process_engine()
    _engine = e
    return e


def engine():
    """The process's engine (``load()`` with defaults on first use)."""
    return _engine if _engine is not None else load()


def register_variant(family: str, name: str, enabled: Optional[Callable[[], bool]] = None) -> None:
    """Registers variant `name` of `family` (a name the rules list); `enabled` says whether it can run now.
    Variants the rules list but nobody registered are never chosen."""
    engine().register_variant(family, name, enabled)


class VariantOp:
    """A user family's operator: one implementation per variant (plain callables, or guarded ops from
    ``ringguard.guard``), called through the engine's current choice for the family. See ``variant_op``."""

    def __init__(self, family: str, implementations: Dict[str, Callable],
                 enabled: Optional[Dict[str, Callable[[], bool]]] = None):
        known = engine().families()
        if family not in known:
            raise ValueError(f"ringguard.policy.variant_op: the rules have no family '{family}' "
                             f"(they have: {', '.join(sorted(known))})")
        listed = known[family]["variants"]
        for name in implementations:
            if name not in listed:
                raise ValueError(f"ringguard.policy.variant_op: family '{family}' lists no variant '{name}' "
                                 f"(it lists: {', '.join(listed)})")
        self.family = family
        self.implementations = dict(implementations)
        for name in implementations:
            engine().register_variant(family, name, (enabled or {}).get(name))

    def variant(self) -> str:
        """The variant the next call runs: the engine's current one, or its first enabled one before any step."""
        return current(self.family) or engine().first_enabled(self.family)

    def __call__(self, *args, **kwargs):
        name = self.variant()
        if name not in self.implementations:
            raise RuntimeError(f"ringguard.policy: family '{self.family}' selected '{name}', which has no "
                               f"implementation here (registered: {', '.join(self.implementations)})")
        return self.implementations[name](*args, **kwargs)


def variant_op(family: str, implementations: Dict[str, Callable],
               enabled: Optional[Dict[str, Callable[[], bool]]] = None) -> VariantOp:
    """Registers `implementations` (variant name -> callable, e.g. guarded ops) for a family the rules list,
    and returns one callable that runs the family's current variant. With ``feed_guard_stats`` the rules can
    switch on the guard's own signals: a guarded op that keeps producing NaN/Inf moves the family to a safer
    variant, and back once it is clean for the dwell time."""
    return VariantOp(family, implementations, enabled)


_guard_seen: Dict[int, Dict[str, int]] = {}


def feed_guard_stats(guard, prefix: str = "guard") -> None:
    """Feeds a ``ringguard.guard`` Guard's counters as signals for the next step: ``<prefix>.detections``,
    ``<prefix>.escalations``, ``<prefix>.replays`` and ``<prefix>.fallbacks``, each the count since the
    previous feed of the same guard (so a rule's threshold reads "per step")."""
    c = guard.counters()
    seen = _guard_seen.setdefault(id(guard), {})
    values = {}
    for key in ("detections", "escalations", "replays", "fallbacks"):
        values[f"{prefix}.{key}"] = float(c[key] - seen.get(key, 0))
        seen[key] = c[key]
    feed_signals(values)


def feed_torch_stats(stats: Optional[Dict[str, Any]] = None, device: Optional[torch.device] = None,
                     async_backend: Optional[bool] = None) -> None:
    """Feeds torch's caching-allocator statistics (``torch.cuda.memory_stats(device)`` by default) and, when
    reading them live, ringguard's own pools beside them (``ringguard.memory_stats``: the ``pool.device.*``
    and ``pool.pinned.*`` signals; a kind of pool the process has none of stays missing)."""
    live = stats is None
    if live:
        if not torch.cuda.is_available():
            return  # nothing to read: the torch signals stay missing
        stats = torch.cuda.memory_stats(device)
    engine().feed_torch_stats(dict(stats), async_allocator() if async_backend is None else async_backend)
    if live:
        pools = memory.memory_stats(device)
        for kind in ("device", "pinned"):
            p = pools[kind]
            if p["pools"]:
                engine().feed_pool_stats(kind, p["reserved_bytes"], p["used_bytes"], p["high_water_bytes"],
                                         p["allocation_failures"])


def feed_signals(values: Dict[str, Optional[float]]) -> None:
    """Extra signals for the next steps (name -> value, or None for missing): custom sources, or a trace. A
    value that is not a finite number raises ValueError naming the signal, and nothing is kept."""
    engine().signals(values)  # checks every value before any is kept for later steps
    _signals.update(values)


def step(signals: Optional[Dict[str, Optional[float]]] = None, t_ms: Optional[float] = None) -> None:
    """A step boundary: evaluates the rules on the latest telemetry (plus `signals`) and switches variants.
    Call it at the same points on every rank. `t_ms` overrides the clock (traces)."""
    merged = dict(_signals)
    if signals:
        merged.update(signals)
    engine().step(merged, t_ms)


def current(family: str) -> str:
    return engine().current(family)


def decisions() -> List[Dict[str, Any]]:
    """Every decision (the last 4096): step, family, from, to, reason, agreed, the signals it read, text."""
    return engine().decisions()


def counters() -> Dict[str, Any]:
    return engine().counters()


def signals() -> Dict[str, Optional[float]]:
    """The signals the engine would see now (None: missing)."""
    return engine().signals(dict(_signals))


def attention_backend():
    """The SDPBackend of the attention family's current variant (its first enabled one before any step)."""
    from torch.nn.attention import SDPBackend

    name = current("attention") or engine().first_enabled("attention")
    if name not in SDPA_BACKENDS:
        raise RuntimeError(f"ringguard.policy: attention variant '{name}' has no SDPA backend "
                           f"(known: {', '.join(SDPA_BACKENDS)})")
    return getattr(SDPBackend, SDPA_BACKENDS[name])


@contextlib.contextmanager
def attention() -> Iterator[None]:
    """Restricts scaled_dot_product_attention in the block to the selected backend
    (``torch.nn.attention.sdpa_kernel``)."""
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(attention_backend()):
        yield


def staged_all_gathers(group=None) -> int:
    """All-gathers of CUDA tensors on `group` (default: the default group) that ran as the staged_chunked
    variant."""
    from . import backend

    return int(backend(group).staged_all_gathers())


def staged_all_reduces(group=None) -> int:
    """Allreduces of CUDA tensors on `group` (default: the default group) that ran as the all_reduce
    family's staged_chunked variant (allreduce_coalesced: one per tensor)."""
    from . import backend

    return int(backend(group).staged_all_reduces())


def set_group(group=None) -> None:
    """Collective families decide from signals reduced (MAX) over `group`'s ranks at every step (a float64
    all_reduce on the group's device); None: the default group. Call it on every rank."""
    import torch.distributed as dist

    g = group if group is not None else dist.group.WORLD
    backend = dist.get_backend(g)
    dev = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")

    def agree(values: List[float]) -> List[float]:
        t = torch.tensor(values, dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=g)
        return t.cpu().tolist()

    engine().set_agreement(agree)
