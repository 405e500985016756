"""What a command printed, kept beside the scenarios so that the same command again answers
without building anything, and without importing jax, flax or numba (the second
``nuna-jax place --policy nap+nar`` of a case answers in about 2 s instead of 20).

A *record* is the command's result as plain Python and NumPy values (no System, Plan or
Traffic: those are flax dataclasses and would import jax to unpickle), stored in the scenario
store of :mod:`nuna_jax.cache` (same directory, same size cap and eviction, same switch: off
when the store is off) under its own key.  The key (:func:`record_key`) covers everything the
printed result depends on:

* every parsed argument of the command (all of ``vars(args)`` but the few that only choose
  how the result is shown, :data:`SHOW_ONLY`): a new option is in the key without anyone
  remembering to add it;
* the bytes of every file an argument names (``--system FILE.toml``, ``--plan FILE.xml``),
  not only its path;
* the package's code (``cache._code_version``: every module's bytes, the version included);
* the float width, as the scenario key reads it (``cache._x64_enabled``: ``JAX_ENABLE_X64`` before
  jax is imported; 64-bit floats change the path model's estimates, hence NAP's and the
  threadblock searches' choices).

Work limits need no part of their own: ``--max-work`` is an argument, and the limits are
a pure function of it and of the inputs, so a stored result passed them.
"""

from __future__ import annotations

import hashlib
import json
import os

__all__ = ["record_key", "load_record", "store_record", "SHOW_ONLY", "FORMAT"]

FORMAT = 1                       # bump when a record's layout changes
#: arguments that change how a result is shown, not what it is
SHOW_ONLY = frozenset({"json", "command"})
#: arguments that name an input file (the key holds the file's bytes)
FILE_ARGS = ("system", "plan", "placement")


def _plain(v):
    """An exact JSON-ready form of an argument value (floats as hex)."""
    if isinstance(v, float):
        return v.hex()
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return repr(v)


def record_key(command: str, args) -> str | None:
    """The record key of ``command`` run with parsed ``args`` (hex SHA-256), or None when the
    scenario store is off or a named input file cannot be read (then nothing is replayed)."""
    from .. import cache
    if not cache.scenarios_on():
        return None
    parts = {k: _plain(v) for k, v in sorted(vars(args).items()) if k not in SHOW_ONLY and not callable(v)}
    files = {}
    for k in FILE_ARGS:
        v = getattr(args, k, None)
        if v is None or (k == "system" and not _is_file(v)):
            continue
        if not os.path.isfile(v):       # missing, a folder, /dev/zero, a FIFO: no replay; the command
            return None                 # itself refuses it (reading /dev/zero to hash it never ends)
        try:
            files[k] = cache._file_digest(v)
        except OSError:
            return None
    doc = {"kind": f"cli-record:{command}", "format": FORMAT, "code": cache._code_version(), "args": parts,
           "files": files, "x64": cache._x64_enabled()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _is_file(spec) -> bool:
    from ..presets import is_system_file
    return is_system_file(str(spec))


def load_record(key: str | None):
    """The record stored under ``key``, or None."""
    if key is None:
        return None
    from .. import cache
    rec = cache.load_scenario(key)
    return rec if isinstance(rec, dict) and rec.get("record_format") == FORMAT else None


def store_record(key: str | None, record: dict) -> bool:
    """Store ``record`` (plain Python / NumPy values only) under ``key``; False when not stored."""
    if key is None:
        return False
    _check_plain(record)
    from .. import cache
    return cache.store_scenario(key, {**record, "record_format": FORMAT})


def _check_plain(v, where: str = "record") -> None:
    """Refuse anything whose unpickling could import more than NumPy (jax arrays, flax dataclasses)."""
    import numpy as np
    if v is None or isinstance(v, (bool, int, float, str, np.generic)):
        return
    if isinstance(v, dict):
        for k, x in v.items():
            _check_plain(x, f"{where}.{k}")
        return
    if isinstance(v, (list, tuple)) and type(v) in (list, tuple):
        for k, x in enumerate(v):
            _check_plain(x, f"{where}[{k}]")
        return
    raise TypeError(f"{where}: a {type(v).__module__}.{type(v).__name__} is not a plain value")
