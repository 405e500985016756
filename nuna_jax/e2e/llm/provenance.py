"""What built a collective table: the model code, the system, the grid (hashes, no JAX).

* :func:`model_files`: every ``nuna_jax`` module reachable by ``import`` (at
  any depth, function-level imports included) from ``collective_timing.py``:
  the path model, placement, lowering, plans, scenario, presets, ...  Found by
  reading the sources (``ast``), so a module added to that chain is hashed
  without anyone listing it.
* :func:`code_hash`: a file's code without its comments and docstrings
  (SHA-256): a comment or docstring edit leaves the table current, any other
  edit makes it stale.  Positions come from ``ast`` and ``tokenize``, so the
  hash is the same on every Python version that parses the file.
* :func:`model_hash`: one hash over the sorted (path, code_hash) pairs.
* :func:`system_params`: every field of the ``System`` but ``name`` and
  ``n_gpus`` (the table is keyed by the hardware, not by what it is called).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import tokenize
from pathlib import Path

from ...provenance import system_params  # noqa: F401  (one definition, used by the table and saved placements)

PKG_ROOT = Path(__file__).resolve().parents[2]          # .../nuna_jax
ROOT_MODULE = Path(__file__).resolve().parent / "collective_timing.py"

__all__ = ["model_files", "code_hash", "model_hash", "model_file_hashes", "system_params", "digest"]


def _module_file(parts: list[str]) -> Path | None:
    """File of the module ``nuna_jax.<parts>`` (a package's ``__init__.py``), or None."""
    base = PKG_ROOT.joinpath(*parts) if parts else PKG_ROOT
    if base.with_suffix(".py").is_file() and parts:
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _imports(path: Path) -> set[Path]:
    """The ``nuna_jax`` module files that ``path`` imports (relative and absolute)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    rel = path.relative_to(PKG_ROOT)
    pkg = list(rel.parent.parts)                       # package of this module
    out: set[Path] = set()
    for node in ast.walk(tree):
        mods: list[list[str]] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(pkg):
                    continue
                base = pkg[:len(pkg) - (node.level - 1)]
            elif node.module and (node.module == "nuna_jax" or node.module.startswith("nuna_jax.")):
                base = []
            else:
                continue
            mod = base + ((node.module.split(".")[1:] if not node.level else node.module.split("."))
                          if node.module else [])
            subs = [mod + [a.name] for a in node.names if _module_file(mod + [a.name]) is not None]
            mods += subs                                       # `from pkg import submodule`
            if len(subs) < len(node.names):                    # a name defined in the module itself
                mods.append(mod)
        elif isinstance(node, ast.Import):
            mods += [a.name.split(".")[1:] for a in node.names if a.name.startswith("nuna_jax.")]
        for m in mods:
            f = _module_file(m)
            if f is not None:
                out.add(f)
    return out


@functools.lru_cache(maxsize=1)
def model_files() -> tuple[str, ...]:
    """Paths (relative to the repository, '/'-separated) of the modules a table entry depends on."""
    seen, todo = set(), [ROOT_MODULE]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo += sorted(_imports(f) - seen)
    return tuple(sorted(str(f.relative_to(PKG_ROOT.parent).as_posix()) for f in seen))


def _strip(source: bytes, where: str) -> str:
    """The code of a module: comments, docstrings, blank lines and trailing spaces removed."""
    text = source.decode("utf-8")
    lines = text.splitlines()
    cut: list[tuple[int, int, int, int]] = []         # (line0, col0, line1, col1), 1-based lines, char cols
    tree = ast.parse(source, filename=where)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                # ast columns are UTF-8 byte offsets: turn them into character offsets
                c0 = len(lines[first.lineno - 1].encode()[:first.col_offset].decode("utf-8", "ignore"))
                c1 = len(lines[first.end_lineno - 1].encode()[:first.end_col_offset].decode("utf-8", "ignore"))
                cut.append((first.lineno, c0, first.end_lineno, c1))
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            cut.append((tok.start[0], tok.start[1], tok.end[0], tok.end[1]))
    keep = [list(ln) for ln in lines]
    for l0, c0, l1, c1 in cut:
        for ln in range(l0, l1 + 1):
            row = keep[ln - 1]
            a = c0 if ln == l0 else 0
            b = c1 if ln == l1 else len(row)
            for i in range(a, min(b, len(row))):
                row[i] = None
    out = ("".join(ch for ch in row if ch is not None).rstrip() for row in keep)
    return "\n".join(ln for ln in out if ln.strip())


def code_hash(path: str | Path) -> str:
    """SHA-256 (16 hex digits) of a Python file's code without comments and docstrings."""
    p = Path(path)
    if not p.is_absolute():
        p = PKG_ROOT.parent / p
    return hashlib.sha256(_strip(p.read_bytes(), str(p)).encode()).hexdigest()[:16]


def model_file_hashes() -> dict[str, str]:
    """{path: code_hash} of :func:`model_files` (read now: an edited file shows at once)."""
    return {f: code_hash(f) for f in model_files()}


def model_hash(files: dict[str, str] | None = None) -> str:
    """One hash of the model code: the sorted (path, code hash) pairs."""
    files = model_file_hashes() if files is None else files
    return digest(sorted(files.items()))


def digest(obj) -> str:
    """SHA-256 (16 hex digits) of ``obj`` as canonical JSON."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
