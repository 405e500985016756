"""Stream sweep rows to a CSV file as chunks finish; resume from what is there.

File layout (docs/sweep.md): a first line ``# nuna-jax sweep grid=<hash>
points=<n>``, a second ``# nuna_jax_version=<v> git_commit=<sha|unknown>``
(``nuna_jax.provenance``; a resume by other code appends ``# resumed:
nuna_jax_version=... git_commit=...`` before its rows), a header line, then
one row per grid point in the order the chunks finished, keyed by the
``index`` column (the point's position in the grid).  Readers skip every
``#`` line.  Each chunk is flushed and fsync'ed, so a killed sweep leaves whole
rows plus at most one partial last line.  On resume the partial line is cut
off, the indices present are skipped, and the rest is appended: no duplicate,
no lost row.  ``.npz`` output: rows stream to ``FILE.npz.rows.csv`` and the
columns (sorted by index) are written to ``FILE.npz`` at the end, with two
0-d string entries ``nuna_jax_version`` and ``git_commit`` (of the code that
wrote the npz; the stream's ``#`` lines name every writer of its rows).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np

__all__ = ["RowWriter", "grid_fingerprint", "read_rows", "read_provenance", "provenance_line", "stream_path"]


def grid_fingerprint(grid) -> str:
    """A short hash of the grid's axes, values and base system (a different grid cannot resume a file)."""
    desc = json.dumps({"axes": [[a, list(v)] for a, v in grid.axes], "base": grid.base.summary()},
                      sort_keys=True, default=str)
    return hashlib.sha256(desc.encode()).hexdigest()[:16]


def stream_path(out: str | Path) -> Path:
    """Where rows stream to: ``out`` itself for CSV, ``out + '.rows.csv'`` for ``.npz``."""
    out = Path(out)
    return out.with_name(out.name + ".rows.csv") if out.suffix == ".npz" else out


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, (np.integer,)):
        return str(int(v))
    return str(v)


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
    """Append-only CSV of sweep rows; ``done`` holds the indices already present.

    Only the writing process (``active``) touches the file; every process
    reads it, so that all of them skip the same points.
    """

    def __init__(self, out: str | Path, columns: list[str], fingerprint: str, n_points: int,
                 active: bool = True):
        self.out = Path(out)
        self.path = stream_path(out)
        self.columns = list(columns)
        self.active = active
        self.magic = f"# nuna-jax sweep grid={fingerprint} points={n_points}"
        self.done = np.zeros(0, np.int64)
        self._fh = None
        if self.path.exists() and self.path.stat().st_size:
            with self.path.open() as fh:
                first = fh.readline().rstrip("\n")
            if first != self.magic:
                raise ValueError(f"{self.path} holds rows of a different grid ({first!r}); remove it or "
                                 "choose another --out")
            header, rows = read_rows(self.path)
            if header and header != self.columns:
                raise ValueError(f"{self.path}: columns {header} differ from this grid's {self.columns}")
            idx = np.asarray([int(r[0]) for r in rows], np.int64)
            if len(np.unique(idx)) != len(idx):
                raise ValueError(f"{self.path} has duplicate indices; it was not written by nuna-jax sweep")
            self.done = np.sort(idx)

    def open(self) -> None:
        """Cut a partial last line, write magic + provenance + header if new (a ``# resumed:`` line when
        other code resumes the file); then rows can be appended."""
        if not self.active:
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
        if self.active:
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            series = [cols[c] for c in self.columns]
            for i in range(n):
                w.writerow([_fmt(s[i]) for s in series])
            self._fh.write(buf.getvalue())
            self._flush()
        self.done = np.union1d(self.done, np.asarray(cols["index"], np.int64))
        return n

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self.active and self.out.suffix == ".npz":
            from ..provenance import provenance
            header, rows = read_rows(self.path)
            p = provenance()
            np.savez(self.out, **to_columns(header, rows), nuna_jax_version=np.asarray(p["nuna_jax_version"]),
                     git_commit=np.asarray(p["git_commit"] or ""))


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
