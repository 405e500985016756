"""Small helpers shared by the ``nuna-jax`` subcommands: sizes, system, output."""

from __future__ import annotations

import argparse
import json
import math
import sys

from typing import TYPE_CHECKING

# only light modules at the top (no jax, flax, numba): the parsers are built from this file
from ..limits import Limits, check_traffic_work, generated_plan_work, plan_work
from ..presets import preset_names
from ..units import MAX_SIZE_BYTES, format_size, parse_size  # noqa: F401  (re-exported for subcommands)
from .names import ALGORITHMS, COLLECTIVES, POLICIES

if TYPE_CHECKING:
    from ..scenario import Scenario
    from ..system import System

#: what :func:`emit_json`'s ``provenance`` says about this run besides the code: the command line
#: (set by ``cli.main``) and the system (set by :func:`system_from_args`)
RUN: dict = {"argv": None, "system": None}

#: the suffixes ``--plot`` takes, every command alike (``plots.io.SUFFIXES``)
PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def add_plot_arg(p, what: str) -> None:
    """``--plot FILE.png|FILE.pdf|FILE.svg`` (docs/plots.md)."""
    p.add_argument("--plot", default=None, metavar="FILE.png|.pdf|.svg", help=f"also draw {what} to FILE")


def write_plot(args, make_figure) -> None:
    """Draw ``make_figure()`` to ``args.plot`` when given (the suffix is checked first, before any work)."""
    if getattr(args, "plot", None):
        from ..plots.io import save   # (nuna_jax.plots.save is also a submodule name)
        try:
            save(make_figure(), args.plot)
        except OSError as e:
            raise ValueError(f"cannot write --plot {args.plot!r}: {e.strerror or e}") from None
        print(f"plot written to {args.plot}", file=sys.stderr)


#: flags a command writes to (``reproduce --out`` is a folder: not here), and the flags of files it reads
#: (``sweep`` checks its grid against ``--out`` itself)
OUTPUT_FLAGS = ("plot", "save", "out")
INPUT_FLAGS = ("system", "plan", "placement", "model", "config", "network", "table")


def _same_file(a: str, b: str) -> bool:
    import os
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def output_paths(args) -> list:
    """``(flag, path)`` of every file the command will write (``e2e --table`` with ``--rebuild-table``)."""
    if getattr(args, "command", None) == "reproduce":
        return []
    outs = [(f"--{k}", str(getattr(args, k))) for k in OUTPUT_FLAGS if getattr(args, k, None)]
    if getattr(args, "rebuild_table", False) and getattr(args, "table", None):
        outs.append(("--table", str(args.table)))
    return outs


def input_paths(args) -> list:
    """``(flag, path)`` of every existing file the command reads."""
    import os

    from ..presets import is_system_file
    ins = []
    for k in INPUT_FLAGS:
        v = getattr(args, k, None)
        if not isinstance(v, str) or not v:
            continue
        if k == "table" and getattr(args, "rebuild_table", False):
            continue
        if k == "system" and not is_system_file(v):
            continue
        if os.path.exists(v):
            ins.append((f"--{k}", v))
    return ins


def check_output_paths(args) -> None:
    """Before any work: every output can be written (its folder exists and is writable, it is not a
    folder), no output is an input of the same run or another output (``ValueError`` -> exit 2)."""
    import os
    outs, ins = output_paths(args), input_paths(args)
    for i, (flag, path) in enumerate(outs):
        for iflag, ipath in ins:
            if _same_file(path, ipath):
                raise ValueError(f"{flag} {path!r} is the {iflag} file this command reads; writing it would "
                                 "destroy that input: choose another output")
        for oflag, opath in outs[:i]:
            if _same_file(path, opath):
                raise ValueError(f"{flag} {path!r} is also {oflag}: give two different files")
        parent = os.path.dirname(path) or "."
        if os.path.isdir(path):
            raise ValueError(f"cannot write {flag} {path!r}: it is a directory")
        if not os.path.isdir(parent):
            raise ValueError(f"cannot write {flag} {path!r}: no directory {parent!r}")
        if os.path.exists(path) and not os.path.isfile(path):
            raise ValueError(f"cannot write {flag} {path!r}: not a regular file")
        if not os.access(path if os.path.exists(path) else parent, os.W_OK):
            raise ValueError(f"cannot write {flag} {path!r}: permission denied")


