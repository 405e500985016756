"""Which code wrote a result: ``provenance() -> {"nuna_jax_version", "git_commit"}``.

Every JSON the CLI prints (``cli.common.emit_json``: a top-level ``provenance``
key), every sweep CSV (a ``# nuna_jax_version=... git_commit=...`` comment
line) and npz, and every saved placement carries it.  ``git_commit`` is the
commit checked out where the package lives, read from the files under
``.git`` (a worktree's ``.git`` file, loose and packed refs) without running
git; it is ``None`` for an installed copy that is no checkout, and reading it
never raises.  It names the commit only: uncommitted changes are not seen.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from pathlib import Path

__all__ = ["provenance", "git_commit"]

_SHA = re.compile(r"[0-9a-f]{40}")
_ROOT = Path(__file__).resolve().parents[1]


def _git_dir(root: Path) -> Path | None:
    dot = root / ".git"
    if dot.is_dir():
        return dot
    if dot.is_file():                                    # a worktree or submodule: "gitdir: <path>"
        text = dot.read_text().strip()
        if text.startswith("gitdir:"):
            d = Path(text[len("gitdir:"):].strip())
            return d if d.is_absolute() else (root / d).resolve()
    return None


def _ref(gitdir: Path, common: Path, ref: str) -> str | None:
    for d in (gitdir, common):
        f = d / ref
        if f.is_file():
            sha = f.read_text().strip()
            return sha if _SHA.fullmatch(sha) else None
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == ref and _SHA.fullmatch(parts[0]):
                return parts[0]
    return None


def git_commit(root: str | Path | None = None) -> str | None:
    """The commit checked out at ``root`` (default: the folder above the package), or None."""
    try:
        root = Path(root) if root is not None else _ROOT
        gitdir = _git_dir(root)
        if gitdir is None:
            return None
        cd = gitdir / "commondir"
        common = (gitdir / cd.read_text().strip()).resolve() if cd.is_file() else gitdir
        head = (gitdir / "HEAD").read_text().strip()
        if head.startswith("ref:"):
            return _ref(gitdir, common, head[len("ref:"):].strip())
        return head if _SHA.fullmatch(head) else None
    except Exception:  # noqa: BLE001  (provenance must never break a result)
        return None


@functools.lru_cache(maxsize=1)
def _cached() -> tuple[str, str | None]:
    from . import __version__
    return __version__, git_commit()


def provenance() -> dict:
    """``{"nuna_jax_version": ..., "git_commit": <40 hex digits> or None}`` (read once per process)."""
    v, c = _cached()
    return {"nuna_jax_version": v, "git_commit": c}


def _plain(v):
    try:
        import numpy as np
        if isinstance(v, np.ndarray) or hasattr(v, "shape"):
            a = np.asarray(v)
            return a.item() if a.ndim == 0 else a.tolist()
    except ImportError:         # pragma: no cover
        pass
    return v


def system_params(system) -> dict:
    """Every field of ``system`` but its name and GPU count, as plain JSON numbers."""
    out = {}
    for f in dataclasses.fields(system):
        if f.name in ("name", "n_gpus"):
            continue
        v = _plain(getattr(system, f.name))
        if isinstance(v, float) and not math.isfinite(v):
            v = repr(v)
        out[f.name] = v
    return out
