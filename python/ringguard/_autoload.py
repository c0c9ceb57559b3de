"""The ``torch.backends`` entry point: registers the "ringguard" backend when torch is imported.

Runs inside ``import torch`` (torch/__init__.py ends with ``_import_device_backends()``), so it
must stay cheap and must never raise: torch turns any exception here into a failed ``import torch``.
It imports nothing of the extension: the creator loads ``ringguard._C`` (and with it MPI, NCCL,
CUDA libraries) on the first ``init_process_group("ringguard")`` / ``new_group``.

It is also reached recursively (``import ringguard`` -> ``import torch`` -> entry point), when the
``ringguard`` package is only partly initialised: this module needs nothing from it.
"""

from __future__ import annotations

import importlib
import os
import warnings

NAME = "ringguard"
DEVICES = ["cpu", "cuda"]
_DISABLED = ("0", "false", "off", "no")

_done = False
_warned = False


def enabled() -> bool:
    """False when ``RINGGUARD_AUTOLOAD`` is 0/false/off/no."""
    return os.environ.get("RINGGUARD_AUTOLOAD", "1").strip().lower() not in _DISABLED


def create(dist_backend_opts, pg_options):
    """The registered creator: loads the extension on first use, then builds the backend."""
    backend = importlib.import_module("ringguard._backend")
    return backend.create(dist_backend_opts, pg_options)


def register() -> bool:
    """Registers "ringguard" with torch.distributed (idempotent). False if c10d is unavailable."""
    import torch.distributed as dist

    if not dist.is_available():
        return False
    plugin = dist.Backend._plugins.get(NAME.upper())
    if plugin is not None and plugin.creator_fn is create and NAME in dist.Backend.backend_list:
        return True
    # torch 2.11's register_backend accepts a name twice (it replaces the creator); older versions
    # assert that the name is new.
    dist.Backend.register_backend(NAME, create, extended_api=True, devices=list(DEVICES))
    return True


def _forget_package() -> None:
    """With autoload off, torch imported this package only to call entry(), and its ``__init__`` skipped its
    work (torch was initialising): forget the package, so that the script's own ``import ringguard`` runs
    ``__init__`` again, which registers the backend and loads the extension. Without this that import found
    the package in ``sys.modules`` and did nothing: "Unknown backend type ringguard". Not when the package is
    still initialising: then the script's ``import ringguard`` imported torch, and ``__init__`` goes on to do
    its work."""
    import sys

    package = sys.modules.get(NAME)
    if package is None or getattr(getattr(package, "__spec__", None), "_initializing", False):
        return
    for name in [n for n in sys.modules if n == NAME or n.startswith(NAME + ".")]:
        del sys.modules[name]


def entry() -> None:
    """Entry point of ``[project.entry-points."torch.backends"]``; never raises."""
    global _done, _warned
    if _done:
        return
    if not enabled():
        try:
            _forget_package()
        except Exception:  # noqa: BLE001 - anything here would break `import torch`
            pass
        return
    try:
        _done = register()
    except Exception as err:  # noqa: BLE001 - anything here would break `import torch`
        if not _warned:
            _warned = True
            warnings.warn(f"ringguard: could not register the 'ringguard' backend with torch.distributed "
                          f"({type(err).__name__}: {err}); `import ringguard` retries and shows the error",
                          RuntimeWarning, stacklevel=2)
