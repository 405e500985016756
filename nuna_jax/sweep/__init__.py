"""Design-space sweeps: one declarative grid, ``jit`` + ``vmap`` in chunks, sharded over
every device (``jax.sharding``) and host (``jax.distributed``), simulator points over
local worker processes (``jobs``); the rows as a ``pandas.DataFrame`` in grid order
(:func:`run_sweep`), or streamed to a resumable ``.csv`` / ``.npz`` / ``.parquet`` file
(:func:`read_sweep` reads one back).  docs/sweep.md describes the grid format.

>>> from nuna_jax.sweep import grid_from_dict
>>> g = grid_from_dict({"axes": {"model": ["closed_form"], "size": [1000, 2000], "gpus": [2, 8]}})
>>> g.n_points
4
"""

import sys
import types

from .api import sweep
from .frame import read_sweep
from .grid import MODELS, Grid, grid_from_dict, load_grid
from .run import run_sweep

__all__ = ["MODELS", "Grid", "grid_from_dict", "load_grid", "read_sweep", "run_sweep", "sweep"]


class _CallablePackage(types.ModuleType):
    """``nuna_jax.sweep`` is both this package and the entry point :func:`.api.sweep`: importing a
    submodule binds the package as the attribute ``sweep`` of ``nuna_jax``, so the package calls
    the function and ``nuna_jax.sweep(grid)`` works whichever of the two the name holds."""

    def __call__(self, grid, out=None, *, progress=False):
        return sweep(grid, out, progress=progress)


sys.modules[__name__].__class__ = _CallablePackage
