"""The one switch for numba: ``jit`` compiles a function with ``numba.njit(cache=True, nogil=True)``
when numba imports, else returns it unchanged (plain Python: the same code, the same answer, slower).
``NUNA_JAX_NO_NUMBA=1`` forces the fallback.  Used by the compiled loops of the flit simulator
(``sim/kernel.py``), the NoC simulator (``noc/kernel.py``) and Algorithm 1 (``algorithm1_kernel.py``)."""

from __future__ import annotations

import os

try:
    if os.environ.get("NUNA_JAX_NO_NUMBA"):
        raise ImportError("numba disabled by NUNA_JAX_NO_NUMBA")
    import numba as _numba

    HAVE_NUMBA = True
    jit = _numba.njit(cache=True, nogil=True)
except Exception:  # pragma: no cover - exercised only without numba
    HAVE_NUMBA = False

    def jit(f):
        return f

__all__ = ["HAVE_NUMBA", "jit"]
