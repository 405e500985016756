"""Segment reductions over a fixed structure, for hardware sweeps (docs/analytical.md, "Engines").

In a hardware sweep one traffic is evaluated on many Systems: which (flow, stage) entry lands
on which (phase, resource) segment, which run updates which sparse-table cell, are the same
for every variant; only the values change.  A :class:`SegPlan` is that structure, computed
once on the host (numpy) from concrete segment ids: the entries of every segment, gathered
into dense blocks of equal width (segments grouped by entry count, rounded up to a power of
two).  :func:`plan_reduce` then replaces ``jax.ops.segment_{sum,min,max}`` by gathers and
dense reductions -- no scatter per variant.

Same numbers as the scatter: a min or max over the same values is exact whatever the order;
a sum is folded left to right in entry order, the order in which XLA's CPU scatter adds
(checked bit for bit in tests/test_contention.py).  Empty segments get the scatter's
identity (``+inf`` / ``-inf`` / 0).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["SegPlan", "seg_plan", "plan_reduce", "segment_reduce"]

_UNROLL = 16   # sums over at most this many entries are unrolled; longer ones are a scan


class SegPlan(NamedTuple):
    """``blocks[b]``: ``[n_b, k_b]`` int32 entry indices of ``n_b`` segments (``m``, one past the
    last entry, pads a row); ``inverse``: ``[n_segments]`` int32 row of each segment in the
    concatenated block results, or their total (the identity) for an empty segment."""

    blocks: tuple
    inverse: Any


def seg_plan(seg, n_segments: int, keep=None) -> SegPlan:
    """The plan of segment ids ``seg`` (``[m]``, concrete; ids outside ``[0, n_segments)`` and
    entries where ``keep`` is False are left out)."""
    seg = np.asarray(seg).astype(np.int64).ravel()
    m = seg.size
    ok = (seg >= 0) & (seg < n_segments)
    if keep is not None:
        ok &= np.asarray(keep, bool).ravel()
    src = np.flatnonzero(ok)
    order = np.argsort(seg[src], kind="stable")          # entry order kept within a segment
    src, sg = src[order], seg[src][order]
    ids, start, count = np.unique(sg, return_index=True, return_counts=True)
    width = np.where(count > 1, 1 << np.ceil(np.log2(np.maximum(count, 1))).astype(np.int64), 1)
    inverse = np.full(n_segments, -1, np.int64)
    blocks, row0 = [], 0
    for w in np.unique(width):
        sel = np.flatnonzero(width == w)
        blk = np.full((sel.size, int(w)), m, np.int64)
        rows = np.repeat(np.arange(sel.size), count[sel])
        cols = np.arange(int(count[sel].sum())) - np.repeat(np.cumsum(count[sel]) - count[sel], count[sel])
        blk[rows, cols] = src[np.repeat(start[sel], count[sel]) + cols]
        blocks.append(blk.astype(np.int32))
        inverse[ids[sel]] = row0 + np.arange(sel.size)
        row0 += sel.size
    inverse[inverse < 0] = row0
    return SegPlan(tuple(blocks), inverse.astype(np.int32))


def _fold_sum(g):
    """Left fold over the last axis of ``g`` ``[..., k]``: ``(((0 + g0) + g1) + ...)``; a long row is a
    scan over steps of :data:`_UNROLL` adds (few loop iterations on an accelerator, same order)."""
    k = g.shape[-1]
    acc = jnp.zeros(g.shape[:-1], g.dtype)

    def add(acc, cols):            # cols [..., u]: added one after another
        for j in range(cols.shape[-1]):
            acc = acc + cols[..., j]
        return acc
    if k <= _UNROLL:
        return add(acc, g)
    steps = jnp.moveaxis(g.reshape(g.shape[:-1] + (k // _UNROLL, _UNROLL)), -2, 0)   # k: a power of 2
    acc, _ = jax.lax.scan(lambda c, x: (add(c, x), None), acc, steps)
    return acc


_IDENT = {"sum": 0.0, "min": float("inf"), "max": float("-inf")}


def plan_reduce(plan: SegPlan, v, op: str):
    """``jax.ops.segment_<op>(v, seg, n_segments)`` for the ``seg`` the plan was made of."""
    ident = jnp.asarray(_IDENT[op], v.dtype)
    vp = jnp.concatenate([v, ident[None]])
    outs = []
    for blk in plan.blocks:
        g = vp[blk]
        outs.append(_fold_sum(g) if op == "sum" else (jnp.min(g, axis=1) if op == "min" else jnp.max(g, axis=1)))
    outs.append(ident[None])
    return jnp.concatenate(outs)[plan.inverse]


_SEGMENT_OPS = {"sum": jax.ops.segment_sum, "min": jax.ops.segment_min, "max": jax.ops.segment_max}


def segment_reduce(op: str, v, seg, n_segments: int, plan: SegPlan | None = None):
    """``jax.ops.segment_<op>`` (a scatter), or :func:`plan_reduce` when a plan is given."""
    if plan is None:
        return _SEGMENT_OPS[op](v, seg, num_segments=n_segments)
    return plan_reduce(plan, v, op)
