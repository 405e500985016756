"""Named hardware presets and System construction (plain parameters, TOML files).

The one source of the NUNA Table 2 numbers is :func:`_table2_params`; the
``System`` dataclass has no defaults, so every system is built here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

if TYPE_CHECKING:   # System (flax) is imported where a System is built: preset_names() stays light
    from .system import System

__all__ = ["preset", "preset_names", "from_params", "from_toml", "load_system", "is_system_file", "table2_params",
           "system_origin", "FIELD_RANGES"]


# ---------------------------------------------------------------------------
def table2_params() -> dict:
    """NUNA Table 2 (section 5.3) and sections 3.1 / 5.1.

    Derivations (docs/model.md, "Table 2 system"):
    * hop: 10 cycles at 1.2 GHz = 8.333 ns.
    * mesh link: 10 TB/s bisection; the minimum bisection of a 24x6 mesh cuts
      6 bidirectional = 12 directed links -> 10e12 / 12 B/s = 833.3 B/ns per
      directed link.
    * HBM: 40 TB/s over 16 stacks = 2.5 TB/s = 2500 B/ns per stack.
    * HBM channels: a stack's channels attach to all 3 routers of its 3-column
      stretch of edge (24 columns / 8 stacks per edge): a stack's 2.5 TB/s
      cannot leave through one 833 B/ns link (docs/model.md, "HBM channels").
    * I/O: 7.2 TB/s over 144 ports = 50 GB/s = 50 B/ns per port, per direction.
    * 25 PFLOPS bf16 = 25e6 FLOP/ns; 100 PFLOPS fp4 = 100e6 FLOP/ns.
    """
    return dict(
        name="table2", mesh_cols=24, mesh_rows=6, n_dies=4, cus_per_router=4,
        n_hbm_stacks=16, hbm_routers_per_stack=3, n_io_ports=144, n_gpus=8, flit_bytes=256, page_bytes=4096,
        max_outstanding_per_cu=700, read_response_links=True,
        noc_clock_ghz=1.2, hop_cycles=10.0, die_crossing_ns=0.0, cu_to_noc_ns=120.0,
        link_bw_bytes_per_ns=10e3 / 12, hbm_bw_bytes_per_ns=40e3 / 16, hbm_latency_ns=150.0,
        port_bw_bytes_per_ns=7.2e3 / 144, switch_latency_ns=500.0,
        flops_bf16_per_ns=25e6, flops_fp4_per_ns=100e6,
    )


def _mono_params() -> dict:
    """Illustrative single-die socket, modelled on an H100-class part.

    One die, an 8x3 mesh with 4 CUs per router (96 CUs; H100 SXM has 132 SMs),
    8 HBM stacks sharing 3.35 TB/s (H100 has 5 active stacks; 8 keeps the two
    long edges symmetric), 18 ports of 25 GB/s per direction (NVLink 4: 18
    links, 450 GB/s per direction), 1.6 GHz NoC, 0.99 PFLOPS bf16 dense.
    Other latencies as Table 2.  Illustrative only: not calibrated to any
    product.
    """
    return dict(
        name="mono", mesh_cols=8, mesh_rows=3, n_dies=1, cus_per_router=4,
        n_hbm_stacks=8, hbm_routers_per_stack=2, n_io_ports=18, n_gpus=8, flit_bytes=256, page_bytes=4096,
        max_outstanding_per_cu=700, read_response_links=True,
        noc_clock_ghz=1.6, hop_cycles=10.0, die_crossing_ns=0.0, cu_to_noc_ns=120.0,
        link_bw_bytes_per_ns=512.0, hbm_bw_bytes_per_ns=3350.0 / 8, hbm_latency_ns=150.0,
        port_bw_bytes_per_ns=25.0, switch_latency_ns=500.0,
        flops_bf16_per_ns=0.99e6, flops_fp4_per_ns=0.99e6,
    )


def _quad_params() -> dict:
    """Illustrative four-die socket loosely modelled on an MI300X-class part:
    four compute dies in a row (a 16x4 global mesh, 256 CUs ~ MI300X's 304),
    8 HBM stacks of 0.66 TB/s (5.3 TB/s), 16 ports of 32 GB/s (~ 7 Infinity
    Fabric links at 64 GB/s bidirectional, rounded to an evenly spread count),
    a die-crossing penalty of 20 ns.  Illustrative only: not calibrated."""
    return dict(
        name="quad", mesh_cols=16, mesh_rows=4, n_dies=4, cus_per_router=4,
        n_hbm_stacks=8, hbm_routers_per_stack=4, n_io_ports=16, n_gpus=8, flit_bytes=256, page_bytes=4096,
        max_outstanding_per_cu=700, read_response_links=True,
        noc_clock_ghz=2.1, hop_cycles=10.0, die_crossing_ns=20.0, cu_to_noc_ns=120.0,
        link_bw_bytes_per_ns=1024.0, hbm_bw_bytes_per_ns=5300.0 / 8, hbm_latency_ns=150.0,
        port_bw_bytes_per_ns=32.0, switch_latency_ns=500.0,
        flops_bf16_per_ns=1.3e6, flops_fp4_per_ns=2.6e6,
    )


_PRESETS = {"table2": table2_params, "mono": _mono_params, "quad": _quad_params}


def preset_names() -> list[str]:
    """The names :func:`preset` accepts, sorted (each a full socket: times in ns, bandwidths in
    bytes/ns, sizes in bytes).

    >>> preset_names()
    ['mono', 'quad', 'table2']
    """
    return sorted(_PRESETS)


#: Accepted range (inclusive) of every System field read from a TOML file or parameters.
#: Wide enough for any real part; narrow enough that no derived time, bandwidth or
#: product overflows (checked before any model runs).
FIELD_RANGES = {
    "mesh_cols": (2, 4096), "mesh_rows": (1, 4096), "n_dies": (1, 4096), "cus_per_router": (1, 4096),
    "n_hbm_stacks": (2, 8192), "hbm_routers_per_stack": (1, 4096), "n_io_ports": (2, 1 << 16), "n_gpus": (1, 1 << 20),
    "flit_bytes": (1, 1 << 20), "page_bytes": (1, 1 << 30), "max_outstanding_per_cu": (1, 1 << 20),
    "read_response_links": (False, True),
    "noc_clock_ghz": (1e-3, 1e3), "hop_cycles": (1e-3, 1e6), "die_crossing_ns": (0.0, 1e9),
    "cu_to_noc_ns": (0.0, 1e9), "link_bw_bytes_per_ns": (1e-6, 1e9), "hbm_bw_bytes_per_ns": (1e-6, 1e9),
    "hbm_latency_ns": (0.0, 1e9), "port_bw_bytes_per_ns": (1e-6, 1e9), "switch_latency_ns": (0.0, 1e9),
    "flops_bf16_per_ns": (1e-6, 1e15), "flops_fp4_per_ns": (1e-6, 1e15),
}


#: Static on/off modelling switches (TOML ``true`` / ``false``; ``FIELD_RANGES`` lists them as (False, True)).
_BOOL_FIELDS = ("read_response_links",)


def _coerce(params: Mapping[str, Any]) -> dict:
    """Plain parameters -> System keyword arguments, each checked for type and range.

    ``ValueError`` names the field, the bad value and the allowed range.
    """
    from .system import System
    fields = {f.name: f for f in dataclasses.fields(System)}
    unknown = sorted(str(k) for k in set(params) - set(fields))
    if unknown:
        raise ValueError(f"unknown System field(s): {', '.join(unknown)[:300]}; known: {', '.join(sorted(fields))}")
    out = {}
    for k, v in params.items():
        static = not fields[k].metadata.get("pytree_node", True)
        if k == "name":
            if not isinstance(v, str) or not v or len(v) > 200:
                raise ValueError(f"name must be a non-empty string of at most 200 characters, got {str(v)[:60]!r}")
            out[k] = v
            continue
        lo, hi = FIELD_RANGES.get(k, (None, None))
        if k in _BOOL_FIELDS:
            if not isinstance(v, (bool, np.bool_)):
                raise ValueError(f"{k} must be true or false, got {str(v)[:60]!r}")
            out[k] = bool(v)
            continue
        if static:
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            ok = isinstance(v, (int, np.integer)) and not isinstance(v, bool)
            if not ok or (lo is not None and not lo <= v <= hi):
                raise ValueError(f"{k} must be an integer in [{lo}, {hi}], got {str(v)[:60]}")
            v = int(v)
        else:
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise ValueError(f"{k} must be a number in [{lo:g}, {hi:g}], got {str(v)[:60]!r}")
            try:
                f = float(v)
            except OverflowError:
                f = float("inf")
            if not np.isfinite(f) or (lo is not None and not lo <= f <= hi):
                raise ValueError(f"{k} must be a finite number in [{lo:g}, {hi:g}], got {str(v)[:60]}")
            v = f
        out[k] = v
    return out


def _stretch_rule(params: dict, given: Mapping[str, Any]) -> dict:
    """Unless ``hbm_routers_per_stack`` is given, attach each stack to every router of its
    stretch of edge (the presets' rule, docs/model.md "HBM channels"), for the mesh and stack
    count in ``params``."""
    if "hbm_routers_per_stack" not in given:
        try:
            params["hbm_routers_per_stack"] = max(1, int(params["mesh_cols"]) // max(1, int(params["n_hbm_stacks"]) // 2))
        except (TypeError, ValueError, OverflowError):
            pass  # _coerce reports the bad mesh_cols / n_hbm_stacks
    return params


def _build(params: dict, given: Mapping[str, Any]) -> System:
    """The validated System of ``params`` (``given``: the fields the caller set)."""
    from .system import System, validate
    return validate(System(**_coerce(_stretch_rule(params, given))))


def from_params(**params) -> System:
    """Build and validate a System from plain keyword parameters.

    Missing static fields are taken from the Table 2 preset; a missing
    ``hbm_routers_per_stack`` is the full stretch of the given mesh.  Units are the
    field's (:class:`~nuna_jax.system.System`): times in ns, bandwidths in bytes/ns, sizes in
    bytes, the NoC clock in GHz; every value is range-checked (:data:`FIELD_RANGES`).

    >>> from_params(n_gpus=4, switch_latency_ns=250.0).switch_latency_ns
    250.0
    """
    base = table2_params()
    base["name"] = "custom"
    base.update(params)
    return _build(base, params)


def preset(name: str = "table2", /, **overrides) -> System:
    """A named preset (``table2``, ``mono``, ``quad``), optionally overridden.

    ``table2`` is the NUNA Table 2 socket (NUNA section 5.3): a 24 x 6 mesh of 144 routers on 4
    dies, 576 CUs, 16 HBM stacks, 144 I/O ports of 50 bytes/ns, a 500 ns switch, 8 GPUs.
    ``overrides`` are System fields in their units (ns, bytes/ns, bytes, GHz, cycles; see
    :class:`~nuna_jax.system.System`), each range-checked (:data:`FIELD_RANGES`).

    >>> preset("table2", n_gpus=64).n_gpus
    64
    >>> preset("table2", port_bw_bytes_per_ns=100.0).port_bw_bytes_per_ns   # bytes/ns
    100.0
    """
    key = str(name).lower()
    if key not in _PRESETS:
        raise ValueError(f"unknown system preset {name!r}; choose one of {', '.join(preset_names())}")
    params = _PRESETS[key]()
    params.update(overrides)
    return _build(params, overrides)


def _read_toml(path: str | Path) -> tuple[Path, dict]:
    """(path, the system's keys) of a TOML system file: top level or the ``[system]`` table.
    ``ValueError`` names the file for an unreadable file or invalid TOML."""
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # pragma: no cover
        import tomli as tomllib
    p = Path(path)
    if not p.exists():
        raise ValueError(f"system file {str(p)!r} does not exist")
    if not p.is_file():
        raise ValueError(f"system file {str(p)!r} is not a regular file")
    raw = p.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{p}: invalid TOML: {e}") from None
    except RecursionError:
        raise ValueError(f"{p}: invalid TOML: nested too deeply") from None
    if "system" in data:
        if not isinstance(data["system"], dict):
            raise ValueError(f"{p}: [system] must be a table, got {type(data['system']).__name__}")
        extra = sorted(set(data) - {"system"})
        if extra:
            raise ValueError(f"{p}: keys outside [system]: {', '.join(extra)[:200]}")
        data = data["system"]
    return p, dict(data)


def _file_name(p: Path) -> str:
    """The name a TOML system takes when it has no ``name`` key: the file's stem (at most 200 characters)."""
    return (p.stem or p.name or "custom")[:200]


def from_toml(path: str | Path) -> System:
    """Read a System from TOML: an optional ``base = "<preset>"`` plus field overrides.

    Keys may sit at top level or under a ``[system]`` table.  The result is
    named by its own ``name`` key, else after the file's stem (``mine.toml``
    -> ``mine``), never after its base: a changed ``table2`` is not
    ``table2`` (:func:`system_origin` records the base and the file beside
    the name).  Without ``base`` the fields not given are Table 2's
    (:func:`from_params`).  ``ValueError`` names the file and the field for
    every error (unreadable file, invalid TOML, unknown field, wrong type,
    out of range).  Field values are in the field's units (ns, bytes/ns, bytes, GHz).

    Example (``slow.toml``: ``base = "table2"`` and ``switch_latency_ns = 1000.0``)::

        s = from_toml("slow.toml")        # named "slow"; s.switch_latency_ns == 1000.0 ns
    """
    p, data = _read_toml(path)
    base = data.pop("base", None)
    data.setdefault("name", _file_name(p))
    try:
        if base is not None:
            if not isinstance(base, str):
                raise ValueError(f"base must be a preset name ({', '.join(preset_names())}), got {base!r}")
            return preset(base, **data)
        return from_params(**data)
    except ValueError as e:
        raise ValueError(f"{p}: {e}") from None


def system_origin(spec: str | None) -> dict:
    """Where a ``--system`` value's System comes from, for reports beside its name:
    ``{"system_base": ..., "system_file": ...}``.  A preset: no base, no file.  A TOML file:
    its ``base`` (``"table2"`` when it has none: :func:`from_params` fills the rest from
    Table 2) and its path as given.  ``ValueError`` as :func:`from_toml`."""
    spec = spec or "table2"
    if not is_system_file(spec):
        return {"system_base": None, "system_file": None}
    _, data = _read_toml(spec)
    base = data.get("base", "table2")
    return {"system_base": str(base).lower() if isinstance(base, str) else None, "system_file": str(spec)}


def is_system_file(spec: str) -> bool:
    """Whether a ``--system`` value names a file (``*.toml``, a path, or anything on disk) not a preset."""
    import os
    spec = str(spec)
    if spec.lower() in _PRESETS:
        return False
    return spec.endswith(".toml") or os.sep in spec or os.path.exists(spec)


def load_system(spec: str | None, n_gpus: int | None = None) -> System:
    """Resolve a CLI ``--system`` value: a preset name or a path to a TOML file."""
    spec = spec or "table2"
    if is_system_file(spec):
        s = from_toml(spec)
    else:
        s = preset(spec)
    if n_gpus is not None:
        from .system import validate
        s = validate(s.replace(n_gpus=int(n_gpus)))
    return s
