"""Pictures of the socket (NUNA sections 1, 3.2, 4, Figures 1, 4 and 6).

One function per CLI use, each returning a :class:`matplotlib.figure.Figure`
built without pyplot (no global figure state leaks into callers):

* :func:`socket_figure` (``nuna-jax place --plot``): one GPU's mesh, dies,
  the CUs used coloured by NAR domain, HBM stacks shaded by bytes read and
  written, I/O ports shaded by bytes through them.
* :func:`compare_figure`: several placements side by side on shared scales
  (UA beside NAP+NAR: the argument of the paper's Figures 1 and 6).
* :func:`simulation_figure` (``nuna-jax simulate --plot``): utilization of
  every directed mesh link (and port, HBM stack) as a heat map, and the
  one-way store-latency histogram.
* :func:`latency_map_figure` (``nuna-jax info --plot``): zero-load latency
  from every CU router to its nearest and farthest I/O port (Figure 4).
* :func:`save`: ``.png``, ``.pdf`` or ``.svg`` by suffix.

The numbers drawn are computed in :mod:`nuna_jax.plots.data` (plain numpy,
tested against independent sums); :mod:`nuna_jax.plots.draw` only draws.
"""

from .data import (cu_domains, link_utilization, port_bytes, port_latency_ns, resource_utilization,
                   stack_bytes)
from .figures import compare_figure, latency_map_figure, simulation_figure, socket_figure
# the submodule nuna_jax.plots.save (save_figure) is loaded first: importing it later would rebind the
# package attribute ``save`` to the module, and ``plots.save(fig, path)`` (the CLI's --plot) would fail
from . import save as _save_figure_module  # noqa: F401,E402
from .io import save  # noqa: E402

__all__ = ["socket_figure", "compare_figure", "simulation_figure", "latency_map_figure", "save",
           "port_bytes", "stack_bytes", "cu_domains", "link_utilization", "resource_utilization",
           "port_latency_ns"]
