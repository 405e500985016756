"""Stream sweep rows to a file as chunks finish; resume from what is there.

Outputs (docs/sweep.md): ``FILE.csv``, ``FILE.npz`` or ``FILE.parquet`` (pyarrow), or none
(``out=None``: rows kept in memory only, nothing written, no lock).

Stream layout: a first line ``# nuna-jax sweep grid=<hash> points=<n>``, a second
``# nuna_jax_version=<v> git_commit=<sha|unknown>`` (``nuna_jax.provenance``; a resume by
other code appends ``# resumed: nuna_jax_version=... git_commit=...`` before its rows), a
header line, then one row per grid point in the order the chunks finished, keyed by the
``index`` column (the point's position in the grid).  Readers skip every ``#`` line.  Each
chunk is flushed and fsync'ed, so a killed sweep leaves whole rows plus at most one partial
last line.  On resume the partial line is cut off, every recovered row is checked (column
count, an integer index inside the grid, numbers in the result columns, no index twice;
anything else is refused naming the file and line), the indices present are skipped, and
the rest is appended: no duplicate, no lost row, whatever byte the kill came at.

The hash (:func:`grid_fingerprint`) covers the grid's axes and values, every field of its
base system and of each ``system`` axis value, the package version and the code of the
model (:func:`model_code_hash`): rows of another grid, other hardware or another model are
never resumed into a file.

``.csv`` output: the stream is the file; when the last point is in, the rows are rewritten
in grid (index) order (to a temporary file, then renamed), the ``#`` lines kept on top.

One writer at a time: the writing process holds an exclusive ``fcntl`` lock
on ``<stream>.lock`` from the first read to the last write, so a second
sweep on the same output fails at once (``ValueError``, exit 2 in the CLI).
A file that is not a sweep output is never written over (unless the caller
removes it first: the CLI's ``--force``).

``.npz`` / ``.parquet`` output: rows stream to ``FILE.npz.rows.csv`` (``FILE.parquet.rows.csv``)
and the typed columns (``sweep.frame``), sorted by index, are written to ``FILE`` at the end
(to a temporary file, then renamed), with the writer's ``nuna_jax_version``, ``git_commit``
and ``sweep_magic`` (the grid line): 0-d string entries of the npz, the ``nuna_jax_sweep``
key (JSON) of the Parquet schema's metadata.  When every point is in, the stream is removed;
a rerun on a finished output of the same grid has nothing to do.
"""

from __future__ import annotations

import csv
import fcntl
import functools
import hashlib
import io
import json
import math
import os
from pathlib import Path

import numpy as np

from .frame import text_column

__all__ = ["RowWriter", "FORMATS", "grid_fingerprint", "model_code_files", "model_code_hash", "read_rows", "read_provenance",
           "provenance_line", "stream_path", "check_format"]


MAGIC = "# nuna-jax sweep"


#: output suffixes (``.parquet`` needs pyarrow: ``pip install 'nuna_jax[data]'``)
FORMATS = (".csv", ".npz", ".parquet")
_BINARY = (".npz", ".parquet")


def check_format(out) -> None:
    """``ValueError`` for an output suffix other than :data:`FORMATS`, or ``.parquet`` without pyarrow."""
    suf = Path(out).suffix
    if suf not in FORMATS:
        raise ValueError(f"--out must end in .csv, .npz or .parquet, got {str(out)!r}")
    if suf == ".parquet":
        try:
            import pyarrow  # noqa: F401
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ValueError(f"--out {str(out)!r}: writing Parquet needs pyarrow "
                             "(pip install 'nuna_jax[data]'), or choose .csv / .npz") from None


#: parts of the package that cannot change a row: the command line, pictures, the optimizer, the NoC
#: simulator, the end-to-end model above the collectives, progress bars, provenance
_NOT_MODEL_DIRS = ("cli", "plots", "optim", "noc", "e2e", "models/llm")
_NOT_MODEL_FILES = ("__main__.py", "progress.py", "provenance.py", "astra.py")


