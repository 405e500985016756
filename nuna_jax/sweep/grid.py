"""A declarative sweep grid: named axes -> lists of values, their Cartesian product.

A grid is a base system (a preset name or a system TOML file) and an ordered
mapping ``axis -> values``.  Point ``i`` of the grid is the ``i``-th element of
the Cartesian product in C order (the last axis varies fastest); ``i`` is the
row key of the output (resume skips the keys already written).  docs/sweep.md
is the user-facing description of the TOML format.

Axes (every one optional; a missing axis takes its default):

* scenario axes: ``model`` (``closed_form``, ``path``, ``sim``), ``collective``,
  ``size`` (bytes, the collective's per-GPU buffer, as ``make_scenario``),
  ``policy``, ``algorithm``, ``tbs_per_gpu``, ``nar_granularity``, ``stat``
  (the closed form's alpha statistic: best, mean, worst), ``system`` (preset
  names or system TOML paths);
* hardware axes: any ``System`` field.  Continuous fields (pytree leaves)
  batch under ``vmap``; static fields (``n_gpus`` -- also spelt ``gpus`` --,
  ``n_io_ports``, ``n_dies``, ``mesh_cols``, ...) split the grid into groups of
  equal static shape (``sweep.groups``).

Everything is checked here, before any work: an unknown axis, an empty value
list, a value of the wrong type, an unknown name or an impossible system
raises ``ValueError`` naming the axis and the allowed values.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..limits import Limits
from ..placement import canonical_policy
from ..plans import ALGORITHMS, COLLECTIVES
from ..presets import from_toml, preset, preset_names
from ..system import System, validate

__all__ = ["MODELS", "SCENARIO_AXES", "Grid", "grid_from_dict", "load_grid", "continuous_fields",
           "static_fields"]

MODELS = ("closed_form", "path", "sim")
_MODEL_ALIASES = {"closed_form": "closed_form", "closedform": "closed_form", "closed": "closed_form",
                  "alpha_beta": "closed_form", "path": "path", "path_model": "path", "sim": "sim",
                  "simulator": "sim"}
STATS = ("best", "mean", "worst")
_ALIASES = {"gpus": "n_gpus", "size_bytes": "size", "tbs": "tbs_per_gpu"}
# scenario axis -> default value (None: the library's default)
SCENARIO_AXES = {"model": "path", "system": None, "collective": "allgather", "size": None,
                 "policy": "NAP+NAR", "algorithm": "direct", "tbs_per_gpu": "best", "nar_granularity": None,
                 "stat": "mean"}


@functools.cache   # System's fields are fixed: _canon asks once per grid value
def continuous_fields() -> tuple[str, ...]:
    """``System`` fields that are pytree leaves (vmap-able, differentiable)."""
    return tuple(f.name for f in dataclasses.fields(System) if f.metadata.get("pytree_node", True))


@functools.cache
def static_fields() -> tuple[str, ...]:
    """``System`` fields that fix shapes (a change re-traces); ``name`` excluded."""
    return tuple(f.name for f in dataclasses.fields(System)
                 if not f.metadata.get("pytree_node", True) and f.name != "name")


def _bool_fields() -> tuple[str, ...]:
    """Static ``System`` switches that are true / false (``read_response_links``)."""
    return tuple(f.name for f in dataclasses.fields(System) if f.type in (bool, "bool"))


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return (_is_int(v) or isinstance(v, (float, np.floating))) and not isinstance(v, bool)


def _expand(axis: str, spec, limits: Limits | None = None) -> list:
    """A value list from a list, or from a range table ``{start, stop, num, scale = "log"|"lin"}``
    (a range's ``num`` and a list's length checked against the ``axis_values`` limit first)."""
    lim = limits or Limits()
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"start", "stop", "num", "scale", "integer"}
        if unknown or not {"start", "stop", "num"} <= set(spec):
            raise ValueError(f"axis {axis!r}: a range is a table {{start, stop, num, scale = 'log'|'lin', "
                             f"integer = false}}, got keys {sorted(spec)}")
        a, b, n = spec["start"], spec["stop"], spec["num"]
        if not (_is_num(a) and _is_num(b)) or not _is_int(n) or n < 1:
            raise ValueError(f"axis {axis!r}: range needs numeric start/stop and an integer num >= 1, got {spec}")
        lim.check("axis_values", int(n), f"axis {axis!r} (a range of num={n})")
        scale = spec.get("scale", "lin")
        if scale == "log":
            if a <= 0 or b <= 0:
                raise ValueError(f"axis {axis!r}: a log range needs start, stop > 0, got {a}, {b}")
            vals = np.geomspace(float(a), float(b), int(n))
        elif scale == "lin":
            vals = np.linspace(float(a), float(b), int(n))
        else:
            raise ValueError(f"axis {axis!r}: scale must be 'log' or 'lin', got {scale!r}")
        if spec.get("integer", False):
            return [int(round(v)) for v in vals]
        return [float(v) for v in vals]
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Sequence):
        spec = [spec]
    lim.check("axis_values", len(spec), f"axis {axis!r} ({len(spec)} values)")
    vals = list(spec)
    if not vals:
        raise ValueError(f"axis {axis!r} has no values (give at least one)")
    return vals


@dataclasses.dataclass(frozen=True)
class Grid:
    """A checked grid: ``axes`` (ordered name -> tuple of canonical values) and the base system.

    ``base``: the System every point starts from (its fields are overridden by
    the hardware axes).  ``chunk``: points per evaluation chunk for the path
    model and the simulator (memory bound; the closed form sizes its own).
    """

    axes: tuple[tuple[str, tuple], ...]
    base: System
    chunk: int = 64
    closed_form_chunk: int = 1 << 22
    source: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a for a, _ in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for _, v in self.axes)

    @property
    def n_points(self) -> int:
        return int(math.prod(self.shape))

    def values(self, axis: str) -> tuple:
        return dict(self.axes)[axis]

    def digits(self, index) -> np.ndarray:
        """Per-axis value indices of point ``index`` (array-friendly), shape ``[..., n_axes]``."""
        return np.stack(np.unravel_index(np.asarray(index), self.shape), axis=-1) if self.axes else \
            np.zeros(np.shape(index) + (0,), np.int64)

    def point(self, index: int) -> dict:
        """Axis -> value of point ``index``, with defaults for the axes the grid does not name."""
        d = {k: v for k, v in SCENARIO_AXES.items()}
        for (name, vals), j in zip(self.axes, self.digits(int(index))):
            d[name] = vals[int(j)]
        return d

    def system_of(self, point: Mapping) -> System:
        """The (validated) System of a point: its ``system`` axis or the base, plus hardware axes."""
        base = self.base if point.get("system") is None else _load_system(point["system"])
        hw = {k: v for k, v in point.items() if k not in SCENARIO_AXES}
        return validate(base.replace(**hw)) if hw else base


def _load_system(spec: str) -> System:
    return from_toml(spec) if str(spec).endswith(".toml") else preset(spec)


def _canon(axis: str, v, parse_size: Callable | None):
    """Canonical value of one grid entry; ``ValueError`` naming the axis if it is the wrong type."""
    cont, stat = continuous_fields(), static_fields()
    if axis == "model":
        k = str(v).strip().lower().replace("-", "_")
        if k not in _MODEL_ALIASES:
            raise ValueError(f"axis 'model': unknown model {v!r}; choose one of {', '.join(MODELS)}")
        return _MODEL_ALIASES[k]
    if axis == "collective":
        k = str(v).strip().lower().replace("-", "").replace("_", "")
        if k not in COLLECTIVES:
            raise ValueError(f"axis 'collective': unknown collective {v!r}; choose one of {', '.join(COLLECTIVES)}")
        return k
    if axis == "algorithm":
        k = str(v).strip().lower()
        if k not in ALGORITHMS:
            raise ValueError(f"axis 'algorithm': unknown algorithm {v!r}; choose one of {', '.join(ALGORITHMS)}")
        return k
    if axis == "policy":
        if not isinstance(v, str):
            raise ValueError(f"axis 'policy': policies are names, got {v!r}")
        return canonical_policy(v)
    if axis == "stat":
        if v not in STATS:
            raise ValueError(f"axis 'stat': must be one of {', '.join(STATS)}, got {v!r}")
        return v
    if axis == "system":
        if not isinstance(v, str):
            raise ValueError(f"axis 'system': a preset name ({', '.join(preset_names())}) or a .toml path, got {v!r}")
        _load_system(v)
        return v
    if axis == "size":
        if isinstance(v, str):
            if parse_size is None:
                raise ValueError(f"axis 'size': give sizes in bytes (integers), got {v!r}")
            v = parse_size(v)
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not _is_int(v) or v <= 0:
            raise ValueError(f"axis 'size': sizes are whole numbers of bytes > 0, got {v!r}")
        from ..units import MAX_SIZE_BYTES
        if v > MAX_SIZE_BYTES:
            raise ValueError(f"axis 'size': {v} B is out of range: allowed 1 .. {MAX_SIZE_BYTES:.0e} B")
        return int(v)
    from ..presets import FIELD_RANGES
    lo, hi = FIELD_RANGES.get(axis, (None, None))
    if axis in _bool_fields():
        if not isinstance(v, bool):
            raise ValueError(f"axis {axis!r}: must be true or false, got {v!r}")
        return v
    if axis == "tbs_per_gpu" and isinstance(v, str):
        if v.strip().lower() != "best":
            raise ValueError(f"axis 'tbs_per_gpu': an integer >= 1 or \"best\", got {v!r}")
        return "best"
    if axis in ("tbs_per_gpu", "nar_granularity") or axis in stat:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not _is_int(v) or v < 1:
            raise ValueError(f"axis {axis!r}: must be an integer >= 1, got {v!r}")
        if lo is not None and not lo <= v <= hi:
            raise ValueError(f"axis {axis!r}: {v} is out of range: allowed [{lo}, {hi}]")
        return int(v)
    if axis in cont:
        if not _is_num(v) or not math.isfinite(float(v)):
            raise ValueError(f"axis {axis!r}: must be a finite number, got {v!r}")
        if lo is not None and not lo <= float(v) <= hi:
            raise ValueError(f"axis {axis!r}: {v!r} is out of range: allowed [{lo:g}, {hi:g}]")
        return float(v)
    known = sorted(set(SCENARIO_AXES) | set(cont) | set(stat) | set(_ALIASES))
    raise ValueError(f"unknown axis {axis!r}; known axes: {', '.join(known)}")


def grid_from_dict(data: Mapping[str, Any], *, parse_size: Callable | None = None, source: str = "",
                   limits: Limits | None = None) -> Grid:
    """A checked :class:`Grid` from a plain mapping (the parsed TOML).

    Layout: ``[sweep]`` (``system``: preset or system TOML, default table2;
    ``chunk``: points per path-model chunk) and ``[axes]`` (axis -> list of
    values or a range table).  ``parse_size`` turns size strings such as
    ``"1MB"`` into bytes (the CLI passes ``cli.common.parse_size``).  ``limits``
    (default :class:`~nuna_jax.limits.Limits`): values per axis, points of the
    grid and of the path model / simulator, distinct static systems, each
    checked before anything is expanded or validated one by one.
    """
    lim = limits or Limits()
    data = dict(data)
    unknown = set(data) - {"sweep", "axes"}
    if unknown:
        raise ValueError(f"unknown grid table(s) {sorted(unknown)}; a grid has [sweep] and [axes]")
    for table in ("sweep", "axes"):
        if table in data and not isinstance(data[table], Mapping):
            raise ValueError(f"[{table}] must be a table, got {type(data[table]).__name__} "
                             f"{str(data[table])[:40]!r}")
    head = dict(data.get("sweep", {}))
    bad = set(head) - {"system", "chunk", "closed_form_chunk", "description"}
    if bad:
        raise ValueError(f"unknown [sweep] key(s) {sorted(bad)}; known: chunk, closed_form_chunk, description, system")
    base = _load_system(str(head.get("system", "table2")))
    chunk = head.get("chunk", 64)
    cf_chunk = head.get("closed_form_chunk", 1 << 22)
    for k, v in (("chunk", chunk), ("closed_form_chunk", cf_chunk)):
        if not _is_int(v) or v < 1:
            raise ValueError(f"[sweep] {k} must be an integer >= 1, got {v!r}")
    raw = data.get("axes")
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError("a grid needs a non-empty [axes] table (axis = [values, ...])")
    axes, seen = [], set()
    for name, spec in raw.items():
        axis = _ALIASES.get(name, name)
        if axis in seen:
            raise ValueError(f"axis {axis!r} is given twice")
        seen.add(axis)
        vals = tuple(_canon(axis, v, parse_size) for v in _expand(axis, spec, lim))
        if len(set(vals)) != len(vals):
            raise ValueError(f"axis {axis!r} repeats a value: {list(vals)}")
        axes.append((axis, vals))
    if "size" not in seen:
        raise ValueError("a grid needs a 'size' axis (bytes, e.g. size = [100000, 1000000])")
    g = Grid(tuple(axes), base, int(chunk), int(cf_chunk), source)
    what = source or "the grid"
    lim.check("grid_points", g.n_points, f"{what} ({' x '.join(map(str, g.shape))} points)")
    models = g.values("model") if "model" in g.names else (SCENARIO_AXES["model"],)
    n_model = g.n_points // len(models) * sum(m != "closed_form" for m in models)
    lim.check("model_points", n_model, f"{what} ({n_model} path-model / simulator points)")
    static_axes = [a for a in g.names if a in static_fields() or a == "system"]
    lim.check("static_systems", math.prod(len(g.values(a)) for a in static_axes),
              f"{what} (distinct static systems of {', '.join(static_axes) or 'the base'})")
    _check_systems(g)
    return g


def _check_systems(g: Grid) -> None:
    """Validate every distinct static system of the grid, and every continuous value on the base."""
    names = g.names
    static_axes = [a for a in names if a in static_fields() or a == "system"]
    combos = itertools.product(*[g.values(a) for a in static_axes])
    for combo in combos:
        p = dict(SCENARIO_AXES)
        p.update(zip(static_axes, combo))
        try:
            s = g.system_of(p)
        except ValueError as e:
            desc = ", ".join(f"{a}={v}" for a, v in zip(static_axes, combo))
            raise ValueError(f"impossible system ({desc}): {e}") from None
        for a in names:
            if a in continuous_fields():
                for v in g.values(a):
                    try:
                        validate(s.replace(**{a: v}))
                    except ValueError as e:
                        raise ValueError(f"axis {a!r}: {e}") from None


def load_grid(path: str | Path, *, parse_size: Callable | None = None, limits: Limits | None = None) -> Grid:
    """Read and check a grid TOML file (format: docs/sweep.md) within ``limits``."""
    import tomllib
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"grid file {str(p)!r} does not exist")
    (limits or Limits()).check_file(p, "grid file")
    with p.open("rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{p}: invalid TOML: {e}") from None
        except UnicodeDecodeError as e:
            raise ValueError(f"{p}: not UTF-8 text (byte {e.start}): a grid is a TOML file") from None
        except RecursionError:
            raise ValueError(f"{p}: arrays or tables nested too deeply to be a grid") from None
    return grid_from_dict(data, parse_size=parse_size, source=str(p), limits=limits)
