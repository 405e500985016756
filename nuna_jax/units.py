"""Byte sizes as users write them (``100kB``, ``1MB``, ``1MiB``): decimal units follow the NUNA paper."""

from __future__ import annotations

import math
import re

__all__ = ["MAX_SIZE_BYTES", "parse_size", "format_size"]

#: Largest accepted ``--size``: 1 PB (10^15 bytes), far above the papers' 1 GB.
MAX_SIZE_BYTES = 10**15

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 10**3, "m": 10**6, "g": 10**9,
}


def parse_size(text: str | int) -> int:
    """Bytes from a size such as ``1MB`` (decimal, 10^6), ``1MiB`` (2^20) or ``4096``.

    Decimal units follow the NUNA paper (100 kB .. 1 GB).  Raises ValueError.
    """
    if isinstance(text, int):
        n = text
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(
                f"bad size {text!r}: use a number with an optional unit "
                "B, kB, MB, GB (decimal) or KiB, MiB, GiB (binary), e.g. 1MB")
        val = float(m.group(1)) * _UNITS[m.group(2).lower()]
        if not math.isfinite(val) or val > MAX_SIZE_BYTES:
            raise ValueError(f"size {text!r} is out of range: allowed 1 B .. {MAX_SIZE_BYTES:.0e} B")
        if abs(val - round(val)) > 1e-6 * max(1.0, val):
            raise ValueError(f"size {text!r} is not a whole number of bytes")
        n = int(round(val))
    if n <= 0 or n > MAX_SIZE_BYTES:
        raise ValueError(f"size must be in 1 B .. {MAX_SIZE_BYTES:.0e} B, got {text!r}")
    return n


def format_size(n: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:g}{unit}"
    return f"{n:g}B"