@functools.lru_cache(maxsize=1)
def model_code_files() -> tuple[str, ...]:
    """The package's modules a sweep row can depend on (repository paths): every ``nuna_jax`` file but
    those of :data:`_NOT_MODEL_DIRS` / :data:`_NOT_MODEL_FILES` -- the scenario builder, placement,
    path model, closed form, simulator, presets, the sweep itself ...  (A directory rule rather than
    the import graph: conservative, an edit anywhere below the command line stops a resume.)"""
    pkg = Path(__file__).resolve().parents[1]
    out = []
    for f in sorted(pkg.rglob("*.py")):
        rel = f.relative_to(pkg).as_posix()
        if rel in _NOT_MODEL_FILES or any(rel.startswith(d + "/") for d in _NOT_MODEL_DIRS):
            continue
        out.append(f"nuna_jax/{rel}")
    return tuple(out)


def _code(path: Path) -> str:
    """A module's code without comments and docstrings (its AST with docstrings dropped)."""
    import ast
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


@functools.lru_cache(maxsize=1)
def model_code_hash() -> str:
    """One hash of the code of :func:`model_code_files`, comments and docstrings left out (an edit of
    a comment or docstring does not stop a resume; any other edit does)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for f in model_code_files():
        h.update(f.encode() + b"\0" + _code(root / f).encode() + b"\0")
    return h.hexdigest()[:16]


def grid_fingerprint(grid) -> str:
    """A short hash of what a row depends on: the grid's axes and values, every field of the base
    system and of each ``system`` axis value, the package version and the model's code
    (:func:`model_code_hash`); a file of a different hash is never resumed."""
    from .. import __version__
    from ..provenance import system_params
    from .grid import _load_system

    def params(s):
        return {**system_params(s), "n_gpus": s.n_gpus}
    systems = {"base": params(grid.base)}
    if "system" in grid.names:
        for v in grid.values("system"):
            systems[str(v)] = params(_load_system(v))
    desc = json.dumps({"axes": [[a, list(v)] for a, v in grid.axes], "systems": systems,
                       "nuna_jax_version": __version__, "model_code": model_code_hash()},
                      sort_keys=True, default=str)
    return hashlib.sha256(desc.encode()).hexdigest()[:16]


def stream_path(out: str | Path) -> Path:
    """Where rows stream to: ``out`` itself for CSV, ``out + '.rows.csv'`` for ``.npz`` / ``.parquet``."""
    out = Path(out)
    return out.with_name(out.name + ".rows.csv") if out.suffix in _BINARY else out


def _tmp_path(out: Path) -> Path:
    """The temporary file a finished output is written to before it is renamed over ``out``."""
    return out.with_name(out.name + ".tmp" + out.suffix)


def provenance_line() -> str:
    """``nuna_jax_version=<v> git_commit=<sha|unknown>`` of this process (``nuna_jax.provenance``)."""
    from ..provenance import provenance
    p = provenance()
    return f"nuna_jax_version={p['nuna_jax_version']} git_commit={p['git_commit'] or 'unknown'}"


def read_provenance(path: str | Path) -> list[dict]:
    """The provenance records of a sweep CSV, in file order: the writer's, then one per resume by other
    code (``{"nuna_jax_version": ..., "git_commit": ... or None}``)."""
    out = []
    for ln in Path(path).read_text().split("\n"):
        body = ln[1:].strip() if ln.startswith("#") else ""
        body = body[len("resumed:"):].strip() if body.startswith("resumed:") else body
        if body.startswith("nuna_jax_version="):
            kv = dict(x.split("=", 1) for x in body.split() if "=" in x)
            c = kv.get("git_commit")
            out.append({"nuna_jax_version": kv.get("nuna_jax_version"), "git_commit": None if c == "unknown" else c})
    return out


def read_rows(path: str | Path) -> tuple[list[str], list[list[str]]]:
    """(header, complete rows) of a sweep CSV; a partial last line is ignored."""
    text = Path(path).read_text()
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]          # the last line was cut mid-write
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    if not lines:
        return [], []
    rows = list(csv.reader(lines))
    header, body = rows[0], rows[1:]
    return header, [r for r in body if len(r) == len(header)]


class RowWriter:
    """Append-only stream of sweep rows; ``done`` holds the indices already present.

    Only the writing process (``active``) touches the file; every process
    reads it, so that all of them skip the same points.  ``out=None``: no file
    at all, the rows are kept in memory (:meth:`columns_in_memory`).
    ``keep``: also keep this run's rows in memory when there is a file.
    """

    def __init__(self, out: str | Path | None, columns: list[str], fingerprint: str, n_points: int,
                 active: bool = True, keep: bool = False):
        self.out = None if out is None else Path(out)
        self.path = None if out is None else stream_path(out)
        self.columns = list(columns)
        self.active = active
        self.magic = f"# nuna-jax sweep grid={fingerprint} points={n_points}"
        self.done = np.zeros(0, np.int64)
        self.n_points = int(n_points)
        self.keep = keep or out is None
        self._mem: list[dict] = []
        self._fh = None
        self._lock = None
        self._finished = False           # a finished .npz / .parquet of this grid: nothing to write
        if self.out is None:
            return
        check_format(self.out)
        if active:
            self._take_lock()
            tmp = _tmp_path(self.out)
            if tmp.exists():             # a finished file was being renamed into place when a run died
                tmp.unlink()
        if self.out.suffix in _BINARY and self.out.exists() and not self.path.exists():
            self.done = self._finished_binary()
            self._finished = True
            return
        if self.path.exists() and self.path.stat().st_size:
            with self.path.open("rb") as fh:
                head = fh.read(len(self.magic) + 1)
            if b"\n" not in head and self.magic.encode().startswith(head):
                if active:
                    self.path.write_bytes(b"")       # killed while writing the first line: start afresh
                return
            first = head.split(b"\n")[0].decode("utf-8", "replace")
            if b"\n" not in head:
                with self.path.open("rb") as fh:
                    first = fh.readline().rstrip(b"\n").decode("utf-8", "replace")
            self._check_magic(self.path, first if first.startswith(MAGIC) else None)
            try:
                self.done = self._recovered_indices()
            except ValueError:
                self.close_lock()
                raise

    def _take_lock(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        for _ in range(5):
            fh = lock.open("a")
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                raise ValueError(f"another nuna-jax sweep is writing {self.out} (it holds {lock}); wait for it "
                                 "or choose another --out") from None
            try:                 # the holder removes the lock file as it lets go: ours must still be it
                same = os.stat(lock).st_ino == os.fstat(fh.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._lock = (fh, lock)
                return
            fh.close()
        raise ValueError(f"cannot lock {lock}: another nuna-jax sweep keeps replacing it")

    def close_lock(self) -> None:
        if self._lock is not None:
            fh, lock = self._lock
            try:
                lock.unlink()
            except OSError:
                pass
            fh.close()       # closing releases the flock
            self._lock = None

    def _check_magic(self, path: Path, magic: str | None) -> None:
        """Refuse (lock released) a file that is no sweep output (``magic`` None) or another grid's."""
        if magic is None:
            self.close_lock()
            raise ValueError(f"{path} is not a nuna-jax sweep output; refusing to write over it "
                             "(remove it, choose another --out, or pass --force)")
        if magic != self.magic:
            self.close_lock()
            raise ValueError(f"{path} holds rows of a different grid, system, model or nuna_jax version "
                             f"({magic!r}); remove it or choose another --out")

    def _finished_binary(self) -> np.ndarray:
        """Indices of a finished ``.npz`` / ``.parquet`` of this grid (all points); refuse any other file."""
        magic, idx = None, None
        try:
            if self.out.suffix == ".npz":
                with np.load(self.out, allow_pickle=False) as z:
                    magic = str(z["sweep_magic"]) if "sweep_magic" in z.files else None
                    idx = np.asarray(z["index"], np.int64) if "index" in z.files else None
            else:
                import pyarrow.parquet as pq
                from .frame import PARQUET_META_KEY
                meta = pq.read_schema(self.out).metadata or {}
                if PARQUET_META_KEY in meta:
                    magic = json.loads(meta[PARQUET_META_KEY]).get("sweep_magic")
                    idx = np.asarray(pq.read_table(self.out, columns=["index"])["index"].to_numpy(), np.int64)
        except Exception:            # not an npz / parquet file at all
            magic, idx = None, None
        self._check_magic(self.out, magic if idx is not None else None)
        return np.sort(idx)

    def _recovered_indices(self) -> np.ndarray:
        """Check every complete row of the stream; the sorted indices it holds."""
        text = self.path.read_bytes().decode("utf-8", "replace")
        lines = text.split("\n")
        if not text.endswith("\n"):
            lines = lines[:-1]                       # the last line was cut mid-write: dropped
        header, idx, seen = None, [], set()
        res_cols = None
        for no, ln in enumerate(lines, start=1):
            if not ln or ln.startswith("#"):
                continue
            row = next(csv.reader([ln]))
            if header is None:
                header = row
                if header != self.columns:
                    raise ValueError(f"{self.path}:{no}: columns {header} differ from this grid's {self.columns}")
                res_cols = [k for k, c in enumerate(header) if c in ("time_ns", "lower_bound_ns", "n_flows", "tbs_used")]
                continue
            where = f"{self.path}:{no}"
            if len(row) != len(header):
                raise ValueError(f"{where}: {len(row)} fields where the header has {len(header)}; "
                                 "the file was changed by hand (remove the line)")
            try:
                i = int(row[0])
            except ValueError:
                raise ValueError(f"{where}: index {row[0][:40]!r} is not an integer") from None
            if not 0 <= i < self.n_points:
                raise ValueError(f"{where}: index {i} is outside this grid's 0 .. {self.n_points - 1}")
            if i in seen:
                raise ValueError(f"{where}: index {i} appears twice; the file was not written by one "
                                 "nuna-jax sweep (remove the duplicate)")
            for k in res_cols:
                v = row[k]
                try:
                    x = float(v) if v else math.nan
                except ValueError:
                    raise ValueError(f"{where}: {header[k]} {v[:40]!r} is not a number") from None
                if header[k] == "time_ns" and not (math.isfinite(x) and x >= 0):
                    raise ValueError(f"{where}: time_ns {v!r} is not a finite time")
            seen.add(i)
            idx.append(i)
        return np.sort(np.asarray(idx, np.int64))

    def open(self) -> None:
        """Cut a partial last line, write magic + provenance + header if new (a ``# resumed:`` line when
        other code resumes the file); then rows can be appended."""
        if not self.active or self._finished or self.out is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        prov = provenance_line()
        if fresh:
            self._fh = self.path.open("a", newline="")
            self._fh.write(self.magic + "\n# " + prov + "\n" + ",".join(self.columns) + "\n")
            self._flush()
            return
        data = self.path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            with self.path.open("r+b") as fh:
                fh.truncate(keep)
        text = data[:keep].decode()
        same_code = any(ln.startswith("#") and ln.endswith(" " + prov) for ln in text.split("\n"))
        self._fh = self.path.open("a", newline="")
        if not same_code:                                 # the rows from here on come from other code
            self._fh.write("# resumed: " + prov + "\n")
        if not read_rows(self.path)[0]:
            self._fh.write(",".join(self.columns) + "\n")
        self._flush()

    def _flush(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def todo_mask(self, index: np.ndarray) -> np.ndarray:
        """True where a point is not in the file yet."""
        return ~np.isin(index, self.done)

    def write(self, cols: dict) -> int:
        """Append rows (``cols``: column -> sequence, all the same length); returns rows written."""
        n = len(cols["index"])
        if n == 0:
            return 0
        if self.active and self._fh is not None:
            text = [text_column(cols[c]) for c in self.columns]
            names = [t for c, t in zip(self.columns, text) if np.asarray(cols[c]).dtype.kind not in "fiub"]
            if any(ch in v for t in names for v in t for ch in ',"\r\n'):
                buf = io.StringIO()         # a text value that needs quoting: the csv module writes it
                csv.writer(buf, lineterminator="\n").writerows(zip(*text))
                self._fh.write(buf.getvalue())
            else:
                self._fh.write("".join(",".join(r) + "\n" for r in zip(*text)))
            self._flush()
        if self.keep:
            self._mem.append({c: np.asarray(cols[c]) for c in self.columns})
        self.done = np.union1d(self.done, np.asarray(cols["index"], np.int64))
        return n

    def columns_in_memory(self) -> dict:
        """This run's rows kept in memory (``keep``), column -> array, in the order written."""
        if not self._mem:
            return {}
        return {c: np.concatenate([m[c] for m in self._mem]) for c in self.columns}

    def close(self) -> None:
        """Stop writing; a complete CSV is put in grid order, an ``.npz`` / ``.parquet`` written (its
        stream removed once complete); the lock is released."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self.active and not self._finished and self.out is not None and self.path.exists():
            from ..provenance import provenance
            if self.out.suffix == ".csv":
                if len(self.done) == self.n_points:
                    _sort_csv(self.out)
            else:
                from .frame import parse_text_column
                header, rows = read_rows(self.path)
                rows.sort(key=lambda r: int(r[0]))
                cols = {name: parse_text_column([r[k] for r in rows]) for k, name in enumerate(header)}
                p = provenance()
                tmp = _tmp_path(self.out)
                if self.out.suffix == ".npz":
                    with tmp.open("wb") as fh:
                        np.savez(fh, **cols, nuna_jax_version=np.asarray(p["nuna_jax_version"]),
                                 git_commit=np.asarray(p["git_commit"] or ""), sweep_magic=np.asarray(self.magic))
                        fh.flush()
                        os.fsync(fh.fileno())
                else:
                    _write_parquet(tmp, header, cols, {"sweep_magic": self.magic, "provenance": [p],
                                                       "stream_provenance": read_provenance(self.path)})
                os.replace(tmp, self.out)
                if len(rows) == self.n_points:          # finished: the stream has done its job
                    self.path.unlink()
        self.close_lock()


def _write_parquet(path: Path, header: list[str], cols: dict, meta: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from .frame import PARQUET_META_KEY, frame_from_columns
    t = pa.Table.from_pandas(frame_from_columns(cols, header), preserve_index=False)
    t = t.replace_schema_metadata({**(t.schema.metadata or {}), PARQUET_META_KEY: json.dumps(meta).encode()})
    pq.write_table(t, path)


def _sort_csv(path: Path) -> None:
    """Rewrite a complete sweep CSV with its rows in index order (``#`` lines first, as they were;
    a temporary file renamed over it: a kill leaves the old file or the new one)."""
    data = path.read_bytes().decode()
    lines = data.split("\n")
    if not data.endswith("\n"):
        lines = lines[:-1]
    comments = [ln for ln in lines if ln.startswith("#")]
    body = [ln for ln in lines if ln and not ln.startswith("#")]
    if not body:
        return
    header, rows = body[0], body[1:]
    keys = [int(ln.split(",", 1)[0]) for ln in rows]
    if all(a < b for a, b in zip(keys, keys[1:])):
        return                                           # in order already
    rows = [r for _, r in sorted(zip(keys, rows))]
    tmp = _tmp_path(path)
    with tmp.open("w", newline="") as fh:
        fh.write("\n".join(comments + [header] + rows) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def to_columns(header: list[str], rows: list[list[str]]) -> dict:
    """CSV rows -> numpy columns sorted by ``index`` (numbers where a column parses as numbers)."""
    rows = sorted(rows, key=lambda r: int(r[0]))
    out = {}
    for k, name in enumerate(header):
        vals = [r[k] for r in rows]
        try:
            arr = np.asarray([int(v) for v in vals], np.int64)
        except ValueError:
            try:
                arr = np.asarray([float(v) for v in vals], np.float64)
            except ValueError:
                arr = np.asarray(vals)
        out[name] = arr
    return out
