"""``ringguard-run``: torchrun with ringguard's defaults.

    ringguard-run [--rg NAME=VALUE]... [torchrun options] script.py [script args]

- ``--rg NAME=VALUE`` (repeatable, before any torchrun option) exports ``RINGGUARD_NAME=VALUE`` to
  every rank, e.g. ``--rg FAULT_PROB=0.01 --rg SLICE_BYTES=65536`` (the prefix is optional).
- ``RINGGUARD_AUTOLOAD=1`` is exported, so ``init_process_group("ringguard")`` works in scripts that
  never ``import ringguard``.
- Without any rendezvous option (``--standalone``, ``--rdzv-*``, ``--master-*``, ``--nnodes``) it adds
  ``--standalone``: a free local port instead of torchrun's fixed 29500, so jobs on one machine do not
  collide. ``--nproc-per-node`` keeps torchrun's default (1).

Everything else is ``torch.distributed.run.main``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from typing import List, Optional, Tuple

_RDZV_FIELDS = ("standalone", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "rdzv_conf", "nnodes",
                "node_rank", "master_addr", "master_port")


def split_args(argv: List[str]) -> Tuple[dict, List[str]]:
    """Leading ``--rg NAME=VALUE`` / ``--rg=NAME=VALUE`` -> ({RINGGUARD_NAME: VALUE}, rest)."""
    env = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--rg":
            if i + 1 >= len(argv):
                raise SystemExit("ringguard-run: --rg needs NAME=VALUE")
            setting, i = argv[i + 1], i + 2
        elif arg.startswith("--rg="):
            setting, i = arg[len("--rg="):], i + 1
        else:
            break
        name, sep, value = setting.partition("=")
        if not sep or not name:
            raise SystemExit(f"ringguard-run: --rg expects NAME=VALUE, got {setting!r}")
        name = name.upper()
        if not name.startswith("RINGGUARD_"):
            name = "RINGGUARD_" + name
        env[name] = value
    return env, argv[i:]


def torchrun_args(rest: List[str]) -> List[str]:
    """Adds ``--standalone`` when torchrun's parser sees no rendezvous option set."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            given = parser.parse_args(rest)
            default = parser.parse_args(["script.py"])
    except SystemExit:  # --help, or bad arguments: torchrun itself prints them
        return rest
    if all(getattr(given, f, None) == getattr(default, f, None) for f in _RDZV_FIELDS):
        return ["--standalone"] + rest
    return rest


def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    env, rest = split_args(argv)
    os.environ.update(env)
    os.environ["RINGGUARD_AUTOLOAD"] = "1"
    if os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") != "1":
        warnings.warn("ringguard-run: TORCH_DEVICE_BACKEND_AUTOLOAD is off, so scripts must "
                      "`import ringguard` before init_process_group('ringguard')", RuntimeWarning)
    from torch.distributed.run import main as torchrun_main

    torchrun_main(torchrun_args(rest))


if __name__ == "__main__":
    main()