def check_plot_path(args) -> None:
    """Refuse a bad ``--plot`` suffix before any work (ValueError -> exit 2)."""
    path = getattr(args, "plot", None)
    if path and not str(path).lower().endswith(PLOT_SUFFIXES):
        raise ValueError(f"--plot {path!r}: the file must end in .png, .pdf or .svg")


def number(lo: float, hi: float, *, lo_open: bool = False, integer: bool = False, what: str = ""):
    """An argparse ``type``: a finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``).

    NaN, infinity, overflow and out-of-range values are refused with the range
    (argparse turns the error into exit 2 and one line on stderr).
    """
    left = "(" if lo_open else "["
    label = f"{what} " if what else ""

    def parse(text: str):
        try:
            v = int(text, 10) if integer else float(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(
                f"{label}{text[:40]!r} is not {'an integer' if integer else 'a number'}") from None
        ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi
        if not ok:
            raise argparse.ArgumentTypeError(f"{label}{text[:40]!r} is out of range: allowed {left}{lo:.10g}, {hi:.10g}]")
        return v

    parse.__name__ = "integer" if integer else "number"
    return parse


def size_arg(text: str) -> int:
    """An argparse ``type``: a byte count as a size string (``1MB``, ``1MiB``, ``4096``: ``units.parse_size``)."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


size_arg.__name__ = "size"


def add_max_work_arg(p) -> None:
    p.add_argument("--max-work", type=number(0.0, 1e6, lo_open=True), default=1.0, metavar="F",
                   help="multiply every work limit (GPUs, routers, plan steps, pages, flits, file bytes; "
                        "README 'Limits and errors') by F (default 1)")


def limits_from_args(args) -> Limits:
    return Limits(getattr(args, "max_work", 1.0))


def add_system_args(p, gpus: bool = True) -> None:
    p.add_argument("--system", default="table2", metavar="NAME|FILE.toml",
                   help=f"hardware preset ({', '.join(preset_names())}) or a TOML file (default: table2)")
    if gpus:
        p.add_argument("--gpus", type=number(1, 10**9, integer=True, what="n_gpus"), default=None, metavar="N",
                       help="GPUs (sockets) in the scale-up pod (default: the system's, 8 for table2)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_max_work_arg(p)


def system_from_args(args) -> System:
    """The ``--system`` (preset or TOML file, read once) with ``--gpus``, within the work limits."""
    from ..presets import is_system_file, load_system
    lim = limits_from_args(args)
    spec = str(args.system or "table2")
    if is_system_file(spec):
        lim.check_file(spec, "--system file")
    n = getattr(args, "gpus", None)
    if n is not None:
        lim.check("gpus", n, f"--gpus {n}")
    s = load_system(spec, n)
    lim.check_system(s, f"--system {spec}")
    RUN["system"] = system_labels(args, s)
    return s


def system_labels(args, s: System) -> dict:
    """``{"system", "system_base", "system_file"}`` of the ``--system`` a command loaded: a TOML file's
    system is named after the file (or its ``name`` key), with its base and path beside the name."""
    from ..presets import system_origin
    return {"system": s.name, **system_origin(getattr(args, "system", None))}


def system_text(labels: dict) -> str:
    """The system for a text line: ``table2``, or ``mine (mine.toml, base table2)``."""
    if not labels.get("system_file"):
        return labels["system"]
    return f"{labels['system']} ({labels['system_file']}, base {labels['system_base']})"


def _finite(obj, where: str = "output") -> None:
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise RuntimeError(f"non-finite number {obj!r} at {where} of the JSON output: a bug "
                               "(inputs that produce it should have been refused)")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _finite(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for k, v in enumerate(obj):
            _finite(v, f"{where}[{k}]")


def run_provenance() -> dict:
    """``provenance`` of a command's JSON (docs/json.md): ``nuna_jax_version``, ``git_commit`` (null when
    not a checkout), ``system``, ``system_base``, ``system_file`` (null when the command loaded no
    system, or a preset), ``command_line`` (``nuna-jax ...`` as given)."""
    import shlex

    from ..provenance import provenance
    labels = RUN.get("system") or {}
    argv = RUN.get("argv")
    return {**provenance(), "system": labels.get("system"), "system_base": labels.get("system_base"),
            "system_file": labels.get("system_file"),
            "command_line": None if argv is None else shlex.join(["nuna-jax", *map(str, argv)])}


#: keys whose numbers are counts or byte sizes: written as JSON integers (docs/json.md, "Numbers")
INTEGER_KEYS = frozenset({
    "n_gpus", "size_bytes", "pad_bytes", "padded_size_bytes", "flits", "bytes", "n_flows", "n_tbs", "n_steps",
    "n_phases", "inter_gpu_bytes", "tbs_per_gpu", "tbs_per_gpu_max", "elem_bytes", "flits_injected",
    "flits_delivered", "flit_hops", "m", "n", "k", "comm_sms", "bytes_per_gpu", "message_bytes",
})


def _integers(obj, key=None):
    """``obj`` with every whole float under an :data:`INTEGER_KEYS` key (or in a list under one) as an int."""
    if isinstance(obj, dict):
        return {k: _integers(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_integers(v, key) for v in obj]
    if key in INTEGER_KEYS and isinstance(obj, float) and math.isfinite(obj) and obj == int(obj):
        return int(obj)
    return obj


def canonical_policy_name(name: str) -> str:
    """A policy's canonical name (``UA``, ``NAP+NAR``, ...: ``placement.POLICIES``) from any spelling."""
    from .names import POLICIES
    key = str(name).strip().upper().replace("_", "+").replace(" ", "")
    for p in POLICIES:
        if p.upper() == key:
            return p
    return str(name)


