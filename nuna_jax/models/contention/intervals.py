"""Interval primitives of the ``runs`` engine (docs/analytical.md, "Engines").

A mesh leg under XY routing is two straight runs (X along the source row, then Y
along the destination column), so "every link of the run" is an interval of link
positions on one line of the mesh.  Links live in four *direction grids*
``[lines, length]`` (east/west: one line per (phase, GPU, row); south/north: per
(phase, GPU, column)).  Per-link sums become difference arrays (+v at the start,
-v past the end, then a cumulative sum); per-link max / min become two updates of
a sparse table (blocks of length 2^k covering the run) pushed down level by level.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...geometry import n_link_slots
from ...path import resource_layout
from ...system import System
from .segplan import SegPlan, plan_reduce, seg_plan, segment_reduce
from .tables import BIG


def _level_count(n: int) -> int:
    return max(1, int(np.floor(np.log2(max(n, 1)))) + 1)




def grid_shape(s: System, P: int, dirn: int):
    """(n_lines_total, line_length) of a direction grid."""
    if dirn < 2:
        return P * s.n_gpus * s.mesh_rows, s.mesh_cols
    return P * s.n_gpus * s.mesh_cols, s.mesh_rows


_DEAD = 1024  # padding segments for masked entries (spread, so they do not pile onto one address)


def _by_dir(dirn, values):
    """values[dirn] for 4 static ints, as selects (a gather here defeats XLA CPU fusion)."""
    v = [int(x) for x in values]
    return jnp.where(dirn == 0, v[0], jnp.where(dirn == 1, v[1], jnp.where(dirn == 2, v[2], v[3]))).astype(jnp.int32)


def _dead_idx(base: int, n: int):
    return base + (jnp.arange(n, dtype=jnp.int32) % _DEAD)


def range_sum(s: System, P: int, ru, val, act):
    """Per direction, [lines, length]: sum of ``val`` over runs ``ru`` (``dirn``, ``line``, ``lo``, ``hi``) covering each link
    (difference arrays: +v at the first link, -v past the last, cumulative sum)."""
    shapes = [grid_shape(s, P, dn) for dn in range(4)]
    sizes = [nl * (n + 1) for nl, n in shapes]
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n_tot = int(offs[-1])
    on = act & (ru.hi > ru.lo)
    width = _by_dir(ru.dirn, [n + 1 for _, n in shapes])
    base = _by_dir(ru.dirn, offs[:4]) + ru.line * width
    m = ru.lo.shape[0]
    idx = jnp.concatenate([jnp.where(on, base + ru.lo, _dead_idx(n_tot, m)),
                           jnp.where(on, base + ru.hi, _dead_idx(n_tot, m))])
    v = jnp.concatenate([jnp.where(on, val, 0.0), jnp.where(on, -val, 0.0)])
    idx, v = jax.lax.optimization_barrier((idx, v))
    flat = jax.ops.segment_sum(v, idx, num_segments=n_tot + _DEAD)
    out = []
    for dn, (nl, n) in enumerate(shapes):
        diff = flat[offs[dn]:offs[dn + 1]].reshape(nl, n + 1)
        out.append(jnp.cumsum(diff, axis=1)[:, :n])
    return out


def _ext_layout(s: System, P: int):
    shapes = [grid_shape(s, P, dn) for dn in range(4)]
    nks = [_level_count(n) for _, n in shapes]
    sizes = [nl * nk * n for (nl, n), nk in zip(shapes, nks)]
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return shapes, nks, offs


def ext_index(s: System, P: int, ru, act):
    """Sparse-table cells of :func:`range_ext`'s updates, ``[2 * runs]`` (the run's first block,
    then its last; an inactive or empty run goes to a dead cell past the tables), and the cell count."""
    shapes, nks, offs = _ext_layout(s, P)
    n_tot = int(offs[-1])
    on = act & (ru.hi > ru.lo)
    ln = jnp.maximum(ru.hi - ru.lo, 1)
    k = jnp.zeros_like(ln)
    for kk in range(1, max(nks)):          # k = floor(log2(len)), exactly, in integers
        k = jnp.where(ln >= (1 << kk), kk, k)
    nlen = _by_dir(ru.dirn, [n for _, n in shapes])
    nkd = _by_dir(ru.dirn, nks)
    base = _by_dir(ru.dirn, offs[:4]) + (ru.line * nkd + k) * nlen
    m = ru.lo.shape[0]
    idx = jnp.concatenate([jnp.where(on, base + ru.lo, _dead_idx(n_tot, m)),
                           jnp.where(on, base + ru.hi - jnp.left_shift(1, k), _dead_idx(n_tot, m))])
    return idx, on, n_tot


#: :func:`range_ext`'s ``plan`` in a hardware sweep on a CPU (``sweep.path_eval``, ``lax.map`` over the
#: variants): a run's two updates as two scatters that read the values where they are, instead of one
#: scatter of a concatenated, fenced copy; the same cells, so the same numbers (a min or max is exact
#: in any order).  2-core CPU, 8-GPU 1 MB All-Gather, 1,008 threadblocks per GPU (load 15-17): 5.5-6.4
#: CPU ms per variant against 7.6-7.7 (benchmarks/bench_hw_sweep.py for the sweep end to end).
SPLIT = "split"


def range_ext(s: System, P: int, ru, val, act, op: str, plan: SegPlan | str | None = None):
    """Per direction, [lines, length]: max (op='max') or min of ``val`` over runs covering each link
    (identity -/+BIG where none), by a sparse table: each run updates two blocks of length 2^k
    (k = floor log2 of its length) that together cover it; levels are pushed down to length 1.
    ``plan``: the :func:`ext_index` cells as a :class:`.segplan.SegPlan` (a hardware sweep's
    hoisted structure): gathers instead of the scatter, same numbers; :data:`SPLIT`: two scatters."""
    ident = -BIG if op == "max" else BIG
    comb = jnp.maximum if op == "max" else jnp.minimum
    shapes, nks, offs = _ext_layout(s, P)
    if isinstance(plan, str):
        if plan != SPLIT:
            raise ValueError(f"range_ext: unknown plan {plan!r}")
        idx, on, n_tot = ext_index(s, P, ru, act)
        m = ru.lo.shape[0]
        v = jnp.where(on, val, ident)
        flat = segment_reduce(op, v, idx[:m], n_tot + _DEAD)                    # the first blocks
        flat = flat.at[idx[m:]].max(v) if op == "max" else flat.at[idx[m:]].min(v)   # the last blocks
    elif plan is None:
        idx, on, n_tot = ext_index(s, P, ru, act)
        v = jnp.concatenate([jnp.where(on, val, ident), jnp.where(on, val, ident)])
        idx, v = jax.lax.optimization_barrier((idx, v))
        flat = segment_reduce(op, v, idx, n_tot + _DEAD)
    else:   # the plan holds the live cells only, each entry a run index (mod the run count)
        flat = plan_reduce(plan, val, op)
    out = []
    for dn, ((nl, n), nk) in enumerate(zip(shapes, nks)):
        tab = flat[offs[dn]:offs[dn + 1]].reshape(nl, nk, n)
        tab = jnp.where(jnp.abs(tab) < BIG / 2, tab, ident)   # empty segments of segment_max/min
        lvl = tab[:, nk - 1, :]
        for kk in range(nk - 1, 0, -1):
            half = 1 << (kk - 1)
            shifted = jnp.concatenate([jnp.full((nl, half), ident, lvl.dtype), lvl[:, :n - half]], axis=1)
            lvl = comb(comb(tab[:, kk - 1, :], lvl), shifted)
        out.append(lvl)
    return out


def ext_plan(idx, n_tot: int) -> SegPlan:
    """:func:`range_ext`'s cells as a plan over the runs, from :func:`ext_index`'s concrete ``idx``
    (host): each update of a run reads the run's value; dead cells are left out."""
    m = int(np.shape(idx)[0]) // 2
    plan = seg_plan(idx, n_tot)
    return plan._replace(blocks=tuple(np.where(b < 2 * m, b % m, m).astype(np.int32) for b in plan.blocks))


def links_to_resources(s: System, P: int, grids, fill):
    """Four direction grids -> [P, G, n_link_slots] in mesh.route_links' slot order (4 * router + dir)."""
    G, C, Rw = s.n_gpus, s.mesh_cols, s.mesh_rows
    e, w = (g.reshape(P, G, Rw, C) for g in grids[:2])
    so, no = (g.reshape(P, G, C, Rw).transpose(0, 1, 3, 2) for g in grids[2:])
    slots = jnp.stack([e, w, so, no], axis=-1)  # [P, G, rows, cols, 4]
    return slots.reshape(P, G, Rw * C * 4)


def place(s: System, P: int, nonlink_flat, link_pgl, fill):
    """Combine scattered non-link values ([P * R + 1] by global id) and link grids into [P, R]."""
    lay = resource_layout(s)
    G = s.n_gpus
    a = nonlink_flat[:-1].reshape(P, G, lay.per_gpu)
    a = a.at[:, :, lay.offset_link:lay.offset_link + n_link_slots(s)].set(link_pgl)
    return a.reshape(P, G * lay.per_gpu)
