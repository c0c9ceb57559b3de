"""Loads the compiled extension ``ringguard._C`` and checks the torch it was built for."""

from __future__ import annotations

import importlib

_module = None
_on_load = []  # what runs once the extension is loaded (when_loaded)


def matches(built: str, installed: str) -> bool:
    """Same torch: equal strings, or equal releases when `built` has no local part (torch's C++
    TORCH_VERSION is "2.11.0" where ``torch.__version__`` is "2.11.0+cu130")."""
    if built == installed:
        return True
    return "+" not in built and built == installed.split("+", 1)[0]


def load():
    """``ringguard._C``; ``ImportError`` naming both versions if it was built for another torch."""
    global _module
    if _module is not None:
        return _module
    import torch

    try:
        mod = importlib.import_module("ringguard._C")
    except ImportError as err:
        raise ImportError(
            f"ringguard: cannot load the compiled extension ringguard._C ({err}). It is built by "
            "`python3 -m pip install --no-build-isolation .` from the ringguard source tree, against "
            f"the installed torch ({torch.__version__}).") from err
    built = str(getattr(mod, "__torch_version__", "<unknown>"))
    if not matches(built, str(torch.__version__)):
        raise ImportError(
            f"ringguard._C was built against torch {built}, but torch {torch.__version__} is "
            "installed: rebuild it with `python3 -m pip install --no-build-isolation .`")
    _module = mod
    for f in _on_load:
        f()
    return mod


def when_loaded(f) -> None:
    """Runs `f` once the extension is loaded: now if it is, else right after ``load()`` loads it. How modules
    that use the extension hook in at load time without this module importing them (no import circle)."""
    if _module is not None:
        f()
    else:
        _on_load.append(f)
