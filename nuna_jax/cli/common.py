"""Small helpers shared by the ``nuna-jax`` subcommands: sizes, system, output."""

from __future__ import annotations

import json
import re
import sys

from ..placement import POLICIES
from ..plans import ALGORITHMS, COLLECTIVES
from ..scenario import Scenario, make_scenario
from ..system import System
from ..presets import load_system, preset_names

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


def add_scenario_args(p) -> None:
    """Add --collective/--plan, --size, --policy, --tbs, --nar-granularity, --algorithm."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--collective", metavar="NAME",
                     help=f"generated collective: {', '.join(COLLECTIVES)}")
    src.add_argument("--plan", metavar="FILE.xml", help="an MSCCL XML algorithm file instead of --collective")
    p.add_argument("--size", required=True, metavar="SIZE",
                   help="per-GPU buffer size, e.g. 100kB, 1MB (decimal), 1MiB (binary)")
    p.add_argument("--policy", default="nap+nar", metavar="POLICY",
                   help=f"placement/routing: {', '.join(x.lower() for x in POLICIES)} (default nap+nar)")
    p.add_argument("--tbs", type=int, default=None, metavar="N",
                   help="threadblocks per GPU for generated plans (default: n_gpus - 1)")
    p.add_argument("--nar-granularity", type=int, default=None, metavar="G",
                   help="NAR domains (default: logical groups per GPU clamped to [2, 2*mesh_rows])")
    p.add_argument("--algorithm", default="direct", choices=ALGORITHMS,
                   help="generated plan algorithm (default direct, as in the paper)")
    p.add_argument("--placement", default=None, metavar="FILE.json",
                   help="a saved placement (nuna-jax optimize --save) instead of --policy")


def scenario_from_args(args, system: System) -> Scenario:
    """Scenario from parsed CLI args (see :func:`add_scenario_args`).

    With ``--plan`` and no explicit ``--gpus``, the system takes the file's
    GPU count.
    """
    size = parse_size(args.size)
    plan_file = getattr(args, "plan", None)
    if plan_file is not None and getattr(args, "gpus", None) is None:
        from ..msccl import msccl_gpus
        n = msccl_gpus(plan_file)
        if n != system.n_gpus:
            system = system.replace(n_gpus=n)
    sc = make_scenario(system, collective=getattr(args, "collective", None), plan_file=plan_file,
                       size_bytes=size, policy=args.policy, tbs_per_gpu=args.tbs,
                       nar_granularity=args.nar_granularity, algorithm=args.algorithm)
    if getattr(args, "placement", None):
        from ..lowering import build_traffic
        from ..optim.io import load_placement
        pl = load_placement(args.placement, sc.system, sc.plan)
        sc = Scenario(sc.system, sc.plan, pl, build_traffic(sc.system, sc.plan, pl))
    return sc
