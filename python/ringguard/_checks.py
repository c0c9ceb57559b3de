"""Checks of the Python API's integer parameters, each error naming the function, the parameter and its range.

An int that does not fit the C++ type behind it would otherwise fail in pybind11 as "Unable to cast Python
instance of type <class 'int'> to C++ type '?'", or wrap around, naming nothing.
"""

from __future__ import annotations

from typing import Optional

U64_MAX = (1 << 64) - 1
I64_MAX = (1 << 63) - 1
I32_MAX = (1 << 31) - 1


def integer(where: str, name: str, value, lo: int, hi: int, none_ok: bool = False) -> Optional[int]:
    """`value` when it is an int (not a bool) in [lo, hi] (or None with `none_ok`); TypeError or ValueError
    naming ``where``'s parameter `name` and the range otherwise."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where}: {name} must be an integer in [{lo}, {hi}], got {type(value).__name__} "
                        f"{_short(value)}")
    if not lo <= value <= hi:
        raise ValueError(f"{where}: {name} must be an integer in [{lo}, {hi}], got {_short(value)}")
    return value


def _short(value, limit: int = 80) -> str:
    """repr(value), cut to about `limit` characters (a 10**1000 is 1001 digits)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}...({len(text)} characters)...{text[-limit // 2:]}"
