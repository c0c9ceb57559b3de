"""Options of a ringguard process group (pure Python; no torch import).

Precedence, lowest first: built-in defaults, ``RINGGUARD_*`` environment variables (read by the C++
side), the fields set in :class:`Options` (``pg_options=`` of ``init_process_group``/``new_group``).
The process-group ``timeout`` becomes ``RINGGUARD_TIMEOUT_MS`` unless ``Options.timeout`` or the
environment variable sets it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Dict, Mapping, Optional, Tuple

# The fields, their variables, types, defaults and ranges come from the C++ declarations
# (src/core/settings.cc), through the generated _settings.py (docs/ENV.md).
from ._settings import SETTINGS, Fields, Schedule  # noqa: F401  Schedule: the fault_schedule type

_BY_NAME = {s.name: s for s in SETTINGS}
# Field -> environment variable. `timeout` is converted to milliseconds.
_NAMES = {s.field: s.name for s in SETTINGS if s.field is not None}

TIMEOUT_NAME = "RINGGUARD_TIMEOUT_MS"
# Options::kMaxTimeoutMs (include/ringguard/core/options.h): a year of milliseconds.
MAX_TIMEOUT_MS = _BY_NAME[TIMEOUT_NAME].hi


def timeout_ms(timeout: timedelta) -> int:
    """A timedelta as a positive number of milliseconds (rounded up)."""
    if not isinstance(timeout, timedelta):
        raise TypeError(f"timeout must be a datetime.timedelta, got {type(timeout).__name__}")
    us = timeout // timedelta(microseconds=1)
    ms = -(-us // 1000)
    if ms <= 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    if ms > MAX_TIMEOUT_MS:
        raise ValueError(f"{TIMEOUT_NAME}: timeout {timeout!r} ({ms} ms) is above the maximum, "
                         f"{MAX_TIMEOUT_MS} ms (a year)")
    return ms


def _checked_timeout(text: str, where: str) -> Optional[int]:
    """RINGGUARD_TIMEOUT_MS's text as milliseconds; ``None`` when it is not an integer (the extension then
    rejects it naming the variable); ValueError naming the variable when it is out of range."""
    try:
        ms = int(text)
    except ValueError:
        return None
    if not 1 <= ms <= MAX_TIMEOUT_MS:
        raise ValueError(f"{TIMEOUT_NAME}={text!r} ({where}): expected an integer in [1, {MAX_TIMEOUT_MS}] "
                         "(milliseconds, at most a year)")
    return ms


def format_value(name: str, value) -> str:
    """The string the C++ option parser receives for `value`."""
    if isinstance(value, bool):
        # str(True) == "True" would reach the C++ parser as a confusing number error.
        raise TypeError(f"{name}: booleans are not accepted, got {value!r}")
    if isinstance(value, timedelta):
        return str(timeout_ms(value))
    if isinstance(value, float):
        return repr(value)
    setting = _BY_NAME.get(name)
    if setting is not None and setting.kind == "schedule" and not isinstance(value, str):
        # [(collective, step, slice, rank), ...] -> "c:s:l:r,c:s:l:r"
        return ",".join(":".join(str(int(x)) for x in entry) for entry in value)
    return str(value)


@dataclass
class Options(Fields):
    """Per-group settings; ``None`` leaves the environment's value (or the default) in place.

    One field per per-group setting of docs/ENV.md (the fields come from ``_settings.Fields``).
    ``extra`` takes further ``RINGGUARD_*`` names verbatim (``{"RINGGUARD_X": "value"}``).
    Values are checked by the extension: an unknown name or a bad value raises ``ValueError``
    naming it when the group is created.
    """

    extra: Dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, str]:
        """``{RINGGUARD_NAME: str(value)}`` for every field that is set."""
        out: Dict[str, str] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is None:
                continue
            name = _NAMES[f.name]
            if f.name == "timeout":
                out[name] = str(timeout_ms(value))
            else:
                out[name] = format_value(name, value)
        for name, value in self.extra.items():
            if not isinstance(name, str) or not name.startswith("RINGGUARD_"):
                raise ValueError(f"Options.extra: keys must be RINGGUARD_* names, got {name!r}")
            if name in out:
                raise ValueError(f"Options.extra: {name} is also set by a field")
            out[name] = format_value(name, value)
        return out


def field_names() -> Dict[str, str]:
    """Field name -> environment variable name."""
    return dict(_NAMES)


def fault_dict(kwargs: Mapping[str, object]) -> Dict[str, str]:
    """``set_fault`` keywords -> ``{RINGGUARD_FAULT_*: str}``.

    Accepts ``prob=0.1``, ``fault_prob=0.1`` or ``RINGGUARD_FAULT_PROB=0.1``, one of them per setting
    (two spellings of one setting raise ValueError naming both: which was meant is a guess). ``None`` is
    the same as leaving the keyword out: ``set_fault`` replaces the whole fault configuration, so the
    setting takes its default (``prob=None`` turns random injection off). A keyword that names no fault
    setting (``probability=``, ``sead=``) raises ValueError naming the closest one: ignoring it would
    inject nothing and say nothing.
    """
    known = {name for name in _NAMES.values() if name.startswith("RINGGUARD_FAULT_")}
    out: Dict[str, str] = {}
    spelled: Dict[str, str] = {}  # setting -> the keyword that named it
    for key, value in kwargs.items():
        if key.startswith("RINGGUARD_FAULT_"):
            name = key
        else:
            short = key[len("fault_"):] if key.startswith("fault_") else key
            name = "RINGGUARD_FAULT_" + short.upper()
        if name not in known:
            shorts = sorted(n[len("RINGGUARD_FAULT_"):].lower() for n in known)
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.0)
            hint = f" (did you mean {close[0][len('RINGGUARD_FAULT_'):].lower()!r}?)" if close else ""
            raise ValueError(f"set_fault: unknown setting {key!r}{hint}; the settings are "
                             + ", ".join(shorts))
        if name in spelled:
            raise ValueError(f"set_fault: {spelled[name]!r} and {key!r} both set {name}: give one of them")
        spelled[name] = key
        if value is None:
            continue
        out[name] = format_value(name, value)
    return out


def resolve(pg_options, pg_timeout: timedelta,
            environ: Optional[Mapping[str, str]] = None) -> Tuple[Dict[str, str], Optional[int]]:
    """Options for the extension, and the effective timeout in ms when Python knows it.

    Returns ``(options, timeout_ms)``: `options` overrides the environment on the C++ side; the
    timeout is ``None`` only when it comes from an environment value the extension will reject.
    """
    if environ is None:
        environ = os.environ
    if pg_options is None:
        opts: Dict[str, str] = {}
    elif isinstance(pg_options, Options):
        opts = pg_options.to_dict()
    else:
        raise TypeError("pg_options of a ringguard process group must be ringguard.Options or None, "
                        f"got {type(pg_options).__module__}.{type(pg_options).__qualname__}")
    if TIMEOUT_NAME in opts:
        return opts, _checked_timeout(opts[TIMEOUT_NAME], "pg_options")
    if TIMEOUT_NAME in environ:
        return opts, _checked_timeout(environ[TIMEOUT_NAME], "environment")
    ms = timeout_ms(pg_timeout)
    opts[TIMEOUT_NAME] = str(ms)
    return opts, ms
