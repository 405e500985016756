"""The closed-form (alpha-beta-gamma) evaluator of one block, on the device mesh.

A block fixes the collective, algorithm, alpha statistic and the static
system (so ``p = n_gpus``), which are compile-time constants of
``models.collectives.cost_ns``: XLA folds its ``select`` over collectives and
algorithms away and each point costs one fused multiply-add chain.  Per
hardware variant (the product of the block's continuous hardware axes),
``alpha, beta, gamma`` come from ``collectives.alpha_beta_gamma`` (vmapped).

A chunk is generated on the device from its first row ``r0`` (a row: the
block's last free axis): the row's free-axis digits (mixed radix, as
``groups.Block.free_digits``) pick its size and hardware variant from small
replicated tables, so the device reads almost nothing and writes 4 bytes per
point.  The rows are split over the mesh.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from ..models import collectives as C
from .groups import Block
from jax.sharding import NamedSharding, PartitionSpec

from .shard import put_replicated, replicated

__all__ = ["hw_tables", "closed_form_fn", "closed_form_tables"]

_ABG_BATCH = 256  # hardware variants per alpha_beta_gamma call (bounds the [routers, stacks] tables)


def hw_tables(block: Block, grid) -> dict:
    """Per hardware variant (C order over ``block.hw_axes()``): the value of each hw axis, ``[H]``."""
    axes = block.hw_axes()
    if not axes:
        return {}
    mesh_vals = np.meshgrid(*[np.asarray(grid.values(a), np.float64) for a in axes], indexing="ij")
    return {a: m.ravel() for a, m in zip(axes, mesh_vals)}


def closed_form_tables(block: Block, base_system, grid):
    """``(alpha_ns, beta_ns_per_byte, gamma_ns_per_byte)``, each ``[H]`` float32, for the block's
    hardware variants (``H = 1`` when no continuous hardware axis is free)."""
    stat = block.fixed["stat"]
    hw = hw_tables(block, grid)
    f = functools.partial(_abg_batch, stat=stat)
    if not hw:
        a, b, g = C.alpha_beta_gamma(base_system, stat)
        return tuple(np.asarray([float(v)], np.float32) for v in (a, b, g))
    H = len(next(iter(hw.values())))
    out = []
    for lo in range(0, H, _ABG_BATCH):
        sl = {k: jnp.asarray(v[lo:lo + _ABG_BATCH], jnp.float32) for k, v in hw.items()}
        out.append(np.asarray(f(base_system, sl)))
    abg = np.concatenate(out, axis=0).astype(np.float32)
    return abg[:, 0], abg[:, 1], abg[:, 2]


@functools.partial(jax.jit, static_argnames="stat")
def _abg_batch(base_system, vals: dict, stat: str):
    """``[n, 3]`` (alpha, beta, gamma) for the base system with each row of ``vals`` substituted."""
    return jax.vmap(lambda v: jnp.stack(C.alpha_beta_gamma(base_system.replace(**v), stat)))(vals)


@functools.lru_cache(maxsize=256)
def closed_form_fn(coll: int, alg: int, p: int, free_lens: tuple, size_pos: int, hw_pos: tuple,
                   rows: int, mesh):
    """``f(r0, sizes, alpha, beta, gamma) -> time_ns[rows, L]`` for local points ``r0*L .. (r0+rows)*L - 1``.

    The chunk is laid out as rows of the block's last free axis (length
    ``L = free_lens[-1]``, the fastest-varying one), so per-point work is a
    broadcast: the outer digits (mixed radix over ``free_lens[:-1]``) are
    decoded once per row, and the last axis contributes either the size
    vector, a contiguous slice of the hardware tables (it is then the last
    hardware axis, stride 1) or nothing.  ``size_pos``: position of ``size``
    among the free axes; ``hw_pos``: positions of the continuous hardware axes.
    Rows past the block's end read clamped tables (the caller drops them).
    """
    L = free_lens[-1]
    last = len(free_lens) - 1
    outer = free_lens[:-1]
    hw_lens = [free_lens[i] for i in hw_pos]
    hw_strides = {i: int(math.prod(hw_lens[k + 1:])) for k, i in enumerate(hw_pos)}
    bat = NamedSharding(mesh, PartitionSpec("d", None))
    rep = replicated(mesh)

    def f(r0, sizes, alpha, beta, gamma):
        r = r0 + jnp.arange(rows, dtype=jnp.int32)
        digits, rem = {}, r
        for i in reversed(range(len(outer))):
            digits[i] = rem % outer[i]
            rem = rem // outer[i]
        h = jnp.zeros_like(r)
        for i in hw_pos:
            if i != last:
                h = h + digits[i] * hw_strides[i]
        if size_pos == last:
            n_bytes = sizes[None, :]
        else:
            n_bytes = sizes[digits[size_pos]][:, None]
        if last in hw_pos:       # the last hw axis has stride 1: a row is a contiguous table slice
            a, b, g = (v.reshape(-1, L)[h // L] for v in (alpha, beta, gamma))
        else:
            a, b, g = (v[h][:, None] for v in (alpha, beta, gamma))
        # a last axis the closed form does not read (policy, tbs_per_gpu, ...): the same time along it
        return jnp.broadcast_to(C.cost_ns(coll, alg, p, n_bytes, a, b, g), (rows, L))

    out = jax.jit(f, in_shardings=(rep, rep, rep, rep, rep), out_shardings=bat)
    return out


def block_args(block: Block, base_system, grid, mesh):
    """Everything :func:`closed_form_fn` needs for a block: ``(static kwargs, device tables)``.

    A block with no free axis gets a virtual one of length 1 (``size`` is
    always free, so this does not happen for a checked grid)."""
    coll = C.collective_code(block.fixed["collective"])
    alg = C.algorithm_code(block.fixed["algorithm"])
    sizes = np.asarray(grid.values("size"), np.float32)
    size_pos = block.free_axes.index("size")
    hw_axes = block.hw_axes()
    hw_pos = tuple(block.free_axes.index(a) for a in hw_axes)
    a, b, g = closed_form_tables(block, base_system, grid)
    static = dict(coll=coll, alg=alg, p=int(base_system.n_gpus), free_lens=tuple(block.free_lens),
                  size_pos=size_pos, hw_pos=hw_pos)
    return static, put_replicated((sizes, a, b, g), mesh)
