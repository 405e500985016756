"""Sweep rows as labelled data: a ``pandas.DataFrame``, one row per grid point in grid order.

Why a DataFrame and not an xarray Dataset over the grid's axes: a sweep's rows are
"long" records (every point carries its axis values and four results), which is what
the ``.csv`` and ``.parquet`` files hold row for row, what ``groupby``/``pivot`` and
every plotting library take, and what a grid mixing models (``closed_form`` rows with
``n_flows = -1`` beside path-model rows) or a ``tbs_per_gpu`` axis of ``[1, 4, "best"]``
stays readable as.  A Dataset is one call away where a user wants one
(``df.set_index(list(grid.names)).to_xarray()``), and xarray needs pandas anyway.

One set of column types for every way of getting the rows (:func:`typed_axis`,
:func:`read_sweep`): ``index`` int64; an axis column is int64 (integers), float64
(numbers), bool (true / false) or text (names, and an axis mixing kinds, such as
``tbs_per_gpu = [1, "best"]``, as the CSV writes it); ``time_ns`` and
``lower_bound_ns`` float64 in ns; ``n_flows`` and ``tbs_used`` int64.

**Floats at the precision they carry**: the closed form and the path model compute in
float32 (JAX's default); their times are kept as the shortest decimal that identifies
the float32 value (about 7 significant digits, :func:`carried`), held in a float64
column, so that ``2507.123`` is written, read back and compared as ``2507.123`` in
memory, in the CSV and in the Parquet file alike.  The simulator's times are float64
and kept as they are.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

__all__ = ["RESULT_DTYPES", "carried", "text_column", "typed_axis", "frame_from_columns", "parse_text_column",
           "read_sweep", "PARQUET_META_KEY"]

#: the result columns and their dtypes (docs/sweep.md "Output")
RESULT_DTYPES = {"time_ns": np.float64, "lower_bound_ns": np.float64, "n_flows": np.int64, "tbs_used": np.int64}
PARQUET_META_KEY = b"nuna_jax_sweep"


def carried(x) -> np.ndarray:
    """``x`` as float64; a float32 (or float16) array becomes the float64 of the shortest decimal
    that identifies each value at its own precision (numpy's shortest repr), others are widened."""
    a = np.asarray(x)
    if a.dtype in (np.float32, np.float16):
        return a.astype(str).astype(np.float64)
    return a.astype(np.float64)


def _kind(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    return "str"


def text_of(v) -> str:
    """How a value is written to the CSV (and what an axis of mixed kinds holds): floats as the
    shortest repr of their float64, integers as integers, ``None`` as the empty string."""
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, np.integer):
        return str(int(v))
    return str(v)


def text_column(values) -> list[str]:
    """:func:`text_of` of every value of a column, vectorized for numeric and boolean arrays
    (numpy's float64 -> str is the shortest repr, as ``repr(float)``)."""
    a = np.asarray(values)
    if a.dtype.kind == "f":
        return a.astype(np.float64).astype(str).tolist()
    if a.dtype.kind in "iu":
        return a.astype(np.int64).astype(str).tolist()
    if a.dtype.kind == "b":
        return np.where(a, "True", "False").tolist()
    return [text_of(v) for v in values]


def typed_axis(values) -> np.ndarray:
    """An axis's values as one typed numpy array (the column type of that axis)."""
    vals = list(values)
    kinds = {_kind(v) for v in vals}
    if kinds == {"bool"}:
        return np.asarray(vals, bool)
    if kinds == {"int"}:
        return np.asarray(vals, np.int64)
    if kinds <= {"int", "float"}:
        return np.asarray(vals, np.float64)
    return np.asarray([text_of(v) for v in vals], dtype=str)


def parse_text_column(vals: list[str]) -> np.ndarray:
    """A CSV column back to its type: int64, else float64, else bool (``True`` / ``False``), else text
    (numpy's parsers first, Python's where numpy refuses a spelling Python reads)."""
    arr = np.asarray(vals, dtype=str)
    for conv in (lambda: arr.astype(np.int64), lambda: np.asarray([int(v) for v in vals], np.int64),
                 lambda: np.where(arr == "", "nan", arr).astype(np.float64),
                 lambda: np.asarray([float(v) if v else math.nan for v in vals], np.float64)):
        try:
            return conv()
        except (ValueError, OverflowError):
            pass
    if vals and set(vals) <= {"True", "False"}:
        return np.asarray([v == "True" for v in vals], bool)
    return np.asarray(vals, dtype=str)


def frame_from_columns(cols: dict, columns: list[str] | None = None, attrs: dict | None = None):
    """A DataFrame of ``cols`` (name -> 1-d array) sorted by ``index``, with a fresh 0..n-1 index."""
    import pandas as pd
    names = list(columns) if columns is not None else list(cols)
    if "index" in cols and len(cols["index"]):
        order = np.argsort(np.asarray(cols["index"], np.int64), kind="stable")
        cols = {k: np.asarray(cols[k])[order] for k in names}
    df = pd.DataFrame({k: np.asarray(cols[k]) for k in names})
    for k, dt in RESULT_DTYPES.items():
        if k in df.columns and len(df):
            df[k] = df[k].astype(dt)
    if attrs:
        df.attrs.update(attrs)
    return df


def _csv_columns(path: Path) -> tuple[list[str], dict]:
    from .writer import read_rows
    header, rows = read_rows(path)
    if not header:
        return [], {}
    return header, {name: parse_text_column([r[k] for r in rows]) for k, name in enumerate(header)}


def read_sweep(path: str | Path):
    """The rows of a sweep output (``.csv``, ``.npz`` or ``.parquet``) as a DataFrame in grid order,
    with the column types of the in-memory result (``df.attrs``: ``sweep_magic``, ``provenance``)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"sweep output {str(p)!r} does not exist")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq
        t = pq.read_table(p)
        meta = json.loads((t.schema.metadata or {}).get(PARQUET_META_KEY, b"{}"))
        df = t.to_pandas()
        return frame_from_columns({k: df[k].to_numpy() for k in df.columns}, list(df.columns),
                                  {"sweep_magic": meta.get("sweep_magic"), "provenance": meta.get("provenance", [])})
    if p.suffix == ".npz":
        with np.load(p, allow_pickle=False) as z:
            cols = {k: z[k] for k in z.files if z[k].ndim == 1}
            magic = str(z["sweep_magic"]) if "sweep_magic" in z.files else None
            prov = [{"nuna_jax_version": str(z["nuna_jax_version"]), "git_commit": str(z["git_commit"]) or None}] \
                if "nuna_jax_version" in z.files else []
        return frame_from_columns(cols, list(cols), {"sweep_magic": magic, "provenance": prov})
    from .writer import read_provenance
    header, cols = _csv_columns(p)
    first = p.open("r").readline().rstrip("\n")
    return frame_from_columns(cols, header, {"sweep_magic": first if first.startswith("#") else None,
                                             "provenance": read_provenance(p)})
