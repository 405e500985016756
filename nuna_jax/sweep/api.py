"""``nuna_jax.sweep(grid)``: a design-space grid evaluated and read back in one call (docs/sweep.md)."""

from __future__ import annotations

__all__ = ["sweep"]


def sweep(grid, out=None, *, progress=False) -> dict:
    """Evaluate a design-space grid (docs/sweep.md): every point of the Cartesian product of its
    axes through the closed form, the path model or the simulator, in jit + vmap chunks.

    ``grid``: a dict (the TOML file's tables, e.g. ``{"axes": {...}, "sweep": {...}}``), a path to a
    grid TOML file, or a :class:`nuna_jax.sweep.Grid`.  Axes: ``model`` (``closed_form``, ``path``,
    ``sim``), ``collective``, ``size`` (bytes, or strings like ``"1MB"``), ``gpus``, ``policy``,
    ``tbs`` (threadblocks per GPU; default ``"best"`` per point, as :func:`nuna_jax.make_scenario`),
    and any ``System`` field (e.g. ``port_bw_bytes_per_ns`` in bytes/ns,
    ``switch_latency_ns`` in ns).  ``out``: ``None`` (the default: nothing is written) or a
    ``.csv``, ``.npz`` or ``.parquet`` file to write (resumable).

    Returns a dict: ``columns`` (name -> numpy array, one element per point in grid order:
    ``index``, one column per axis, ``time_ns`` in ns, ``lower_bound_ns`` in ns (path model),
    ``n_flows``, ``tbs_used``: the threadblocks per GPU each point ran with), ``frame`` (the same
    rows as a ``pandas.DataFrame``: :func:`nuna_jax.sweep.run_sweep`'s result) and ``summary``
    (points, seconds, devices, ...).

    Example::

        import nuna_jax as nj
        c = nj.sweep({"axes": {"size": ["1MB"], "gpus": [8], "policy": ["UA", "NAP+NAR"],
                               "port_bw_bytes_per_ns": [25.0, 50.0, 100.0]}})["columns"]
        for pol, bw, t in zip(c["policy"], c["port_bw_bytes_per_ns"], c["time_ns"]):
            print(pol, bw, t)                              # policy, bytes/ns, ns
    """
    from ..units import parse_size
    from .grid import Grid, grid_from_dict, load_grid
    from .run import run_sweep
    if isinstance(grid, Grid):
        g = grid
    elif isinstance(grid, dict):
        g = grid_from_dict(grid, parse_size=parse_size)
    else:
        g = load_grid(grid, parse_size=parse_size)
    df = run_sweep(g, out, progress=progress)
    return {"columns": {k: df[k].to_numpy() for k in df.columns}, "frame": df, "summary": df.attrs["summary"]}