def emit_json(obj) -> None:
    """One strict JSON object on stdout (no NaN / Infinity: a non-finite value is a bug, not output),
    in the vocabulary of docs/json.md (counts and byte sizes as integers), with a top-level
    ``provenance`` key (:func:`run_provenance`) added last."""
    if isinstance(obj, dict) and "provenance" not in obj:
        obj = {**obj, "provenance": run_provenance()}
    obj = json.loads(json.dumps(obj, default=float))  # numpy / JAX scalars -> plain numbers
    obj = _integers(obj)
    _finite(obj)
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, allow_nan=False))
    sys.stdout.write("\n")


def padding_fields(plan, time_ns: float) -> dict:
    """``pad_bytes`` (the bytes a plan added so that every chunk holds whole elements, ``Plan.pad_bytes``)
    and the nccl-tests bandwidths of ``size_bytes`` (padding not counted), bytes/ns = GB/s."""
    from ..models.collectives import bandwidths
    return {"pad_bytes": int(plan.pad_bytes), **bandwidths(plan.collective, plan.n_gpus, plan.size_bytes, time_ns)}


def padding_text(plan) -> str:
    """One text line about the padding of ``plan`` ('' when it has none)."""
    if not plan.pad_bytes:
        if plan.algorithm != "msccl":
            return ""
        return f"  padding: none ({plan.size_bytes} B splits into whole-element chunks)"
    return (f"  padding: {int(plan.pad_bytes)} B added ({plan.padded_size_bytes} B moved) so that every chunk "
            f"holds whole {plan.elem_bytes}-byte elements; bandwidths count the {plan.size_bytes} B asked for")


def tbs_arg(text: str):
    """``--tbs N|best``: a threadblock count per GPU, or ``best`` (``scenario.tbs_candidates``)."""
    if str(text).strip().lower() == "best":
        return "best"
    return number(1, 10**9, integer=True, what="--tbs")(text)


tbs_arg.__name__ = "N or best"


def add_tbs_arg(p) -> None:
    p.add_argument("--tbs", type=tbs_arg, default="best", metavar="N|best",
                   help="threadblocks per GPU for generated plans: N, or best (default): the count of "
                        "k x (n_gpus - 1), k in 1, 4, 16 (at most 1,008) with the smallest path-model "
                        "estimate, per policy (NUNA 5.1 'the best-performing number of threadblocks')")


