"""Design-space sweeps: one declarative grid, ``jit`` + ``vmap`` in chunks, sharded over
every device (``jax.sharding``) and host (``jax.distributed``), streamed to a
resumable columnar file.  docs/sweep.md describes the grid format.

>>> from nuna_jax.sweep import grid_from_dict
>>> g = grid_from_dict({"axes": {"model": ["closed_form"], "size": [1000, 2000], "gpus": [2, 8]}})
>>> g.n_points
4
"""

from .grid import MODELS, Grid, grid_from_dict, load_grid
from .run import run_sweep

__all__ = ["MODELS", "Grid", "grid_from_dict", "load_grid", "run_sweep"]
