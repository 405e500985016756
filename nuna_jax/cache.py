"""On-disk caches: where they live, and the scenario store.

One root for everything nuna_jax keeps between runs: ``$NUNA_JAX_CACHE_DIR``
when set (empty: every cache off), else ``$XDG_CACHE_HOME/nuna_jax``, else
``~/.cache/nuna_jax``.  Under it:

* ``xla/``: JAX's persistent compilation cache (compiled XLA programs);
* ``scenarios/``: built scenarios (plan + placement + traffic + NAP's searches),
  one file per key (:func:`scenario_key`), so that the second
  ``nuna-jax place --policy nap+nar`` of a case skips the plan, Algorithm 1,
  NAR, the lowering, NAP's granularity search and the threadblock search.

The scenario store is a small content-addressed directory rather than
``joblib.Memory`` or ``diskcache``: the key must hash a System's exact floats,
an MSCCL file's bytes and the model code (not only arguments a generic memoizer
sees), the values are NumPy arrays in a NamedTuple, and it adds no dependency.
A key covers every input of ``scenario.make_scenario`` (every System field,
exactly; the plan file's bytes; every option; the work-limit factor) and a hash
of every module's bytes (the package version included): edited code never
reads an old entry.  Entries are pickles written atomically; an entry that
fails to load is deleted and rebuilt.  They are trusted like JAX's compiled
programs in ``xla/`` (a cache directory that others can write to is unsafe for
both).  The store keeps at most :data:`SCENARIO_CACHE_BYTES` (oldest entries
removed first) and skips scenarios larger than :data:`SCENARIO_MAX_ENTRY_BYTES`.

The scenario store is used where :func:`use_scenarios` turned it on: the
command line (every subcommand, so the sweep too) and the experiments.  A
library call of ``make_scenario`` does not touch the disk unless the caller
turns it on (``nuna_jax.cache.use_scenarios(True)``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path

__all__ = ["root", "subdir", "use_scenarios", "scenarios_on", "scenario_key", "load_scenario",
           "store_scenario", "SCENARIO_CACHE_BYTES", "SCENARIO_MAX_ENTRY_BYTES"]

#: most bytes the scenario store keeps on disk (oldest entries go first)
SCENARIO_CACHE_BYTES = 2 << 30
#: a scenario whose pickle is larger than this is not stored (a 64-GPU 1 GB All-Reduce)
SCENARIO_MAX_ENTRY_BYTES = 256 << 20
_FORMAT = 1                     # bump when the entry layout changes

_state = {"scenarios": False}


def root() -> Path | None:
    """The cache root, or None when caching is off (``NUNA_JAX_CACHE_DIR=""``)."""
    d = os.environ.get("NUNA_JAX_CACHE_DIR")
    if d == "":
        return None
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nuna_jax"


def subdir(name: str) -> Path | None:
    """``root()/name``, created; None when caching is off or the directory is not writable."""
    r = root()
    if r is None:
        return None
    d = r / name
    try:
        d.mkdir(parents=True, exist_ok=True)
        if not os.access(d, os.W_OK):
            return None
    except OSError:             # no home, a read-only file system, a file in the way
        return None
    return d


def use_scenarios(on: bool = True) -> None:
    """Turn the scenario store on (or off) for this process (the CLI and the experiments turn it on)."""
    _state["scenarios"] = bool(on)


def scenarios_on() -> bool:
    return _state["scenarios"] and root() is not None


@functools.lru_cache(maxsize=1)
def _code_version() -> str:
    """A hash of the bytes of every module of the package, ``__init__.py`` and its version string
    included (a few ms; any edit, comments included, starts a new set of entries: safe, and cheaper
    than the model hash).  Reads the files, imports nothing: this module stays out of the e2e
    table's model files but for itself."""
    h = hashlib.sha256()
    pkg = Path(__file__).resolve().parent
    for f in sorted(pkg.rglob("*.py")):
        h.update(str(f.relative_to(pkg)).encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def _plain(v):
    """A JSON-ready, exact form of a key part (floats as hex: every bit counts)."""
    import numpy as np
    if isinstance(v, (bool, type(None), str)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v).hex()
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    a = np.asarray(v)
    if a.dtype == object:
        raise TypeError(f"scenario_key: cannot key a {type(v).__name__}")
    if a.ndim == 0:
        return _plain(a.item())
    return [_plain(x) for x in a.ravel().tolist()] + [list(a.shape)]


def _file_digest(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _x64_enabled() -> bool:
    """Whether JAX computes in 64-bit floats here: its config once jax is imported, else JAX_ENABLE_X64.

    64-bit floats change the path model's estimates and so NAP's granularity and threadblock choices."""
    jax = sys.modules.get("jax")
    if jax is not None:
        return bool(jax.config.jax_enable_x64)
    return os.environ.get("JAX_ENABLE_X64", "").strip().lower() in ("1", "true", "yes", "on")


def scenario_key(system, args: dict, limits_factor: float) -> str:
    """The store's key of ``make_scenario(system, **args)`` under a work-limit factor and the float
    width in effect (hex SHA-256)."""
    parts = dict(args)
    if parts.get("plan_file") is not None:
        parts["plan_file"] = _file_digest(parts["plan_file"])     # the bytes, not the name
    doc = {"format": _FORMAT, "code": _code_version(), "system": _plain(system), "args": _plain(parts),
           "limits": _plain(float(limits_factor)), "x64": _x64_enabled()}
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _entry(key: str) -> Path | None:
    d = subdir("scenarios")
    return None if d is None else d / f"{key}.pkl"


def load_scenario(key: str):
    """The stored scenario of ``key``, or None (absent, off, or unreadable: then deleted)."""
    p = _entry(key)
    if p is None or not p.is_file():
        return None
    try:
        with open(p, "rb") as f:
            obj = pickle.load(f)
        if not (isinstance(obj, dict) and obj.get("format") == _FORMAT and obj.get("key") == key):
            raise ValueError("not an entry of this store")
        os.utime(p)                 # recently used: evicted last
        return obj["scenario"]
    except Exception:               # truncated, foreign or from another layout: rebuild
        try:
            p.unlink()
        except OSError:
            pass
        return None


def store_scenario(key: str, scenario) -> bool:
    """Write ``scenario`` under ``key`` (atomically); False when off, too large or not writable."""
    p = _entry(key)
    if p is None:
        return False
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".pkl")
        with os.fdopen(fd, "wb") as f:      # pickled straight to the file: no copy of it in memory
            pickle.dump({"format": _FORMAT, "key": key, "scenario": scenario}, f, protocol=pickle.HIGHEST_PROTOCOL)
            size = f.tell()
        if size > SCENARIO_MAX_ENTRY_BYTES:
            os.unlink(tmp)
            return False
        os.replace(tmp, p)
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        return False
    _evict(p.parent, keep=p)
    return True


def _evict(d: Path, keep: Path) -> None:
    """Delete the least recently used entries until the store fits :data:`SCENARIO_CACHE_BYTES`."""
    try:
        entries = [(e.stat().st_mtime, e.stat().st_size, e) for e in d.glob("*.pkl")]
    except OSError:
        return
    total = sum(sz for _, sz, _ in entries)
    for _, sz, e in sorted(entries, key=lambda x: x[0]):
        if total <= SCENARIO_CACHE_BYTES:
            break
        if e == keep:
            continue
        try:
            e.unlink()
            total -= sz
        except OSError:
            pass