def tbs_for_work(args, n_gpus: int, algorithm: str = "direct"):
    """The largest threadblock count ``--tbs`` may build (for the work limits, before any work)."""
    if getattr(args, "tbs", None) == "best":
        from ..scenario import tbs_candidates
        return max(tbs_candidates(n_gpus, algorithm))
    return getattr(args, "tbs", None)


def add_scenario_args(p) -> None:
    """Add --collective/--plan, --size, --policy, --tbs, --nar-granularity, --algorithm."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--collective", metavar="NAME",
                     help=f"generated collective: {', '.join(COLLECTIVES)}")
    src.add_argument("--plan", metavar="FILE.xml", help="an MSCCL XML algorithm file instead of --collective")
    p.add_argument("--size", required=True, metavar="SIZE",
                   help="per-GPU buffer size, e.g. 100kB, 1MB (decimal), 1MiB (binary); a size the plan's "
                        "whole-element chunks do not divide is padded up (pad_bytes in the output)")
    p.add_argument("--policy", default="NAP+NAR", metavar="POLICY",
                   help=f"placement/routing: {', '.join(POLICIES)} (any case: nap+nar is NAP+NAR; default NAP+NAR)")
    add_tbs_arg(p)
    p.add_argument("--nar-granularity", type=number(1, 10**9, integer=True), default=None, metavar="G",
                   help="NAR domains (default: logical groups per GPU clamped to [2, 2*mesh_rows])")
    p.add_argument("--algorithm", default="direct", choices=ALGORITHMS,
                   help="generated plan algorithm (default direct, as in the paper)")
    p.add_argument("--placement", default=None, metavar="FILE.json",
                   help="a saved placement (nuna-jax optimize --save) instead of --policy")


def scenario_from_args(args, system: System, *, flits: bool = False) -> Scenario:
    """Scenario from parsed CLI args (see :func:`add_scenario_args`), within the work limits.

    With ``--plan`` and no explicit ``--gpus``, the system takes the file's
    GPU count.  The work (threadblocks, plan steps, pages, and with
    ``flits=True`` the simulator's flits) is checked before the traffic is
    built: from the inputs for a generated plan, from the parsed plan for an
    MSCCL file (read once: ``make_scenario`` gets the cached parse).
    """
    from ..plans import canonical_collective
    from ..scenario import Scenario, make_scenario
    lim = limits_from_args(args)
    size = parse_size(args.size)
    plan_file = getattr(args, "plan", None)
    if plan_file is not None:
        from ..msccl import load_msccl
        lim.check_file(plan_file, "--plan file")
        plan = load_msccl(plan_file, size)
        lim.check("gpus", plan.n_gpus, f"--plan {plan_file} (ngpus={plan.n_gpus})")
        if getattr(args, "gpus", None) is None and plan.n_gpus != system.n_gpus:
            system = system.replace(n_gpus=plan.n_gpus)
        work, source = plan_work(plan), f"--plan {plan_file} at --size {args.size}"
    else:
        coll = canonical_collective(args.collective)
        work = generated_plan_work(coll, args.algorithm, system.n_gpus, tbs_for_work(args, system.n_gpus,
                                                                                      args.algorithm), size)
        source = (f"{coll} ({args.algorithm}) of --size {args.size} on {system.n_gpus} GPUs"
                  + (f" with --tbs {args.tbs}" if args.tbs is not None else ""))
    check_traffic_work(lim, work, system, source, flits=flits)
    sc = make_scenario(system, collective=getattr(args, "collective", None), plan_file=plan_file,
                       size_bytes=size, policy=args.policy, tbs_per_gpu=(None if plan_file and args.tbs == "best" else args.tbs),
                       nar_granularity=args.nar_granularity, algorithm=args.algorithm)
    if getattr(args, "placement", None):
        from ..lowering import build_traffic
        from ..optim.io import load_placement
        lim.check_file(args.placement, "--placement file")
        pl = load_placement(args.placement, sc.system, sc.plan)
        try:
            t = build_traffic(sc.system, sc.plan, pl)
        except ValueError as e:         # e.g. a page the plan touches placed on no stack (-1)
            raise ValueError(f"placement file {args.placement!r}: {e}") from None
        sc = Scenario(sc.system, sc.plan, pl, t)
    return sc
