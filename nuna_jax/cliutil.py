"""Small helpers shared by the ``nuna-jax`` subcommands: sizes, system, output."""

from __future__ import annotations

import json
import re
import sys

from .system import System, load_system, preset_names

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
        if abs(val - round(val)) > 1e-6 * max(1.0, val):
            raise ValueError(f"size {text!r} is not a whole number of bytes")
        n = int(round(val))
    if n <= 0:
        raise ValueError(f"size must be > 0 bytes, got {text!r}")
    return n


def format_size(n: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:g}{unit}"
    return f"{n:g}B"


def add_system_args(p, gpus: bool = True) -> None:
    p.add_argument("--system", default="table2", metavar="NAME|FILE.toml",
                   help=f"hardware preset ({', '.join(preset_names())}) or a TOML file (default: table2)")
    if gpus:
        p.add_argument("--gpus", type=int, default=None, metavar="N",
                       help="GPUs (sockets) in the scale-up pod (default: the system's, 8 for table2)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def system_from_args(args) -> System:
    return load_system(args.system, getattr(args, "gpus", None))


def emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=float)
    sys.stdout.write("\n")
