"""The one switch for numba: ``jit`` compiles a function with ``numba.njit(cache=True, nogil=True)``
when numba imports, else returns it unchanged (plain Python: the same code, the same answer, slower).
``NUNA_JAX_NO_NUMBA=1`` forces the fallback.  Used by the compiled loops of the flit simulator
(``sim/kernel.py``) and the NoC simulator (``noc/kernel.py``).  (``algorithm1_kernel.py`` keeps
its own copy of these lines: its code is part of the end-to-end table's model hash.)"""

from __future__ import annotations

import os

try:
    if os.environ.get("NUNA_JAX_NO_NUMBA"):
        raise ImportError("numba disabled by NUNA_JAX_NO_NUMBA")
    import numba as _numba

    HAVE_NUMBA = True
    jit = _numba.njit(cache=True, nogil=True)
    #: for hot loops over arrays the caller allocates: no reference counting (numba's runtime off:
    #: every array argument of a call would otherwise cost an atomic increment and decrement; such
    #: a function allocates no array), and ``jit_inline`` for its small helpers, inlined at
    #: numba's IR level
    jit_loop = _numba.njit(cache=True, nogil=True, _nrt=False)
    jit_inline = _numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
except Exception:  # pragma: no cover - exercised only without numba
    HAVE_NUMBA = False

    def jit(f):
        return f

    jit_loop = jit_inline = jit

__all__ = ["HAVE_NUMBA", "jit", "jit_loop", "jit_inline"]
