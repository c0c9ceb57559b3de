"""``ringguard-run``: torchrun with ringguard's defaults.

    ringguard-run [--rg NAME=VALUE]... [torchrun options] script.py [script args]

- ``--rg NAME=VALUE`` (repeatable, before any torchrun option) exports ``RINGGUARD_NAME=VALUE`` to
  every rank, e.g. ``--rg FAULT_PROB=0.01 --rg SLICE_BYTES=65536`` (the prefix is optional). NAME must
  be a ringguard setting (docs/ENV.md) or ``AUTOLOAD``; anything else exits with status 2.
- ``RINGGUARD_AUTOLOAD=1`` is exported (unless ``--rg AUTOLOAD=...`` says otherwise), so
  ``init_process_group("ringguard")`` works in scripts that never ``import ringguard``.
- When neither the options nor torchrun's ``PET_*`` environment configure a rendezvous
  (``--standalone``, ``--rdzv-*``, ``--master-*``, ``--nnodes``, ``--node-rank`` with a value other than
  torchrun's default) it adds ``--standalone``: a free local port instead of torchrun's fixed 29500, so
  jobs on one machine do not collide. ``--nproc-per-node`` keeps torchrun's default (1).

Everything else is ``torch.distributed.run.main``.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import sys
import warnings
from typing import List, NoReturn, Optional, Tuple

from ._autoload import enabled as autoload_enabled
from ._settings import SETTINGS

_RDZV_FIELDS = ("standalone", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "rdzv_conf", "nnodes",
                "node_rank", "master_addr", "master_port")
# Every name --rg accepts: the settings (src/core/settings.cc, docs/ENV.md) and the entry point's switch.
_NAMES = frozenset(s.name for s in SETTINGS) | {"RINGGUARD_AUTOLOAD"}


def _usage_error(message: str) -> NoReturn:
    """Exits like argparse does on a bad command line: the message on stderr, status 2."""
    print(f"ringguard-run: {message}", file=sys.stderr)
    raise SystemExit(2)


def _setting(setting: Optional[str]) -> Tuple[str, str]:
    """``NAME=VALUE`` -> (``RINGGUARD_NAME``, VALUE); a usage error unless NAME is a setting."""
    name, sep, value = (setting or "").partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_]+", name):
        got = "nothing" if setting is None else repr(setting)
        _usage_error(f"--rg needs NAME=VALUE (a ringguard setting, e.g. --rg NAN_CHECK=error), got {got}")
    name = name.upper()
    if not name.startswith("RINGGUARD_"):
        name = "RINGGUARD_" + name
    if name not in _NAMES:
        close = difflib.get_close_matches(name, _NAMES, n=1)
        hint = f"did you mean {close[0][len('RINGGUARD_'):]}? " if close else ""
        _usage_error(f"--rg {setting}: {name} is not a ringguard setting ({hint}see docs/ENV.md)")
    return name, value


def split_args(argv: List[str]) -> Tuple[dict, List[str]]:
    """Leading ``--rg NAME=VALUE`` / ``--rg=NAME=VALUE`` -> ({RINGGUARD_NAME: VALUE}, rest)."""
    env = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--rg":
            setting, i = (argv[i + 1] if i + 1 < len(argv) else None), i + 2
        elif arg.startswith("--rg="):
            setting, i = arg[len("--rg="):], i + 1
        else:
            break
        name, value = _setting(setting)
        env[name] = value
    return env, argv[i:]


def torchrun_args(rest: List[str]) -> List[str]:
    """Adds ``--standalone`` when torchrun's parser, reading `rest` and the ``PET_*`` environment, sets
    every rendezvous option to the value it has with neither."""
    from torch.distributed.run import get_args_parser

    pet = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("PET_")}
    try:
        bare = get_args_parser()  # its defaults are torchrun's own: the parser reads PET_* when built
    finally:
        os.environ.update(pet)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            given = get_args_parser().parse_args(rest)
            default = bare.parse_args(["script.py"])
    except SystemExit:  # --help, or bad arguments: torchrun itself prints them
        return rest
    if all(getattr(given, f, None) == getattr(default, f, None) for f in _RDZV_FIELDS):
        return ["--standalone"] + rest
    return rest


def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    env, rest = split_args(argv)
    if rest[:1] in (["-h"], ["--help"]):  # ringguard-run's own options first, then torchrun's help
        print(__doc__.replace("``", "`").rstrip() + "\n\ntorchrun's options:\n")
    os.environ["RINGGUARD_AUTOLOAD"] = "1"  # whatever the caller's environment says; --rg AUTOLOAD=0 wins
    os.environ.update(env)
    torch_autoload = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "1"
    for var, on in (("TORCH_DEVICE_BACKEND_AUTOLOAD", torch_autoload), ("RINGGUARD_AUTOLOAD", autoload_enabled())):
        if not on:
            warnings.warn(f"ringguard-run: {var} is off, so scripts must `import ringguard` before "
                          "init_process_group('ringguard')", RuntimeWarning)
    from torch.distributed.run import main as torchrun_main

    torchrun_main(torchrun_args(rest))


if __name__ == "__main__":
    main()
